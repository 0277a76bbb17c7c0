"""Time, memory and cost of the jobs that follow a training run: an evaluation (forward passes and greedy
generations on a GPU) and an export (a merge in the machine's memory, then GGUF conversion and quantization).

Modelled from the same hardware facts as training, with the constants in estimate/constants.py; they are not
calibrated against measured runs, so the timeouts keep training's margin.
"""

import math
from dataclasses import dataclass, field

from hf_train_mcp.backends.catalog import Catalog, FlavorInfo
from hf_train_mcp.durations import format_duration
from hf_train_mcp.estimate import constants as C
from hf_train_mcp.estimate.sizing import ModelSize


@dataclass(frozen=True)
class JobEstimate:
    """What a follow-up job needs and takes on one flavor (the fields training's FlavorEstimate has too)."""

    flavor: str
    fits: bool
    memory_gb: float  # needed: GPU memory for an evaluation, machine memory for an export
    available_gb: float
    train_seconds: float  # the work itself
    overhead_seconds: float  # container, installs, downloads, uploads
    cost_usd: float
    reasons: list[str] = field(default_factory=list)

    @property
    def hours(self) -> float:
        return (self.train_seconds + self.overhead_seconds) / 3600

    @property
    def recommended_timeout_seconds(self) -> int:
        raw = self.train_seconds * C.TIMEOUT_FACTOR + self.overhead_seconds * 1.5
        return int(max(C.TIMEOUT_MIN_S, math.ceil(raw / 600) * 600))

    @property
    def recommended_timeout(self) -> str:
        return format_duration(self.recommended_timeout_seconds)


@dataclass(frozen=True)
class EvalWork:
    """An evaluation's passes: scored rows, generated tokens and benchmark items."""

    rows: int
    tokens_per_row: float
    sequences_per_row: int  # 2 for preference data (chosen and rejected)
    generated_tokens: int  # greedy decoding: side-by-side samples (base and tuned) and GRPO completions
    generation_calls: int
    benchmark_items: int  # lm-evaluation-harness items over all tasks (num_samples each)


@dataclass(frozen=True)
class ExportWork:
    format: str  # merged | gguf
    quantization: str | None  # gguf: f16 | q8_0 | q4_k_m
    merge: bool  # an adapter merged into its base (else a full model re-saved)


def _cost(seconds: float, usd_per_hour: float) -> float:
    return round(math.ceil(seconds / 60) * usd_per_hour / 60, 2)


def _download_seconds(size: ModelSize) -> float:
    return size.params * 2 / 1e9 / C.DOWNLOAD_GBPS


def evaluation_on(size: ModelSize, work: EvalWork, flavor: FlavorInfo) -> JobEstimate:
    """An evaluation on a GPU flavor: the model in bf16 across its GPUs, batch-1 forwards and greedy decoding."""
    gpu = flavor.gpu
    if gpu is None:
        raise ValueError(f"{flavor.name} has no GPU")
    weights_gb = size.params * 2 / 1e9
    need = weights_gb * C.EVAL_MEMORY_SAFETY + C.CUDA_CONTEXT_GB
    have = gpu.memory_gb * flavor.gpus
    flops = gpu.peak_tflops * 1e12 * C.EVAL_EFFICIENCY
    read_s = weights_gb / (gpu.bandwidth_tbps * 1e3 * C.DECODE_BANDWIDTH_SHARE)  # one pass over the weights
    forward = work.rows * work.sequences_per_row * (
        max(work.tokens_per_row * 2 * size.compute_params / flops, read_s) + C.FORWARD_OVERHEAD_S)
    decode = work.generated_tokens * (read_s + C.GENERATE_TOKEN_OVERHEAD_S)
    benchmarks = work.benchmark_items * C.BENCHMARK_TOKENS_PER_SAMPLE * 2 * size.compute_params / (flops * 2)
    seconds = forward + decode + benchmarks
    overhead = C.IMAGE_START_S + C.DEPENDENCY_INSTALL_S + _download_seconds(size) * (2 if work.benchmark_items else 1)
    reasons = [] if need <= have else [f"needs ~{need:.0f} GB of GPU memory, {flavor.name} has {have:.0f} GB"]
    return JobEstimate(flavor=flavor.name, fits=not reasons, memory_gb=round(need, 1), available_gb=have,
                       train_seconds=seconds, overhead_seconds=overhead,
                       cost_usd=_cost(seconds + overhead, flavor.usd_per_hour), reasons=reasons)


def export_weights_gb(size: ModelSize) -> float:
    """The model as the export loads and writes it: in its base's dtype (size.dtype; bf16 for most)."""
    return size.params * size.weight_bytes / 1e9


def export_memory_gb(size: ModelSize) -> float:
    """Machine memory a merge needs: the model as loaded, loader and serializer peaks, Python and torch."""
    return export_weights_gb(size) * C.EXPORT_RAM_SAFETY + C.EXPORT_RAM_FLOOR_GB


def export_output_gb(size: ModelSize, work: ExportWork) -> float:
    if work.format == "gguf":
        return size.params * C.GGUF_BYTES_PER_PARAM[work.quantization or "q4_k_m"] / 1e9
    return export_weights_gb(size)


def export_disk_gb(size: ModelSize, work: ExportWork) -> float:
    """The downloaded base, the merged model and, for GGUF, the f16 file and the quantized one."""
    weights_gb = export_weights_gb(size)
    gguf = weights_gb + export_output_gb(size, work) if work.format == "gguf" else 0.0
    return weights_gb * 2 + gguf + 2


def export_on(size: ModelSize, work: ExportWork, flavor: FlavorInfo) -> JobEstimate:
    """An export on any flavor (a CPU machine does it as well as a GPU one): merge, save, convert, quantize,
    upload. Whether it fits depends on the machine's memory, not the GPU's."""
    weights_gb = export_weights_gb(size)
    vcpus = flavor.vcpus or 2
    seconds = weights_gb / C.MERGE_GBPS + weights_gb / C.SAVE_GBPS
    if work.format == "gguf":
        seconds += C.LLAMA_CPP_SETUP_S + weights_gb / C.GGUF_CONVERT_GBPS
        if work.quantization not in ("f16", "q8_0"):  # k-quants go through llama-quantize, built in the job
            seconds += C.LLAMA_QUANTIZE_BUILD_VCPU_S / vcpus + size.params / (C.QUANTIZE_PARAMS_PER_VCPU_S * vcpus)
    overhead = (C.IMAGE_START_S + C.DEPENDENCY_INSTALL_S + _download_seconds(size)
                + export_output_gb(size, work) / C.PUSH_GBPS)
    need = export_memory_gb(size)
    have = flavor.ram_gb
    reasons = []  # an unknown machine size passes: the caller chose the flavor
    if have is not None and need > have:
        reasons.append(f"needs ~{need:.0f} GB of memory, {flavor.name} has {have:.0f} GB")
    disk = export_disk_gb(size, work)
    if flavor.disk_gb is not None and disk > flavor.disk_gb:
        reasons.append(f"needs ~{disk:.0f} GB of disk, {flavor.name} has {flavor.disk_gb:.0f} GB")
    return JobEstimate(flavor=flavor.name, fits=not reasons, memory_gb=round(need, 1), available_gb=have or 0.0,
                       train_seconds=seconds, overhead_seconds=overhead,
                       cost_usd=_cost(seconds + overhead, flavor.usd_per_hour), reasons=reasons)


def cheapest(estimates: list[JobEstimate]) -> JobEstimate | None:
    fitting = [e for e in estimates if e.fits]
    return min(fitting, key=lambda e: (e.cost_usd, e.hours)) if fitting else None


def evaluation_options(size: ModelSize, work: EvalWork, catalog: Catalog) -> list[JobEstimate]:
    return [evaluation_on(size, work, f) for f in catalog.flavors.values() if f.gpu is not None]


def export_options(size: ModelSize, work: ExportWork, catalog: Catalog) -> list[JobEstimate]:
    return [export_on(size, work, f) for f in catalog.flavors.values() if f.ram_gb is not None]
