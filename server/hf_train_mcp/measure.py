"""Measured rather than modelled: the preflight's numbers (HFTM_PROBE) turned into an estimate.

estimate_cost(measure=True) launches a measurement job: the training script's preflight alone, a few optimizer
steps at the real batch size on the target flavor. Its attempts are ledger records whose idempotency key is
`probe-<key>-<n>`, the key naming everything that sets the step time, so a later estimate (or a submission's
default timeout) with the same settings finds the measurement.
"""

import hashlib
import json
import math
from dataclasses import replace
from typing import Any

from hf_train_mcp.estimate import constants as EC
from hf_train_mcp.estimate.cost import FlavorEstimate

PROBE_KEY_PREFIX = "probe-"
# Hyper fields that change the step time or the number of steps (the rest, e.g. the learning rate, do not).
_TIMING_FIELDS = ("method", "peft", "epochs", "max_steps", "max_length", "per_device_batch_size",
                  "gradient_accumulation", "packing", "num_generations", "max_completion_length")


def probe_key(*, model: str, dataset: str, flavor: str, backend: str, timing: dict[str, Any]) -> str:
    """The settings a measurement stands for."""
    named = {"model": model, "dataset": dataset, "flavor": flavor, "backend": backend,
             **{k: timing.get(k) for k in _TIMING_FIELDS}}
    return hashlib.sha256(json.dumps(named, sort_keys=True, default=str).encode()).hexdigest()[:16]


def prefix(key: str) -> str:
    return f"{PROBE_KEY_PREFIX}{key}-"


def attempt_key(key: str, attempt: int) -> str:
    return f"{prefix(key)}{attempt}"


def apply_measurement(estimate: FlavorEstimate, probe: dict[str, Any], usd_per_hour: float) -> FlavorEstimate:
    """The estimate with the preflight's projected training time and peak memory in place of the model's."""
    seconds = float(probe["projected_train_seconds"])
    total = seconds + estimate.overhead_seconds
    peak = probe.get("peak_memory_gb")
    return replace(
        estimate, train_seconds=seconds, hours=total / 3600,
        cost_usd=round(math.ceil(total / 60) * usd_per_hour / 60, 2),
        steps=int(probe.get("planned_steps") or estimate.steps),
        tokens_per_second=float(probe.get("tokens_per_second") or estimate.tokens_per_second),
        memory=replace(estimate.memory, gb=float(peak)) if peak is not None else estimate.memory,
        fits=True, reasons=[], timeout_factor=EC.MEASURED_TIMEOUT_FACTOR, measured=True,
    )
