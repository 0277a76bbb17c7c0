"""The Jobs hardware catalog of the Hugging Face Jobs backend: live from the Hub (cached per process), else the
built-in table."""

import logging
import math
import re
import threading
import time

from hf_train_mcp.backends.catalog import GPU_FACTS, Catalog, FlavorInfo, GpuFacts

log = logging.getLogger(__name__)

# (flavor, GPU model or None, GPU count, $/hour) — HF Jobs pricing docs, 2026 (shared/reference/training-facts.md).
# Used only when the live `list_jobs_hardware()` cannot be reached.
FALLBACK_FLAVORS: tuple[tuple[str, str | None, int, float], ...] = (
    ("cpu-basic", None, 0, 0.01), ("cpu-upgrade", None, 0, 0.03), ("cpu-xl", None, 0, 1.00),
    ("cpu-performance", None, 0, 1.90),
    ("t4-small", "T4", 1, 0.40), ("t4-medium", "T4", 1, 0.60),
    ("l4x1", "L4", 1, 0.80), ("l4x4", "L4", 4, 3.80),
    ("l40sx1", "L40S", 1, 1.80), ("l40sx4", "L40S", 4, 8.30), ("l40sx8", "L40S", 8, 23.50),
    ("a10g-small", "A10G", 1, 1.00), ("a10g-large", "A10G", 1, 1.50),
    ("a10g-largex2", "A10G", 2, 3.00), ("a10g-largex4", "A10G", 4, 5.00),
    ("a100-large", "A100", 1, 2.50), ("a100x4", "A100", 4, 10.00), ("a100x8", "A100", 8, 20.00),
    ("h200", "H200", 1, 5.00), ("h200x2", "H200", 2, 10.00), ("h200x4", "H200", 4, 20.00),
    ("h200x8", "H200", 8, 40.00),
    ("rtx-pro-6000", "RTX PRO 6000", 1, 2.75), ("rtx-pro-6000x2", "RTX PRO 6000", 2, 5.50),
    ("rtx-pro-6000x4", "RTX PRO 6000", 4, 11.00), ("rtx-pro-6000x8", "RTX PRO 6000", 8, 22.00),
)  # fmt: skip

# (memory GB, vCPUs) of each flavor's machine: HF Spaces/Jobs hardware tables (a100-large: 12 vCPU, 142 GB;
# a10g-small: 4 vCPU, 15 GB). The live hardware list carries these too and wins; this table is the offline answer.
FALLBACK_HOSTS: dict[str, tuple[float, int]] = {
    "cpu-basic": (16, 2), "cpu-upgrade": (32, 8), "cpu-xl": (124, 16), "cpu-performance": (256, 32),
    "t4-small": (15, 4), "t4-medium": (30, 8), "l4x1": (30, 8), "l4x4": (186, 48),
    "l40sx1": (62, 8), "l40sx4": (382, 48), "l40sx8": (1534, 192),
    "a10g-small": (15, 4), "a10g-large": (46, 12), "a10g-largex2": (92, 24), "a10g-largex4": (184, 48),
    "a100-large": (142, 12), "a100x4": (568, 48), "a100x8": (1136, 96),
    "h200": (256, 23), "h200x2": (512, 46), "h200x4": (1024, 92), "h200x8": (2048, 184),
    "rtx-pro-6000": (186, 24), "rtx-pro-6000x2": (372, 48), "rtx-pro-6000x4": (744, 96),
    "rtx-pro-6000x8": (1488, 192),
}  # fmt: skip

HARDWARE_DEADLINE_S = 3.0  # prices are advisory: fall back quickly
LIVE_TTL_S = 3600.0  # prices change rarely; a long-running server still picks up new ones within the hour
FAILED_TTL_S = 60.0
_lock = threading.Lock()
_cached: tuple[float, Catalog] | None = None  # (valid until, catalog)


def fallback_catalog() -> Catalog:
    """The built-in table: what the Jobs pricing docs listed, for when the Hub cannot be asked."""
    flavors = {}
    for name, model, count, price in FALLBACK_FLAVORS:
        ram, vcpus = FALLBACK_HOSTS.get(name, (None, None))
        flavors[name] = FlavorInfo(name, GPU_FACTS[model] if model else None, count, price, ram_gb=ram, vcpus=vcpus)
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


def jobs_catalog(token: str | None = None, *, offline: bool = False) -> Catalog:
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
