"""What the rooms (sweeps, submission, launching, following, estimating) may ask of the core that holds them.

A Protocol, so that a room depends on this and never on service.py: the facade imports the rooms, no room
imports the facade, and no two rooms import each other in a circle (a room reaches another through the host).
"""

from typing import Any, Protocol

from hf_train_mcp.access import Access
from hf_train_mcp.backends.base import Backend
from hf_train_mcp.ledger import JobRecord, Ledger
from hf_train_mcp.schemas import CancelResult, JobReport, Submission


class Host(Protocol):
    access: Access

    @property
    def ledger(self) -> Ledger: ...

    def backend(self, name: str) -> Backend: ...

    def preview(self, req: Any, *, kind: str = "train", progress: Any = None) -> Any: ...

    def submit_training(self, req: Any, *, kind: str = "train", progress: Any = None, confirm: Any = None,
                        sweep_run: bool = False) -> Submission: ...

    def job_status(self, job_id: str, tail: int = 20) -> JobReport: ...

    def job_stage(self, job_id: str) -> str: ...

    def cancel_job(self, job_id: str) -> CancelResult: ...

    def recover_submission(self, key: str) -> JobRecord | None: ...

    def check_sweep_access(self, sweep: Any) -> None: ...
