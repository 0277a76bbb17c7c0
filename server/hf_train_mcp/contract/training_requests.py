"""What validate_dataset, estimate_cost and submit_training take: a dataset to check, and the shape of a run
(model, method, PEFT, sizes, hardware) that an estimate and a submission share, declared once."""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from hf_train_mcp import engines, methods
from hf_train_mcp.access import check_reference
from hf_train_mcp.contract.request_fields import (DryRun, IdempotencyKey, Label, MaxCost, Request, SplitName,
                                                  lift_options, with_method_options)
from hf_train_mcp.contract.results import (BackendName, ColumnMapping, DatasetRef, Flavor, HubRepoId, Method,
                                           ModelRef, Peft, Timeout)
from hf_train_mcp.nodes import rules as node_rules


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
    nodes: Annotated[int, Field(ge=2, le=node_rules.MAX_NODES)] | None = None
    engine: engines.EngineName | None = None  # None: TRL (no default in the schema: it costs every agent turn)

    @model_validator(mode="before")
    @classmethod
    def _lift_options(cls, data: Any) -> Any:
        return lift_options(data, [name for name in methods.options() if name in cls.model_fields])

    @model_validator(mode="after")
    def _method_options(self) -> "_RunShape":
        methods.check_request(self)
        node_rules.check_request(self)
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
