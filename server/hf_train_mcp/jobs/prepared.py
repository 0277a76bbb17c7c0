"""A submission planned and rendered but not launched: what a confirmation shows and what a launch sends."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hf_train_mcp.access import question_name, script_reference

Progress = Callable[[str], None]  # a phase of a long call, for MCP progress notifications


class Share(str):
    """A progress message that also says how far along its phase is (bytes uploaded of bytes to upload): a
    shell shows it as a bar, or as the numbers of an MCP progress notification."""

    done: int
    total: int

    def __new__(cls, text: str, done: int, total: int) -> "Share":
        share = super().__new__(cls, text)
        share.done, share.total = done, total
        return share


@dataclass
class Prepared:
    """A submission planned and rendered, not yet launched (a training, measurement, evaluation or export)."""

    req: Any  # the tool's request: TrainingRequest, EvaluateRequest or ExportRequest
    backend_name: str
    kind: str
    namespace: str | None
    plan: Any
    script: Any
    spec: Any
    model_url: str | None
    trackio_url: str | None
    common: dict
    model: str  # what the ledger lists: the model trained, evaluated or exported
    dataset: str | None
    reads: list[tuple[str, str]]  # (repo type, id) the job reads from the Hub: a local job's token depends on them
    parent_job_id: str | None = None  # the training job an evaluation or export works on
    uploads: list = field(default_factory=list)  # jobs/uploads.py Upload: local files the job reads, sent at launch
    new_upload_bytes: int | None = None  # what of them the bucket lacks, once asked (the upload question's figure)
    asked: str | None = None  # the call as its caller sent it (retries.asked_json)

    @property
    def worst_case_cost_usd(self) -> float:
        return self.plan.worst_case_cost_usd or 0.0

    @property
    def nodes(self) -> int:
        """The machines the job runs on (each bills the flavor's price)."""
        return getattr(self.plan, "nodes", 1)

    @property
    def summary(self) -> str:
        """What the job does, for a confirmation question: names as references (question_name), never free text."""
        if self.kind == "script":
            return f"a script job of {script_reference(self.plan.source)}"
        what = {"evaluate": "an evaluation", "export": f"a {self.plan.config.get('format')} export",
                "probe": f"a {self.plan.method.upper()} measurement job"}.get(
            self.kind, f"a {self.plan.method.upper()} job")
        return f"{what} of {question_name(self.model)}"
