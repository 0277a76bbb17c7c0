"""How much GPU memory training a model takes: the weights as held (bf16, fp32 masters, 4- or 8-bit), the
trainable state, and the activations of a micro-batch."""

from dataclasses import dataclass

from hf_train_mcp import engines, methods
from hf_train_mcp.estimate import constants as C
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.models.family import NO_ACTIVATION_CHECKPOINTING

def four_bit(size: ModelSize, peft: str) -> bool:
    """Whether the weights are held in bitsandbytes 4-bit: QLoRA, or LoRA on a checkpoint stored so (transformers
    keeps the model's own quantization_config: quantizers/auto.py merge_quantization_configs), which is QLoRA in
    effect; a checkpoint stored in 8 bits stays 8-bit under QLoRA too."""
    stored = size.quantization.method if size.quantization else None
    return peft != "full" and (stored == "bitsandbytes_4bit" or (peft == "qlora" and stored != "bitsandbytes_8bit"))


def quantized_params(size: ModelSize) -> int:
    """What bitsandbytes quantizes: every parameter but a mixture of experts' fused experts (routed_expert_params)."""
    return size.params - size.expert_params


def held_weight_bytes(size: ModelSize, peft: str) -> float:
    """Bytes of the weights a data-parallel replica holds: fp32 master weights for a full fine-tune (bf16 weights
    round small updates away), 4-bit (QLoRA) or 8-bit (a checkpoint stored so) for what bitsandbytes quantizes with
    a mixture of experts' fused experts at bf16 beside them, else bf16 (an MXFP4 checkpoint is dequantized to bf16)."""
    if peft == "full":
        return size.params * C.WEIGHT_BYTES["fp32"]
    stored = size.quantization.method if size.quantization else None
    per = C.WEIGHT_BYTES["4bit"] if four_bit(size, peft) else 1.0 if stored == "bitsandbytes_8bit" else None
    if per is None:
        return size.params * C.WEIGHT_BYTES["bf16"]
    return quantized_params(size) * per + size.expert_params * C.WEIGHT_BYTES["bf16"]


@dataclass(frozen=True)
class MemoryNeed:
    gb: float
    weights_gb: float
    training_state_gb: float
    activations_gb: float
    trainable_params: int


def memory_need(
    size: ModelSize,
    *,
    method: str,
    peft: str,
    batch: int,
    seq_len: int,
    num_generations: int = 1,
    teacher_params: int | None = None,
    engine: str = "trl",
    shards: int = 1,
) -> MemoryNeed:
    """Peak GPU memory of one GPU with gradient checkpointing (where the model has it): a data-parallel replica
    holds a full copy; with `shards` > 1 (FSDP full shard) the weights, gradients and optimizer state are split
    over that many GPUs.
    engine: what trains it (Unsloth keeps less of the checkpoints and logits on the GPU: engines.py)."""
    spec = methods.get(method)
    kept = engines.get(engine)
    weights = held_weight_bytes(size, peft)
    if teacher_params:  # distillation: the frozen teacher in bf16 beside the student
        weights += teacher_params * C.WEIGHT_BYTES["bf16"]
    if spec.full_reference_copy and peft == "full":
        weights += size.params * C.WEIGHT_BYTES["fp32"]  # the frozen reference, loaded like the policy (PEFT
        # disables the adapters instead of keeping a copy)
    trainable = size.params if peft == "full" else int(size.params * C.LORA_TRAINABLE_SHARE)
    state = trainable * C.TRAINABLE_EXTRA_BYTES
    if shards > 1:  # plus one layer gathered whole at a time
        weights = weights / shards + size.params / max(1, size.layers) * C.WEIGHT_BYTES["bf16"]
        state /= shards
    sequences = batch * max(spec.sequences_per_example, 2 if spec.full_reference_copy else 1)  # KTO: its KL batch
    act_bytes = 2.0
    # checkpointed hidden states of every layer + the working set of the one layer being recomputed
    offloaded = kept.checkpoint_share if seq_len >= kept.offloads_from_seq_len else 1.0
    working_set = sequences * seq_len * (size.hidden * 16 + size.intermediate * 3) * act_bytes
    if size.image_activations:  # a convolutional net: what every layer keeps, per image (conv_activations)
        acts = sequences * size.image_activations * act_bytes
    elif size.model_type in NO_ACTIVATION_CHECKPOINTING:  # every layer's working set stays for the backward pass
        acts = working_set * size.layers
    else:
        acts = sequences * seq_len * size.hidden * act_bytes * size.layers * offloaded + working_set
    if not spec.classifier:  # LM head logits (bf16) + their fp32 upcast for the loss
        acts += sequences * seq_len * size.vocab * 6 * kept.logits_share
    if spec.generates:  # KV cache while generating
        acts += batch * num_generations * seq_len * size.layers * size.hidden * 2 * act_bytes / max(1, num_generations)
    total = (weights + state + acts) / 1e9 * C.MEMORY_SAFETY + C.CUDA_CONTEXT_GB
    return MemoryNeed(round(total, 1), round(weights / 1e9, 2), round(state / 1e9, 2), round(acts / 1e9, 2), trainable)
