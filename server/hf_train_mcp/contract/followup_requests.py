"""What evaluate_model and export_model take: a trained model (a job, a Hub repo or a folder), and where and
how long the follow-up job runs."""

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from hf_train_mcp.access import check_reference
from hf_train_mcp.contract.request_fields import DryRun, IdempotencyKey, MaxCost, Request, SplitName, TaskName
from hf_train_mcp.contract.results import BackendName, DatasetRef, Flavor, HubRepoId, Timeout


class FollowupShape(Request):
    """What an evaluation or an export takes besides its own options: the model, and where and how long it runs."""

    model: Annotated[str, Field(min_length=1, max_length=512), AfterValidator(check_reference)]  # the tools say what
    backend: BackendName | None = None
    flavor: Flavor | None = None
    timeout: Timeout | None = None
    max_cost_usd: MaxCost | None = None
    dry_run: DryRun = False
    idempotency_key: IdempotencyKey | None = None


class EvaluateRequest(FollowupShape):
    dataset: DatasetRef | None = None  # default: the job's eval split (evaluate_model's description says so)
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
