"""Hyperparameters a practitioner would pick when the caller leaves them out, with the reasoning.

Learning rates: LoRA trains few parameters from zero-initialised adapters, so it wants ~10x the full
fine-tuning rate (LoRA paper; TRL's PEFT examples use 1e-4..2e-4 for SFT). Preference methods (DPO, GRPO)
move a policy away from a reference and diverge at SFT rates: TRL's defaults are 1e-6 (DPO, GRPO), raised
~5-10x for LoRA. Reward models train a fresh scalar head: TRL defaults to 1e-4 with LoRA.
Epochs: SFT 3 (TRL's default; small curated sets need it), preference/RL methods 1 (they overfit fast).
Batch: the per-device batch shrinks with model size so activations fit a 24 GB card; gradient accumulation
brings the effective batch back to ~16 sequences, a stable size for all four methods.
"""

from dataclasses import dataclass

LEARNING_RATE = {
    # method: (full, lora/qlora)
    "sft": (2e-5, 2e-4),
    "dpo": (1e-6, 5e-6),
    "grpo": (1e-6, 1e-5),
    "reward": (1e-5, 1e-4),
}
EPOCHS = {"sft": 3.0, "dpo": 1.0, "grpo": 1.0, "reward": 1.0}
MAX_LENGTH = {"sft": 1024, "dpo": 1024, "grpo": 512, "reward": 1024}  # GRPO: prompt length
TARGET_EFFECTIVE_BATCH = 16
LORA = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"}
DPO_BETA = 0.1
GRPO_NUM_GENERATIONS = 8
GRPO_MAX_COMPLETION_LENGTH = 256  # TRL's 512 doubles generation time; most reasoning-format tasks fit 256
SAVE_STEPS = 100
SAVE_TOTAL_LIMIT = 2  # each checkpoint holds optimizer state (several times the adapter/model size)


def per_device_batch(method: str, billions: float) -> int:
    size_batch = 8 if billions < 1 else 4 if billions < 4 else 2 if billions < 10 else 1
    if method in ("dpo", "reward"):
        size_batch = max(1, size_batch // 2)  # every row is two sequences (chosen and rejected)
    return size_batch


@dataclass(frozen=True)
class Schedule:
    per_device_batch_size: int
    gradient_accumulation: int

    def effective(self, gpus: int) -> int:
        return self.per_device_batch_size * self.gradient_accumulation * max(1, gpus)


def schedule(method: str, billions: float, gpus: int, *, batch: int | None, accumulation: int | None,
             num_generations: int) -> Schedule:
    if method == "grpo" and batch is None:
        batch = num_generations  # one prompt's group per device step; TRL needs batch*accum*gpus % G == 0
    batch = batch or per_device_batch(method, billions)
    if accumulation is None:
        accumulation = max(1, TARGET_EFFECTIVE_BATCH // (batch * max(1, gpus)))
    return Schedule(batch, accumulation)
