"""What a caller should hear about a chosen flavor: one text per concern, for an estimate and a plan alike."""

from typing import Any

LONG_RUN_HOURS = 4


def flavor_warnings(flavor: str, hours: float, *, model_type: str, save_steps: int) -> list[str]:
    """T4's missing bf16 (and Gemma's fp16 overflow on it), and what protects a long run."""
    out = []
    if flavor.startswith("t4"):
        gemma = "gemma" in model_type  # sqrt(hidden)-scaled embeddings
        out.append("T4 has no bf16: the script trains in fp16 mixed precision (can overflow); l4x1 has bf16 for a "
                   "similar price" + (". Gemma models overflow fp16 (their activations pass its 65,504 maximum: "
                                      "NaN losses): send flavor='l4x1'" if gemma else ""))
    if hours > LONG_RUN_HOURS:
        out.append(f"over {LONG_RUN_HOURS} h ({hours:.1f} h): checkpoints are pushed to the Hub every {save_steps} "
                   "steps, so resume_from can continue after a timeout; a multi-GPU flavor finishes sooner")
    return out


def model_warnings(size: Any, peft: str) -> list[str]:
    """What the model's architecture and files change in the run: no activation checkpointing (more memory per
    batch), a checkpoint stored quantized (what LoRA on it is), a mixture of experts' experts under 4-bit."""
    from hf_train_mcp.estimate.memory import four_bit
    from hf_train_mcp.models.family import NO_ACTIVATION_CHECKPOINTING

    out = []
    if size.model_type in NO_ACTIVATION_CHECKPOINTING:
        out.append(f"{size.model_type} models cannot checkpoint activations: the script trains with checkpointing "
                   "off, and the estimate keeps every layer's activations (a smaller per_device_batch_size fits a "
                   "smaller GPU)")
    stored = size.quantization
    if stored is not None and peft != "full":
        if stored.method == "bitsandbytes_4bit":
            out.append(f"the checkpoint is stored in {stored.describe()}: peft={peft!r} trains LoRA adapters on its "
                       "4-bit weights, QLoRA in effect (transformers loads the model's own quantization_config), and "
                       "is sized so")
        elif stored.method == "bitsandbytes_8bit":
            out.append(f"the checkpoint is stored in {stored.describe()}: peft={peft!r} trains LoRA adapters on its "
                       "8-bit weights (transformers keeps the model's own quantization_config), and is sized so")
        elif stored.method == "mxfp4":
            out.append("the checkpoint is stored in MXFP4: the job has no `kernels` package, so transformers "
                       "dequantizes it to bf16 on load and LoRA trains that; sized at bf16")
    if size.expert_params and four_bit(size, peft):
        out.append(f"bitsandbytes quantizes nn.Linear layers only: this mixture of experts' fused experts "
                   f"({size.expert_params / 1e9:.1f}B parameters) stay bf16 under 4-bit, and are sized so")
    return out
