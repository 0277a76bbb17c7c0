"""What a training method is, for every layer that needs to know: one MethodSpec per method module.

A method module declares its request options (the submit_training parameters only it takes), the dataset formats
it accepts (data/formats.py declares each) and how to map common layouts onto them, what its evaluation measures,
the Hub's task for what it trains, its defaults, the factors the estimator needs, the CONFIG keys its template
reads, and its template. Nothing else names a method: the request models, validation, the planner, the
estimator, the cards and the evaluation ask the registry (methods/__init__.py).
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hf_train_mcp.rendering.config import EvalKind, TrainingConfig

Mapping = dict[str, str]


@dataclass(frozen=True)
class Option:
    """A parameter that only some methods take, declared once by the module that introduced it (others that
    take it too import it). `sizing`: it changes time or memory, so estimate_cost takes it as well."""

    name: str
    annotation: Any  # Annotated[type, Field(...)]: optional (None) unless `default` says otherwise
    sizing: bool = False
    default: Any = None
    resolves_to: Any = None  # the value a job runs with when the caller sends none (None: the default's)
    changes_loss: bool = False  # runs that differ in it have losses that mean different things (sweep pruning)
    top_level: bool = False  # a parameter of its own in the tool schema; else sent inside `options` (smaller)

    def resolve(self, value: Any) -> Any:
        if value is not None:
            return value
        return self.default if self.resolves_to is None else self.resolves_to


def no_config(req: Any) -> dict[str, Any]:
    return {}


def no_check(req: Any) -> None:
    return None


@dataclass(frozen=True)
class MethodSpec:
    name: str
    title: str  # "SFT", "DPO", ...
    summary: str  # what the model card calls the result ("a supervised fine-tune")
    formats: tuple[str, ...]  # accepted dataset formats, in the order a layout is read as one (data/formats.py)
    needs: str  # what the data must hold, for error messages
    learning_rate: tuple[float, float]  # (full fine-tune, LoRA/QLoRA)
    epochs: float
    max_length: int
    tokens_per_example: int  # the estimate's assumption when the data has no token statistics
    eval_metric: EvalKind  # what evaluate measures (rendering/config.py: each kind its own template partial)
    pipeline_tag: str  # the Hub's task for the trained model (its card's pipeline_tag)
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)  # target column <- layouts seen in the wild
    options: tuple[Option, ...] = ()
    keep_columns: tuple[str, ...] | None = None  # the columns the trainer is given (None: all)
    # --- what the estimator needs -------------------------------------------------------------------------
    sequences_per_example: int = 1  # chosen and rejected: 2
    min_batch: int = 1  # KTO estimates its KL term from the other rows of a batch
    reference_passes: float = 0.0  # forward passes of a frozen reference per trained token
    full_reference_copy: bool = False  # a full fine-tune keeps a frozen copy of the weights (PEFT disables adapters)
    generates: bool = False  # completions are sampled every step (GRPO, on-policy distillation)
    grouped: bool = False  # GRPO: num_generations completions per prompt, whole groups per batch
    classifier: bool = False  # a sequence-classification head: no language-model logits
    appends_eos: bool = False  # every text ends with an end token (TRL's reward trainer; [SEP] where no EOS)
    prompt_length: bool = False  # max_length bounds the prompt; completions add max_completion_length
    # --- what the jobs do ---------------------------------------------------------------------------------
    library: str = "TRL"  # what trains it, as the card says ("transformers Trainer", ...)
    inputs: str = "text"  # what a row feeds the model: "text" (a tokenizer) or "image" (an image processor)
    auto_class: str = "AutoModelForCausalLM"  # the transformers class that loads the trained model
    processor: str = "AutoTokenizer"  # the transformers class that loads its preprocessing
    # what loads the trained model: "transformers" (an AutoModel class), or "sentence-transformers" (a
    # SentenceTransformer: its modules and pooling beside the weights; evaluation and export load it so)
    model_library: str = "transformers"
    peft_task: str = "CAUSAL_LM"
    prompt_required: bool = False  # preference rows need a prompt (DPO), or the shared turns are the prompt
    template: str = ""  # templates/<template>.py.j2; the method's name by default
    config: Callable[[Any], dict[str, Any]] = no_config  # the CONFIG keys only this method's template reads
    config_schema: type[TrainingConfig] = TrainingConfig  # their types: a subclass declared in the method's module
    data_config: Callable[[Any], dict[str, Any]] = no_config  # CONFIG keys it derives from the data (DataFacts)
    check: Callable[[Any], None] = no_check  # request checks beyond the options' own (raise ValueError)
    # checks that need the models' sizes (req, ModelSize, teacher ModelSize or None): planning calls it before
    # anything is launched (raise ValueError)
    check_sizes: Callable[[Any, Any, Any], None] = lambda req, size, teacher: None
    card_settings: Callable[[dict[str, Any]], dict[str, Any]] = lambda config: {}
    data_notes: Callable[[set[str]], list[tuple[str, str, str | None]]] = lambda columns: []  # (severity, text, col)
    dependencies: tuple[str, ...] = ()
    request_dependencies: Callable[[Any], list[str]] = lambda req: []  # PyPI names the request's own code imports

    @property
    def template_name(self) -> str:
        return self.template or self.name

    def sizing_options(self, req: Any) -> dict[str, Any]:
        """This method's options that change time or memory, each resolved to what the job runs with (a request
        or an estimate_cost call; a script's CONFIG holds the same values under the same names)."""
        return {o.name: o.resolve(getattr(req, o.name, None)) for o in self.options if o.sizing}

    def group_size(self, sizing: dict[str, Any]) -> int:
        """Completions sampled per prompt and trained as one group (GRPO's num_generations); 1 otherwise."""
        return sizing["num_generations"] if self.grouped else 1

    def batch_rows(self, size_batch: int) -> int:
        """Rows per device step at a model-size batch: pairs count twice."""
        return max(self.min_batch, size_batch // self.sequences_per_example)
