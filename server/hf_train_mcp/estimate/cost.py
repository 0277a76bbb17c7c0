"""Time and money of a training run on a flavor, the memory verdict, and the flavor to recommend."""

import math
from dataclasses import dataclass, field

from hf_train_mcp.durations import format_duration
from hf_train_mcp.estimate import constants as C
from hf_train_mcp.estimate.hardware import FlavorInfo
from hf_train_mcp.estimate.sizing import MemoryNeed, ModelSize, memory_need


@dataclass(frozen=True)
class Workload:
    """What the run does, independent of hardware."""

    method: str
    peft: str
    num_examples: int
    tokens_per_example: float  # mean, before truncation
    epochs: float
    max_steps: int | None
    max_length: int
    per_device_batch_size: int
    gradient_accumulation: int
    packing: bool = False
    num_generations: int = 8
    max_completion_length: int = 256
    eval_split: float = 0.0
    save_steps: int = 500

    def seq_len(self) -> int:
        if self.method == "grpo":
            return int(min(self.tokens_per_example, self.max_length) + self.max_completion_length)
        return self.max_length if self.packing else int(min(self.max_length, self.tokens_per_example * 2))


@dataclass
class FlavorEstimate:
    flavor: str
    fits: bool
    memory: MemoryNeed
    gpu_memory_gb: float
    train_seconds: float
    overhead_seconds: float
    hours: float
    cost_usd: float
    steps: int
    tokens: float
    tokens_per_second: float
    reasons: list[str] = field(default_factory=list)

    @property
    def recommended_timeout_seconds(self) -> int:
        raw = self.train_seconds * C.TIMEOUT_FACTOR + self.overhead_seconds
        return int(max(C.TIMEOUT_MIN_S, math.ceil(raw / 600) * 600))

    @property
    def recommended_timeout(self) -> str:
        return format_duration(self.recommended_timeout_seconds)


def achieved_flops(flavor: FlavorInfo) -> float:
    """Training FLOP/s of the whole flavor (calibrated; see constants)."""
    gpu = flavor.gpu
    assert gpu is not None
    per_gpu = min((gpu.mfu or C.MFU) * gpu.peak_tflops, C.FLOPS_PER_BYTE * gpu.bandwidth_tbps) * 1e12
    scale = flavor.gpus * (C.MULTI_GPU_EFFICIENCY if flavor.gpus > 1 else 1.0)
    return per_gpu * scale


def effective_tokens_per_example(work: Workload) -> float:
    """Tokens one example costs: truncated at max_length; without packing, batches pad to their longest row."""
    mean = min(work.tokens_per_example, work.max_length)
    return mean if work.packing else mean * C.PADDING_FACTOR


def optimizer_steps(work: Workload, gpus: int) -> int:
    if work.max_steps:
        return work.max_steps
    examples = work.num_examples * (1 - work.eval_split)
    per_step = work.per_device_batch_size * work.gradient_accumulation * max(1, gpus)
    if work.method == "grpo":
        per_step = per_step / work.num_generations  # the batch counts completions, G per prompt
    return max(1, math.ceil(examples * work.epochs / per_step))


def estimate_on(size: ModelSize, work: Workload, flavor: FlavorInfo) -> FlavorEstimate:
    gpu = flavor.gpu
    if gpu is None:
        raise ValueError(f"{flavor.name} has no GPU: training estimates cover GPU flavors only")
    memory = memory_need(
        size, method=work.method, peft=work.peft, batch=work.per_device_batch_size, seq_len=work.seq_len(),
        num_generations=work.num_generations,
    )
    steps = optimizer_steps(work, flavor.gpus)
    rows = steps * work.per_device_batch_size * work.gradient_accumulation * max(1, flavor.gpus)
    n = size.params
    backward = C.BACKWARD_FLOPS * (1.0 if work.peft == "full" else C.LORA_BACKWARD_SHARE)
    per_token = n * (C.FORWARD_FLOPS + backward + C.RECOMPUTE_FLOPS)
    if work.peft == "qlora":
        per_token *= C.QLORA_SLOWDOWN
    seconds_decode = 0.0
    if work.method == "grpo":
        tokens = rows * (min(work.tokens_per_example, work.max_length) + work.max_completion_length)
        weight_bytes = n * (C.WEIGHT_BYTES["4bit"] if work.peft == "qlora" else C.WEIGHT_BYTES["bf16"])
        decode_passes = rows / (work.per_device_batch_size * max(1, flavor.gpus)) * work.max_completion_length
        seconds_decode = decode_passes * weight_bytes / (gpu.bandwidth_tbps * 1e12 * C.DECODE_BANDWIDTH_EFFICIENCY)
    else:
        tokens = rows * effective_tokens_per_example(work)
    flops = tokens * per_token
    if work.method in ("dpo", "reward"):
        flops *= 2  # chosen and rejected
    if work.method == "dpo":
        flops += 2 * tokens * n * C.FORWARD_FLOPS  # reference log-probs of both
    if work.eval_split:
        evals = max(1, steps // max(1, work.save_steps))
        eval_tokens = work.num_examples * work.eval_split * effective_tokens_per_example(work)
        flops += evals * eval_tokens * n * C.FORWARD_FLOPS
    train_seconds = flops / achieved_flops(flavor) + seconds_decode
    final_gb = n * C.WEIGHT_BYTES["bf16"] / 1e9 * (1 if work.peft == "full" else C.LORA_TRAINABLE_SHARE)
    overhead = (
        C.IMAGE_START_S
        + C.DEPENDENCY_INSTALL_S
        + n * C.WEIGHT_BYTES["bf16"] / 1e9 / C.DOWNLOAD_GBPS
        + final_gb / C.PUSH_GBPS
    )
    hours = (train_seconds + overhead) / 3600
    fits = memory.gb <= gpu.memory_gb
    reasons = [] if fits else [f"needs ~{memory.gb:.0f} GB per GPU, {flavor.name} has {gpu.memory_gb:.0f} GB"]
    return FlavorEstimate(
        flavor=flavor.name, fits=fits, memory=memory, gpu_memory_gb=gpu.memory_gb,
        train_seconds=train_seconds, overhead_seconds=overhead, hours=hours,
        cost_usd=round(hours * flavor.usd_per_hour, 2), steps=steps, tokens=tokens,
        tokens_per_second=tokens / max(train_seconds, 1e-9),
        reasons=reasons,
    )


def how_to_fit(work: Workload, best: FlavorEstimate | None) -> str:
    steps = []
    if work.peft == "full":
        steps.append("peft='lora'")
    if work.peft != "qlora":
        steps.append("peft='qlora'")
    if work.per_device_batch_size > 1:
        steps.append("a smaller per_device_batch_size (raise gradient_accumulation to keep the batch)")
    if work.max_length > 1024:
        steps.append("a shorter max_length")
    if best is not None:
        steps.append(f"flavor='{best.flavor}'")
    return "To fit, try: " + "; ".join(steps) + "."
