"""The tool contract in one place: parameter types shared by tools and core, and every result model."""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

from hf_train_mcp import backends, methods
from hf_train_mcp.access import check_reference
from hf_train_mcp.data.report import DatasetIssue, DatasetReport, TokenStats  # noqa: F401  (the contract's)
from hf_train_mcp.durations import parse_duration
from hf_train_mcp.backends.jobs_hardware import FALLBACK_FLAVORS
from hf_train_mcp.stages import Stage

Method = Literal[methods.NAMES]  # type: ignore[valid-type]  # the registry's methods (methods/)
Peft = Literal["lora", "qlora", "full"]
BackendName = Literal[backends.NAMES]  # the registry's: a new backend is named in no list here

# The offline hardware table names every flavor (a test holds it to huggingface_hub.JobHardware); it is plain
# data, so `tools/list` stays import-light.
FLAVORS: tuple[str, ...] = tuple(name for name, *_ in FALLBACK_FLAVORS)


def _check_flavor(value: str) -> str:
    if value not in FLAVORS and value not in backends.catalog_flavors():
        raise ValueError(f"unknown flavor {value!r}; send one of: {', '.join(FLAVORS)}")
    return value


def _check_timeout(value: str | int) -> int:
    return parse_duration(value)


_HUB_ID = r"^[A-Za-z0-9_.-]{1,96}/[A-Za-z0-9_.-]{1,96}$"  # ASCII: see contract/request_fields.py on \w


def _check_hub_id(value: str) -> str:
    owner, name = value.split("/")
    for part in (owner, name):
        if part[0] in ".-" or part.endswith((".", "-")) or ".." in part or "--" in part:
            raise ValueError(f"{value!r} is not a valid Hub repo id: use 'owner/name' (letters, digits, '-', '_', '.')")
    return value


def _check_mapping(value: dict[str, str]) -> dict[str, str]:
    for target, source in value.items():
        if not target.isidentifier() or len(target) > 64 or not 0 < len(source) <= 128:
            raise ValueError(f"column_mapping entry {target!r}: {source!r} is not 'target_column': 'source_column'")
    return value

ModelRef = Annotated[str, Field(min_length=1, max_length=512, description="Hub model id or local path"),
                     AfterValidator(check_reference)]
DatasetRef = Annotated[str, Field(min_length=1, max_length=512, description="Hub dataset id or local file/folder"),
                       AfterValidator(check_reference)]
HubRepoId = Annotated[str, Field(pattern=_HUB_ID, description="'owner/name'"), AfterValidator(_check_hub_id)]
Flavor = Annotated[str, AfterValidator(_check_flavor), Field(description="Jobs hardware, e.g. 'a10g-large'")]
Timeout = Annotated[
    int,
    BeforeValidator(_check_timeout),
    Field(description="'90m', '2h', '1h30m' or seconds", json_schema_extra={"type": ["string", "integer"]}),
]
ColumnMapping = Annotated[
    dict[str, str],
    AfterValidator(_check_mapping),
    Field(description="target <- source, e.g. {'prompt': 'question'}"),
]


class Progress(BaseModel):
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    percent: float | None = None


class Submission(BaseModel):
    job_id: str | None = Field(description="handle for job_status; null on dry_run")
    backend: BackendName
    stage: Stage | None
    job_url: str | None
    hub_model_id: str | None
    model_url: str | None
    trackio_url: str | None
    flavor: str
    timeout: str
    estimated_hours: float | None
    estimated_cost_usd: float | None
    worst_case_cost_usd: float | None = Field(description="the most it can bill: timeout x hourly price; 0 local")
    effective_batch_size: int
    script_sha256: str
    warnings: list[str]
    script: str | None = Field(default=None, description="dry_run only: the full rendered script")
    command: list[str] | None = Field(default=None, description="dry_run only: what would run")
    node_job_ids: list[str] | None = Field(default=None, description="a run across nodes: every node's job, rank "
                                           "0 first (job_id is rank 0's and stands for the run)")
    uploads: list[dict[str, Any]] | None = Field(default=None, description="local files put in your private bucket "
                                                 "for the job: bucket, path, files, bytes, new_bytes, delete")


class NodeStage(BaseModel):
    rank: int
    job_id: str | None = Field(description="null: never submitted")
    stage: str


class GpuFigure(BaseModel):  # a figure the reading lacks, or could not be (negative, over 100 %): null
    index: int
    utilization_pct: float | None
    memory_used_gb: float | None
    memory_total_gb: float | None


class JobReport(BaseModel):
    job_id: str
    backend: BackendName
    stage: Stage
    message: str | None = None
    job_url: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    progress: Progress = Field(default_factory=Progress)
    last_metrics: dict[str, float] = Field(default_factory=dict)
    log_tail: list[str] = Field(default_factory=list)
    error: str | None = None
    trackio_url: str | None = None
    model_url: str | None = None
    next_step: str
    stale: bool = Field(default=False, description="the Hub did not answer: last known state from the ledger")
    nodes: list[NodeStage] | None = Field(default=None, description="a run across nodes: each node's stage")
    gpu: list[GpuFigure] | None = None  # while it runs on GPUs; null when unknown


class JobSummary(BaseModel):
    job_id: str
    backend: BackendName
    stage: Stage
    created_at: str | None = None
    model: str | None = None
    method: str | None = None
    hub_model_id: str | None = None
    job_url: str | None = None
    stale: bool = False


class JobList(BaseModel):
    jobs: list[JobSummary]


class LogPage(BaseModel):
    job_id: str
    offset: int
    lines: list[str]
    next_offset: int
    finished: bool = Field(description="true when the job has ended and no more lines will come")
    note: str | None = None


class CancelResult(BaseModel):
    job_id: str
    stage: Stage
    message: str


class FlavorOption(BaseModel):
    flavor: str
    fits: bool
    hours: float
    cost_usd: float


class Measurement(BaseModel):
    """A measurement job's state, and what it measured once finished."""

    job_id: str
    stage: Stage | None
    job_url: str | None = None
    seconds_per_step: float | None = None
    tokens_per_second: float | None = None
    peak_memory_gb: float | None = None
    device: str | None = None
    error: str | None = None


class CostEstimate(BaseModel):
    flavor: str
    fits: bool
    memory_gb_needed: float
    gpu_memory_gb: float
    hours: float
    cost_usd: float
    recommended_timeout: str
    steps: int
    effective_batch_size: int
    alternatives: list[FlavorOption] = Field(description="other flavors, cheapest first")
    fastest: FlavorOption | None = None
    assumptions: dict[str, Any]
    warnings: list[str]
    measurement: Measurement | None = Field(default=None, description="measure=True: the measurement job")


class HardwareRow(BaseModel):
    flavor: str
    gpu: str | None
    gpus: int
    gpu_memory_gb: float
    bf16: bool
    usd_per_hour: float


class HardwareList(BaseModel):
    source: str = Field(description="'live' (Hub API) or 'built-in' (offline table)")
    flavors: list[HardwareRow]


SweepRunState = Literal["queued", "launching", "launched", "pruned", "failed", "canceled"]


class SweepRun(BaseModel):
    index: int
    params: dict[str, Any]
    state: SweepRunState
    job_id: str | None = None
    stage: Stage | None = None
    job_url: str | None = None
    model_url: str | None = None
    worst_case_cost_usd: float | None = None
    note: str | None = None


class SweepResult(BaseModel):
    sweep_id: str | None = Field(description="for compare_runs; null on dry_run")
    backend: BackendName
    jobs: list[SweepRun]
    estimated_cost_usd: float | None
    worst_case_cost_usd: float = Field(description="every run at its timeout")
    max_parallel: int
    trackio_url: str | None
    warnings: list[str]
    next_step: str


class RunRow(BaseModel):
    job_id: str | None
    stage: Stage | None
    params: dict[str, Any]
    metrics: dict[str, float]
    state: SweepRunState | None = None
    progress_percent: float | None = None


class Comparison(BaseModel):
    metric: str
    lower_is_better: bool
    best_job_id: str | None
    runs: list[RunRow] = Field(description="best first; runs without the metric last")
    sweep_state: Literal["running", "finished", "canceled"] | None = None
    saved_usd: float | None = Field(default=None, description="what pruning saved (estimate)")
    warnings: list[str]
    next_step: str
