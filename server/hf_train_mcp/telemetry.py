"""GPU figures for job_status: what a running job's backend measures of its GPUs, and the hints they give.

A reading is taken at most once per CACHE_S per job, by at most one reader thread per job: clients poll
job_status (and HTTP serves many of them), and each Jobs reading is one more request against the Hub's rate
limit. A reading that fails, or does not come within the backend's own bound (hf_jobs: METRICS_DEADLINE_S,
which the stream's keep-alives cannot extend), shows as null: job_status never fails or
waits long for telemetry, and the reason is only logged, with the token masked.
"""

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hf_train_mcp import backends
from hf_train_mcp.backends.base import Backend, GpuReading
from hf_train_mcp.durations import minutes_since
from hf_train_mcp.estimate.hardware import get_catalog
from hf_train_mcp.hub import hub_token, scrub
from hf_train_mcp.schemas import GpuFigure

log = logging.getLogger(__name__)
CACHE_S = 12.0  # a job's next reading starts no sooner, and never while its last reader is still reading
READ_WAIT_S = 3.0  # job_status's wait for a reading (hf_jobs bounds its own to METRICS_DEADLINE_S)
WINDOW_S = 600.0  # the readings "stays low" looks at
KEPT_READINGS = 20
KEPT_JOBS = 256
NEAR_OOM = 0.95  # memory used / total on any one GPU
IDLE_PCT = 20.0  # mean utilisation over the job's GPUs
IDLE_AFTER_MIN = 5.0  # start-up (download, loading, tokenising) leaves the GPU idle: say nothing before this


@dataclass
class _Job:
    read_at: float  # when the last reading started (monotonic)
    reader: threading.Thread | None = None  # the job's one reader: a stalled one is waited out, never doubled
    figures: list[GpuFigure] | None = None
    utilisation: deque = field(default_factory=lambda: deque(maxlen=KEPT_READINGS))  # (when, mean %)


def runs_on_gpu(flavor: str | None) -> bool:
    """False for a flavor known to have no GPU (nothing to ask the backend then); True when unknown."""
    if flavor is None:
        return True
    if flavor in backends.gpuless_flavors():
        return False
    info = get_catalog(offline=True).flavors.get(flavor)
    return info is None or info.gpu is not None


def _figure(reading: GpuReading) -> GpuFigure:
    return GpuFigure(index=reading.index, utilization_pct=round(reading.utilization_pct, 1),
                     memory_used_gb=round(reading.memory_used_gb, 1),
                     memory_total_gb=round(reading.memory_total_gb, 1))


def read_gpus(backend: Backend, job_id: str, namespace: str | None) -> list[GpuFigure] | None:
    """One reading, never raising: None when the backend has no such reading or it failed."""
    reader = getattr(backend, "gpus", None)  # optional in the Backend protocol
    if reader is None:
        return None
    try:
        readings = reader(job_id, namespace)
    except Exception as exc:  # telemetry is best effort: the status is what the caller asked for
        log.info("no GPU figures for %s: %s", job_id, scrub(str(exc) or type(exc).__name__, hub_token()))
        return None
    return [_figure(r) for r in readings] if readings else None


class GpuTelemetry:
    """Per-job readings, cached for CACHE_S, with the recent utilisation kept for the idle hint."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._jobs: OrderedDict[tuple[str, str], _Job] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, backend: Backend, job_id: str, namespace: str | None, *, stage: str | None,
              flavor: str | None) -> Callable[[], list[GpuFigure] | None]:
        """Begin reading the job's GPUs (in the background, while job_status reads the log); the returned call
        gives the figures, or None (not running, no GPU, unknown, not in time) within READ_WAIT_S. stage=None:
        the backend did not answer (a stale status), so neither is it asked for figures."""
        if stage != "RUNNING" or not runs_on_gpu(flavor):
            return lambda: None
        key, now = (backend.name, job_id), self._clock()
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and (now - job.read_at < CACHE_S or (job.reader and job.reader.is_alive())):
                return lambda: job.figures
            if job is None:
                job = self._jobs[key] = _Job(read_at=now)
            job.read_at = now  # claimed: concurrent callers get the last figures, not a second reading
            self._jobs.move_to_end(key)
            while len(self._jobs) > KEPT_JOBS:
                self._jobs.popitem(last=False)
            reader = job.reader = threading.Thread(target=self._read, args=(job, backend, job_id, namespace),
                                                   daemon=True, name=f"gpus-{job_id}")
            reader.start()  # under the lock: a caller that sees the reader sees it alive

        def result() -> list[GpuFigure] | None:
            # counted from the start: job_status read the log meanwhile. A backend that does not bound its own
            # reading is cut here
            reader.join(max(0.0, now + READ_WAIT_S - self._clock()))
            return None if reader.is_alive() else job.figures

        return result

    def _read(self, job: _Job, backend: Backend, job_id: str, namespace: str | None) -> None:
        figures = read_gpus(backend, job_id, namespace)
        with self._lock:
            job.figures = figures
            if figures:
                job.utilisation.append((self._clock(), sum(f.utilization_pct for f in figures) / len(figures)))

    def hint(self, backend: Backend, job_id: str, figures: list[GpuFigure] | None, *,
             started_at: str | None) -> str:
        """What the figures call for, as sentences for next_step ("" when nothing)."""
        if not figures:
            return ""
        hints = []
        full = [f for f in figures if f.memory_total_gb and f.memory_used_gb / f.memory_total_gb >= NEAR_OOM]
        if full:
            worst = max(full, key=lambda f: f.memory_used_gb / f.memory_total_gb)
            hints.append(f"GPU {worst.index} memory is at {100 * worst.memory_used_gb / worst.memory_total_gb:.0f}% "
                         f"({worst.memory_used_gb:g} of {worst.memory_total_gb:g} GB): near OOM: lower "
                         "per_device_batch_size or use QLoRA (peft='qlora') if it fails out of memory.")
        idle = self._idle((backend.name, job_id), started_at)
        if idle is not None:
            hints.append(f"GPU mostly idle ({idle:.0f}% busy in every reading of the last "
                         f"{WINDOW_S / 60:.0f} min): data loading bound? job_logs shows what it is doing; a larger "
                         "per_device_batch_size keeps the GPU busier if memory allows.")
        return "".join(f" {h}" for h in hints)

    def _idle(self, key: tuple[str, str], started_at: str | None) -> float | None:
        """The highest recent utilisation when every reading in WINDOW_S was below IDLE_PCT, once the job has
        run past its start-up; else None."""
        running = minutes_since(started_at)
        if running is None or running < IDLE_AFTER_MIN:
            return None
        with self._lock:
            job = self._jobs.get(key)
            recent = [pct for at, pct in (job.utilisation if job else ()) if self._clock() - at <= WINDOW_S]
        if not recent or max(recent) >= IDLE_PCT:
            return None
        return max(recent)
