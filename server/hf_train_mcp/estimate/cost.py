"""Time and money of a training run (a Workload) on a flavor, the memory verdict, and how to make it fit.

The time model, per GPU and optimizer step:

    step = micro-batches x (compute + dequantisation + fixed) + optimizer + exposed all-reduce + generation

- compute: the run's FLOPs (forward, backward, recompute, reference/teacher passes, attention) over the
  achieved FLOP/s, which is the GPU's dense peak x its sustained share x a width term h/(h+H0) x a batch term
  T/(T+T0) (T: tokens in one micro-batch). Small models and small micro-batches use GPUs poorly; both terms
  come from the calibration table, not from one constant.
- dequantisation (QLoRA): every pass (forward, recompute, backward) unpacks the 4-bit weights, a memory-bound
  cost per parameter and pass that does not shrink with the batch, which is why QLoRA is slow at small batches.
- generation (GRPO): completions are decoded token by token; each decoding step reads the weights once for the
  whole generation batch (memory-bound), plus a per-layer launch cost that dominates small models with
  transformers' generate (vLLM's CUDA graphs mostly remove it), plus the batch's own FLOPs.
- multi-GPU: data parallel (DDP) all-reduces the trainable parameters' gradients every step over NVLink or PCIe;
  the part not hidden behind the backward pass is added. Sharded runs (ZeRO-3/FSDP, calibration only) also
  gather the weights.
Every constant is in estimate/constants.py (`CALIBRATED`, fitted by estimate/calibration/fit.py on runs.csv).
"""

import math
from dataclasses import dataclass, field, replace
from typing import Any

from hf_train_mcp.backends.catalog import FlavorInfo
from hf_train_mcp.durations import format_duration
from hf_train_mcp.estimate import constants as C
from hf_train_mcp.estimate.constants import Calibration
from hf_train_mcp.estimate.memory import MemoryNeed, four_bit, memory_need, quantized_params
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.estimate.workload import Workload, micro_batch, optimizer_steps

@dataclass
class StepTime:
    """Seconds of one optimizer step on one GPU, by cause."""

    compute: float
    dequantise: float
    fixed: float
    optimizer: float
    communication: float
    generation: float

    @property
    def total(self) -> float:
        return self.compute + self.dequantise + self.fixed + self.optimizer + self.communication + self.generation


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
    step: StepTime | None = None
    reasons: list[str] = field(default_factory=list)
    timeout_factor: float = C.TIMEOUT_FACTOR  # smaller once the time is measured rather than modelled
    measured: bool = False

    @property
    def recommended_timeout_seconds(self) -> int:
        raw = self.train_seconds * self.timeout_factor + self.overhead_seconds
        return int(max(C.TIMEOUT_MIN_S, math.ceil(raw / 600) * 600))

    @property
    def recommended_timeout(self) -> str:
        return format_duration(self.recommended_timeout_seconds)


def _achieved_flops(gpu, size: ModelSize, tokens: float, cal: Calibration) -> float:
    """FLOP/s one GPU sustains on micro-batches of `tokens` tokens of this model. A matmul is efficient once all
    its sides are large: the batch side needed shrinks as the model widens (tokens_half is for hidden 4096), and
    a narrow model's memory-bound work weighs more on a GPU with a high ridge (L4) than a low one (A10G)."""
    width = size.hidden / (size.hidden + cal.width_half * gpu.ridge / C.RIDGE_REF)
    batch = tokens / (tokens + cal.tokens_half * 4096 / size.hidden)
    return gpu.peak_tflops * 1e12 * cal.efficiency[gpu.model] * width * batch


def _passes(work: Workload) -> tuple[float, float]:
    """(forward-equivalents per trained token for the weights, same for attention): forward 1, backward 2
    (1 without weight gradients, LoRA), recompute 1 with gradient checkpointing."""
    backward = 1.0 + (work.trainable_share or 1.0 if work.peft == "full" else 0.0)
    recompute = 1.0 if work.gradient_checkpointing else 0.0
    return 1.0 + backward + recompute, 3.0 + recompute  # attention's backward needs both input gradients


def step_time(size: ModelSize, work: Workload, flavor: FlavorInfo, cal: Calibration) -> tuple[StepTime, float]:
    """One optimizer step on one GPU, and the tokens it trains on (all GPUs together)."""
    gpu = flavor.gpu
    assert gpu is not None
    gpus = max(1, flavor.gpus)
    n = size.compute_params  # FLOPs per token (a mixture of experts runs its active experts only)
    stored = size.params  # what is held, unpacked, optimised and communicated
    weight_pass, attention_pass = _passes(work)
    generation = _generation_seconds(size, work, flavor, cal) if work.spec.generates else 0.0
    rows, length = micro_batch(work)
    tokens_mb = rows * length  # tokens one micro-batch runs through the policy
    fwd_per_token = C.FORWARD_FLOPS * n + 2 * size.layers * size.hidden * length  # weights + causal attention
    flops = tokens_mb * (weight_pass * C.FORWARD_FLOPS * n + attention_pass * 2 * size.layers * size.hidden * length)
    # a frozen reference's log-probs (DPO: chosen and rejected; KTO: the KL batch too; GRPO with beta > 0)
    reference = work.spec.reference_passes if work.reference_passes is None else work.reference_passes
    flops += tokens_mb * fwd_per_token * reference
    if work.teacher_params:  # distillation: the teacher's forward over the same tokens
        flops += tokens_mb * (C.FORWARD_FLOPS * work.teacher_params + 2 * size.layers * size.hidden * length)
    compute = flops / _achieved_flops(gpu, size, tokens_mb, cal)
    if size.experts:  # routed experts: small per-expert matmuls, and every pass touches all experts' weights
        compute /= cal.moe_efficiency
        compute += weight_pass * stored * 2 / (gpu.bandwidth_tbps * 1e12)
    if work.fp32:
        compute *= gpu.peak_tflops / gpu.fp32_tflops
    elif work.emulated_bf16:
        compute *= gpu.peak_tflops / (gpu.fp32_tflops * cal.emulated_bf16_speedup)
    unsloth = work.framework == "unsloth" and work.peft != "full"  # its kernels are for (Q)LoRA
    if unsloth:
        compute /= cal.unsloth_speedup
    dequantise = 0.0
    if four_bit(size, work.peft):  # every weight pass (forward, recompute, input gradients) unpacks the 4-bit
        # weights (a mixture of experts' fused experts stay bf16: nothing to unpack)
        dequantise = weight_pass * quantized_params(size) * cal.dequant_bytes / (gpu.bandwidth_tbps * 1e12)
        if unsloth:
            dequantise /= cal.unsloth_speedup
    fixed = _fixed_seconds(size, work, gpu, rows * length ** 2, weight_pass, attention_pass, cal)
    micro = work.gradient_accumulation
    trainable = stored * (work.trainable_share or 1.0) if work.peft == "full" else stored * C.LORA_TRAINABLE_SHARE
    optimizer = trainable * cal.optimizer_bytes / (gpu.bandwidth_tbps * 1e12)
    communication = _communication_seconds(size, work, gpu, gpus, trainable, compute * micro, weight_pass, cal)
    step = StepTime(compute=compute * micro, dequantise=dequantise * micro, fixed=fixed * micro,
                    optimizer=optimizer, communication=communication, generation=generation)
    return step, tokens_mb * micro * gpus


def _fixed_seconds(size: ModelSize, work: Workload, gpu: Any, score_cells: float, weight_pass: float,
                   attention_pass: float, cal: Calibration) -> float:
    """Per micro-batch costs that do not scale with FLOPs: kernel launches per layer (and per expert), shard
    fetches, eager attention's score matrices (score_cells: rows x length squared)."""
    fixed = cal.layer_overhead_s * size.layers * weight_pass
    if size.experts:  # transformers runs the experts one after another: a launch per expert, layer and pass
        fixed += cal.expert_launch_s * size.experts * size.layers * weight_pass
    if work.sharded:  # ZeRO-3/FSDP fetch each layer's shards before using it: a latency per layer and pass
        fixed += cal.shard_layer_latency_s * size.layers * weight_pass
    if work.eager_attention:  # fp32 scores of every head written, softmaxed and read back, in each attention pass
        heads = max(1, size.hidden // 128)
        fixed += score_cells * heads * size.layers * cal.eager_score_bytes * attention_pass / (
            gpu.bandwidth_tbps * 1e12)
    return fixed


def _communication_seconds(size: ModelSize, work: Workload, gpu: Any, gpus: int, trainable: float,
                           step_compute: float, weight_pass: float, cal: Calibration) -> float:
    """What a step waits on the links: gradients (and ZeRO-3's weight gathers) beyond what overlaps the compute,
    and GRPO's weight sync to its vLLM server."""
    stored, micro = size.params, work.gradient_accumulation
    communication = 0.0
    if gpus > 1 or work.nodes > 1:
        ring = (gpus - 1) / gpus
        link = gpu.link_gbps * 1e9 if work.nodes == 1 else cal.internode_gbps * 1e9
        if work.sharded:  # every micro-batch gathers the weights (4-bit under QLoRA) for each weight pass and
            # reduce-scatters the fp32 gradients of the trainable ones
            width = C.WEIGHT_BYTES["4bit"] if four_bit(size, work.peft) else 2.0
            gathers = weight_pass - (1 if work.peft == "full" else 0)
            volume = ring * micro * (stored * width * gathers + trainable * 4)
        else:  # data parallel: one all-reduce of the fp32 gradients per step (accumulation skips the others)
            volume = 2 * ring * trainable * 4
        # overlapped with the compute it can hide behind (the backward, the next layer's forward)
        transfer = volume / link
        overlap = cal.communication_overlap if gpu.nvlink or work.nodes > 1 else cal.pcie_overlap
        hidden = min(transfer, step_compute) * overlap
        communication = transfer - hidden + cal.multi_gpu_step_s
    if work.spec.generates and work.generation_gpus:  # the new weights are sent to the vLLM server every step
        communication += stored * 2 / (cal.weight_sync_gbps * 1e9)
    return communication


def _generation_seconds(size: ModelSize, work: Workload, flavor: FlavorInfo, cal: Calibration) -> float:
    """GRPO: decoding one optimizer step's completions (per_device_batch x accumulation per training GPU)."""
    gpu = flavor.gpu
    calls = work.gradient_accumulation if work.generation_per_micro_batch else 1
    completions = work.per_device_batch_size * work.gradient_accumulation / calls  # per training GPU and call
    if work.generation_gpus:  # a vLLM server on other GPUs decodes everyone's completions
        completions = completions * max(1, flavor.gpus) / work.generation_gpus
    steps = work.max_completion_length if work.completion_length is None else work.completion_length * 1.5
    steps = min(steps, work.max_completion_length)  # the longest completion of the batch sets the pace
    vllm = work.generation == "vllm"
    if four_bit(size, work.peft):  # bitsandbytes unpacks the 4-bit weights at every decoding step
        weight_bytes = quantized_params(size) * cal.dequant_bytes + size.expert_params * 2.0
    else:  # bf16 (or FP8) weights, read once per decoding step
        weight_bytes = size.params * (1.0 if work.fp8_weights else 2.0)
    compute_params = size.compute_params
    context = work.mean_length + steps / 2
    kv_bytes = completions * context * size.layers * 2 * size.hidden * 2 * cal.kv_share
    memory = (weight_bytes + kv_bytes) / (gpu.bandwidth_tbps * 1e12 * cal.decode_bandwidth_share)
    math_s = 2 * compute_params * completions / (gpu.peak_tflops * 1e12 * cal.efficiency[gpu.model] * 0.5)
    launch = (cal.vllm_step_s + size.layers * cal.vllm_layer_s) if vllm else (
        cal.decode_step_s + size.layers * cal.decode_layer_s)
    prefill = completions * work.mean_length * 2 * compute_params / (gpu.peak_tflops * 1e12 * cal.efficiency[gpu.model] * 0.5)
    return calls * (steps * (max(memory, math_s) + launch) + prefill)


def push_seconds(size: ModelSize, work: Workload) -> float:
    """Uploading the final model (full fine-tune) or adapter."""
    return size.params * 2 / 1e9 * (1 if work.peft == "full" else C.LORA_TRAINABLE_SHARE) / C.PUSH_GBPS


def overhead_seconds(size: ModelSize, work: Workload) -> float:
    """Billed time outside the training loop: container start, installs, model download, final push."""
    download_gb = (size.params + (work.teacher_params or 0)) * 2 / 1e9
    return C.IMAGE_START_S + C.DEPENDENCY_INSTALL_S + download_gb / C.DOWNLOAD_GBPS + push_seconds(size, work)


def train_seconds(size: ModelSize, work: Workload, flavor: FlavorInfo, cal: Calibration | None = None
                  ) -> tuple[float, int, float, StepTime]:
    """Seconds of the training loop, its optimizer steps, the tokens trained on, and one step's breakdown."""
    cal = cal or C.CALIBRATED
    step, tokens = step_time(size, work, flavor, cal)
    steps = optimizer_steps(work, flavor.gpus)
    seconds = steps * step.total
    if work.save_steps and steps >= work.save_steps:  # checkpoints: weights and optimizer state to disk
        trainable = size.params * (work.trainable_share or 1.0) if work.peft == "full" else (
            size.params * C.LORA_TRAINABLE_SHARE)
        saved = trainable * C.CHECKPOINT_BYTES + (size.params * 2 if work.peft == "full" else 0)
        seconds += (steps // work.save_steps) * saved / max(1, flavor.gpus if work.sharded else 1) / (
            (cal or C.CALIBRATED).save_gbps * 1e9)
    eval_tokens = work.eval_tokens
    if eval_tokens is None and work.eval_split:  # one forward over the held-out rows at every save
        evals = max(1, steps // max(1, work.save_steps))
        eval_tokens = evals * work.num_examples * work.eval_split * work.mean_length * work.sequences_per_example
    if eval_tokens:
        speedup = cal.unsloth_speedup if work.framework == "unsloth" and work.peft != "full" else 1.0
        seconds += eval_tokens * C.FORWARD_FLOPS * size.compute_params / speedup / (
            _achieved_flops(flavor.gpu, size, work.per_device_batch_size * work.mean_length, cal) * flavor.gpus)
    return seconds, steps, steps * tokens, step


def estimate_on(size: ModelSize, work: Workload, flavor: FlavorInfo, cal: Calibration | None = None
                ) -> FlavorEstimate:
    gpu = flavor.gpu
    if gpu is None:
        raise ValueError(f"{flavor.name} has no GPU: training estimates cover GPU flavors only")
    memory = memory_need(
        size, method=work.method, peft=work.peft, batch=work.per_device_batch_size, seq_len=work.sequence_length(),
        num_generations=work.num_generations, teacher_params=work.teacher_params, engine=work.framework,
        shards=flavor.gpus if work.sharded else 1,
    )
    seconds, steps, tokens, step = train_seconds(size, work, flavor, cal)
    overhead = overhead_seconds(size, work)
    hours = (seconds + overhead) / 3600
    fits = memory.gb <= gpu.memory_gb
    reasons = [] if fits else [f"needs ~{memory.gb:.0f} GB per GPU, {flavor.name} has {gpu.memory_gb:.0f} GB"]
    return FlavorEstimate(
        flavor=flavor.name, fits=fits, memory=memory, gpu_memory_gb=gpu.memory_gb,
        train_seconds=seconds, overhead_seconds=overhead, hours=hours,
        cost_usd=round(math.ceil((seconds + overhead) / 60) * flavor.usd_per_hour / 60, 2), steps=steps,
        tokens=tokens, tokens_per_second=tokens / max(seconds, 1e-9), step=step, reasons=reasons,
        timeout_factor=C.TIMEOUT_FACTOR_MOE if size.active or size.experts else C.TIMEOUT_FACTOR,
    )


def tokens_counted(work: Workload, estimate: FlavorEstimate) -> dict[str, Any]:
    """What an estimate's tokens total counts, so that a reader can recompute it: steps (themselves from the
    rows, epochs and eval_split) x sequences_per_step x tokens_per_sequence."""
    rows, length = micro_batch(work)
    if work.spec.generates:
        how = "a prompt and its completion"
    elif work.packing:
        how = "rows packed into max_length"
    elif work.spec.inputs == "image":
        how = "an image's patch grid"
    else:
        how = f"a row padded to the longest of the {rows} in its micro-batch"
        if not work.cut:
            how += ", uncut: text and image tokens, as vision rows train (max_length does not cut them)"
    if work.sequences_per_example > 1:
        how += f", {work.sequences_per_example} per example"
    schedule = {"max_steps": work.max_steps} if work.max_steps else {"epochs": work.epochs}
    return {**schedule, **({"eval_split": work.eval_split} if work.eval_split else {}),
            "sequences_per_step": round(estimate.tokens / max(1, estimate.steps) / max(length, 1e-9)),
            "tokens_per_sequence": round(length, 1),
            "tokens_total_counts": f"steps x sequences_per_step x tokens_per_sequence ({how})"}


def scaling(size: ModelSize, work: Workload, flavor: FlavorInfo, cal: Calibration | None = None) -> str | None:
    """How the run's GPUs add up, for assumptions: its pace against one GPU of the same kind, and the all-reduce
    behind the difference; None on one GPU."""
    if flavor.gpu is None or flavor.gpus < 2:
        return None
    cal = cal or C.CALIBRATED
    many, many_tokens = step_time(size, work, flavor, cal)
    one, one_tokens = step_time(size, replace(work, nodes=1), replace(flavor, gpus=1), cal)
    speedup = (many_tokens / many.total) / (one_tokens / one.total)
    link = "machines" if work.nodes > 1 else "NVLink" if flavor.gpu.nvlink else "PCIe"
    return (f"{flavor.gpus} x {flavor.gpu.model} over {link}: {speedup:.2f}x one GPU's pace ({speedup / flavor.gpus:.0%} "
            f"of linear), each step waiting {many.communication:.2f} s on the gradient exchange beyond what overlaps "
            "compute")


def how_to_fit(work: Workload, best: FlavorEstimate | None) -> str:
    steps = []
    if work.peft == "full":
        steps.append("peft='lora'")
    if work.peft != "qlora":
        steps.append("peft='qlora'")
    if work.per_device_batch_size > 1:
        steps.append("a smaller per_device_batch_size (raise gradient_accumulation to keep the batch)")
    if not work.cut:
        steps.append("fewer or smaller images per row (vision rows train uncut: max_length does not shorten them)")
    elif work.max_length > 1024:
        steps.append("a shorter max_length")
    if best is not None:
        steps.append(f"flavor='{best.flavor}'")
    return "To fit, try: " + "; ".join(steps) + "."
