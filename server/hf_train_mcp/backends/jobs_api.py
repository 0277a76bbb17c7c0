"""What the Hugging Face Jobs API answers, read into this package's types: a job's reference, its GPUs' metrics,
how a failed POST reads (never sent, or refused), and a project folder synced to the account's bucket."""

import re

from hf_train_mcp.backends.base import GpuReading, JobRef, UserRun
from hf_train_mcp.backends.jobs_commands import FOLDER_MOUNT
from hf_train_mcp.errors import TrainError
from hf_train_mcp.hub import status_of, transient
from hf_train_mcp.user_scripts.source import sync_excludes

JOB_ID = re.compile(r"(?:[\w.-]+/)?[0-9a-fA-F]{24}")  # a Hub job id, optionally 'namespace/id'


def iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def job_ref(job) -> JobRef:
    network = getattr(job, "network", None)
    return JobRef(job.id, job.url, str(job.status.stage), iso(job.created_at), namespace=job.owner.name,
                  labels=dict(job.labels or {}), group=network.group if network else None,
                  mounts=tuple(v.mount_path for v in getattr(job, "volumes", None) or ()))


def unsent(exc: BaseException) -> bool:
    """The request never reached the Hub, so it cannot have created a job: the connection was refused, or
    huggingface_hub refused the job's arguments before posting them (in `_create_job_spec`)."""
    if {cls.__name__ for cls in type(exc).__mro__} & {"ConnectError", "ConnectionRefusedError"}:
        return True
    frame = exc.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code.co_name == "_create_job_spec":
            return True
        frame = frame.tb_next
    return False


def refused(exc: BaseException) -> bool:
    """The Hub answered the POST with a 4xx other than 408/429: a definite refusal, so it made no job."""
    status = status_of(exc)
    return status is not None and 400 <= status < 500 and not transient(exc)


def sync_folder(api, run: UserRun, namespace: str | None):
    """sync_job_volume's steps, with what it does not offer: the folder's history, environments and credentials
    left out (user_scripts/source.py sync_excludes), a place per content (two versions of one folder never mix in a
    running job), nothing printed (stdout is the CLI's --json answer), and a public bucket refused rather than
    warned about."""
    from huggingface_hub import Volume, constants

    owner = namespace or api.whoami()["name"]
    bucket = f"{owner}/{constants.HF_JOBS_ARTIFACTS_BUCKET_NAME}"
    api.create_bucket(bucket_id=bucket, exist_ok=True, private=True)
    if not api.bucket_info(bucket_id=bucket).private:
        raise TrainError(f"your bucket {bucket} is public: a project folder synced there would be readable by anyone. "
                         f"Make it private ({api.endpoint}/buckets/{bucket}), then call again. Nothing was launched.")
    api.sync_bucket(run.folder, f"hf://buckets/{bucket}/{run.folder_name}", exclude=sync_excludes(run.withheld),
                    quiet=True)
    return Volume(type="bucket", source=bucket, mount_path=FOLDER_MOUNT, path=run.folder_name, read_only=True)


def gpu_readings(event: dict) -> list[GpuReading] | None:
    """A Jobs metrics event's GPUs (`gpus: {id: {utilization, memory_used_bytes, memory_total_bytes}}`), in
    the order the Hub lists them; None for a CPU flavor's empty map or a malformed event."""
    gpus = event.get("gpus")
    if not isinstance(gpus, dict) or not gpus:
        return None
    try:
        return [GpuReading(index=i, utilization_pct=float(g.get("utilization") or 0),
                           memory_used_gb=round(float(g.get("memory_used_bytes") or 0) / 1e9, 2),
                           memory_total_gb=round(float(g.get("memory_total_bytes") or 0) / 1e9, 2))
                for i, g in enumerate(gpus.values())]
    except (AttributeError, TypeError, ValueError):
        return None
