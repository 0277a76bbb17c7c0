"""Hugging Face Jobs through huggingface_hub: the script travels inline (base64 in the job env)."""

import base64
import logging
import os
import re
import shlex
import threading
import time
import uuid
from dataclasses import replace

from hf_train_mcp.backends.base import IDEMPOTENCY_LABEL, key_label
from hf_train_mcp.backends.base import GpuReading, JobGone, JobRef, JobSpec, JobState, LogRead, SubmissionUnknown
from hf_train_mcp.backends.base import UserRun
from hf_train_mcp.nodes import rules as multinode
from hf_train_mcp.credentials import secret_value
from hf_train_mcp.errors import TrainError
from hf_train_mcp.hub import bounded, hub_api, hub_error, scrub, status_of, streamed, transient
from hf_train_mcp.rendering.script import Script
from hf_train_mcp.user_scripts.source import sync_excludes

log = logging.getLogger(__name__)
UV_IMAGE = "ghcr.io/astral-sh/uv:python3.12-bookworm"
VENV = "/tmp/venv"
SCRIPT_ENV = "HFTM_SCRIPT_B64"
SCRIPT_PATH = "/tmp/train.py"
USER_SCRIPT = "/tmp/script.py"  # run_script's inline source, decoded in the job
FOLDER_MOUNT = "/code"  # run_script's folder: mounted read-only here, copied to WORKDIR and run there
WORKDIR = "/tmp/project"
# Linux caps one argv/env string at 128 KiB (MAX_ARG_STRLEN), "NAME=" included; keep a margin.
MAX_INLINE_CHARS = 128 * 1024 - len(SCRIPT_ENV) - 1024
LOG_DEADLINE_S = 3.0
LOG_READER_GRACE_S = 1.0  # the reader outlives job_status's wait by this at most, then ends
SUBMIT_ATTEMPTS = 3
RETRY_BACKOFF_S = 0.5
# A POST cut by the client's timeout (hub.REQUEST_TIMEOUT_S: huggingface_hub's run_job sets none) got no answer
# at all: the Hub may still be creating its job (a 34 s POST was seen), so the job list is watched this long for
# its label before the job is posted again. One slower still makes a copy, found by the label and canceled.
POST_SETTLE_S = 60.0
JOB_ID = re.compile(r"(?:[\w.-]+/)?[0-9a-fA-F]{24}")  # a Hub job id, optionally 'namespace/id'
SETTLE_POLL_S = 3.0
SYNC_DEADLINE_S = 600.0  # a project folder's first upload (a re-sync sends only what changed)
# The metrics stream sends a sample a second, but stays silent (the client waits 10 s) while a RUNNING job's
# hardware is not up yet: job_status waits this long at most, then shows no figures.
METRICS_DEADLINE_S = 2.0


def _ref(job) -> JobRef:
    network = getattr(job, "network", None)
    return JobRef(job.id, job.url, str(job.status.stage), _iso(job.created_at), namespace=job.owner.name,
                  labels=dict(job.labels or {}), group=network.group if network else None)


def _unsent(exc: BaseException) -> bool:
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


def _refused(exc: BaseException) -> bool:
    """The Hub answered the POST with a 4xx other than 408/429: a definite refusal, so it made no job."""
    status = status_of(exc)
    return status is not None and 400 <= status < 500 and not transient(exc)


def uv_argv(run: UserRun, target: str) -> list[str]:
    """`uv run` of a script, as run_uv_job builds it: every value its own argv item, never shell text."""
    return ["uv", "run", *(x for dep in run.dependencies for x in ("--with", dep)), target, *run.script_args]


def user_command(run: UserRun) -> list[str]:
    """A run_script job's command. A URL or image command runs as sent; an inline script is decoded first, a
    folder copied to a writable place first (its mount is read-only), and then the argv runs through
    `exec "$@"`, so that no argument is ever parsed by the shell."""
    target = USER_SCRIPT if run.script is not None else run.url or run.entry or ""
    argv = list(run.command) if run.command else uv_argv(run, target)
    steps = []
    if run.script is not None:
        steps.append(f'printf %s "${SCRIPT_ENV}" | base64 -d > {USER_SCRIPT}')
    if run.folder:
        steps.append(f"cp -r {FOLDER_MOUNT} {WORKDIR} && cd {WORKDIR}")
    if not steps:
        return argv
    return ["/bin/sh", "-c", " && ".join(steps) + ' && exec "$@"', "sh", *argv]


def _inline(script: Script, advice: str) -> str:
    encoded = base64.b64encode(script.text.encode()).decode()
    if len(encoded) > MAX_INLINE_CHARS:
        raise TrainError(f"the script is {len(script.text)} bytes, over the {MAX_INLINE_CHARS * 3 // 4} bytes that "
                         f"fit inline in a job; {advice}")
    return encoded


def _sync_folder(api, run: UserRun, namespace: str | None):
    """sync_job_volume's steps, with what it does not offer: the folder's history, environments and credentials
    left out (scripts.left_out), a place per content (two versions of one folder never mix in a running job),
    nothing printed (stdout is the CLI's --json answer), and a public bucket refused rather than warned about."""
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


def _iso(value) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


class HfJobsBackend:
    name = "hf"
    place = "Hugging Face Jobs"
    reads_local_paths = False
    bills = True
    catalog_from_hub = True
    pushes_to_hub = True
    has_namespace = True
    needs_local_jobs_permission = False
    labels_submissions = True
    output_dir = "/tmp/outputs"
    default_timeout_s = 3600
    logs_final_when_settled = False
    runs_images = True
    cancel_note = "cancel requested; billing stops when the job ends"

    @staticmethod
    def flavor(*, cuda: bool) -> str | None:
        return None

    @staticmethod
    def claims(job_id: str) -> bool:
        return JOB_ID.fullmatch(job_id) is not None

    def __init__(self, token: str | None = None):
        self._token = token

    def image(self, spec: JobSpec) -> str:
        return (spec.run.image if spec.run else None) or UV_IMAGE

    def command(self, spec: JobSpec) -> list[str]:
        if spec.run is not None:
            return user_command(spec.run)
        decode = f'printf %s "${SCRIPT_ENV}" | base64 -d > {SCRIPT_PATH}'
        if spec.gpus > 1 or spec.nodes > 1:
            # uv cannot hand a PEP 723 environment to `accelerate launch`: install the header's own pins into a
            # venv and launch from it, so multi-GPU jobs run exactly the versions single-GPU jobs do.
            pins = " ".join(shlex.quote(d) for d in spec.dependencies)
            launch = (multinode.shell_words(multinode.launcher_args(
                nodes=spec.nodes, rank=spec.node_rank, gpus=spec.gpus, full=spec.full,
                shared_output=bool(spec.output_bucket)))
                if spec.nodes > 1 else f"--num_processes {spec.gpus}")
            run = (f"uv venv -q {VENV} && uv pip install -q --python {VENV}/bin/python {pins} && "
                   f"exec {VENV}/bin/accelerate launch {launch} {SCRIPT_PATH}")
        else:
            run = f"exec uv run {SCRIPT_PATH}"
        return ["/bin/sh", "-c", f"{decode} && {run}"]

    def environment(self, script: Script, spec: JobSpec | None = None) -> dict[str, str]:
        if spec is not None and spec.run is not None:  # the caller's variables, bars left on
            inline = {SCRIPT_ENV: _inline(script, "send it as an https URL or in a folder")} \
                if spec.run.script is not None else {}
            return {**dict(spec.run.env), **inline, "PYTHONUNBUFFERED": "1"}
        return {SCRIPT_ENV: _inline(script, "shorten reward_code"), "PYTHONUNBUFFERED": "1",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}

    def volumes(self, spec: JobSpec) -> list:
        from huggingface_hub import Volume

        if not spec.output_bucket:
            return []
        return [Volume(type="bucket", source=spec.output_bucket, mount_path=spec.output_mount, read_only=False)]

    def secrets(self, spec: JobSpec) -> dict[str, str]:
        """HF_TOKEN always (the only way the token reaches a job), and a run_script job's other secrets by name,
        read from this server's environment."""
        out = {"HF_TOKEN": self._token}
        for name in spec.run.secrets if spec.run else ():
            if name not in out:
                out[name] = secret_value(name)
        return out

    def synced_folder(self, spec: JobSpec, api) -> list:
        """A run_script folder, synced to the account's jobs-artifacts bucket and mounted read-only, as `hf jobs run
        -v ./dir:/code` does."""
        run = spec.run
        if run is None or not run.folder:
            return []
        return [bounded("uploading the project folder to your jobs-artifacts bucket",
                        lambda: _sync_folder(api, run, spec.namespace), self._token, deadline_s=SYNC_DEADLINE_S)]

    def submit(self, script: Script, spec: JobSpec) -> JobRef:
        """POST the job; on a 5xx, 429 or network failure, look the job up by its one-off `submission` label
        before trying again, and again right before posting again, so that a failure after the job was created
        never launches it twice. A job the Hub makes anyway after both looks (a POST answered later than
        POST_SETTLE_S) carries the label too: after any second POST the label is looked up once more, the oldest
        job kept and the others canceled (JobRef.copies); `doubted` says a copy may still appear. Only a 4xx
        refusal (or a request never sent) proves there is no job: a POST that got no readable answer and whose job
        the label does not find raises SubmissionUnknown, never a plain failure (its caller keeps looking)."""
        api = hub_api(self._token)
        labels = {"submission": uuid.uuid4().hex[:12], **spec.labels}  # the core usually names it (crash recovery)
        submission, namespace = labels["submission"], spec.namespace
        env, secrets = self.environment(script, spec), self.secrets(spec)
        volumes = self.volumes(spec) + self.synced_folder(spec, api)
        unanswered, failure = 0, None  # POSTs sent without a readable answer: each may still make its job
        for attempt in range(SUBMIT_ATTEMPTS):
            if failure is not None:  # the last POST's job may have appeared while we waited
                found = self._posted(submission, namespace, failure, settle=False)
                if found:
                    return self._kept(found, namespace, doubted=unanswered > len(found))
            try:
                ref = _ref(api.run_job(
                    image=self.image(spec),
                    command=self.command(spec),
                    env=env,
                    secrets=secrets,
                    flavor=spec.flavor,
                    timeout=spec.timeout_seconds,
                    labels=labels,
                    volumes=volumes or None,
                    namespace=namespace,
                    **({"network_group": spec.network_group, "network_aliases": [multinode.node_alias(
                        spec.node_rank)]} if spec.network_group else {}),
                ))
            except TrainError:
                raise
            except Exception as exc:
                if _refused(exc) or (_unsent(exc) and not transient(exc)):
                    error = hub_error("submitting the job to Hugging Face Jobs", exc, self._token)
                    said = "" if "nothing was launched" in str(error) else "; the Hub made no job"
                    raise type(error)(f"{error}{said}") from None
                unanswered += status_of(exc) is None and not _unsent(exc)
                found = self._posted(submission, namespace, exc)
                if found:
                    return self._kept(found, namespace, doubted=unanswered > len(found))
                made = not transient(exc)  # answered 2xx with a body that is no job: posting again makes a second
                if made or attempt == SUBMIT_ATTEMPTS - 1:
                    if unanswered:
                        raise self._unknown(exc, attempt + 1) from None
                    raise hub_error(f"submitting the job ({SUBMIT_ATTEMPTS} attempts)", exc, self._token) from None
                failure = exc
                time.sleep(RETRY_BACKOFF_S * 2**attempt)
                continue
            return ref if failure is None else self._after_repost(ref, submission, namespace, unanswered)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _unknown(self, exc: BaseException, attempts: int) -> SubmissionUnknown:
        """A POST got no readable answer and its label finds no job yet: the Hub may still make it."""
        why = scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, self._token)
        return SubmissionUnknown(
            f"submitting the job ({attempts} attempt(s)) got no readable answer ({why}) and the job has not appeared "
            f"in the job list within {POST_SETTLE_S:g} s, so whether the Hub created it cannot be told yet. Nothing "
            "more is posted for it: this server keeps looking for it (list_jobs and job_status show it once the Hub "
            "does), and a retry with the same idempotency_key returns it; do not submit it again without that key")

    def _after_repost(self, ref: JobRef, submission: str, namespace: str | None, unanswered: int) -> JobRef:
        """A POST that worked after others failed: the jobs its label names now (an earlier POST's may be among
        them), the oldest kept. A list that cannot be read leaves the job doubted (looked for later)."""
        try:
            found = self.find_all(submission, namespace)
        except TrainError:
            return replace(ref, doubted=True)
        found = [*found, *([] if any(r.job_id == ref.job_id for r in found) else [ref])]
        return self._kept(found, namespace, doubted=unanswered > len(found) - 1)

    def _kept(self, found: list[JobRef], namespace: str | None, *, doubted: bool) -> JobRef:
        """The oldest of the jobs of one submission, the others canceled (their stage as the Hub then says)."""
        kept, *others = sorted(found, key=lambda ref: ref.created_at or "")
        copies = []
        for other in others:
            try:
                self.cancel(other.job_id, namespace)
                other = replace(other, stage=self.inspect(other.job_id, namespace).stage)
            except TrainError as exc:  # recorded as a copy still going: the next look cancels it
                log.warning("could not cancel job %s, a second job of submission %s: %s", other.job_id,
                             (kept.labels or {}).get("submission"), exc)
            copies.append(other)
        return replace(kept, copies=tuple(copies), doubted=doubted or bool(copies))

    def _posted(self, submission: str, namespace: str | None, exc: BaseException, *,
                settle: bool = True) -> list[JobRef]:
        """After a failed POST: the jobs it (or an earlier POST) created, if any. A POST that got no answer may
        still be creating its job, so the list is watched for POST_SETTLE_S; an answered failure (a 5xx), or a
        look right before posting again (settle=False), looks once. Raises SubmissionUnknown when the list
        cannot be read (posting again could launch twice)."""
        unanswered = status_of(exc) is None and not _unsent(exc)
        deadline = time.monotonic() + (POST_SETTLE_S if settle and unanswered else 0.0)
        while True:
            try:
                found = self.find_all(submission, namespace)
            except TrainError:
                why = scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, self._token)
                raise SubmissionUnknown(
                    f"submitting failed ({why}) and the job list cannot be read to tell whether it was created. "
                    "Nothing more is posted for it: this server keeps looking for it (list_jobs and job_status show "
                    "it once the Hub does), and a retry with the same idempotency_key returns it; do not submit it "
                    "again without that key") from None
            if found or time.monotonic() >= deadline:
                return found
            time.sleep(min(SETTLE_POLL_S, max(0.0, deadline - time.monotonic())))

    def find(self, submission: str, namespace: str | None) -> JobRef | None:
        """The job posted with this `submission` label, if the Hub has it (retries, crash recovery): the oldest,
        should the Hub hold copies."""
        found = self.find_all(submission, namespace)
        return found[0] if found else None

    def find_all(self, submission: str, namespace: str | None) -> list[JobRef]:
        """Every job with this `submission` label, oldest first."""
        return sorted(self.labeled({"submission": submission}, namespace), key=lambda ref: ref.created_at or "")

    def find_keyed(self, key: str, namespace: str | None) -> JobRef | None:
        """The oldest job submitted with this idempotency key, by its label: what a lost ledger forgot."""
        found = self.labeled({IDEMPOTENCY_LABEL: key_label(key)}, namespace)
        return min(found, key=lambda ref: ref.created_at or "") if found else None

    def find_group(self, group: str, labels: dict[str, str], namespace: str | None) -> list[JobRef]:
        """The jobs with these labels in one network group (the nodes of a run), oldest first."""
        found = [ref for ref in self.labeled(labels, namespace) if ref.group == group]
        return sorted(found, key=lambda ref: ref.created_at or "")

    def labeled(self, labels: dict[str, str], namespace: str | None) -> list[JobRef]:
        api = hub_api(self._token)
        found = bounded("looking up a submission", lambda: list(api.list_jobs(labels=labels, namespace=namespace)),
                        self._token)
        return [_ref(job) for job in found]

    def inspect(self, job_id: str, namespace: str | None) -> JobState:
        from huggingface_hub.errors import JobNotFoundError

        def read():
            try:
                return hub_api(self._token).inspect_job(job_id=job_id, namespace=namespace)
            except JobNotFoundError:
                raise JobGone(f"the Hub has no job {job_id!r} in namespace {namespace!r}") from None

        job = bounded(f"reading job {job_id}", read, self._token)
        return JobState(
            stage=str(job.status.stage.value if hasattr(job.status.stage, "value") else job.status.stage),
            message=job.status.message,
            created_at=_iso(job.created_at),
            started_at=_iso(job.started_at),
            finished_at=_iso(job.finished_at),
            url=job.url,
        )

    def logs(self, job_id: str, namespace: str | None, *, tail: int | None, finished: bool,
             upto: int | None = None) -> LogRead:
        """At most LOG_DEADLINE_S of log reading (a silent running job must not stall job_status), stopping after
        `upto` lines; a stream the Hub drops returns what was read, marked incomplete."""
        lines: list[str] = []
        problem: list[str] = []
        api = hub_api(self._token)

        waited = LOG_DEADLINE_S * (2 if finished else 1)

        def read() -> None:
            for line in api.fetch_job_logs(job_id=job_id, namespace=namespace, tail=tail):
                lines.append(line)
                if upto is not None and len(lines) >= upto:
                    return

        def pump() -> None:
            try:  # a running job's stream sends keep-alives that reset the read timeout: end it at a deadline
                streamed(read, deadline_s=waited + LOG_READER_GRACE_S)
            except Exception as exc:  # logs are best effort; the stage came from inspect
                problem.append(f"the log stream broke off ({type(exc).__name__}) after {len(lines)} lines")

        reader = threading.Thread(target=pump, name=f"logs-{job_id}", daemon=True)
        reader.start()
        # A finished job's stream closes at once; a running one may stay silent until the client's 5 s timeout.
        reader.join(waited)
        if reader.is_alive() and finished:
            problem.append(f"the log stream did not finish within {LOG_DEADLINE_S * 2:.0f} s")
        elif reader.is_alive() and upto is not None and len(lines) < upto:
            problem.append(f"only {len(lines)} lines arrived within {LOG_DEADLINE_S:.0f} s; call again for more")
        return LogRead(list(lines), complete=not problem, note=scrub(problem[0], self._token) if problem else None)

    def cancel(self, job_id: str, namespace: str | None) -> None:
        bounded(f"canceling job {job_id}", lambda: hub_api(self._token).cancel_job(job_id=job_id, namespace=namespace),
                self._token, retry=False)

    def gpus(self, job_id: str, namespace: str | None) -> list[GpuReading] | None:
        """The job's GPUs now: the first sample of the Jobs metrics stream (follow=False), read in the calling
        thread (telemetry's one reader per job) and ended METRICS_DEADLINE_S after it starts, however many
        keep-alives the stream sends (a header that never comes: the client's 10 s read timeout). A finished
        job's 406 and a 500 give no sample (huggingface_hub tolerates both)."""
        api = hub_api(self._token)
        try:
            events = streamed(lambda: list(api.fetch_job_metrics(job_id=job_id, namespace=namespace)),
                              deadline_s=METRICS_DEADLINE_S)
        except Exception as exc:
            raise hub_error(f"reading GPU metrics of job {job_id}", exc, self._token) from None
        return gpu_readings(events[0]) if events else None
