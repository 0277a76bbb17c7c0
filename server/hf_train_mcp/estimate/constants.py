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
    link_gbps: float  # GPU-to-GPU bandwidth of an all-reduce inside one machine (NVLink, else PCIe)
    fp32_tflops: float  # plain fp32 (no tensor cores, no TF32): training without mixed precision
    source: str
    nvlink: bool = False  # the flavor's GPUs share NVLink (SXM parts); else PCIe through the host

    @property
    def ridge(self) -> float:
        """FLOPs per byte of memory traffic at which this GPU's matmuls stop waiting on memory (roofline)."""
        return self.peak_tflops / self.bandwidth_tbps


# NVIDIA datasheets (dense, i.e. without 2:4 sparsity). A10G: AWS G5 documentation and the commonly cited
# 70 TFLOPS dense bf16 (it is a power-capped A10). T4 has no bf16: its peak is fp16. Links: NVLink where the
# flavor's GPUs are SXM parts (A100, H100, H200), else PCIe 4/5 shared through the host (~10-25 GB/s achieved).
GPU_FACTS: dict[str, GpuFacts] = {
    g.model: g
    for g in (
        GpuFacts("T4", 16, False, 65, 0.32, 8, 8.1, "NVIDIA T4 datasheet (fp16 tensor, no bf16)"),
        GpuFacts("L4", 24, True, 121, 0.30, 12, 30, "NVIDIA L4 datasheet"),
        GpuFacts("A10G", 24, True, 70, 0.60, 12, 31, "AWS EC2 G5 docs; NVIDIA A10 datasheet scaled to A10G clocks"),
        GpuFacts("L40S", 48, True, 362, 0.864, 20, 91, "NVIDIA L40S datasheet"),
        GpuFacts("A100", 80, True, 312, 2.04, 200, 19.5, "NVIDIA A100 80GB SXM datasheet", nvlink=True),
        GpuFacts("H100", 80, True, 989, 3.35, 300, 67, "NVIDIA H100 SXM datasheet (not a Jobs flavor: calibration)",
                 nvlink=True),
        GpuFacts("H200", 141, True, 989, 4.8, 300, 67, "NVIDIA H200 SXM datasheet", nvlink=True),
        GpuFacts("RTX PRO 6000", 96, True, 500, 1.79, 25, 120, "NVIDIA RTX PRO 6000 Blackwell Server datasheet"),
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

# --- Throughput: see estimate/cost.py for the model and estimate/calibration/ for the fit ------------------
# FLOPs per parameter per token: forward 2, backward 4 (2 for activation gradients, 2 for weight gradients);
# gradient checkpointing recomputes the forward (+2). LoRA/QLoRA skip the frozen weights' gradients (-2).
FORWARD_FLOPS = 2.0

# How the measured runs were executed, where it differs from our scripts (TRL, transformers' generate, DDP).
# Unsloth's own kernels, its gradient offload and 8-bit Adam make its runs faster than plain TRL on the same
# settings (Unsloth claims ~2x for QLoRA SFT): calibration rows, and runs with engine="unsloth" (engines.py).
FRAMEWORKS = ("trl", "unsloth")
# Generation engines for GRPO: transformers' generate (our scripts) and vLLM (CUDA graphs, paged attention).
GENERATION_ENGINES = ("hf", "vllm")

# Without packing every batch pads to its longest row. Lengths of chat data vary with a coefficient of
# variation around 0.6-0.9 (Capybara, dolly, alpaca: measured on their token counts); the expected longest of
# b rows is mean x (1 + cv x z_b), z_b the expected maximum of b standard normals.
LENGTH_CV = 0.7
RIDGE_REF = 200.0  # FLOPs per byte: the ridge at which Calibration.width_half is stated (T4's and H200's ~200)



@dataclass(frozen=True)
class Calibration:
    """The time model's fitted constants (estimate/calibration/fit.py fits them to runs.csv; see cost.py)."""

    # sustained share of the dense peak on large matmuls in real training kernels (power and clock limits)
    efficiency: dict[str, float]
    # hidden size at which the width term is 1/2, on a GPU whose ridge is RIDGE_REF: the memory-bound work beside
    # the matmuls (norms, activations, softmax, optimizer) grows with h against the matmuls' h^2, and weighs as
    # much more as the GPU computes faster than it reads memory, so the half-point scales with the ridge
    width_half: float
    tokens_half: float  # tokens per micro-batch at which the batch term is 1/2
    dequant_bytes: float  # QLoRA: memory traffic per parameter and weight pass to unpack 4-bit weights
    layer_overhead_s: float  # launch/Python cost per layer and weight pass of a training micro-batch
    optimizer_bytes: float  # AdamW traffic per trainable parameter and step (fp32 weights, grads, moments)
    communication_overlap: float  # share of NVLink and inter-node transfers hidden behind compute (up to its length)
    # the same over PCIe: the all-reduce goes through the host, competes with the step for the bus and the SMs
    pcie_overlap: float
    multi_gpu_step_s: float  # fixed synchronisation cost of a data-parallel step
    shard_layer_latency_s: float  # ZeRO-3/FSDP: fetching one layer's shards, per layer and pass (calibration rows)
    internode_gbps: float  # all-reduce bandwidth between machines (calibration rows only)
    unsloth_speedup: float  # Unsloth's kernels vs plain TRL on the same settings (and engine="unsloth")
    decode_bandwidth_share: float  # achieved share of memory bandwidth while decoding
    decode_step_s: float  # transformers' generate: fixed cost per decoded token (the Python loop, sampling)
    decode_layer_s: float  # transformers' generate: launch/Python cost per layer and decoded token
    vllm_step_s: float  # vLLM: fixed cost per decoding step (its scheduler)
    vllm_layer_s: float  # vLLM: cost per layer and step (CUDA graphs leave little)
    kv_share: float  # KV-cache size relative to full multi-head attention (grouped-query attention)
    weight_sync_gbps: float  # GRPO with a vLLM server: new weights sent to it every step (gather + load)
    eager_score_bytes: float  # unfused attention: memory traffic per attention score and pass (calibration rows)
    moe_efficiency: float  # mixture of experts: matmul efficiency of routed experts relative to a dense layer
    save_gbps: float  # writing a checkpoint to local disk
    emulated_bf16_speedup: float  # bf16 on a GPU without it, relative to its fp32 peak (calibration rows)
    expert_launch_s: float  # mixture of experts: fixed cost per expert, layer and pass


# Fitted on estimate/calibration/runs.csv by estimate/calibration/fit.py (see its report in sources.md).
CALIBRATED = Calibration(
    efficiency={"T4": 0.312, "L4": 0.390, "A10G": 0.574, "L40S": 0.450, "A100": 0.466, "H100": 0.412, "H200": 0.412, "RTX PRO 6000": 0.450},
    width_half=639.8,
    tokens_half=409.3,
    dequant_bytes=5.069,
    layer_overhead_s=0.000195,
    optimizer_bytes=32,
    communication_overlap=0.959,
    pcie_overlap=0.4791,
    multi_gpu_step_s=0.06185,
    shard_layer_latency_s=0.002734,
    internode_gbps=25.47,
    unsloth_speedup=1.663,
    decode_bandwidth_share=0.6032,
    decode_step_s=0.005755,
    decode_layer_s=0.001205,
    vllm_step_s=0.00603,
    vllm_layer_s=2.031e-05,
    kv_share=0.25,
    weight_sync_gbps=5,
    eager_score_bytes=18.47,
    moe_efficiency=0.2157,
    save_gbps=1.013,
    emulated_bf16_speedup=1.578,
    expert_launch_s=1.541e-05,
)

# --- Fixed overheads (seconds) -------------------------------------------------------------------------
IMAGE_START_S = 60  # pulling the uv image and starting the container (billed: the job is Starting)
# uv resolving and installing torch (with its CUDA libraries), transformers, trl, peft and trackio from the PEP
# 723 header, then the script reading the dataset and applying the chat template: the docs' two a10g-small runs
# of TRL's sft.py on Capybara (100 steps in ~6 min, 3 epochs = 5,928 steps in ~2 h 20) put everything but the
# steps at ~220 s, of which the image start, the 1 GB download and the push are ~70 s
DEPENDENCY_INSTALL_S = 150
DOWNLOAD_GBPS = 0.5  # model download from the Hub inside Jobs, GB per second
PUSH_GBPS = 0.1  # upload of the final model/adapter and checkpoints, GB per second
# Recommended timeout: the estimate x TIMEOUT_FACTOR + overheads, rounded up to 10 min. A run that takes twice its
# estimate still finishes: the calibration table's worst under-estimate is 31% (estimate/calibration), runs on
# shared hardware vary, and a timed-out job loses everything since its last checkpoint. Jobs bill what runs, not
# the timeout; budgets are checked against the timeout (the worst case), and shorten it when the run still fits.
TIMEOUT_FACTOR = 2.0
# Mixture-of-experts timing rests on two calibration rows of different designs (leave-one-out errors -70%/+85%):
# a wider margin until more are measured.
TIMEOUT_FACTOR_MOE = 3.5
# Once a preflight measured the real seconds per step on the target flavor, what remains is run-to-run spread
# (evaluation, checkpoint pushes, shared hardware): a smaller margin.
MEASURED_TIMEOUT_FACTOR = 1.3
TIMEOUT_MIN_S = 20 * 60

# --- Memory (bytes per parameter unless noted) ---------------------------------------------------------
WEIGHT_BYTES = {"bf16": 2.0, "fp32": 4.0, "4bit": 0.55}  # nf4 + double-quant scales ~ 4.4 bits
# A trainable parameter carries bf16 weight + fp32 grad... in practice with AdamW: fp32 grad (4) + two fp32
# moments (8) = 12 bytes on top of its weight.
TRAINABLE_EXTRA_BYTES = 12.0
CUDA_CONTEXT_GB = 1.5  # CUDA context, cuBLAS workspaces, allocator fragmentation floor
MEMORY_SAFETY = 1.15  # fragmentation and peaks we do not model
LORA_TRAINABLE_SHARE = 0.01
CHECKPOINT_BYTES = 12.0  # per trainable parameter in a checkpoint: fp32 weights + AdamW's two moments  # r=16 on all linear layers ~ 0.5-1.5% of a dense model's parameters

# --- Defaults when the dataset gives no token statistics (mean tokens per example) ---------------------
DEFAULT_TOKENS_PER_EXAMPLE = {"sft": 512, "dpo": 640, "grpo": 160, "reward": 512, "kto": 512, "distill": 512}
DEFAULT_NUM_EXAMPLES = 10_000

# --- Evaluation and export jobs (estimate/jobs.py): modelled from the same hardware facts, not calibrated ------
EVAL_EFFICIENCY = 0.25  # share of peak a batch-1 forward reaches (short sequences, no fused kernels)
DECODE_BANDWIDTH_SHARE = 0.6  # greedy decoding reads every weight per token: this share of memory bandwidth
GENERATE_TOKEN_OVERHEAD_S = 0.02  # transformers' generate: Python and kernel launches per token, per model call
FORWARD_OVERHEAD_S = 0.01  # per batch-1 forward call
BENCHMARK_TOKENS_PER_SAMPLE = 1200  # a multiple-choice item: ~4 choices x ~300 tokens of context and answer
EVAL_MEMORY_SAFETY = 1.2  # weights plus activations and the KV cache of short generations
MERGE_GBPS = 1.0  # loading bf16 shards and adding LoRA deltas on the CPU, GB of weights per second
SAVE_GBPS = 0.5  # writing safetensors to the job's disk
GGUF_CONVERT_GBPS = 0.25  # convert_hf_to_gguf.py, GB of bf16 weights read per second
QUANTIZE_PARAMS_PER_VCPU_S = 25e6  # llama-quantize k-quants, parameters per second per vCPU
LLAMA_CPP_SETUP_S = 30  # shallow clone of llama.cpp and its Python requirements
LLAMA_QUANTIZE_BUILD_VCPU_S = 1600  # building llama-quantize: ~200 s on 8 vCPUs
EXPORT_RAM_SAFETY = 1.25  # a merge holds the bf16 model in memory, plus loader and serializer peaks
EXPORT_RAM_FLOOR_GB = 4.0  # Python, torch and the tokenizer
GGUF_BYTES_PER_PARAM = {"f16": 2.0, "q8_0": 1.07, "q4_k_m": 0.6}  # file size per parameter (llama.cpp's tables)
