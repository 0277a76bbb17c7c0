"""What a sweep needs of the jobs it runs: submit one (keyed by its run), read its status and stage, cancel it,
recover a submission its launcher left unfinished, and the ledger that holds the sweep and its runs. service.Core
is one; a test may hand in its own."""

from typing import Protocol

from hf_train_mcp.access import Access
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.contract.results import CancelResult, JobReport, Submission
from hf_train_mcp.jobs.ledger import JobRecord, Ledger


class JobControl(Protocol):
    access: Access

    @property
    def ledger(self) -> Ledger: ...

    def submit_training(self, req: TrainingRequest, *, sweep_run: bool = False) -> Submission: ...

    def for_caller(self, access: Access) -> "JobControl": ...

    def job_status(self, job_id: str, tail: int = 20) -> JobReport: ...

    def job_stage(self, job_id: str) -> str: ...

    def cancel_job(self, job_id: str) -> CancelResult: ...

    def recover_submission(self, key: str) -> JobRecord | None: ...
