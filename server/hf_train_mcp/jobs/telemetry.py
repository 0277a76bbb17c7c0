"""GPU figures for job_status: what a running job's backend measures of its GPUs, and the hints they give.

A reading is taken at most once per CACHE_S per job, by at most one reader thread per job: clients poll
job_status (and HTTP serves many of them), and each Jobs reading is one more request against the Hub's rate
limit. A reading that fails, or does not come within the backend's own bound (hf_jobs: METRICS_DEADLINE_S,
which the stream's keep-alives cannot extend), shows as null: job_status never fails or
waits long for telemetry, and the reason is only logged, with the token masked.
"""

import logging
import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from hf_train_mcp import backends
from hf_train_mcp.backends.base import Backend, GpuReading
from hf_train_mcp.durations import minutes_since
from hf_train_mcp import methods
from hf_train_mcp.contract.requests import RunShape
from hf_train_mcp.estimate.hardware import get_catalog
from hf_train_mcp.hub import hub_token, scrub
from hf_train_mcp.jobs.ledger import JobRecord
from hf_train_mcp.contract.results import GpuFigure

log = logging.getLogger(__name__)
CACHE_S = 12.0  # a job's next reading starts no sooner, and never while its last reader is still reading
READ_WAIT_S = 3.0  # job_status's wait for a reading (hf_jobs bounds its own to METRICS_DEADLINE_S)
WINDOW_S = 600.0  # the readings "stays low" looks at
KEPT_READINGS = 20
KEPT_JOBS = 256
# NVML's memory.used counts what PyTorch's caching allocator keeps reserved (freed blocks it does not hand back),
# so a healthy job sits near its high-water mark: past this share the hint says so and what to do IF it fails,
# never that it is failing (an actual OOM ends the job, and its error line says so)
NEAR_OOM = 0.95  # memory used / total on any one GPU
IDLE_PCT = 20.0  # a GPU below this in every reading of WINDOW_S is idle
# A job whose log shows no training step yet may still be starting: a multi-GPU job installs its venv before
# `accelerate launch` (minutes), then every job downloads and loads the model and tokenises. Say nothing before
# this; once the log shows steps, start-up is over and the window alone decides.
IDLE_AFTER_MIN = 15.0
MAX_GPUS = 16  # figures shown: a real node has 8 (16 at most); a longer list is a broken reading, cut with a note
MAX_GPU_GB = 1024.0  # a card's memory beyond this is not a reading (the largest have ~300 GB)


@dataclass
class _Job:
    read_at: float  # when the last reading started (monotonic)
    reader: threading.Thread | None = None  # the job's one reader: a stalled one is waited out, never doubled
    figures: list[GpuFigure] | None = None
    reported: int = 0  # GPUs in the last reading, before MAX_GPUS cut it
    # (when, {GPU index: utilisation %}) of the recent readings, for the idle hint
    utilisation: deque = field(default_factory=lambda: deque(maxlen=KEPT_READINGS))


def runs_on_gpu(flavor: str | None, backend: str) -> bool:
    """False for a flavor known to have no GPU (nothing to ask the backend then); True when unknown."""
    if flavor is None:
        return True
    if flavor in backends.gpuless_flavors():
        return False
    info = get_catalog(offline=True, backend=backend).flavors.get(flavor)
    return info is None or info.gpu is not None


def _within(value: float, low: float, high: float) -> float | None:
    """The value when it is a possible reading (finite, in [low, high]), else None: shown as null, never a
    made-up 0 (a clamped -500 % would read as an idle GPU)."""
    return value if math.isfinite(value) and low <= value <= high else None


def _figure(reading: GpuReading) -> GpuFigure:
    total = _within(reading.memory_total_gb, 0.0, MAX_GPU_GB) or None  # 0 GB is no card either
    used = _within(reading.memory_used_gb, 0.0, 1.01 * (total or MAX_GPU_GB))  # 1 %: rounding of the two
    util = _within(reading.utilization_pct, 0.0, 100.0)
    return GpuFigure(index=reading.index, utilization_pct=None if util is None else round(util, 1),
                     memory_used_gb=None if used is None else round(used, 1),
                     memory_total_gb=None if total is None else round(total, 1))


def read_gpus(backend: Backend, job_id: str, namespace: str | None) -> list[GpuFigure] | None:
    """One reading, never raising: None when the backend has no such reading or it failed. Impossible values
    become None; the caller cuts the list to MAX_GPUS."""
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
        if stage != "RUNNING" or not runs_on_gpu(flavor, backend.name):
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
            job.figures, job.reported = (figures[:MAX_GPUS], len(figures)) if figures else (None, 0)
            busy = {f.index: f.utilization_pct for f in job.figures or () if f.utilization_pct is not None}
            if busy:
                job.utilisation.append((self._clock(), busy))

    def hint(self, backend: Backend, job_id: str, figures: list[GpuFigure] | None, *, started_at: str | None,
             stepping: bool = False, record: JobRecord | None = None) -> str:
        """What the figures call for, as sentences for next_step ("" when nothing). stepping: the log shows
        training steps (start-up is over); record: the job's ledger record, whose request the advice fits."""
        if not figures:
            return ""
        key = (backend.name, job_id)
        with self._lock:
            reported = self._jobs[key].reported if key in self._jobs else len(figures)
        hints = [f"The backend reported {reported} GPUs, more than a node has: only the first {len(figures)} are "
                 "shown, and they may not be real."] if reported > len(figures) else []
        full = [f for f in figures if f.memory_used_gb is not None and f.memory_total_gb
                and f.memory_used_gb / f.memory_total_gb >= NEAR_OOM]
        if full:
            worst = max(full, key=lambda f: f.memory_used_gb / f.memory_total_gb)
            advice = memory_advice(method=record.method if record else None,
                                   request=record.request if record else None, kind=record.kind if record else None)
            hints.append(f"GPU {worst.index} memory is at {100 * worst.memory_used_gb / worst.memory_total_gb:.0f}% "
                         f"({worst.memory_used_gb:g} of {worst.memory_total_gb:g} GB), PyTorch's cache included: "
                         f"a job that keeps stepping there is fine; if it fails out of memory, {advice}.")
        hints += self._idle_hint(key, started_at, stepping, [f.index for f in figures])
        return "".join(f" {h}" for h in hints)

    def _idle_hint(self, key: tuple[str, str], started_at: str | None, stepping: bool, shown: list[int]) -> list[str]:
        """Which GPUs stayed below IDLE_PCT in every reading of the last WINDOW_S, once the job is past its
        start-up (its log shows steps, or it has run IDLE_AFTER_MIN): all of them, or those beside a busy one."""
        running = minutes_since(started_at)
        if not stepping and (running is None or running < IDLE_AFTER_MIN):
            return []
        with self._lock:
            job = self._jobs.get(key)
            recent = [busy for at, busy in (job.utilisation if job else ()) if self._clock() - at <= WINDOW_S]
        seen = [i for i in shown if any(i in busy for busy in recent)]
        highest = {i: max(busy[i] for busy in recent if i in busy) for i in seen}
        idle = [i for i in seen if highest[i] < IDLE_PCT]
        if not idle:
            return []
        window = f"{WINDOW_S / 60:.0f} min"
        if len(idle) == len(seen):
            which = "GPU" if len(idle) == 1 else f"all {len(idle)} GPUs"
            return [f"{which} mostly idle ({max(highest[i] for i in idle):.0f}% busy at most in every reading of "
                    f"the last {window}): data loading bound? job_logs shows what it is doing; a larger "
                    "per_device_batch_size keeps the GPU busier if memory allows."]
        busy = [i for i in seen if i not in idle]
        return [f"{_gpus(idle)} of {len(seen)} idle (under {IDLE_PCT:.0f}% busy in every reading of the last "
                f"{window}) while {_gpus(busy)} {'works' if len(busy) == 1 else 'work'}: is the job using every "
                "GPU? A script run with plain python uses one; accelerate launch or torchrun starts one process per "
                "GPU."]


def _gpus(indices: list[int]) -> str:
    return f"GPU{'s' if len(indices) > 1 else ''} {', '.join(str(i) for i in indices)}"


def memory_advice(*, method: str | None, request: dict | None, kind: str | None) -> str:
    """What to resubmit with when a job's GPU runs out of memory, fitting the job: no QLoRA for a QLoRA job or
    where QLoRA is refused (embedding, an engine without it), LoRA for a full fine-tune, no max_length for
    images; a job this server did not render (run_script, another's) hears what to change in its own code."""
    if kind not in ("train", "node") or method not in methods.NAMES or not request:
        return ("lower the batch size (or sequence length) it runs with, or run it on a flavor with more GPU "
                "memory")
    steps = ["a smaller per_device_batch_size (raise gradient_accumulation to keep the batch)"]
    if methods.get(method).inputs == "text":
        steps.append("a shorter max_length")
    peft = request.get("peft") or "lora"
    if peft == "full":
        steps.append("peft='lora'")
    elif peft == "lora" and _qlora_offered(request):
        steps.append("peft='qlora'")
    steps.append("a flavor with more GPU memory (estimate_cost)")
    return f"resubmit with {', '.join(steps[:-1])} or {steps[-1]}"


def _qlora_offered(request: dict) -> bool:
    """Whether the same run would be accepted with peft='qlora' (the method's and the engine's own checks)."""
    shape = {name: value for name, value in request.items() if name in RunShape.model_fields}
    try:
        RunShape.model_validate({**shape, "peft": "qlora"})
    except ValueError:  # pydantic's ValidationError is one
        return False
    return True
