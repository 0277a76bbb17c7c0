"""Token statistics of a sample with the model's own tokenizer (imports transformers: only when asked)."""

import logging
import math
import os
from typing import Any

from hf_train_mcp.data.checks import is_conversation
from hf_train_mcp.data.formats import FORMATS, prompt_and_completion
from hf_train_mcp.data.report import TokenStats

log = logging.getLogger(__name__)
TOKENIZER_DEADLINE_S = 8.0


def _as_text(tokenizer: Any, value: Any) -> str:
    if is_conversation(value):
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(value, tokenize=False)
        return "\n".join(str(m.get("content", "")) for m in value)
    return "" if value is None else str(value)


def counted_text(tokenizer: Any, row: dict, fmt: str) -> str:
    """The text of a row whose tokens are counted, as its format says (an unknown one: prompt and completion)."""
    counted = FORMATS[fmt].counted if fmt in FORMATS else prompt_and_completion
    return counted(lambda value: _as_text(tokenizer, value), row)


TOKENIZER_FILES = ["tokenizer*", "*.model", "vocab*", "merges.txt", "special_tokens_map.json", "added_tokens.json",
                   "*.tiktoken", "chat_template*", "config.json"]


def load_tokenizer(model: str, token: str | None, *, local: bool) -> Any:
    """The model's tokenizer, failing within seconds when the Hub is slow or unreachable (a Hub model is
    looked up with one quick metadata read first: tokenizer downloads retry for tens of seconds)."""
    from hf_train_mcp.hub import bounded, hub_api

    if not local:
        bounded(f"reading {model}", lambda: hub_api(token).model_info(model), token)

    def load() -> Any:
        from transformers import AutoTokenizer

        source = model
        if not local and os.path.exists(model):  # a Hub id that is also a folder here: the Hub's, not the folder
            source = hub_api(token).snapshot_download(model, allow_patterns=TOKENIZER_FILES)
        return AutoTokenizer.from_pretrained(source, token=token or None)

    return bounded(f"loading the tokenizer of {model}", load, token, deadline_s=TOKENIZER_DEADLINE_S)


def token_stats(model: str, token: str | None, rows: list[dict], fmt: str, max_length: int,
                num_rows: int | None, *, local: bool) -> tuple[TokenStats | None, str | None]:
    """Token statistics of `rows`, or None and why not (offline, gated, no transformers)."""
    try:
        tokenizer = load_tokenizer(model, token, local=local)
    except Exception as exc:  # stats are optional; the reason goes into the report
        log.info("no tokenizer for %s: %s", model, exc)
        return None, str(exc).splitlines()[0]
    lengths = sorted(len(tokenizer(counted_text(tokenizer, r, fmt))["input_ids"]) for r in rows)
    if not lengths:
        return None, "no rows to count"
    mean = sum(lengths) / len(lengths)

    def pct(p: float) -> int:
        return lengths[min(len(lengths) - 1, math.ceil(p * len(lengths)) - 1)]

    return TokenStats(
        tokenizer=model, sampled_rows=len(lengths), p50=pct(0.5), p95=pct(0.95), max=lengths[-1],
        mean=round(mean, 1), share_over_max_length=round(sum(n > max_length for n in lengths) / len(lengths), 3),
        max_length=max_length, estimated_total_tokens=int(mean * num_rows) if num_rows else None,
    ), None
