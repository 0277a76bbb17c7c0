"""What callers send to each tool, validated before anything is rendered or launched. One model per tool: its
fields are the MCP tool's parameters and the CLI command's options (declared here, nowhere else)."""

import json
import re
from functools import cache
from itertools import product
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model,
                      field_validator, model_validator)

from hf_train_mcp import engines, methods

from hf_train_mcp.nodes import rules as multinode
from hf_train_mcp.access import check_reference
from hf_train_mcp.credentials import looks_like_credential
from hf_train_mcp.contract.readable import readable
from hf_train_mcp.user_scripts.source import IMAGE_PATTERN, SECRET_NAME_PATTERN, source_kind

from hf_train_mcp.contract.results import (
    BackendName,
    ColumnMapping,
    DatasetRef,
    Flavor,
    HubRepoId,
    Method,
    ModelRef,
    Peft,
    Stage,
    Timeout,
)

# ASCII classes, not \w: Hub names are ASCII, and pydantic-core compiles a Unicode \w into a large automaton
# (~15 ms per pattern at import, most of the server's start-up)
SplitName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-\[\]:%]{1,64}$")]
Label = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\- ]{1,96}$")]
# Declared once, used by every tool that launches a job
MaxCost = Annotated[float, Field(gt=0, description="refuse if timeout x price is higher")]
DryRun = Annotated[bool, Field(description="render and plan only: nothing launched")]
IdempotencyKey = Annotated[str, Field(min_length=1, max_length=128)]
TaskName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,96}$")]


class Request(BaseModel):
    """What one tool takes: its fields are the tool's parameters (MCP schema) and the CLI command's options."""

    # validators are built on a tool's first call: tools/list reads only the fields (app.py builds the schema)
    model_config = ConfigDict(extra="forbid", defer_build=True)


def with_method_options(base: type[Request], *, sizing_only: bool) -> Any:
    """`base` plus the methods' own options (methods/), each declared once by its method module. sizing_only:
    the options that change time or memory (what estimate_cost takes)."""
    fields = {
        name: (option.annotation if option.default is not None else option.annotation | None, option.default)
        for name, option in methods.options().items()
        if (option.sizing or not sizing_only) and name not in base.model_fields
    }
    return create_model(base.__name__.lstrip("_"), __base__=base, __module__=__name__, __doc__=base.__doc__,
                        **fields)


def nested_options(request: type[Request]) -> list[str]:
    """The method options a request takes inside its `options` object (the tool schema lists them there)."""
    return [name for name, option in methods.options().items() if name in request.model_fields and not option.top_level]


def options_description(names: list[str]) -> str:
    """What the `options` parameter says: each nested option with its own words (and choices), from methods/."""
    return "method settings: " + "; ".join(f"{name} ({_option_words(name)})" for name in names)


@cache
def _option_words(name: str) -> str:
    """One option's description and choices, from its JSON schema (several tools share an option: built once)."""
    schema = TypeAdapter(methods.options()[name].annotation).json_schema()
    choices = schema.get("enum") or schema.get("items", {}).get("enum")
    return schema.get("description", "") + (f": {'|'.join(choices)}" if choices else "")


def lift_options(data: Any, accepted: list[str]) -> Any:
    """The `options` object of a tool call as the flat fields a request holds (so that stored requests, sweep
    grids and CLI flags name each option directly)."""
    if not isinstance(data, dict) or "options" not in data:
        return data
    nested, rest = data["options"], {k: v for k, v in data.items() if k != "options"}
    if nested is None:
        return rest
    if not isinstance(nested, dict):
        raise ValueError('options must be an object such as {"beta": 0.1}')
    unknown = sorted(set(nested) - set(accepted))
    if unknown:
        raise ValueError(f"options takes {', '.join(accepted) or 'nothing here'}, not {', '.join(unknown)}")
    twice = sorted(name for name in nested if rest.get(name) is not None)
    if twice:
        raise ValueError(f"{', '.join(twice)} sent both inside options and beside it: send it once")
    return rest | nested


class _RunShape(Request):
    """What sizes a run: shared by estimate_cost and submit_training, declared once."""

    model: ModelRef
    method: Method = "sft"
    peft: Peft = "lora"
    flavor: Flavor | None = None
    epochs: Annotated[float, Field(gt=0, le=100)] | None = None
    max_steps: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    max_length: Annotated[int, Field(ge=32, le=131_072, description="tokens per sequence")] | None = None
    per_device_batch_size: Annotated[int, Field(ge=1, le=512)] | None = None
    gradient_accumulation: Annotated[int, Field(ge=1, le=1024)] | None = None
    dataset_config: Annotated[str, Field(max_length=128)] | None = None
    dataset_split: SplitName = "train"
    backend: BackendName | None = None
    max_cost_usd: MaxCost | None = None
    nodes: Annotated[int, Field(ge=2, le=multinode.MAX_NODES)] | None = None
    engine: engines.EngineName | None = None  # None: TRL (no default in the schema: it costs every agent turn)

    @model_validator(mode="before")
    @classmethod
    def _lift_options(cls, data: Any) -> Any:
        return lift_options(data, [name for name in methods.options() if name in cls.model_fields])

    @model_validator(mode="after")
    def _method_options(self) -> "_RunShape":
        methods.check_request(self)
        multinode.check_request(self)
        engines.check_request(self.engine, self.method, self.peft)
        return self


RunShape = with_method_options(_RunShape, sizing_only=True)


class ValidateRequest(Request):
    dataset: DatasetRef
    method: Method = "sft"
    split: SplitName = "train"
    config: Annotated[str, Field(max_length=128, description="Hub dataset config")] | None = None
    column_mapping: ColumnMapping | None = None
    model: Annotated[str, Field(min_length=1, max_length=512, description="tokenizer for token stats"),
                     AfterValidator(check_reference)] | None = None
    max_length: Annotated[int, Field(ge=32, le=131_072)] | None = None


class EstimateRequest(RunShape):
    dataset: DatasetRef | None = None
    num_examples: Annotated[int, Field(ge=1)] | None = None
    tokens_per_example: Annotated[float, Field(gt=0, description="mean tokens per row")] | None = None
    measure: Annotated[bool, Field(description="time real steps as a job (needs dataset)")] = False


ALL_LINEAR = "all-linear"  # PEFT's shorthand for every linear layer but the output head (peft/utils/constants.py)


def lora_target_names(names: list[str]) -> list[str]:
    """LoRA target names as PEFT's LoraConfig reads a list: each the last part(s) of a module's dotted name
    (`key == name or key.endswith("." + name)`, peft/tuners/tuners_utils.py check_target_module_exists), so a name
    is an attribute path (q_proj, self_attn.q_proj, layers.0.mlp.up_proj); 'all-linear' is PEFT's shorthand only as
    the whole value, in any spelling (the request's lora_targets sends it as that string)."""
    if not names:
        raise ValueError("send at least one module name (e.g. ['q_proj', 'v_proj']), or leave it out for all-linear")
    shorthand = [n for n in names if n.lower().replace("_", "-") == ALL_LINEAR]
    if shorthand and len(set(names)) > len(shorthand):
        raise ValueError("'all-linear' already adapts every linear layer: send ['all-linear'] alone, or list module "
                         "names without it")
    if shorthand:
        return [ALL_LINEAR]
    for name in names:
        if "-" in name:
            raise ValueError(f"{name!r} is no module name (they are Python attribute names, with '_' not '-'): send "
                             f"{name.replace('-', '_')!r}, or 'all-linear' for every linear layer")
        if name.startswith(".") or name.endswith(".") or ".." in name:
            raise ValueError(f"{name!r} is no module name: send dotted names without an empty part, e.g. "
                             "'self_attn.q_proj' or 'q_proj'")
    return list(dict.fromkeys(names))


class _TrainingRequest(RunShape):
    dataset: DatasetRef
    hub_model_id: Annotated[HubRepoId, Field(description="'owner/name' to push to")] | None = None
    timeout: Timeout | None = None
    learning_rate: Annotated[float, Field(gt=0, lt=1)] | None = None
    column_mapping: ColumnMapping | None = None
    eval_split: Annotated[float, Field(gt=0, lt=0.5, description="held-out fraction")] | None = None
    trackio_space_id: HubRepoId | None = None
    project: Label | None = None
    run_name: Label | None = None
    private: bool = True
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 42
    use_liger_kernel: bool = False
    chat_template: Annotated[Literal["chatml"], Field(description="for a base model without one")] | None = None
    lora_r: Annotated[int, Field(ge=1, le=1024)] | None = None
    lora_alpha: Annotated[int, Field(ge=1, le=4096)] | None = None
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] | None = None
    lora_target_modules: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]] | None = None
    save_steps: Annotated[int, Field(ge=1)] | None = None
    save_total_limit: Annotated[int, Field(ge=1, le=100)] | None = None
    resume_from: Annotated[str, Field(max_length=256, description="job id or Hub repo with last-checkpoint/"),
                           AfterValidator(check_reference)] | None = None
    output_bucket: Annotated[HubRepoId, Field(description="bucket mounted as output_dir")] | None = None
    dry_run: DryRun = False
    preflight: Annotated[bool, Field(description="time a few steps first; stop if OOM/too slow")] = False
    idempotency_key: IdempotencyKey | None = None
    skip_validation: bool = False

    @model_validator(mode="after")
    def _lora_options(self) -> "_TrainingRequest":
        if self.peft == "full" and any(
            v is not None for v in (self.lora_r, self.lora_alpha, self.lora_dropout, self.lora_target_modules)
        ):
            raise ValueError("lora_* options need peft='lora' or 'qlora', not 'full'")
        return self

    @field_validator("lora_target_modules")
    @classmethod
    def _target_names(cls, names: list[str] | None) -> list[str] | None:
        return None if names is None else lora_target_names(names)

    @property
    def lora_targets(self) -> str | list[str] | None:
        """What PEFT's LoraConfig gets as target_modules (None: the plan's default): ['all-linear'] as the string
        PEFT expands (in a list it would name a module called 'all-linear', NoMatchingPeftModuleError)."""
        if self.lora_target_modules == [ALL_LINEAR]:
            return ALL_LINEAR
        return self.lora_target_modules


TrainingRequest = with_method_options(_TrainingRequest, sizing_only=False)


class FollowupShape(Request):
    """What an evaluation or an export takes besides its own options: the model, and where and how long it runs."""

    model: Annotated[str, Field(min_length=1, max_length=512, description="training job_id, Hub id, or folder"),
                     AfterValidator(check_reference)]
    backend: BackendName | None = None
    flavor: Flavor | None = None
    timeout: Timeout | None = None
    max_cost_usd: MaxCost | None = None
    dry_run: DryRun = False
    idempotency_key: IdempotencyKey | None = None


class EvaluateRequest(FollowupShape):
    dataset: Annotated[DatasetRef, Field(description="default: the job's eval split")] | None = None
    split: SplitName | None = None
    tasks: Annotated[list[TaskName], Field(max_length=16, description="lm-eval tasks, e.g. hellaswag")] | None = None
    num_samples: Annotated[int, Field(ge=1, le=100_000, description="rows (and items per task)")] | None = None


class ExportRequest(FollowupShape):
    format: Literal["merged", "gguf"] = "merged"
    quantization: Literal["q4_k_m", "q8_0", "f16"] | None = None
    hub_model_id: Annotated[HubRepoId, Field(description="target repo (default <repo>-merged / -GGUF)")] | None = None
    private: bool = True

    @model_validator(mode="after")
    def _gguf_only(self) -> "ExportRequest":
        if self.quantization and self.format != "gguf":
            raise ValueError("quantization applies to format='gguf' only")
        return self


# what a sweep sets itself on every run: a grid or base may not
SWEEP_OWNED = frozenset({"dry_run", "idempotency_key"})
NOT_GRIDDED = frozenset({"backend", "project", "run_name"})  # one sweep: one place, one Trackio project
# what changes what a loss means: runs that differ in these cannot be pruned against each other (a method's own
# such options say so where they are declared: Option.changes_loss)
PRUNE_INCOMPARABLE = frozenset({"method", "model", "dataset", "dataset_config", "dataset_split", "column_mapping",
                                *(o.name for o in methods.options().values() if o.changes_loss)})
SWEEP_RUNS_MAX = 64


class SweepRequest(Request):
    base: Annotated[dict[str, Any], Field(description="submit_training arguments")]
    grid: Annotated[dict[str, Annotated[list[Any], Field(min_length=1, max_length=16)]], Field(
        min_length=1, max_length=8, description='e.g. {"learning_rate": [1e-4, 2e-4]}')]
    max_runs: Annotated[int, Field(ge=1, le=SWEEP_RUNS_MAX)] = 8
    max_parallel: Annotated[int, Field(ge=1, le=16)] = 2
    max_cost_usd: Annotated[float, Field(gt=0, description="for the whole sweep")] | None = None
    prune: Annotated[bool, Field(description="cancel runs 10% behind the median loss")] \
        = False
    dry_run: DryRun = False
    idempotency_key: IdempotencyKey | None = None

    @model_validator(mode="before")
    @classmethod
    def _flat_options(cls, data: Any) -> Any:
        """The base's `options` as flat parameters (what the runs' params, pruning and the ledger name); a grid
        names an option itself."""
        if not isinstance(data, dict):
            return data
        if isinstance(data.get("grid"), dict) and "options" in data["grid"]:
            raise ValueError('a grid varies one method option by name: name the option itself, e.g. {"beta": '
                             '[0.1, 0.2]}, not options')
        if isinstance(data.get("base"), dict):
            data = {**data, "base": lift_options(data["base"], list(methods.options()))}
        return data

    @model_validator(mode="after")
    def _runs(self) -> "SweepRequest":
        owned = sorted((set(self.base) | set(self.grid)) & SWEEP_OWNED)
        if owned:
            raise ValueError(f"{', '.join(owned)}: set on submit_sweep itself, not in base or grid")
        unknown = sorted((set(self.base) | set(self.grid)) - set(TrainingRequest.model_fields))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} {'is not a parameter' if len(unknown) == 1 else 'are not parameters'}"
                             " of submit_training")
        fixed = sorted(set(self.grid) & NOT_GRIDDED)
        if fixed:
            raise ValueError(f"{', '.join(fixed)} cannot vary within a sweep: put it in base")
        incomparable = sorted(set(self.grid) & PRUNE_INCOMPARABLE) if self.prune else []
        if incomparable:
            raise ValueError(f"prune compares the runs' losses step by step, and {', '.join(incomparable)} changes "
                             "what the loss measures: drop prune, or keep that parameter out of the grid")
        both = sorted(set(self.base) & set(self.grid))
        if both:
            raise ValueError(f"{', '.join(both)} is in both base and grid: keep it in one")
        repeated = sorted(name for name, values in self.grid.items()
                          if len({json.dumps(v) for v in values}) < len(values))
        if repeated:
            raise ValueError(f"grid values repeat for {', '.join(repeated)}: each run must differ")
        count = 1
        for values in self.grid.values():
            count *= len(values)
        if count > self.max_runs:
            raise ValueError(f"the grid makes {count} runs, over max_runs={self.max_runs}: drop values or raise "
                             f"max_runs (at most {SWEEP_RUNS_MAX})")
        for params in self.combinations():
            try:
                TrainingRequest(**self.base, **params)
            except ValidationError as exc:
                raise ValueError(f"the run with {params}: {readable(exc)}") from None
        return self

    def combinations(self) -> list[dict[str, Any]]:
        return [dict(zip(self.grid, combination)) for combination in product(*self.grid.values())]


JobIdText = Annotated[str, Field(min_length=1, max_length=200)]
JobId = Annotated[JobIdText, Field(description="from submit_training or list_jobs")]


class CompareRequest(Request):
    sweep_id: Annotated[str, Field(pattern=r"^sweep-[0-9a-f]{6,32}$")] | None = None
    job_ids: Annotated[list[JobIdText], Field(min_length=1, max_length=64)] | None = None
    metric: Annotated[str, Field(pattern=r"^[A-Za-z0-9_./\-]{1,64}$",
                                 description="default eval_loss, else loss")] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "CompareRequest":
        if (self.sweep_id is None) == (self.job_ids is None):
            raise ValueError("send sweep_id (from submit_sweep) or job_ids, one of the two")
        return self


class StatusRequest(Request):
    job_id: JobId
    tail: Annotated[int, Field(ge=0, le=500, description="log lines")] = 20


class LogsRequest(Request):
    job_id: JobId
    offset: Annotated[int, Field(ge=0)] = 0
    limit: Annotated[int, Field(ge=1, le=2000)] = 200


class CancelRequest(Request):
    job_id: JobId


class ListRequest(Request):
    stage: Stage | None = None
    limit: Annotated[int, Field(ge=1, le=100)] = 20


class HardwareRequest(Request):
    pass


# --- run_script: the caller's own code -------------------------------------------------------------------------
SecretName = Annotated[str, Field(pattern=SECRET_NAME_PATTERN)]
Arg = Annotated[str, Field(max_length=4096)]
def _one_requirement(value: str) -> str:
    """One `uv run --with` item: a space would make it more than a requirement (e.g. ' --index-url ...')."""
    if " " in value:
        raise ValueError(f"dependency {value[:80]!r} holds spaces: write one requirement without them, e.g. "
                         "'torch>=2.4' or 'trl[peft]==1.16.0'")
    return value


# a requirement uv takes after --with (never an option: it starts with a letter or digit; the pattern admits a
# space so that _one_requirement, not a regular expression, says what is wrong with one)
Requirement = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~*+;:/@ ]{0,255}$"),
                        AfterValidator(_one_requirement)]
Image = Annotated[str, Field(pattern=IMAGE_PATTERN)]


class ScriptRequest(Request):
    script: Annotated[str, Field(min_length=1, max_length=200_000)] | None = None  # the tool's words say what
    script_args: Annotated[list[Arg], Field(max_length=256)] = []
    folder: Annotated[str, Field(min_length=1, max_length=512),
                      AfterValidator(check_reference)] | None = None
    image: Image | None = None
    command: Annotated[list[Arg], Field(min_length=1, max_length=256)] | None = None
    dependencies: Annotated[list[Requirement], Field(max_length=64)] | None = None
    secrets: Annotated[list[SecretName], Field(max_length=32)] | None = None
    # names checked below, not by a key pattern (a patternProperties schema costs every agent turn)
    env: Annotated[dict[str, Annotated[str, Field(max_length=4096)]], Field(max_length=64)] | None = None
    flavor: Flavor | None = None
    timeout: Timeout | None = None
    backend: BackendName | None = None
    max_cost_usd: MaxCost | None = None
    idempotency_key: IdempotencyKey | None = None
    dry_run: DryRun = False

    @staticmethod
    def argv_field(given: dict) -> str:
        """Which argument list the CLI's words after `--` fill: the script's arguments, else the command."""
        return "script_args" if given.get("script") else "command"

    @model_validator(mode="after")
    def _one_program(self) -> "ScriptRequest":
        if (self.script is None) == (self.command is None):
            raise ValueError("send script (source, https URL or .py path) or command (an argv list, with image or "
                             "folder), one of the two")
        if self.command is not None and not (self.image or self.folder):
            raise ValueError("command runs in an image: send image (e.g. 'huggingface/trl'), or folder to run it in a "
                             "copy of your project")
        if self.command is not None and (self.script_args or self.dependencies):
            raise ValueError("script_args and dependencies go with script; put arguments in command itself")
        if self.folder and self.script is not None and (source_kind(self.script) != "path" or ".." in self.script
                                                        or self.script.startswith(("/", "~", "-"))):
            raise ValueError("with folder, script is the entry file's path inside it, e.g. 'train.py'")
        for name in self.env or {}:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
                raise ValueError(f"env name {name[:64]!r} is not a variable name (letters, digits, '_')")
            if looks_like_credential(name):
                raise ValueError(f"env {name!r} looks like a credential: send its name in secrets (a Jobs job gets "
                                 "HF_TOKEN as a secret always), never its value in env")
        return self
