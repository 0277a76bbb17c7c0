"""The Backend protocol: adding a place to run jobs (a cluster, another cloud) means one new file."""

import hashlib
from dataclasses import dataclass
from typing import Protocol

from hf_train_mcp.backends.catalog import Catalog
from hf_train_mcp.errors import HubError, NotFoundError
from hf_train_mcp.rendering.script import Script


@dataclass(frozen=True)
class Words:
    """What messages outside backends/ say of a backend, so that none of them names one: its phrases, and what to
    send instead for what it cannot do."""

    job: str  # one of its jobs, as a sentence names it ("a Hugging Face job")
    the_backend: str  # the backend itself, as a sentence's subject ("the local backend")
    flavor_kind: str  # what its catalog lists, as in "no Jobs flavor fits"
    catalog: str  # its catalog, as in "not in the Jobs hardware catalog"
    instead: str  # the argument that sends a job to a backend that can do what this one cannot ("backend='hf'")
    no_nodes: str | None = None  # why a run across machines cannot run here; None when it can
    # what a retry of its jobs finds once the ledger is lost (backends.lost_ledger_note); None: say nothing
    lost_ledger: str | None = None


@dataclass(frozen=True)
class UserRun:
    """A caller's own program (run_script) instead of a rendered training script: what runs, never a secret's
    value (secrets are names; the backend reads their values when it submits)."""

    script: str | None = None  # inline source: travels inside the job, like a rendered script
    url: str | None = None  # a script URL the job fetches itself (`uv run URL`)
    entry: str | None = None  # with folder: the script's path inside it
    script_args: tuple[str, ...] = ()
    dependencies: tuple[str, ...] = ()  # `uv run --with` packages
    image: str | None = None  # None: the backend's uv image
    command: tuple[str, ...] | None = None  # an argv run as is (in the image, or in the folder's copy)
    env: tuple[tuple[str, str], ...] = ()
    secrets: tuple[str, ...] = ("HF_TOKEN",)
    folder: str | None = None  # a local project folder, synced to the account's bucket and mounted
    folder_name: str | None = None  # its place in the bucket: one per content, so two versions never mix
    withheld: tuple[str, ...] = ()  # the folder's credential files, left out of its copy (source.py copy_ignore)


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
    run: UserRun | None = None  # run_script: the caller's program (the script passed to submit is its source)
    # a run across machines (nodes/): this job is node `node_rank` of `nodes` in `network_group`
    nodes: int = 1
    node_rank: int = 0
    network_group: str | None = None
    full: bool = False  # the whole model trains (FSDP across the nodes), not adapters (data parallel)
    uploads: tuple = ()  # jobs/uploads.py Upload: local files the backend's upload() put in place, mounted read-only


@dataclass(frozen=True)
class JobRef:
    job_id: str
    url: str | None
    stage: str
    created_at: str | None
    namespace: str | None = None
    job_dir: str | None = None
    labels: dict[str, str] | None = None  # as the backend holds them (a job found by its labels)
    # A submission the Hub made more than once (a POST answered too late, then posted again): the other jobs
    # under its `submission` label, this one being the oldest, each canceled (their stage says whether it took).
    copies: tuple["JobRef", ...] = ()
    doubted: bool = False  # a POST of it went unanswered: a copy may still appear (duplicates.py looks for it)
    group: str | None = None  # the network group it joined (a node of a run across machines)
    mounts: tuple[str, ...] = ()  # where its volumes are mounted, as the backend says them (none said: unknown)


@dataclass
class JobState:
    stage: str
    message: str | None = None
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    url: str | None = None
    stale: str | None = None  # why this is the ledger's last known state, not the backend's answer


@dataclass(frozen=True)
class GpuReading:
    """One GPU of a running job, as its backend measured it just now (memory in decimal GB)."""

    index: int
    utilization_pct: float
    memory_used_gb: float
    memory_total_gb: float


@dataclass
class LogRead:
    lines: list[str]
    complete: bool = True  # False: the stream broke off or did not finish in time
    note: str | None = None


IDEMPOTENCY_LABEL = "idempotency"  # the hash of the idempotency key a job was submitted with


def key_label(key: str) -> str:
    """The label value naming an idempotency key: a hash, since labels are public to whoever sees the job."""
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def submission_labels(labels: dict[str, str], submission: str, key: str | None) -> dict[str, str]:
    """A job's labels with its one-off `submission` label (crash recovery finds it by that) and, when keyed,
    its key's hash: the backend then remembers which keys launched even if the ledger is lost."""
    out = {**labels, "submission": submission}
    if key:
        out.setdefault(IDEMPOTENCY_LABEL, key_label(key))
    return out


class JobGone(NotFoundError):
    """The backend answered that the job does not exist (deleted, or never was)."""


class SubmissionUnknown(HubError):
    """A submission failed in a way that leaves it unknown whether the job was created."""


class Backend(Protocol):
    """Where jobs run. Callers ask these traits, never the name: a new backend is one module behind this."""

    name: str
    place: str  # where its jobs run, in words ("Hugging Face Jobs")
    words: Words  # the rest of what messages say of it
    # What callers ask instead of where a backend is (this machine, the Hub's machines, another cloud):
    reads_local_paths: bool  # its jobs read this machine's files (a model or dataset may be a local path)
    bills: bool  # its jobs cost money (per minute of their flavor's price): budgets and worst cases apply
    chooses_flavor: bool  # a job runs on a flavor chosen from its catalog (else flavor() names its one hardware)
    pushes_to_hub: bool  # its jobs push their result to a Hub repo (else it stays in the job's folder)
    has_namespace: bool  # its jobs belong to an HF account (a namespace: 'namespace/job_id')
    needs_local_jobs_permission: bool  # it runs code on this machine: HTTP callers need the operator's leave
    labels_submissions: bool  # a submission carries a one-off label that `find` looks up (crash recovery)
    output_dir: str  # where a job writes its output, relative to the job's folder or absolute in its container
    default_timeout_s: int  # without an estimate to derive one from
    logs_final_when_settled: bool  # a settled job's log is already whole (the Hub's can lag its stage)
    runs_images: bool  # it runs a Docker image + command (run_script's image=); else scripts only
    cancel_note: str  # what a cancel means for the bill

    def flavor(self, *, cuda: bool) -> str | None:
        """The one hardware this backend has (this machine), or None when a flavor is chosen from the catalog."""
        ...

    def catalog(self, token: str | None, *, offline: bool) -> Catalog:
        """The flavors its jobs are priced and placed on, with their GPUs, memory and $/hour (a static method: read
        without an instance). offline: without asking anyone (a built-in table)."""
        ...

    def claims(self, job_id: str) -> bool:
        """Whether a job id that is not in the ledger can be one of this backend's."""
        ...

    def command(self, spec: JobSpec) -> list[str]:
        """What would run (shown by dry_run)."""
        ...

    def submit(self, script: Script, spec: JobSpec) -> JobRef: ...

    def find(self, submission: str, namespace: str | None) -> JobRef | None:
        """The job posted with this one-off `submission` label (a server that died mid-POST journaled it)."""
        ...

    # Optional: every job with the label, oldest first (a backend without it is taken to create no copies).
    def find_all(self, submission: str, namespace: str | None) -> list[JobRef]: ...

    def find_keyed(self, key: str, namespace: str | None) -> JobRef | None:
        """The oldest job submitted with this idempotency key: what a lost ledger forgot."""
        ...

    # Optional (a backend that runs across machines): the jobs with these labels in one network group.
    def find_group(self, group: str, labels: dict[str, str], namespace: str | None) -> list[JobRef]: ...

    def inspect(self, job_id: str, namespace: str | None) -> JobState: ...

    def logs(self, job_id: str, namespace: str | None, *, tail: int | None, finished: bool,
             upto: int | None = None) -> LogRead: ...

    def cancel(self, job_id: str, namespace: str | None) -> None: ...

    # Optional: a backend whose jobs cannot read this machine's files but can mount uploaded copies of them
    # (jobs/uploads.py plans them). dry_run: say what would be sent, send nothing. share(sent, total): bytes.
    def upload(self, uploads: list, namespace: str | None, *, dry_run: bool = False, share=None) -> list: ...

    # Optional: a backend without it reports no GPU figures (job_status.gpu stays null).
    def gpus(self, job_id: str, namespace: str | None) -> list[GpuReading] | None:
        """The GPUs of a running job now, None when it has none or they cannot be read; may raise TrainError.
        Must answer within a couple of seconds: job_status waits for it."""
        ...
