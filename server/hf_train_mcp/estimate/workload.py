"""What a training run does, independent of hardware: its rows, lengths and batches, the tokens a micro-batch
holds (padded to its longest row, or packed), and the optimizer steps it takes."""

import math
from dataclasses import dataclass

from hf_train_mcp import methods
from hf_train_mcp.estimate import constants as C
from hf_train_mcp.methods import MethodSpec

# Expected maximum of b standard normal draws (padding of a batch of b rows to its longest).
_EXPECTED_MAX = {1: 0.0, 2: 0.564, 3: 0.846, 4: 1.029, 5: 1.163, 6: 1.267, 7: 1.352, 8: 1.424, 12: 1.629,
                 16: 1.766, 24: 1.948, 32: 2.070, 64: 2.336, 128: 2.580}


def expected_max_normal(b: int) -> float:
    if b in _EXPECTED_MAX:
        return _EXPECTED_MAX[b]
    if b > 128:  # the asymptotic form, shifted to meet the table at 128
        def asymptotic(n: int) -> float:
            root = math.sqrt(2 * math.log(n))
            return root - (math.log(math.log(n)) + math.log(4 * math.pi)) / (2 * root)

        return asymptotic(b) + _EXPECTED_MAX[128] - asymptotic(128)
    below = max(k for k in _EXPECTED_MAX if k <= b)
    above = min(k for k in _EXPECTED_MAX if k >= b)
    share = (math.log(b) - math.log(below)) / (math.log(above) - math.log(below))
    return _EXPECTED_MAX[below] + share * (_EXPECTED_MAX[above] - _EXPECTED_MAX[below])


@dataclass(frozen=True)
class Workload:
    """What the run does, independent of hardware."""

    method: str
    peft: str
    num_examples: int
    tokens_per_example: float  # mean, before truncation (GRPO: the prompt)
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
    completion_length: float | None = None  # GRPO: mean generated tokens, when known (else the maximum)
    teacher_params: int | None = None  # distill: the teacher's parameters (its forward pass per token)
    reference_passes: float | None = None  # a frozen reference's forwards per token; None: the method's own
    # How it is executed: our scripts run TRL with transformers' generate and DDP; calibration rows vary.
    framework: str = "trl"
    generation: str = "hf"
    sharded: bool = False  # ZeRO-3 / FSDP: weights gathered every step
    gradient_checkpointing: bool = True
    liger: bool = False
    generation_gpus: int = 0  # GPUs that only generate (a vLLM server), besides the training GPUs
    nodes: int = 1
    fp32: bool = False  # trained without mixed precision (calibration rows; our scripts use bf16/fp16 on GPUs)
    emulated_bf16: bool = False  # bf16 forced on a GPU without it (T4, calibration rows): no tensor cores
    fp8_weights: bool = False  # an FP8 base model (calibration rows): decoding reads 1 byte per weight
    trainable_share: float | None = None  # full fine-tune of part of the layers (Spectrum): their share
    eager_attention: bool = False  # attention without a fused kernel (calibration rows): scores go through memory
    generation_per_micro_batch: bool = False  # TRL < 0.16 generated each micro-batch's completions separately
    eval_tokens: float | None = None  # forward tokens of all evaluations, when known (else from eval_split)
    # rows cut at max_length; vision rows are not (SFT and DPO pass max_length=None, GRPO keeps a prompt whole: a
    # cut would drop image tokens), so they are trained at their whole length, text and image tokens
    cut: bool = True

    def sequence_length(self) -> int:
        """Tokens of one sequence as the GPU sees it (padded or packed), for memory and attention."""
        if self.spec.generates:  # the prompt and its sampled completion
            return int(self.mean_length + self.max_completion_length)
        if self.packing:
            return self.max_length
        return int(padded_length(self, self.per_device_batch_size * self.sequences_per_example))

    @property
    def sequences_per_example(self) -> int:
        return self.spec.sequences_per_example

    @property
    def spec(self) -> MethodSpec:
        return methods.get(self.method)

    @property
    def mean_length(self) -> float:
        """Mean tokens of one example after truncation at max_length (uncut rows: all of them)."""
        return min(self.tokens_per_example, self.max_length) if self.cut else self.tokens_per_example


def padded_length(work: Workload, rows: int) -> float:
    """Tokens of a row in a micro-batch of `rows` unpacked rows: the batch pads to its longest (up to max_length).
    Images are their patch grid, all alike: nothing to pad."""
    if work.spec.inputs == "image":
        return float(work.tokens_per_example)
    longest = work.tokens_per_example * (1 + C.LENGTH_CV * expected_max_normal(max(1, rows)))
    padded = max(work.mean_length, longest)
    return min(float(work.max_length), padded) if work.cut else padded


def rows_per_step(work: Workload, gpus: int) -> float:
    """Dataset rows one optimizer step consumes (GRPO: prompts, each sampled num_generations times)."""
    per_step = work.per_device_batch_size * work.gradient_accumulation * max(1, gpus)
    if work.spec.grouped:
        return per_step / work.num_generations
    if work.packing:  # a packed sequence holds max_length tokens of several rows
        return per_step * work.max_length / max(1.0, work.mean_length)
    return per_step


def optimizer_steps(work: Workload, gpus: int) -> int:
    if work.max_steps:
        return work.max_steps
    examples = work.num_examples * (1 - work.eval_split)
    return max(1, math.ceil(examples * work.epochs / rows_per_step(work, gpus)))


def micro_batch(work: Workload) -> tuple[int, float]:
    """(sequences in one micro-batch on one GPU, tokens of each as the GPU runs them): a row padded to the
    longest of its micro-batch, a packed sequence's max_length, a prompt and its sampled completion."""
    if work.spec.generates:
        return work.per_device_batch_size, work.mean_length + (work.completion_length or work.max_completion_length)
    if work.packing:
        return work.per_device_batch_size, float(work.max_length)
    rows = work.per_device_batch_size * work.sequences_per_example
    return rows, padded_length(work, rows)
