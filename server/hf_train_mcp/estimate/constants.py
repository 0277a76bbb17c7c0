"""Every number the estimator uses, with where it comes from. Change them here and nowhere else."""

from dataclasses import dataclass

# The GPUs' datasheet facts and the Jobs flavors' prices are the backends' (backends/catalog.py GPU_FACTS,
# backends/jobs_hardware.py): each backend's catalog (Backend.catalog) carries them to the estimator.

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
