"""The MCP shell: tool declarations only. Work happens in service.Core; fixable errors become ToolError."""

from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import Tool as MCPTool
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from hf_train_mcp.access import STDIO, Access
from hf_train_mcp.compact_schema import compact
from hf_train_mcp.errors import TrainError
from hf_train_mcp.schemas import (
    BackendName,
    CancelResult,
    ColumnMapping,
    CostEstimate,
    DatasetRef,
    DatasetReport,
    Flavor,
    HubRepoId,
    JobList,
    JobReport,
    LogPage,
    Method,
    ModelRef,
    Peft,
    Stage,
    Submission,
    Timeout,
)

T = TypeVar("T")

INSTRUCTIONS = """\
Fine-tune models with TRL (SFT, DPO, GRPO, reward modeling) on Hugging Face Jobs, or on this machine when
there is no HF account (backend='local'). Typical flow: validate_dataset -> estimate_cost -> submit_training
(dry_run=True first to review the script) -> job_status now and then (it never waits). Jobs keep running
after this conversation; the model is pushed to hub_model_id with checkpoints along the way."""

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True)


def _readable(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "request"
        parts.append(f"{where}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


class CompactMCPServer(MCPServer):
    """MCPServer whose tools/list carries compacted schemas (arguments are still validated by the full models)."""

    async def list_tools(self) -> list[MCPTool]:
        return [
            tool.model_copy(update={
                "input_schema": compact(tool.input_schema),
                "output_schema": compact(tool.output_schema, output=True) if tool.output_schema else None,
            })
            for tool in await super().list_tools()
        ]


def build_server(core: Any | None = None, access: Access = STDIO) -> MCPServer:
    """The MCP server. `core` is created lazily so that tools/list never touches disk, network or heavy imports;
    `access` is what its callers may do (everything over stdio; what the operator allowed over HTTP)."""
    mcp = CompactMCPServer("hf-train-mcp", instructions=INSTRUCTIONS)
    state: dict[str, Any] = {"core": core}

    def get_core() -> Any:
        if state["core"] is None:
            from hf_train_mcp.service import Core

            state["core"] = Core(access=access)
        return state["core"]

    async def call(work: Callable[[Any], T]) -> T:
        try:
            return await anyio.to_thread.run_sync(lambda: work(get_core()))
        except TrainError as exc:
            raise ToolError(str(exc)) from None
        except ValidationError as exc:
            raise ToolError(f"invalid arguments: {_readable(exc)}") from None

    @mcp.tool(title="Validate a training dataset", annotations=READ_ONLY)
    async def validate_dataset(
        dataset: DatasetRef,
        method: Method = "sft",
        split: str = "train",
        config: Annotated[str | None, Field(description="Hub dataset config")] = None,
        column_mapping: ColumnMapping | None = None,
        model: Annotated[str | None, Field(description="tokenizer to count tokens with")] = None,
        max_length: Annotated[int | None, Field(ge=32)] = None,
    ) -> DatasetReport:
        """Check a dataset (Hub id via the viewer API, no download; or local .jsonl/.json/.csv/.parquet)
        against a TRL method: format, errors/warnings with rows, suggested_column_mapping for submit_training."""
        return await call(lambda c: c.validate_dataset(dataset, method, split=split, config=config,
                                                       column_mapping=column_mapping, model=model,
                                                       max_length=max_length))

    @mcp.tool(title="Estimate time, cost and memory", annotations=READ_ONLY)
    async def estimate_cost(
        model: ModelRef,
        method: Method = "sft",
        peft: Peft = "lora",
        dataset: DatasetRef | None = None,
        num_examples: Annotated[int | None, Field(ge=1)] = None,
        tokens_per_example: Annotated[float | None, Field(gt=0, description="mean tokens per row")] = None,
        flavor: Flavor | None = None,
        epochs: Annotated[float | None, Field(gt=0, le=100)] = None,
        max_steps: Annotated[int | None, Field(ge=1)] = None,
        max_length: Annotated[int | None, Field(ge=32)] = None,
        per_device_batch_size: Annotated[int | None, Field(ge=1)] = None,
        gradient_accumulation: Annotated[int | None, Field(ge=1)] = None,
        packing: bool = False,
        num_generations: Annotated[int | None, Field(ge=2, description="GRPO only")] = None,
        max_completion_length: Annotated[int | None, Field(ge=8, description="GRPO only")] = None,
        measure: Annotated[bool, Field(description="run a short measurement job on the flavor (needs dataset)")] = False,
        backend: BackendName | None = None,
    ) -> CostEstimate:
        """Hours, dollars, GPU memory fit and recommended_timeout on Jobs hardware. Without flavor: the
        cheapest flavor that fits, plus the fastest. measure=True launches a few real training steps on the
        flavor; call again with the same arguments when it finished to get the measured estimate."""
        from hf_train_mcp.planning import Hyper

        hyper = Hyper(method=method, peft=peft, epochs=epochs, max_steps=max_steps, max_length=max_length,
                      per_device_batch_size=per_device_batch_size, gradient_accumulation=gradient_accumulation,
                      packing=packing, num_generations=num_generations, max_completion_length=max_completion_length)
        return await call(lambda c: c.estimate_cost(model=model, hyper=hyper, flavor=flavor, dataset=dataset,
                                                    num_examples=num_examples, tokens_per_example=tokens_per_example,
                                                    measure=measure, backend=backend))

    @mcp.tool(
        title="Submit a training job",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                    open_world_hint=True),
    )
    async def submit_training(
        model: ModelRef,
        dataset: DatasetRef,
        method: Method = "sft",
        hub_model_id: HubRepoId | None = None,
        flavor: Flavor | None = None,
        timeout: Timeout | None = None,
        peft: Peft = "lora",
        epochs: Annotated[float | None, Field(gt=0, le=100)] = None,
        max_steps: Annotated[int | None, Field(ge=1)] = None,
        learning_rate: Annotated[float | None, Field(gt=0, lt=1)] = None,
        max_length: Annotated[int | None, Field(ge=32)] = None,
        per_device_batch_size: Annotated[int | None, Field(ge=1)] = None,
        gradient_accumulation: Annotated[int | None, Field(ge=1)] = None,
        column_mapping: ColumnMapping | None = None,
        eval_split: Annotated[float | None, Field(gt=0, lt=0.5, description="held-out fraction")] = None,
        dataset_config: str | None = None,
        dataset_split: str = "train",
        trackio_space_id: HubRepoId | None = None,
        project: str | None = None,
        run_name: str | None = None,
        private: bool = True,
        packing: bool = False,
        lora_r: Annotated[int | None, Field(ge=1)] = None,
        lora_alpha: Annotated[int | None, Field(ge=1)] = None,
        lora_dropout: Annotated[float | None, Field(ge=0, lt=1)] = None,
        lora_target_modules: list[str] | None = None,
        use_liger_kernel: bool = False,
        chat_template: Literal["chatml"] | None = None,
        seed: int = 42,
        save_steps: Annotated[int | None, Field(ge=1)] = None,
        save_total_limit: Annotated[int | None, Field(ge=1)] = None,
        beta: Annotated[float | None, Field(gt=0, description="DPO only")] = None,
        num_generations: Annotated[int | None, Field(ge=2, description="GRPO only")] = None,
        max_completion_length: Annotated[int | None, Field(ge=8, description="GRPO only")] = None,
        reward_funcs: Annotated[
            list[str] | None, Field(description="GRPO: think_format, length, accuracy (vs answer/solution)")
        ] = None,
        reward_code: Annotated[str | None, Field(description="GRPO: source of `def reward(completions, **kw)`")] = None,
        resume_from: Annotated[str | None, Field(description="previous job id or Hub repo with last-checkpoint/")] = None,
        output_bucket: Annotated[HubRepoId | None, Field(description="bucket mounted as output_dir")] = None,
        backend: BackendName | None = None,
        dry_run: bool = False,
        preflight: Annotated[bool, Field(description="a few timed steps first; stops early on OOM or too slow")] = False,
        max_cost_usd: Annotated[float | None, Field(gt=0, description="cap on timeout x price")] = None,
        idempotency_key: str | None = None,
        skip_validation: bool = False,
    ) -> Submission:
        """Start a TRL training job on HF Jobs (backend='hf': needs hub_model_id, write token) or this machine
        (backend='local'). Returns job_id and URLs at once. Validates the dataset first; flavor/timeout default
        to the cheapest fitting flavor and a safe timeout. dry_run=True: script and command, nothing launched."""
        arguments = {k: v for k, v in locals().items() if v is not None and k not in ("call", "get_core")}
        return await call(lambda c: c.submit_training(_request(arguments)))

    @mcp.tool(title="Job status", annotations=READ_ONLY)
    async def job_status(
        job_id: Annotated[str, Field(min_length=1, max_length=200)],
        tail: Annotated[int, Field(ge=0, le=500, description="log lines to include")] = 20,
    ) -> JobReport:
        """Stage, progress, last metrics, log tail, error and next_step of a job. Quick; never waits."""
        return await call(lambda c: c.job_status(job_id, tail))

    @mcp.tool(title="Job logs", annotations=READ_ONLY)
    async def job_logs(
        job_id: Annotated[str, Field(min_length=1, max_length=200)],
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=2000)] = 200,
    ) -> LogPage:
        """A page of a job's log lines from `offset`; page on with next_offset."""
        return await call(lambda c: c.job_logs(job_id, offset, limit))

    @mcp.tool(
        title="Cancel a job",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                    open_world_hint=True),
    )
    async def cancel_job(job_id: Annotated[str, Field(min_length=1, max_length=200)]) -> CancelResult:
        """Stop a running or scheduled job (billing stops). Checkpoints already pushed are kept."""
        return await call(lambda c: c.cancel_job(job_id))

    @mcp.tool(title="List training jobs", annotations=READ_ONLY)
    async def list_jobs(stage: Stage | None = None, limit: Annotated[int, Field(ge=1, le=100)] = 20) -> JobList:
        """Jobs submitted through this server (both backends), newest first."""
        return await call(lambda c: c.list_jobs(stage, limit))

    @mcp.resource("hf-train://templates/{method}", mime_type="text/x-python")
    def template(method: str) -> str:
        """The Jinja2 template a method's training script is rendered from."""
        from hf_train_mcp.render import template_source

        if method not in ("sft", "dpo", "grpo", "reward", "_base"):
            raise ValueError("method must be one of sft, dpo, grpo, reward, _base")
        return template_source(method)

    return mcp


def _request(arguments: dict[str, Any]):
    from hf_train_mcp.request import TrainingRequest

    return TrainingRequest(**arguments)
