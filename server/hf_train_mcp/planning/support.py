"""What a model can be trained and exported as, said once for the README's support table: computed from the very
decisions the tools make (the request checks of the methods and engines, planning/training.check_models with
models/refusals.py's refusals (quantization_refusal among them), planning/subjects.for_family and planning/export's
export_refusal), never from a rule of its own. A cell that says no carries the tool's own refusal (why, and what to
send instead)."""

from dataclasses import dataclass

from pydantic import ValidationError

from hf_train_mcp import engines, methods
from hf_train_mcp.contract.readable import readable
from hf_train_mcp.contract.training_requests import RunShape
from hf_train_mcp.data.formats import reads_images
from hf_train_mcp.errors import TrainError
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.planning.export import export_refusal
from hf_train_mcp.planning.hyperparameters import DataFacts
from hf_train_mcp.planning.subjects import Subject, for_family
from hf_train_mcp.planning.training import check_models

PEFTS = ("lora", "qlora", "full")
EXPORT_FORMATS = ("merged", "gguf")


@dataclass(frozen=True)
class Cell:
    """One way to train the model: a method (on rows with images or not), a PEFT mode and an engine."""

    method: str
    images: bool
    peft: str
    engine: str
    refusal: str | None  # None: the tools plan it (on a GPU flavor)


@dataclass(frozen=True)
class Support:
    model: str
    model_type: str | None
    family: str  # models/family.py Family.kind
    cells: tuple[Cell, ...]
    evaluation: str | None  # why evaluate_model refuses the model as it is (None: it plans it)
    exports: dict[str, str | None]  # format -> why export_model refuses the model as it is (None: it plans it)

    def cell(self, method: str, peft: str, *, images: bool = False, engine: str = engines.DEFAULT) -> Cell | None:
        return next((c for c in self.cells if (c.method, c.peft, c.images, c.engine) == (method, peft, images,
                                                                                         engine)), None)

    @property
    def methods(self) -> dict[str, tuple[str, ...]]:
        """What it trains with the default engine: method (with ' + images' for rows that hold images) -> the PEFT
        modes it may use."""
        found: dict[str, tuple[str, ...]] = {}
        for c in self.cells:
            if c.refusal is None and c.engine == engines.DEFAULT:
                name = f"{c.method} + images" if c.images else c.method
                found[name] = (*found.get(name, ()), c.peft)
        return found

    @property
    def engines(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.engine for c in self.cells if c.refusal is None))

    @property
    def gguf(self) -> bool:
        return self.exports["gguf"] is None


def support_of(size: ModelSize, model: str) -> Support:
    """The support of a model of this size (estimate/sizing.py model_size: its files, family and quantization), as
    `model` names it: every method x rows with or without images x PEFT mode x engine, and its exports."""
    cells = tuple(Cell(method, images, peft, engine, _training_refusal(size, model, method, peft, engine, images))
                  for method in methods.NAMES for images in _rows(method) for peft in PEFTS
                  for engine in engines.ENGINES)
    family = size.family
    return Support(model=model, model_type=size.model_type, family=family.kind if family else "unknown",
                   cells=cells, evaluation=_followup(size, model, "evaluation")[1],
                   exports={f: _export_refusal(size, model, f) for f in EXPORT_FORMATS})


def _rows(method: str) -> tuple[bool, ...]:
    """Text rows, and rows with images where one of the method's formats reads them (vision SFT, DPO, GRPO)."""
    return (False, True) if any(reads_images(f) for f in methods.get(method).formats) else (False,)


def _training_refusal(size: ModelSize, model: str, method: str, peft: str, engine: str,
                      images: bool) -> str | None:
    """What estimate_cost and submit_training say of this run before any data or hardware is looked at: the
    request's own checks (a method's PEFT modes, an engine's methods), then the models' (check_models). A
    distillation is judged with the model as its own teacher (a teacher of another vocabulary is refused)."""
    teacher = {"teacher_model": model} if method == "distill" else {}
    try:
        req = RunShape(model=model, method=method, peft=peft, engine=None if engine == engines.DEFAULT else engine,
                       **teacher)
        check_models(req, size, teacher=None, data=DataFacts(vision=images))
    except ValidationError as exc:
        return readable(exc)
    except TrainError as exc:
        return str(exc)
    return None


def _followup(size: ModelSize, model: str, what: str) -> tuple[Subject | None, str | None]:
    """The model as an evaluation or export of a Hub repo no job of this server trained reads it (its family's
    method), or why none can: (subject, None) or (None, refusal)."""
    try:
        return for_family(Subject(ref=model, kind="full", base_model=None, method=None), size.family, what,
                          quantization=size.quantization), None
    except TrainError as exc:
        return None, str(exc)


def _export_refusal(size: ModelSize, model: str, format: str) -> str | None:
    """What export_model says of the model as it is."""
    subject, refusal = _followup(size, model, "export")
    return refusal or export_refusal(size, subject.method, format, model)
