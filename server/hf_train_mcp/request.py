"""What callers send to each tool, validated before anything is rendered or launched. One model per tool: its
fields are the MCP tool's parameters and the CLI command's options (declared here, nowhere else)."""

import ast
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hf_train_mcp.schemas import (
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

RewardName = Literal["think_format", "length", "accuracy"]
# ASCII classes, not \w: Hub names are ASCII, and pydantic-core compiles a Unicode \w into a large automaton
# (~15 ms per pattern at import, most of the server's start-up)
SplitName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-\[\]:%]{1,64}$")]
Label = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\- ]{1,96}$")]
# Declared once, used by every tool that launches a job
MaxCost = Annotated[float, Field(gt=0, description="refuse a job whose timeout x price is higher")]
DryRun = Annotated[bool, Field(description="render and plan only: nothing launched")]
IdempotencyKey = Annotated[str, Field(min_length=1, max_length=128)]
TaskName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,96}$")]


# Top-level names of the rendered GRPO script: user imports must not rebind them (a test keeps this in sync).
RESERVED_NAMES = frozenset({
    "json", "os", "sys", "CONFIG", "is_main_process", "emit", "completion_text", "think_format_reward",
    "length_reward", "final_answer", "accuracy_reward", "reward_functions", "load_training_data", "to_role_content",
    "precision", "require_gpu", "model_init_kwargs", "quantization_config", "upcast_trainable", "peft_config",
    "load_tokenizer", "common_args", "resume_checkpoint", "status_callback", "build_trainer", "main", "time",
    "SCRIPT_STARTED", "rows_per_step", "preflight", "card_text", "_hours", "_dollars", "_evaluation_section",
    "base_license", "write_card", "read_card", "EVALUATION_MARK",
})


def _plain_annotation(node: ast.expr) -> bool:
    """Type names, dotted names, subscripts, `X | Y` and constants: nothing that calls code when evaluated."""
    match node:
        case ast.Constant() | ast.Name():
            return True
        case ast.Attribute(value=value):
            return _plain_annotation(value)
        case ast.Subscript(value=value, slice=index):
            return _plain_annotation(value) and _plain_annotation(index)
        case ast.Tuple(elts=items) | ast.List(elts=items):
            return all(_plain_annotation(i) for i in items)
        case ast.BinOp(left=left, op=ast.BitOr(), right=right):
            return _plain_annotation(left) and _plain_annotation(right)
    return False


def check_reward_code(source: str) -> str:
    """User reward code must be one function definition (plus imports): nothing that runs at import time."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"reward_code does not parse: {exc.msg} (line {exc.lineno})") from None
    functions = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                raise ValueError("reward_code: `from __future__` imports must open a file and this code is pasted "
                                 "into the middle of the script; remove them")
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                same_module = isinstance(node, ast.Import) and alias.asname is None  # `import os` rebinds os to os
                if (bound in RESERVED_NAMES and not same_module) or alias.name == "*":
                    raise ValueError(f"reward_code: `import {alias.name}` would replace the script's own "
                                     f"`{bound}`; import it under another name")
                if bound == "reward":
                    raise ValueError("reward_code: an import may not bind `reward`, the function that is checked")
            continue
        if isinstance(node, ast.FunctionDef):
            if node.decorator_list:
                raise ValueError("reward_code: decorators run at import time; remove them")
            for arg in [*node.args.defaults, *node.args.kw_defaults]:
                if arg is not None and not isinstance(arg, ast.Constant):
                    raise ValueError("reward_code: default values must be constants (they run at import time)")
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg,
                         node.args.kwarg]
            for annotation in [node.returns, *(a.annotation for a in arguments if a is not None)]:
                if annotation is not None and not _plain_annotation(annotation):
                    raise ValueError("reward_code: annotations run at import time, so they may only name types "
                                     "(e.g. `completions: list[str]`), not call anything")
            functions.append(node.name)
            continue
        raise ValueError(
            f"reward_code line {node.lineno}: only imports and one `def reward(completions, **kwargs)` are allowed "
            "at module level"
        )
    if functions != ["reward"]:
        raise ValueError(
            "reward_code must define exactly one function named `reward(completions, **kwargs)` returning a list "
            f"of floats; found {functions or 'none'}"
        )
    return source


class Request(BaseModel):
    """What one tool takes: its fields are the tool's parameters (MCP schema) and the CLI command's options."""

    model_config = ConfigDict(extra="forbid")


class RunShape(Request):
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
    packing: Annotated[bool, Field(description="SFT: pack rows into max_length sequences")] = False
    num_generations: Annotated[int, Field(ge=2, le=64, description="GRPO: completions per prompt")] | None = None
    max_completion_length: Annotated[int, Field(ge=8, le=32_768, description="GRPO")] | None = None
    dataset_config: Annotated[str, Field(max_length=128)] | None = None
    dataset_split: SplitName = "train"
    backend: BackendName | None = None
    max_cost_usd: MaxCost | None = None

    @model_validator(mode="after")
    def _method_shape(self) -> "RunShape":
        if self.method != "grpo" and (self.num_generations or self.max_completion_length):
            raise ValueError("num_generations and max_completion_length apply to method='grpo' only")
        if self.packing and self.method != "sft":
            raise ValueError("packing applies to method='sft' only")
        return self


class ValidateRequest(Request):
    dataset: DatasetRef
    method: Method = "sft"
    split: SplitName = "train"
    config: Annotated[str, Field(max_length=128, description="Hub dataset config")] | None = None
    column_mapping: ColumnMapping | None = None
    model: Annotated[str, Field(min_length=1, max_length=512, description="tokenizer to count tokens with")] | None = None
    max_length: Annotated[int, Field(ge=32, le=131_072)] | None = None


class EstimateRequest(RunShape):
    dataset: DatasetRef | None = None
    num_examples: Annotated[int, Field(ge=1)] | None = None
    tokens_per_example: Annotated[float, Field(gt=0, description="mean tokens per row")] | None = None
    measure: Annotated[bool, Field(description="run a few real steps on the flavor as a job (needs dataset)")] = False


class TrainingRequest(RunShape):
    dataset: DatasetRef
    hub_model_id: Annotated[HubRepoId, Field(description="'owner/name' to push to (backend='hf')")] | None = None
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
    beta: Annotated[float, Field(gt=0, le=10, description="DPO")] | None = None
    reward_funcs: Annotated[list[RewardName], Field(description="GRPO: built-in rewards")] | None = None
    reward_code: Annotated[str, Field(max_length=20_000,
                                      description="GRPO: source of `def reward(completions, **kw)`")] | None = None
    resume_from: Annotated[str, Field(max_length=256, description="job id or Hub repo with last-checkpoint/")] | None = None
    output_bucket: Annotated[HubRepoId, Field(description="bucket mounted as output_dir")] | None = None
    dry_run: DryRun = False
    preflight: Annotated[bool, Field(description="time a few steps first; stop on OOM or too slow")] = False
    idempotency_key: IdempotencyKey | None = None
    skip_validation: bool = False

    @field_validator("reward_code")
    @classmethod
    def _reward_code(cls, value: str | None) -> str | None:
        return None if value is None else check_reward_code(value)

    @model_validator(mode="after")
    def _method_options(self) -> "TrainingRequest":
        if self.method != "grpo" and (self.reward_funcs or self.reward_code):
            raise ValueError("reward_funcs and reward_code apply to method='grpo' only")
        if self.method != "dpo" and self.beta is not None:
            raise ValueError("beta applies to method='dpo' only")
        if self.use_liger_kernel and self.method == "reward":
            raise ValueError("use_liger_kernel does not work with method='reward' (Liger's fused cross-entropy "
                             "replaces the classification head's forward); leave it off")
        if self.peft == "full" and any(
            v is not None for v in (self.lora_r, self.lora_alpha, self.lora_dropout, self.lora_target_modules)
        ):
            raise ValueError("lora_* options need peft='lora' or 'qlora', not 'full'")
        return self


class FollowupShape(Request):
    """What an evaluation or an export takes besides its own options: the model, and where and how long it runs."""

    model: Annotated[str, Field(min_length=1, max_length=512,
                                description="job_id of a finished training job, Hub id, or local folder")]
    backend: BackendName | None = None
    flavor: Flavor | None = None
    timeout: Timeout | None = None
    max_cost_usd: MaxCost | None = None
    dry_run: DryRun = False
    idempotency_key: IdempotencyKey | None = None


class EvaluateRequest(FollowupShape):
    dataset: Annotated[DatasetRef, Field(description="held-out data (default: the job's eval split)")] | None = None
    split: SplitName | None = None
    tasks: Annotated[list[TaskName], Field(max_length=16, description="lm-eval tasks, e.g. hellaswag")] | None = None
    num_samples: Annotated[int, Field(ge=1, le=100_000, description="rows (and items per task) to score")] | None = None


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


JobId = Annotated[str, Field(min_length=1, max_length=200, description="from submit_training or list_jobs")]


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
