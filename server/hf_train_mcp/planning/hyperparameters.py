"""What sizes a run before any default is applied: the data's facts and the caller's hyperparameters."""

from dataclasses import dataclass, field, fields
from typing import Any

from hf_train_mcp import engines, methods
from hf_train_mcp.methods import defaults as D
from hf_train_mcp.contract.requests import RunShape
from hf_train_mcp.estimate import constants as EC
from hf_train_mcp.estimate.workload import Workload
from hf_train_mcp.estimate.sizing import ModelSize


@dataclass(frozen=True)
class DataFacts:
    """What validation learned about the dataset, for sizing the run."""

    num_rows: int | None = None
    mean_tokens: float | None = None
    conversational: bool = False  # rows hold lists of messages: the tokenizer needs a chat template
    vision: bool = False  # rows hold messages and images: a vision-language model's processor reads them
    images_per_row: float = 0.0  # images a row holds, on average in the sample
    image_pixels: tuple[float, float] | None = None  # their mean (height, width), where the viewer said them


@dataclass(frozen=True)
class Hyper:
    """The hyperparameters that size a run (a TrainingRequest or an estimate_cost call), before defaults."""

    method: str
    peft: str
    epochs: float | None = None
    max_steps: int | None = None
    max_length: int | None = None
    per_device_batch_size: int | None = None
    gradient_accumulation: int | None = None
    eval_split: float | None = None
    save_steps: int | None = None
    teacher_params: int | None = None  # distillation: the teacher's size (sized by the caller)
    engine: str = engines.DEFAULT  # what trains it: its speed and memory (engines.py)
    options: dict[str, Any] = field(default_factory=dict)  # the method's own sizing options, resolved
    nodes: int = 1  # machines of the flavor, each its own job (nodes/rules.py)

    @classmethod
    def of(cls, req: "RunShape", teacher_params: int | None = None) -> "Hyper":
        """From a submit_training or estimate_cost request (the latter has no eval_split or save_steps)."""
        common = {f: getattr(req, f) for f in cls.__dataclass_fields__
                  if f not in ("options", "engine", "nodes") and hasattr(req, f)}
        return cls(**common, engine=req.engine or engines.DEFAULT, teacher_params=teacher_params,
                   options=methods.get(req.method).sizing_options(req), nodes=getattr(req, "nodes", None) or 1)

    @property
    def spec(self) -> methods.MethodSpec:
        return methods.get(self.method)

    @property
    def generations(self) -> int:
        """Completions sampled per prompt: a GRPO group, one otherwise."""
        return self.spec.group_size(self.options)

    @property
    def resolved_epochs(self) -> float:
        return self.epochs or self.spec.epochs

    @property
    def resolved_max_length(self) -> int:
        return self.max_length or self.spec.max_length

    def schedule(self, billions: float, gpus: int) -> D.Schedule:
        return D.schedule(self.method, billions, gpus, batch=self.per_device_batch_size,
                          accumulation=self.gradient_accumulation, num_generations=self.generations)

    def workload(self, size: ModelSize, gpus: int, data: DataFacts) -> Workload:
        """`gpus`: every GPU of the run (all the nodes' together)."""
        sched = self.schedule(size.billions, gpus)
        physical = {k: v for k, v in self.options.items() if k in WORKLOAD_FIELDS}  # packing, completion lengths
        return Workload(
            method=self.method, peft=self.peft,
            num_examples=data.num_rows or EC.DEFAULT_NUM_EXAMPLES,
            # an image is its patch grid of tokens beside the text (validation counts the text alone)
            tokens_per_example=(data.mean_tokens or self.spec.tokens_per_example)
            + data.images_per_row * size.tokens_per_image(data.image_pixels),
            epochs=self.resolved_epochs, max_steps=self.max_steps, max_length=self.resolved_max_length,
            per_device_batch_size=sched.per_device_batch_size, gradient_accumulation=sched.gradient_accumulation,
            **{**physical, "num_generations": self.generations},
            eval_split=self.eval_split or 0.0, save_steps=self.save_steps or D.SAVE_STEPS,
            teacher_params=self.teacher_params, framework=self.engine,
            nodes=self.nodes, sharded=self.nodes > 1 and self.peft == "full",  # FSDP across machines
            cut=not data.vision,  # vision rows are trained whole (no max_length cut): sized so
        )


WORKLOAD_FIELDS = frozenset(f.name for f in fields(Workload))
