"""Token statistics of a sample with the model's own tokenizer (imports transformers: only when asked)."""

import logging
import math
from typing import Any

from hf_train_mcp.data.rules import is_conversation
from hf_train_mcp.schemas import TokenStats

log = logging.getLogger(__name__)


def _as_text(tokenizer: Any, value: Any) -> str:
    if is_conversation(value):
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(value, tokenize=False)
        return "\n".join(str(m.get("content", "")) for m in value)
    return "" if value is None else str(value)


def _row_text(tokenizer: Any, row: dict, fmt: str) -> str:
    if fmt == "messages":
        return _as_text(tokenizer, row.get("messages"))
    if fmt == "text":
        return _as_text(tokenizer, row.get("text"))
    if fmt in ("preference", "implicit_preference"):
        prompt = _as_text(tokenizer, row.get("prompt"))
        longer = max((_as_text(tokenizer, row.get(k)) for k in ("chosen", "rejected")), key=len)
        return prompt + longer
    return _as_text(tokenizer, row.get("prompt")) + _as_text(tokenizer, row.get("completion"))


def token_stats(model: str, token: str | None, rows: list[dict], fmt: str, max_length: int,
                num_rows: int | None) -> TokenStats | None:
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model, token=token or None)
    except Exception as exc:  # no transformers, offline, gated: stats are optional
        log.info("no tokenizer for %s: %s", model, exc)
        return None
    lengths = sorted(len(tokenizer(_row_text(tokenizer, r, fmt))["input_ids"]) for r in rows)
    if not lengths:
        return None
    mean = sum(lengths) / len(lengths)

    def pct(p: float) -> int:
        return lengths[min(len(lengths) - 1, math.ceil(p * len(lengths)) - 1)]

    return TokenStats(
        tokenizer=model, sampled_rows=len(lengths), p50=pct(0.5), p95=pct(0.95), max=lengths[-1],
        mean=round(mean, 1), share_over_max_length=round(sum(n > max_length for n in lengths) / len(lengths), 3),
        max_length=max_length, estimated_total_tokens=int(mean * num_rows) if num_rows else None,
    )
