"""Hyperparameters shared by every method, when the caller leaves them out, with the reasoning (each method's
own learning rates, epochs and lengths are in its module under methods/).

Batch: the per-device batch shrinks with model size so activations fit a 24 GB card; gradient accumulation
brings the effective batch back to ~16 sequences, a stable size for every method.
"""

from dataclasses import dataclass

from hf_train_mcp import methods

TARGET_EFFECTIVE_BATCH = 16
LORA = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"}
SAVE_STEPS = 100
SAVE_TOTAL_LIMIT = 2  # each checkpoint holds optimizer state (several times the adapter/model size)


def per_device_batch(method: str, billions: float) -> int:
    size_batch = 8 if billions < 1 else 4 if billions < 4 else 2 if billions < 10 else 1
    return methods.get(method).batch_rows(size_batch)  # a pair is two sequences (chosen and rejected)


@dataclass(frozen=True)
class Schedule:
    per_device_batch_size: int
    gradient_accumulation: int

    def effective(self, gpus: int) -> int:
        return self.per_device_batch_size * self.gradient_accumulation * max(1, gpus)


def schedule(method: str, billions: float, gpus: int, *, batch: int | None, accumulation: int | None,
             num_generations: int) -> Schedule:
    if methods.get(method).grouped and batch is None:
        batch = num_generations  # one prompt's group per device step; TRL needs batch*accum*gpus % G == 0
    batch = batch or per_device_batch(method, billions)
    if accumulation is None:
        accumulation = max(1, TARGET_EFFECTIVE_BATCH // (batch * max(1, gpus)))
    return Schedule(batch, accumulation)
