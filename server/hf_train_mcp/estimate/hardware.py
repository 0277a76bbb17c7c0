"""The Jobs hardware catalog: live from the Hub (cached per process), else the built-in table."""

import logging
import math
import re
import threading
import time
from dataclasses import dataclass

from hf_train_mcp.estimate.constants import FALLBACK_FLAVORS, FALLBACK_HOSTS, GPU_FACTS, GpuFacts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlavorInfo:
    name: str
    gpu: GpuFacts | None
    gpus: int
    usd_per_hour: float
    ram_gb: float | None = None  # the machine's memory (a merge holds the whole model there)
    vcpus: int | None = None
    disk_gb: float | None = None  # ephemeral storage, when the live list says

    @property
    def gpu_memory_gb(self) -> float:
        return self.gpu.memory_gb if self.gpu else 0.0


@dataclass(frozen=True)
class Catalog:
    flavors: dict[str, FlavorInfo]
    source: str  # "live" or "built-in"
    note: str | None = None  # why the built-in table is used, for the caller's warnings


HARDWARE_DEADLINE_S = 3.0  # prices are advisory: fall back quickly
LIVE_TTL_S = 3600.0  # prices change rarely; a long-running server still picks up new ones within the hour
FAILED_TTL_S = 60.0
_lock = threading.Lock()
_cached: tuple[float, Catalog] | None = None  # (valid until, catalog)


def fallback_catalog() -> Catalog:
    flavors = {
        name: FlavorInfo(name, GPU_FACTS[model] if model else None, count, price, *FALLBACK_HOSTS.get(name, (None, None)))
        for name, model, count, price in FALLBACK_FLAVORS
    }
    return Catalog(flavors, "built-in")


def _gpu_for(model: str, vram: str) -> GpuFacts | None:
    key = re.sub(r"^(nvidia|NVIDIA)\s+", "", model).strip().upper()
    for name, facts in sorted(GPU_FACTS.items(), key=lambda item: -len(item[0])):  # L40S before L4
        if key.startswith(name.upper()):
            match = re.search(r"(\d+(?:\.\d+)?)", vram or "")
            return facts if not match else GpuFacts(**{**facts.__dict__, "memory_gb": float(match.group(1))})
    return None


def _amount(text: str | None) -> float | None:
    match = re.search(r"(\d+(?:\.\d+)?)", text or "")
    return float(match.group(1)) if match else None


def live_catalog(token: str | None) -> Catalog:
    """Prices and accelerators from `list_jobs_hardware()`; GPU facts the API lacks come from GPU_FACTS."""
    from hf_train_mcp.hub import bounded, hub_api

    built_in = fallback_catalog().flavors
    flavors: dict[str, FlavorInfo] = {}
    unpriced: list[str] = []
    for hw in bounded("reading the Jobs hardware list", lambda: hub_api(token).list_jobs_hardware(), token,
                      deadline_s=HARDWARE_DEADLINE_S):
        per_hour = _hourly(hw)
        if per_hour is None:  # a missing or zero price would turn every budget cap off: built-in, else not offered
            unpriced.append(hw.name)
            if hw.name not in built_in:
                continue
            per_hour = built_in[hw.name].usd_per_hour
        acc = hw.accelerator
        ram, cpus = _amount(getattr(hw, "ram", None)), _amount(getattr(hw, "cpu", None))
        host = {"ram_gb": ram, "vcpus": int(cpus) if cpus else None,
                "disk_gb": _amount(getattr(hw, "ephemeral_storage", None))}
        if acc is None:
            flavors[hw.name] = FlavorInfo(hw.name, None, 0, per_hour, **host)
            continue
        count = int(acc.quantity) if str(acc.quantity).isdigit() else 1
        # The API reports total VRAM for multi-GPU flavors on some entries: trust our per-GPU facts then.
        gpu = _gpu_for(acc.model, "") if count > 1 else _gpu_for(acc.model, acc.vram)
        if gpu is None and hw.name in built_in:
            gpu = built_in[hw.name].gpu
        flavors[hw.name] = FlavorInfo(hw.name, gpu, count, per_hour, **host)
    if not flavors:
        raise ValueError("empty hardware list")
    note = None
    if unpriced:
        note = (f"the live hardware list gives no price for {', '.join(sorted(unpriced))}: built-in prices are used "
                "where known, and flavors without one are not offered")
    return Catalog(flavors, "live", note)


def _hourly(hw: object) -> float | None:
    """$/hour of a live hardware entry; None when the price is missing, zero, negative or not a number."""
    cost, unit = getattr(hw, "unit_cost_usd", None), getattr(hw, "unit_label", None)
    per_unit = {"minute": 60, "hour": 1, "second": 3600}.get(unit or "minute")
    if not isinstance(cost, int | float) or isinstance(cost, bool) or per_unit is None:
        return None
    per_hour = float(cost) * per_unit
    return per_hour if math.isfinite(per_hour) and per_hour > 0 else None


def get_catalog(token: str | None = None, *, offline: bool = False) -> Catalog:
    """The live catalog, cached for LIVE_TTL_S; the built-in table (named in `note`) when the Hub cannot be read,
    and then not asked again for FAILED_TTL_S, so that an offline server does not wait on every call."""
    global _cached
    if offline:
        return fallback_catalog()
    with _lock:
        if _cached is None or time.monotonic() >= _cached[0]:
            try:
                _cached = (time.monotonic() + LIVE_TTL_S, live_catalog(token))
            except Exception as exc:  # any failure (offline, 5xx, odd payload) falls back, and says so
                log.info("hardware catalog unavailable (%s); using the built-in table", exc)
                _cached = (time.monotonic() + FAILED_TTL_S, Catalog(
                    fallback_catalog().flavors, "built-in", f"prices and flavors come from the built-in table: {exc}"))
        return _cached[1]


def reset_cache() -> None:
    global _cached
    with _lock:
        _cached = None
