"""What a caller should hear about a chosen flavor: one text per concern, for an estimate and a plan alike."""

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


def model_warnings(model_type: str | None) -> list[str]:
    """What the model's architecture changes in the run: no activation checkpointing (more memory per batch)."""
    from hf_train_mcp.model_family import NO_ACTIVATION_CHECKPOINTING

    if model_type not in NO_ACTIVATION_CHECKPOINTING:
        return []
    return [f"{model_type} models cannot checkpoint activations: the script trains with checkpointing off, and the "
            "estimate keeps every layer's activations (a smaller per_device_batch_size fits a smaller GPU)"]
