"""Measured rather than modelled: the preflight's numbers (HFTM_PROBE) turned into an estimate.

estimate_cost(measure=True) launches a measurement job: the training script's preflight alone, a few optimizer
steps at the real batch size on the target flavor. Its attempts are ledger records of kind "probe" whose
idempotency key is `probe-<key>-<n>`. The key names what sets the time of one step, resolved (the model, the
data and its split, flavor, precision path, batch, accumulation, sequence and generation lengths, LoRA shape);
the number of steps, evaluations and checkpoints is not in it: a measurement gives seconds per step and peak
memory, and the estimate counts the steps of the run at hand and adds its modelled evaluation and checkpoint time.
"""

import hashlib
import json
import math
from dataclasses import replace
from typing import Any

from hf_train_mcp import methods
from hf_train_mcp.estimate import constants as EC
from hf_train_mcp.estimate.cost import FlavorEstimate, push_seconds
from hf_train_mcp.estimate.workload import Workload, rows_per_step
from hf_train_mcp.estimate.sizing import ModelSize

PROBE_KEY_PREFIX = "probe-"
PREFLIGHT_MARGIN = 1.1  # the preflight stops a run whose projection (with this margin) does not fit its timeout


def probe_key(*, model: str, dataset: str, dataset_config: str | None, dataset_split: str, flavor: str,
              backend: str, method: str, peft: str, per_device_batch_size: int, gradient_accumulation: int,
              max_length: int, options: dict[str, Any], lora: dict[str, Any] | None = None,
              use_liger_kernel: bool = False, chat_template: bool = False) -> str:
    """The settings one measured step stands for (each already resolved to what the job runs); `options`: the
    method's own sizing options (MethodSpec.sizing_options)."""
    named = dict(model=model, dataset=dataset, dataset_config=dataset_config, dataset_split=dataset_split,
                 flavor=flavor, backend=backend, method=method, peft=peft, batch=per_device_batch_size,
                 accumulation=gradient_accumulation, max_length=max_length, options=options,
                 lora=None if peft == "full" else {k: (lora or {}).get(k) for k in ("r", "target_modules")},
                 liger=use_liger_kernel, chat_template=chat_template)
    return hashlib.sha256(json.dumps(named, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_key(config: dict[str, Any], *, flavor: str, backend: str) -> str:
    """The key of a rendered run (its script's CONFIG)."""
    return probe_key(model=config["model"], dataset=config["dataset"], dataset_config=config["dataset_config"],
                     dataset_split=config["dataset_split"], flavor=flavor, backend=backend, method=config["method"],
                     peft=config["peft"], per_device_batch_size=config["per_device_batch_size"],
                     gradient_accumulation=config["gradient_accumulation"], max_length=config["max_length"],
                     options={o.name: config[o.name] for o in methods.get(config["method"]).options if o.sizing},
                     lora=config["lora"], use_liger_kernel=config["use_liger_kernel"],
                     chat_template=bool(config["chat_template"]))


def prefix(key: str) -> str:
    return f"{PROBE_KEY_PREFIX}{key}-"


def attempt_key(key: str, attempt: int) -> str:
    return f"{prefix(key)}{attempt}"


def is_probe_key(key: str | None) -> bool:
    return bool(key) and key.startswith(PROBE_KEY_PREFIX)


def usable(probe: dict[str, Any] | None) -> bool:
    return bool(probe) and isinstance(probe.get("seconds_per_step"), int | float) and probe["seconds_per_step"] > 0


def apply_measurement(estimate: FlavorEstimate, probe: dict[str, Any], usd_per_hour: float) -> FlavorEstimate:
    """The estimate with the measured seconds per step in place of the model's, over this run's own steps, plus
    its modelled evaluation and checkpoint time (the preflight measures neither)."""
    loop = estimate.step.total * estimate.steps if estimate.step else estimate.train_seconds
    extra = max(0.0, estimate.train_seconds - loop)
    seconds = float(probe["seconds_per_step"]) * estimate.steps + extra
    total = seconds + estimate.overhead_seconds
    peak = probe.get("peak_memory_gb")
    return replace(
        estimate, train_seconds=seconds, hours=total / 3600,
        cost_usd=round(math.ceil(total / 60) * usd_per_hour / 60, 2),
        tokens_per_second=float(probe.get("tokens_per_second") or estimate.tokens_per_second),
        memory=replace(estimate.memory, gb=float(peak)) if peak is not None else estimate.memory,
        fits=True, reasons=[], timeout_factor=EC.MEASURED_TIMEOUT_FACTOR, measured=True,
    )


def extra_seconds(estimate: FlavorEstimate | None) -> float:
    """Modelled time of the run outside its optimizer steps (evaluation, checkpoints): what a preflight adds."""
    if estimate is None or estimate.step is None:
        return 0.0
    return max(0.0, estimate.train_seconds - estimate.step.total * estimate.steps)


PROBE_STEPS = 3  # the first warms up (kernels, allocator); the others are timed
PROBE_TIMEOUT_MIN_S = 20 * 60


def probe_timeout(estimate: FlavorEstimate | None) -> int:
    """A measurement job: container, installs and model download, then PROBE_STEPS steps, with room to spare."""
    if estimate is None:
        return PROBE_TIMEOUT_MIN_S
    step = estimate.train_seconds / max(1, estimate.steps)
    return int(max(PROBE_TIMEOUT_MIN_S, math.ceil((estimate.overhead_seconds * 2 + step * PROBE_STEPS * 3) / 600) * 600))


def probe_sample_rows(work: Workload, gpus: int) -> int:
    """Rows the preflight tokenizes: enough for its steps twice over (the trainer repeats them if it runs out)."""
    return int(min(work.num_examples, max(64, math.ceil(rows_per_step(work, gpus) * PROBE_STEPS * 2))))


def probe_config(size: ModelSize, work: Workload, gpus: int, estimate: FlavorEstimate | None, timeout: int, *,
                  probe_only: bool) -> dict:
    """The preflight's settings: its steps, the rows it samples and the time budget it judges the run by."""
    return {
        "steps": PROBE_STEPS, "only": probe_only, "sample_rows": probe_sample_rows(work, gpus),
        # what the timeout leaves the script (download, training) once the container, installs and push are paid,
        # and the modelled time of evaluation and checkpoints, which the preflight does not measure
        "train_budget_s": None if probe_only else int(max(60, timeout - EC.IMAGE_START_S - EC.DEPENDENCY_INSTALL_S
                                                          - push_seconds(size, work))),
        "extra_s": round(extra_seconds(estimate)), "margin": PREFLIGHT_MARGIN,
    }
