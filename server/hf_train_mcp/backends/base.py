"""The Backend protocol: adding a place to run jobs (a cluster, another cloud) means one new file."""

from dataclasses import dataclass
from typing import Protocol

from hf_train_mcp.render import Script


@dataclass(frozen=True)
class JobSpec:
    """Everything a backend needs besides the script. Never holds a secret."""

    method: str
    flavor: str
    gpus: int
    timeout_seconds: int
    labels: dict[str, str]
    dependencies: list[str]
    namespace: str | None = None
    output_bucket: str | None = None
    output_mount: str | None = None
    read_token: bool = False  # a local job reads gated/private Hub data, so it gets HF_TOKEN


@dataclass(frozen=True)
class JobRef:
    job_id: str
    url: str | None
    stage: str
    created_at: str | None
    namespace: str | None = None
    job_dir: str | None = None


@dataclass
class JobState:
    stage: str
    message: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    url: str | None = None


TERMINAL_STAGES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})


class Backend(Protocol):
    name: str

    def command(self, spec: JobSpec) -> list[str]:
        """What would run (shown by dry_run)."""
        ...

    def submit(self, script: Script, spec: JobSpec) -> JobRef: ...

    def inspect(self, job_id: str, namespace: str | None) -> JobState: ...

    def logs(self, job_id: str, namespace: str | None, *, tail: int | None, finished: bool) -> list[str]: ...

    def cancel(self, job_id: str, namespace: str | None) -> None: ...
