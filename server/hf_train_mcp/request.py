"""What callers send to each tool, validated before anything is rendered or launched. One model per tool: its
fields are the MCP tool's parameters and the CLI command's options (declared here, nowhere else)."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from hf_train_mcp import methods

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

# ASCII classes, not \w: Hub names are ASCII, and pydantic-core compiles a Unicode \w into a large automaton
# (~15 ms per pattern at import, most of the server's start-up)
SplitName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-\[\]:%]{1,64}$")]
Label = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\- ]{1,96}$")]
# Declared once, used by every tool that launches a job
MaxCost = Annotated[float, Field(gt=0, description="refuse a job whose timeout x price is higher")]
DryRun = Annotated[bool, Field(description="render and plan only: nothing launched")]
IdempotencyKey = Annotated[str, Field(min_length=1, max_length=128)]
TaskName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,96}$")]


class Request(BaseModel):
    """What one tool takes: its fields are the tool's parameters (MCP schema) and the CLI command's options."""

    model_config = ConfigDict(extra="forbid")


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

    @model_validator(mode="after")
    def _method_options(self) -> "_RunShape":
        methods.check_request(self)
        return self


RunShape = with_method_options(_RunShape, sizing_only=True)


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


class _TrainingRequest(RunShape):
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
    resume_from: Annotated[str, Field(max_length=256, description="job id or Hub repo with last-checkpoint/")] | None = None
    output_bucket: Annotated[HubRepoId, Field(description="bucket mounted as output_dir")] | None = None
    dry_run: DryRun = False
    preflight: Annotated[bool, Field(description="time a few steps first; stop on OOM or too slow")] = False
    idempotency_key: IdempotencyKey | None = None
    skip_validation: bool = False

    @model_validator(mode="after")
    def _lora_options(self) -> "_TrainingRequest":
        if self.peft == "full" and any(
            v is not None for v in (self.lora_r, self.lora_alpha, self.lora_dropout, self.lora_target_modules)
        ):
            raise ValueError("lora_* options need peft='lora' or 'qlora', not 'full'")
        return self


TrainingRequest = with_method_options(_TrainingRequest, sizing_only=False)


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
