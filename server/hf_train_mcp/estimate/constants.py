"""Every number the estimator uses, with where it comes from. Change them here and nowhere else."""

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuFacts:
    """What the Jobs hardware API does not say about a GPU model."""

    model: str
    memory_gb: float  # per GPU
    bf16: bool
    peak_tflops: float  # dense bf16 (fp16 on T4) tensor-core peak
    bandwidth_tbps: float
    source: str
    mfu: float | None = None  # this GPU's achievable share of peak, where it differs from MFU below


# NVIDIA datasheets (dense, i.e. without 2:4 sparsity). A10G: AWS G5 documentation and the commonly cited
# 70 TFLOPS dense bf16 (it is a power-capped A10). T4 has no bf16: its peak is fp16.
GPU_FACTS: dict[str, GpuFacts] = {
    g.model: g
    for g in (
        # T4 is power-capped at 70 W and throttles under sustained tensor load: LLM fine-tuning runs ~2.5x slower
        # than on an A10G in practice, hence its own utilisation.
        GpuFacts("T4", 16, False, 65, 0.32, "NVIDIA T4 datasheet (fp16 tensor, no bf16)", mfu=0.10),
        GpuFacts("L4", 24, True, 121, 0.30, "NVIDIA L4 datasheet"),
        GpuFacts("A10G", 24, True, 70, 0.60, "AWS EC2 G5 docs; NVIDIA A10 datasheet scaled to A10G clocks"),
        GpuFacts("L40S", 48, True, 362, 0.864, "NVIDIA L40S datasheet"),
        GpuFacts("A100", 80, True, 312, 2.04, "NVIDIA A100 80GB SXM datasheet"),
        GpuFacts("H200", 141, True, 989, 4.8, "NVIDIA H200 SXM datasheet"),
        GpuFacts("RTX PRO 6000", 96, True, 500, 1.79, "NVIDIA RTX PRO 6000 Blackwell Server datasheet"),
    )
}

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

# --- Throughput --------------------------------------------------------------------------------------
# Achieved training FLOP/s per GPU = min(MFU * peak, FLOPS_PER_BYTE * bandwidth). Small models (the common
# fine-tuning case) are memory-bound on low-bandwidth cards, hence the bandwidth cap. Both constants are
# calibrated on the seeds' measurements (shared/seeds 000 and 003): Qwen2-0.5B-Instruct full SFT on Capybara,
# 3 epochs = 2h20 on a10g-small, 1h35 on a10g-largex2, ~1h on l4x4; 100 steps ~6 min. See tests/test_estimate.py.
MFU = 0.23
FLOPS_PER_BYTE = 40.0
# Data-parallel efficiency for N > 1 GPUs (gradient all-reduce over PCIe, uneven last batches): the seeds'
# a10g-largex2 run is 1.47x faster than a10g-small, i.e. 0.74 per GPU.
MULTI_GPU_EFFICIENCY = 0.74
# FLOPs per parameter per token: forward 2, backward 4; gradient checkpointing recomputes the forward (+2).
FORWARD_FLOPS = 2.0
BACKWARD_FLOPS = 4.0
RECOMPUTE_FLOPS = 2.0
# LoRA skips weight gradients of the frozen base: backward keeps only activation gradients (2 of 4).
LORA_BACKWARD_SHARE = 0.5
# QLoRA dequantizes 4-bit weights on every matmul: ~30% slower than LoRA (QLoRA paper, Dettmers et al. 2023).
QLORA_SLOWDOWN = 1.3
# GRPO generation runs token by token and is memory-bound: it reads all weights once per decoding step for
# the whole batch. Achieved decode efficiency relative to bandwidth.
DECODE_BANDWIDTH_EFFICIENCY = 0.35

# Without packing every batch pads to its longest row: ~25% wasted tokens on typical chat data.
PADDING_FACTOR = 1.25

# --- Fixed overheads (seconds) -------------------------------------------------------------------------
IMAGE_START_S = 60  # scheduling + pulling the uv image (seed 003: "a few minutes" for a 100-step job)
DEPENDENCY_INSTALL_S = 90  # uv resolving torch/transformers/trl/peft/trackio from the PEP 723 header
DOWNLOAD_GBPS = 0.5  # model download from the Hub inside Jobs, GB per second
PUSH_GBPS = 0.1  # upload of the final model/adapter and checkpoints, GB per second
TIMEOUT_FACTOR = 1.3  # recommended timeout = estimate x 1.3 + overheads (issue 5)
TIMEOUT_MIN_S = 20 * 60

# --- Memory (bytes per parameter unless noted) ---------------------------------------------------------
WEIGHT_BYTES = {"bf16": 2.0, "fp32": 4.0, "4bit": 0.55}  # nf4 + double-quant scales ~ 4.4 bits
# A trainable parameter carries bf16 weight + fp32 grad... in practice with AdamW: fp32 grad (4) + two fp32
# moments (8) = 12 bytes on top of its weight.
TRAINABLE_EXTRA_BYTES = 12.0
CUDA_CONTEXT_GB = 1.5  # CUDA context, cuBLAS workspaces, allocator fragmentation floor
MEMORY_SAFETY = 1.15  # fragmentation and peaks we do not model
LORA_TRAINABLE_SHARE = 0.01  # r=16 on all linear layers ~ 0.5-1.5% of a dense model's parameters

# --- Defaults when the dataset gives no token statistics (mean tokens per example) ---------------------
DEFAULT_TOKENS_PER_EXAMPLE = {"sft": 512, "dpo": 640, "grpo": 160, "reward": 512}
DEFAULT_NUM_EXAMPLES = 10_000
