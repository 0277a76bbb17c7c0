"""What the job tools take (job_status, job_logs, cancel_job, list_jobs), and list_hardware (nothing)."""

from typing import Annotated

from pydantic import Field

from hf_train_mcp.contract.request_fields import Request
from hf_train_mcp.contract.results import Stage

JobIdText = Annotated[str, Field(min_length=1, max_length=200)]
JobId = Annotated[JobIdText, Field(description="from submit_training or list_jobs")]


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
