"""What trains a run (`engine=`): TRL alone (the default), or Unsloth's loaders and kernels under TRL's trainers.

One declaration per engine, as data: the methods and PEFT modes it covers, what hardware it runs on, its PEP 723
pins, its memory and card wording. The request (contract/), the planner (planning/training.py), the estimator
(estimate/) and the card (planning/cards.py) ask this module; none of them names an engine.

Unsloth facts below were read in unsloth 2026.10.9 / unsloth_zoo 2026.10.9 (PyPI wheels):
- `FastLanguageModel.from_pretrained(model_name, max_seq_length, dtype, load_in_4bit=True (!), load_in_16bit,
  use_exact_model_name, random_state, ...)` and `get_peft_model(model, r, target_modules, lora_alpha,
  lora_dropout, bias, use_gradient_checkpointing="unsloth", random_state, ...)`; `FastVisionModel` is
  `FastModel` with `finetune_vision_layers` / `finetune_language_layers` on its `get_peft_model`.
- `import unsloth` patches transformers, PEFT and TRL (`_patch_trl_trainer`, `PatchFastRL`): it must come first.
- Its requirements: trl>=0.18.2,!=0.19.0,<=1.15.0; transformers>=4.52.4,<=5.17.0 without 5.0.0/5.1.0;
  datasets>=3.4.1,<5 without 4.0.*/4.1.0/4.4.*/4.5.0; peft>=0.18.0; bitsandbytes>=0.45.5,!=0.46.0,!=0.48.0.
- Without a GPU it falls back to stock transformers + PEFT + TRL (`_cpu_init.py`: text SFT only, no kernels).
- It has DDP/FSDP2 paths and `full_finetuning=True`, but this server's Unsloth scripts and its Unsloth speed
  factor (calibrated on single-GPU Unsloth notebooks, calibration rows 17-28) cover one GPU and LoRA/QLoRA only.
"""

from dataclasses import dataclass
from typing import Any, Literal

EngineName = Literal["trl", "unsloth"]
DEFAULT = "trl"


@dataclass(frozen=True)
class Engine:
    name: str
    title: str  # what the card says trained the model, besides TRL
    methods: frozenset[str] | None = None  # None: every method
    pefts: frozenset[str] | None = None  # None: lora, qlora and full
    single_gpu: bool = False  # only flavors with one GPU
    needs_gpu: bool = False  # no CPU flavor, no local run without CUDA
    pins: dict[str, str] | None = None  # package -> requirement, replacing the base pins of the same package
    # Peak-memory factors against TRL on the same run (estimate/memory.py memory_need)
    checkpoint_share: float = 1.0  # checkpointed hidden states kept on the GPU (Unsloth offloads them to RAM)
    offloads_from_seq_len: int = 0  # ... only for sequences this long (shorter: plain checkpointing, share 1)
    logits_share: float = 1.0  # the LM head's logits and their fp32 upcast (Unsloth's chunked, fused loss)
    why_not: dict[str, str] | None = None  # refusal reasons by kind ("method", "peft", "gpus", "gpu")


ENGINES: dict[str, Engine] = {
    "trl": Engine(name="trl", title="TRL"),
    "unsloth": Engine(
        name="unsloth", title="Unsloth",
        methods=frozenset({"sft", "grpo"}), pefts=frozenset({"lora", "qlora"}), single_gpu=True, needs_gpu=True,
        pins={
            "unsloth": "unsloth>=2026.10.9,<2027",  # the release whose signatures the template was checked against
            "unsloth_zoo": "unsloth_zoo>=2026.10.9,<2027",
            "trl": "trl>=1.0,<=1.15.0",  # Unsloth's own upper bound (it patches TRL's trainers by their source)
            "transformers": "transformers>=5.2,<=5.17.0",
            "datasets": "datasets>=4.2,!=4.4.*,!=4.5.0,<5",
            "peft": "peft>=0.18,<1",
            "bitsandbytes": "bitsandbytes>=0.45.5,!=0.46.0,!=0.48.0",  # its own bounds (a base QLoRA pin is looser)
        },
        # Unsloth's gradient checkpointing offloads each layer's checkpointed input to CPU RAM (one layer's
        # stays), and its fused cross-entropy computes the loss in chunks without the whole fp32 logits: what
        # remains is fitted to the peak reserved memory of its notebooks (rows 17-20, tests/test_unsloth.py)
        checkpoint_share=0.25, logits_share=0.25,
        # apply_unsloth_gradient_checkpointing (unsloth/models/_utils.py): below a max_seq_length of 512 the
        # offload is not worth its copies, and Unsloth falls back to standard checkpointing
        offloads_from_seq_len=512,
        why_not={
            "method": "engine='unsloth' covers method 'sft' and 'grpo' here (its loaders under TRL's SFT and GRPO "
                      "trainers); send engine='trl' (or leave it out) for {value}",
            "peft": "engine='unsloth' covers peft='lora' and 'qlora' here (Unsloth's speed and memory figures in "
                    "the estimate are for adapters); send peft='lora'/'qlora', or engine='trl' for a full fine-tune",
            "gpus": "engine='unsloth' runs on one GPU here ({value} has {gpus}): its scripts and its calibrated speed "
                    "cover single-GPU runs. Send a one-GPU flavor (e.g. 'a100-large', 'h200'), or engine='trl' "
                    "for a multi-GPU run",
            "gpu": "engine='unsloth' needs a CUDA GPU ({value} has none): without one Unsloth falls back to plain "
                   "transformers + PEFT + TRL. Send engine='trl' (the same training), or a GPU flavor on {gpu_backend}",
        },
    ),
}


def get(name: str | None) -> Engine:
    return ENGINES[name or DEFAULT]


def _refusal(engine: Engine, kind: str, **values: Any) -> str:
    assert engine.why_not is not None
    return engine.why_not[kind].format(**values) + ". Nothing was launched."


def check_request(name: str | None, method: str, peft: str) -> None:
    """What the engine cannot train, from the request alone (raises ValueError: a validation error)."""
    engine = get(name)
    if engine.methods is not None and method not in engine.methods:
        raise ValueError(_refusal(engine, "method", value=f"method={method!r}"))
    if engine.pefts is not None and peft not in engine.pefts:
        raise ValueError(_refusal(engine, "peft", value=f"peft={peft!r}"))


def refusal_for_hardware(name: str | None, flavor: str, gpus: int, has_gpu: bool, *,
                         gpu_backend: str | None = None) -> str | None:
    """Why the engine cannot run on this flavor (or this machine), or None. gpu_backend: the `backend=` argument
    that reaches GPU flavors (backends.gpu_backend), said when this hardware has none."""
    engine = get(name)
    if engine.needs_gpu and not has_gpu:
        return _refusal(engine, "gpu", value=flavor, gpu_backend=gpu_backend)
    if engine.single_gpu and gpus > 1:
        return _refusal(engine, "gpus", value=repr(flavor), gpus=gpus)
    return None


def runs_on(name: str | None, gpus: int) -> bool:
    """Whether a GPU flavor of `gpus` GPUs is one this engine may be placed on (the flavor choice)."""
    return not (get(name).single_gpu and gpus > 1)


def dependencies(name: str | None, base: list[str]) -> list[str]:
    """The header's pins: the base ones, each replaced by the engine's own where it has one, then its packages."""
    pins = get(name).pins or {}
    replaced = [pins.get(_package(dep), dep) for dep in base]
    named = {_package(dep) for dep in base}
    return [*replaced, *(pin for package, pin in pins.items() if package not in named)]


def _package(requirement: str) -> str:
    for i, char in enumerate(requirement):
        if char in "<>=!~[; ":
            return requirement[:i].lower()
    return requirement.lower()
