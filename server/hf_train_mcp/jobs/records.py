"""The rows of the ledger: a job (or a reservation, a submission being posted, a node, a copy), a sweep and a
sweep's run, and the prefixes that mark what a job row stands for."""

import json
import os
import uuid
from dataclasses import dataclass
from typing import Any

from hf_train_mcp.stages import SETTLED_STAGES

PENDING = "pending:"  # job_id prefix of an idempotency-key reservation
SUBMITTING = "submitting:"  # job_id prefix of a submission being posted (see Ledger.journal)
UNKNOWN = "UNKNOWN"  # a journal entry's stage once its POST ended without telling whether the job was made
COPY_KIND = "copy"  # a second job of one submission (duplicates.py), recorded under the job it copies


def claim_id() -> str:
    """A one-off owner id for a reservation or journal entry; the pid lets others see its server died."""
    return f"{os.getpid()}-{uuid.uuid4().hex}"


@dataclass
class JobRecord:
    job_id: str
    backend: str
    namespace: str | None
    method: str | None
    model: str | None
    dataset: str | None
    request_json: str
    script_sha256: str
    script_path: str | None
    job_dir: str | None
    stage: str
    flavor: str | None
    timeout: str | None
    job_url: str | None
    hub_model_id: str | None
    model_url: str | None
    trackio_url: str | None
    output_bucket: str | None
    estimated_hours: float | None
    estimated_cost_usd: float | None
    effective_batch_size: int | None
    warnings_json: str
    idempotency_key: str | None
    created_at: str
    finished_at: str | None = None
    worst_case_cost_usd: float | None = None
    # the owner of a pending reservation (one server's submit call); on a run's record, the server still posting
    # its other nodes (node_ranks.py: a node missing while that server lives is not missing yet)
    claim: str | None = None
    output_dir: str | None = None  # where the job writes checkpoints (its own folder of a bucket, or locally)
    started_at: str | None = None
    message: str | None = None  # the backend's last word on the stage ("training finished", an error)
    kind: str = "train"  # train | probe (a measurement for estimate_cost) | evaluate | export
    measured_json: str | None = None  # the preflight's HFTM_PROBE numbers, kept once seen (logs scroll on)
    parent_job_id: str | None = None  # the training job an evaluation or export works on (a node: its run)
    node_rank: int | None = None  # a node of a run across machines (kind "node"; the run's own record is rank 0)
    asked_json: str | None = None  # the call as its caller sent it: a retry with its key is held to it (retries.py)
    secrets_json: str | None = None  # the names (never the values) of the secrets the job was handed
    submission: str | None = None  # the one-off label its POST carried: any other job with it is a copy
    doubted: int | None = 0  # 1: a POST of it went unanswered, so a copy may appear (duplicates.py)
    stopped: str | None = None  # why this server stopped the run (node_ranks.py): later looks say it, not the cancel
    # the local files it reads from the account's bucket (jobs/uploads.py Upload.recorded, with its bucket): a
    # follow-up mounts the same copies, and the content's sha256 says which bytes it read
    uploads_json: str | None = None

    @property
    def secret_names(self) -> tuple[str, ...]:
        """The secrets the job was handed, however they were chosen (a ledger from before they were recorded: the
        call's): their values are masked in its logs."""
        if self.secrets_json is not None:
            return tuple(json.loads(self.secrets_json))
        return tuple(json.loads(self.request_json).get("secrets") or ())

    @property
    def settled(self) -> bool:
        """Ended for good: its stage, times and logs no longer change, so they are served from here."""
        return self.stage in SETTLED_STAGES

    @property
    def request(self) -> dict[str, Any]:
        return json.loads(self.request_json)

    @property
    def warnings(self) -> list[str]:
        return json.loads(self.warnings_json)

    @property
    def uploads(self) -> list[dict[str, Any]]:
        return json.loads(self.uploads_json) if self.uploads_json else []

    @property
    def measured(self) -> dict | None:
        return json.loads(self.measured_json) if self.measured_json else None


@dataclass
class SweepRecord:
    sweep_id: str
    idempotency_key: str | None
    created_at: str
    backend: str
    request_json: str
    max_parallel: int
    prune: int
    state: str  # running (runs queued or active) | finished | canceled
    estimated_cost_usd: float | None
    worst_case_cost_usd: float | None
    trackio_url: str | None
    warnings_json: str = "[]"
    access_json: str | None = None  # the caller's rights (access.Access.recorded): later runs are planned under them


@dataclass
class SweepRunRecord:
    sweep_id: str
    idx: int
    params_json: str
    request_json: str  # the run's TrainingRequest, flavor, timeout and budget pinned when the sweep was approved
    state: str  # queued | launching | launched | pruned | failed | canceled
    job_id: str | None = None
    note: str | None = None
    history_json: str = "[]"  # [[step, total_steps, loss], ...] as the supervisor saw them
    estimated_cost_usd: float | None = None
    worst_case_cost_usd: float | None = None
    saved_usd: float | None = None
    claimed_at: str | None = None  # when a launch was claimed (state launching)

    @property
    def params(self) -> dict[str, Any]:
        return json.loads(self.params_json)

    @property
    def history(self) -> list[list[float]]:
        return json.loads(self.history_json)
