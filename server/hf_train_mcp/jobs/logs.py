"""Training logs -> progress, last metrics, and a one-line error with what to do about it.

Reads the HFTM_ status lines our templates print, and falls back to what any transformers Trainer prints
(`{'loss': 1.2, ...}` dicts and tqdm `12/200 [..]` bars), so jobs not rendered by us still get a progress.
"""

import json
import re
from dataclasses import dataclass, field

from hf_train_mcp.rendering import pysource
from hf_train_mcp.contract.results import Progress

# a Trainer progress bar (no description before the percentage; datasets' bars say "Map: 100%|..")
_TQDM = re.compile(r"(?:^|\r)\s*\d+%\|[^|]*\|\s*(\d+)/(\d+) \[[^\]]*(?:it/s|s/it)\]")  # fast and slow steps
# a metrics dict printed while a bar is drawn lands after the bar's fragment, on its line: `2/4 [00:02<00:02]{..}`
_DICT_AFTER_BAR = re.compile(r"\d+/\d+ \[[^\]]*\]\s*(\{.*\})$")
_DICT_KEYS = ("'loss'", "'eval_loss'", "'train_runtime'")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)|torch\.\w+\.OutOfMemoryError)\b:?\s*(.*)$")
# the Hub refusing a token, as huggingface_hub words it (not any line that happens to contain "401")
_AUTH = re.compile(r"\b40[13] (Client Error|Unauthorized|Forbidden)|\bUnauthorized\b|\bForbidden\b|"
                   r"Invalid (user )?token|GatedRepoError|RepositoryNotFoundError", re.IGNORECASE)
PROBE_METRICS = ("seconds_per_step", "tokens_per_second", "peak_memory_gb", "projected_train_seconds")
_METRIC_KEYS = ("loss", "learning_rate", "grad_norm", "eval_loss", "reward", "rewards/accuracies",
                "rewards/margins", "mean_token_accuracy", "accuracy", "kl", "entropy", "train_loss")


@dataclass
class ParsedLog:
    progress: Progress = field(default_factory=Progress)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    hint: str | None = None
    out_of_memory: bool = False  # the error is the GPU's memory: the advice depends on the job (estimate.advice)
    done: bool = False
    probe: dict | None = None  # the preflight's measurement (HFTM_PROBE)


def _numbers(record: dict) -> dict[str, float]:
    out = {}
    for key, value in record.items():
        number = _number(value)
        if number is None:
            continue
        if key in _METRIC_KEYS or key.startswith(("eval_", "rewards/", "reward")):
            out[key] = number
    return out


def _number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _update_progress(progress: Progress, step: object, total: object, epoch: object) -> None:
    step_n, total_n, epoch_n = _number(step), _number(total), _number(epoch)
    if step_n is not None:
        progress.step = int(step_n)
    if total_n:
        progress.total_steps = int(total_n)
    if epoch_n is not None:
        progress.epoch = round(epoch_n, 3)
    if progress.step is not None and progress.total_steps:
        progress.percent = round(100.0 * progress.step / progress.total_steps, 1)


def probe_metrics(probe: dict) -> dict[str, float]:
    """The preflight's numbers as job_status metrics (preflight_seconds_per_step, ...)."""
    return {f"preflight_{k}": float(v) for k, v in probe.items() if k in PROBE_METRICS and _number(v) is not None}


OUT_OF_MEMORY = "The GPU ran out of memory: "


def _hint(text: str) -> str | None:
    lowered = text.lower()
    if "out of memory" in lowered or "outofmemoryerror" in lowered:
        return OUT_OF_MEMORY + ("resubmit with a smaller per_device_batch_size (raise gradient_accumulation), a "
                                "shorter max_length, or a larger flavor (see estimate_cost).")
    if "timeout" in lowered or "timed out" in lowered or "deadline" in lowered:
        return "The job hit its time limit: resubmit with a longer timeout (estimate_cost recommends one) and resume_from."
    if _AUTH.search(text):
        return "The Hub refused the token: make sure HF_TOKEN has write access to the target repo, then resubmit."
    if "keyerror" in lowered or "column" in lowered or "features" in lowered:
        return "The dataset columns do not match the method: run validate_dataset and pass its column_mapping."
    return None


def _updates(lines: list[str]):
    """Each line's `\r`-separated updates (a bar redraws itself with `\r`, and the Jobs API ends lines at
    newlines only), stripped, as lines of their own."""
    for raw in lines:
        for part in raw.split("\r"):
            if part.strip():
                yield part.strip()


def _metrics_dict(line: str) -> dict | None:
    """A Trainer-style metrics dict on its own line, or after a bar fragment; None when there is none."""
    found = line if line.startswith("{") else (m.group(1) if (m := _DICT_AFTER_BAR.search(line)) else None)
    if found is None or not any(key in found for key in _DICT_KEYS):
        return None
    try:
        record = pysource.literal(found)
    except (ValueError, SyntaxError):
        return None
    return record if isinstance(record, dict) else None


def parse_log(lines: list[str]) -> ParsedLog:
    parsed = ParsedLog()
    traceback_tail: str | None = None
    for line in _updates(lines):
        if line.startswith("HFTM_"):
            kind, _, payload = line.partition(" ")
            try:
                record = json.loads(payload)
            except json.JSONDecodeError:
                continue
            if kind == "HFTM_LOG":
                _update_progress(parsed.progress, record.get("step"), record.get("total_steps"), record.get("epoch"))
                parsed.metrics.update(_numbers(record))
            elif kind == "HFTM_ERROR":
                parsed.error = f"{record.get('type')}: {record.get('message')}".strip()
            elif kind == "HFTM_DONE":
                parsed.done = True
            elif kind == "HFTM_EVAL" and isinstance(record, dict):  # an evaluation's results: every number
                parsed.metrics.update({k: n for k, n in ((k, _number(v)) for k, v in record.items()) if n is not None})
            elif kind == "HFTM_PROBE" and isinstance(record, dict):
                parsed.probe = record
                parsed.metrics.update(probe_metrics(record))
            continue
        bar = _TQDM.findall(line)
        if bar:
            step, total = bar[-1]
            _update_progress(parsed.progress, int(step), int(total), None)
        record = _metrics_dict(line)
        if record is not None:
            parsed.metrics.update(_numbers(record))
            _update_progress(parsed.progress, None, None, record.get("epoch"))
        if bar or line.startswith("{"):
            continue
        match = _EXCEPTION.match(line)
        if match:
            traceback_tail = line
    if parsed.error is None and traceback_tail:
        parsed.error = traceback_tail
    if parsed.error:  # hints come from the error line itself, never from whatever else the log says
        parsed.hint = _hint(parsed.error)
        parsed.out_of_memory = bool(parsed.hint and parsed.hint.startswith(OUT_OF_MEMORY))
    return parsed
