"""Hugging Face Jobs through huggingface_hub: the script travels inline (base64 in the job env)."""

import base64
import shlex
import threading
import time
import uuid

from hf_train_mcp.backends.base import JobRef, JobSpec, JobState
from hf_train_mcp.errors import TrainError
from hf_train_mcp.hub import hub_api, hub_error, scrub
from hf_train_mcp.render import Script

UV_IMAGE = "ghcr.io/astral-sh/uv:python3.12-bookworm"
VENV = "/tmp/venv"
SCRIPT_ENV = "HFTM_SCRIPT_B64"
SCRIPT_PATH = "/tmp/train.py"
# Linux caps one argv/env string at 128 KiB (MAX_ARG_STRLEN), "NAME=" included; keep a margin.
MAX_INLINE_CHARS = 128 * 1024 - len(SCRIPT_ENV) - 1024
LOG_DEADLINE_S = 3.0
SUBMIT_ATTEMPTS = 3
RETRY_BACKOFF_S = 0.5


def _transient(exc: Exception) -> bool:
    """Worth retrying: a 5xx or 429 answer, or no answer at all (connection, timeout, protocol errors)."""
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is not None:
        return status >= 500 or status == 429
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"TransportError", "ConnectError", "TimeoutException", "NetworkError", "RemoteProtocolError",
                         "ConnectionError", "OSError"})


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


class HfJobsBackend:
    name = "hf"

    def __init__(self, token: str | None):
        self._token = token

    def image(self, spec: JobSpec) -> str:
        return UV_IMAGE

    def command(self, spec: JobSpec) -> list[str]:
        decode = f'printf %s "${SCRIPT_ENV}" | base64 -d > {SCRIPT_PATH}'
        if spec.gpus > 1:
            # uv cannot hand a PEP 723 environment to `accelerate launch`: install the header's own pins into a
            # venv and launch from it, so multi-GPU jobs run exactly the versions single-GPU jobs do.
            pins = " ".join(shlex.quote(d) for d in spec.dependencies)
            run = (f"uv venv -q {VENV} && uv pip install -q --python {VENV}/bin/python {pins} && "
                   f"exec {VENV}/bin/accelerate launch --num_processes {spec.gpus} {SCRIPT_PATH}")
        else:
            run = f"exec uv run {SCRIPT_PATH}"
        return ["/bin/sh", "-c", f"{decode} && {run}"]

    def environment(self, script: Script) -> dict[str, str]:
        encoded = base64.b64encode(script.text.encode()).decode()
        if len(encoded) > MAX_INLINE_CHARS:
            raise TrainError(
                f"the rendered script is {len(script.text)} bytes, over the {MAX_INLINE_CHARS * 3 // 4} bytes that fit "
                "inline in a job; shorten reward_code"
            )
        return {SCRIPT_ENV: encoded, "PYTHONUNBUFFERED": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}

    def volumes(self, spec: JobSpec) -> list:
        from huggingface_hub import Volume

        if not spec.output_bucket:
            return []
        return [Volume(type="bucket", source=spec.output_bucket, mount_path=spec.output_mount, read_only=False)]

    def submit(self, script: Script, spec: JobSpec) -> JobRef:
        """POST the job; on a 5xx, 429 or network failure, look the job up by its one-off `submission` label
        before trying again, so that a failure after the job was created never launches it twice."""
        api = hub_api(self._token)
        labels = {**spec.labels, "submission": uuid.uuid4().hex[:12]}
        for attempt in range(SUBMIT_ATTEMPTS):
            try:
                job = api.run_job(
                    image=self.image(spec),
                    command=self.command(spec),
                    env=self.environment(script),
                    secrets={"HF_TOKEN": self._token},
                    flavor=spec.flavor,
                    timeout=spec.timeout_seconds,
                    labels=labels,
                    volumes=self.volumes(spec) or None,
                    namespace=spec.namespace,
                )
                break
            except TrainError:
                raise
            except Exception as exc:
                if not _transient(exc):
                    raise hub_error("submitting the job to Hugging Face Jobs", exc, self._token) from None
                job = self._find_submission(api, spec.namespace, labels["submission"], exc)
                if job is not None:
                    break
                if attempt == SUBMIT_ATTEMPTS - 1:
                    raise hub_error(f"submitting the job ({SUBMIT_ATTEMPTS} attempts)", exc, self._token) from None
                time.sleep(RETRY_BACKOFF_S * 2**attempt)
        return JobRef(job.id, job.url, str(job.status.stage), _iso(job.created_at), namespace=job.owner.name)

    def _find_submission(self, api, namespace: str | None, submission: str, cause: Exception):
        try:
            found = list(api.list_jobs(labels={"submission": submission}, namespace=namespace))
        except Exception:
            raise TrainError(
                f"submitting failed ({scrub(str(cause).splitlines()[0], self._token)}) and the job list cannot be "
                f"read to tell whether it was created: check list_jobs (label submission={submission}) before "
                "submitting again"
            ) from None
        return found[0] if found else None

    def inspect(self, job_id: str, namespace: str | None) -> JobState:
        from huggingface_hub.errors import JobNotFoundError

        try:
            job = hub_api(self._token).inspect_job(job_id=job_id, namespace=namespace)
        except JobNotFoundError:
            raise TrainError(
                f"no job {job_id!r} in namespace {namespace!r}: pass a job_id from submit_training or list_jobs"
            ) from None
        except Exception as exc:
            raise hub_error(f"reading job {job_id}", exc, self._token) from None
        return JobState(
            stage=str(job.status.stage.value if hasattr(job.status.stage, "value") else job.status.stage),
            message=job.status.message,
            created_at=_iso(job.created_at),
            started_at=_iso(job.started_at),
            finished_at=_iso(job.finished_at),
            url=job.url,
        )

    def logs(self, job_id: str, namespace: str | None, *, tail: int | None, finished: bool) -> list[str]:
        """At most LOG_DEADLINE_S of log reading: a silent running job must not stall job_status."""
        lines: list[str] = []
        api = hub_api(self._token)

        def pump() -> None:
            try:
                for line in api.fetch_job_logs(job_id=job_id, namespace=namespace, tail=tail):
                    lines.append(line)
            except Exception:  # logs are best effort; the stage came from inspect
                pass

        reader = threading.Thread(target=pump, name=f"logs-{job_id}", daemon=True)
        reader.start()
        # A finished job's stream closes at once; a running one may stay silent until the client's 5 s timeout.
        reader.join(LOG_DEADLINE_S * (2 if finished else 1))
        return list(lines)

    def cancel(self, job_id: str, namespace: str | None) -> None:
        try:
            hub_api(self._token).cancel_job(job_id=job_id, namespace=namespace)
        except Exception as exc:
            raise hub_error(f"canceling job {job_id}", exc, self._token) from None
