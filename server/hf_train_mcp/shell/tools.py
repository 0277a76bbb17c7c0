"""Every tool once: its name, CLI command, title, the description the agent reads, request and result models,
and the core call. The MCP shell (app.py, its tools registered by tool_handlers.py) and the CLI (cli_parser.py,
cli.py) are both generated from this list; shell/tools_list.json stores what the MCP shell lists."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from hf_train_mcp.models.files import one_read_each

from hf_train_mcp.contract.requests import (
    CancelRequest,
    CompareRequest,
    EstimateRequest,
    EvaluateRequest,
    ExportRequest,
    HardwareRequest,
    ListRequest,
    LogsRequest,
    Request,
    ScriptRequest,
    StatusRequest,
    SweepRequest,
    TrainingRequest,
    ValidateRequest,
)
from hf_train_mcp.contract.results import (
    CancelResult,
    Comparison,
    CostEstimate,
    DatasetReport,
    HardwareList,
    JobList,
    JobReport,
    LogPage,
    Submission,
    SweepResult,
)


@dataclass(frozen=True)
class Hooks:
    """What a shell offers a long call: progress messages, and a confirmation before money is spent."""

    progress: Callable[[str], None] | None = None
    confirm: Callable[[Any], None] | None = None


@dataclass(frozen=True)
class ToolSpec:
    name: str
    command: str
    title: str
    description: str
    request: type[Request]
    result: type[BaseModel]
    run: Callable[[Any, Any, Hooks], BaseModel]
    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True
    progress: bool = False  # takes long enough (Hub reads, tokenizers, submission) to report progress
    launches: str | None = None  # the kind of paid job it can start: a big worst case is confirmed with the user
    aliases: tuple[str, ...] = field(default=())

    def call(self, core: Any, req: Any, hooks: Hooks) -> BaseModel:
        """The tool's work, each model file it needs read once however many steps ask (models/files.py)."""
        with one_read_each():
            return self.run(core, req, hooks)


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "validate_dataset", "validate", "Validate a training dataset",
        "Check a dataset (Hub id, file or image folder) for a method: format, errors by row, the fixing "
        "column_mapping, classes, token stats.",
        ValidateRequest, DatasetReport, lambda core, req, hooks: core.validate_dataset(req, progress=hooks.progress),
        progress=True,
    ),
    ToolSpec(
        "estimate_cost", "estimate", "Estimate time, cost and memory",
        "Hours, dollars, memory fit and a safe timeout on Jobs hardware (no flavor: the cheapest fit); "
        "measure=True times real steps as a job.",
        EstimateRequest, CostEstimate,
        lambda core, req, hooks: core.estimate_cost(req, progress=hooks.progress, confirm=hooks.confirm),
        read_only=False, progress=True, launches="probe",  # measure=True launches a (short, paid) job
    ),
    ToolSpec(
        "submit_training", "submit", "Submit a training job",
        "Train on HF Jobs (needs hub_model_id; local files go to your private bucket) or here (backend='local'); "
        "returns job_id and URLs at once. "
        "Validates data; flavor/timeout default to the cheapest safe fit.",
        TrainingRequest, Submission,
        lambda core, req, hooks: core.submit_training(req, progress=hooks.progress, confirm=hooks.confirm),
        read_only=False, idempotent=False, progress=True, launches="train",
    ),
    ToolSpec(
        "evaluate_model", "evaluate", "Evaluate a model",
        "Evaluate a training job_id (its held-out split), Hub model or folder as a job: the method's "
        "metric, lm-eval `tasks`, base vs tuned; results in job_status last_metrics.",
        EvaluateRequest, Submission,
        lambda core, req, hooks: core.evaluate_model(req, progress=hooks.progress, confirm=hooks.confirm),
        read_only=False, idempotent=False, progress=True, launches="evaluate",
    ),
    ToolSpec(
        "export_model", "export", "Export a model",
        "Export as a job: 'merged' merges a LoRA/QLoRA adapter into its base; 'gguf' converts and quantizes "
        "(q4_k_m default) for llama.cpp/Ollama.",
        ExportRequest, Submission,
        lambda core, req, hooks: core.export_model(req, progress=hooks.progress, confirm=hooks.confirm),
        read_only=False, idempotent=False, progress=True, launches="export",
    ),
    ToolSpec(
        "run_script", "run", "Run your own script",
        "Your code as a job (local: as the server's user): script (uv source, https URL, stdio .py/folder entry) "
        "or image+command; [tool.hf-jobs] fills gaps.",
        ScriptRequest, Submission,
        lambda core, req, hooks: core.run_script(req, progress=hooks.progress, confirm=hooks.confirm),
        read_only=False, idempotent=False, progress=True, launches="script",
    ),
    ToolSpec(
        "submit_sweep", "sweep", "Submit a hyperparameter sweep",
        "A run per `grid` combination over `base` (submit_training arguments); the summed "
        "worst case must fit max_cost_usd; max_parallel at once.",
        SweepRequest, SweepResult,
        lambda core, req, hooks: core.submit_sweep(req, progress=hooks.progress, confirm=hooks.confirm),
        read_only=False, idempotent=False, progress=True, launches="sweep",
    ),
    ToolSpec(
        "compare_runs", "compare", "Compare runs",
        "Rank a sweep's runs (or job_ids) by one metric, evaluations included; best_job_id.",
        CompareRequest, Comparison, lambda core, req, hooks: core.compare_runs(req),
    ),
    ToolSpec(
        "job_status", "status", "Job status",
        "A job's stage, progress, metrics, log tail, error and next_step; never waits (subscribe to "
        "hf-train://jobs/{job_id}).",
        StatusRequest, JobReport, lambda core, req, hooks: core.job_status(req.job_id, req.tail),
    ),
    ToolSpec(
        "job_logs", "logs", "Job logs", "A page of a job's log lines from `offset`; next_offset continues.",
        LogsRequest, LogPage, lambda core, req, hooks: core.job_logs(req.job_id, req.offset, req.limit),
    ),
    ToolSpec(
        "cancel_job", "cancel", "Cancel a job",
        "Stop a job (pushed checkpoints stay) or a whole sweep (sweep_id).",
        CancelRequest, CancelResult, lambda core, req, hooks: core.cancel_job(req.job_id),
        read_only=False, destructive=True,
    ),
    ToolSpec(
        "list_jobs", "jobs", "List training jobs", "Jobs launched through this server, newest first.",
        ListRequest, JobList, lambda core, req, hooks: core.list_jobs(req.stage, req.limit),
    ),
    ToolSpec(
        "list_hardware", "hardware", "List Jobs hardware",
        "Jobs flavors: GPU, count, memory per GPU, bf16 and $/hour.",
        HardwareRequest, HardwareList, lambda core, req, hooks: core.list_hardware(),
    ),
)
BY_NAME = {spec.name: spec for spec in TOOLS}
BY_COMMAND = {spec.command: spec for spec in TOOLS}
