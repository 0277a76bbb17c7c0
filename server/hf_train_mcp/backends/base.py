"""The Backend protocol: adding a place to run jobs (a cluster, another cloud) means one new file."""

from dataclasses import dataclass
from typing import Protocol

from hf_train_mcp.errors import TrainError
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
    labels: dict[str, str] | None = None  # as the backend holds them (a job found by its labels)


@dataclass
class JobState:
    stage: str
    message: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    url: str | None = None
    stale: str | None = None  # why this is the ledger's last known state, not the backend's answer


TERMINAL_STAGES = frozenset({"COMPLETED", "CANCELED", "ERROR", "DELETED"})


@dataclass
class LogRead:
    lines: list[str]
    complete: bool = True  # False: the stream broke off or did not finish in time
    note: str | None = None


class JobGone(TrainError):
    """The backend answered that the job does not exist (deleted, or never was)."""


class SubmissionUnknown(TrainError):
    """A submission failed in a way that leaves it unknown whether the job was created."""


class Backend(Protocol):
    """Where jobs run. Callers ask these traits, never the name: a new backend is one module behind this."""

    name: str
    place: str  # where its jobs run, in words ("Hugging Face Jobs")
    runs_here: bool  # on this machine: it reads local files and costs nothing; else on the Hub's machines, which
    # read only the Hub, push their result there and bill per minute
    output_dir: str  # where a job writes its output, relative to the job's folder or absolute in its container
    default_timeout_s: int  # without an estimate to derive one from
    logs_final_when_settled: bool  # a settled job's log is already whole (the Hub's can lag its stage)
    cancel_note: str  # what a cancel means for the bill

    def flavor(self, *, cuda: bool) -> str | None:
        """The one hardware this backend has (this machine), or None when a flavor is chosen from the catalog."""
        ...

    def claims(self, job_id: str) -> bool:
        """Whether a job id that is not in the ledger can be one of this backend's."""
        ...

    def command(self, spec: JobSpec) -> list[str]:
        """What would run (shown by dry_run)."""
        ...

    def submit(self, script: Script, spec: JobSpec) -> JobRef: ...

    def inspect(self, job_id: str, namespace: str | None) -> JobState: ...

    def logs(self, job_id: str, namespace: str | None, *, tail: int | None, finished: bool,
             upto: int | None = None) -> LogRead: ...

    def cancel(self, job_id: str, namespace: str | None) -> None: ...
