"""Hugging Face Jobs through huggingface_hub: the script travels inline (base64 in the job env)."""

import logging
import threading
import time
import uuid
from dataclasses import replace

from hf_train_mcp.backends import jobs_commands, jobs_uploads
from hf_train_mcp.backends.base import IDEMPOTENCY_LABEL, key_label
from hf_train_mcp.backends.base import GpuReading, JobGone, JobRef, JobSpec, JobState, LogRead, SubmissionUnknown
from hf_train_mcp.backends.base import Words
from hf_train_mcp.backends.catalog import Catalog
from hf_train_mcp.backends.jobs_api import JOB_ID, gpu_readings, iso, job_ref, refused, sync_folder, unsent
from hf_train_mcp.backends.jobs_hardware import jobs_catalog
from hf_train_mcp.credentials import secret_value
from hf_train_mcp.errors import TrainError
from hf_train_mcp.hub import bounded, hub_api, hub_error, scrub, status_of, streamed, transient
from hf_train_mcp.nodes import rendezvous
from hf_train_mcp.rendering.script import Script

log = logging.getLogger(__name__)
LOG_DEADLINE_S = 3.0
LOG_READER_GRACE_S = 1.0  # the reader outlives job_status's wait by this at most, then ends
SUBMIT_ATTEMPTS = 3
RETRY_BACKOFF_S = 0.5
# A POST cut by the client's timeout (hub.REQUEST_TIMEOUT_S: huggingface_hub's run_job sets none) got no answer
# at all: the Hub may still be creating its job (a 34 s POST was seen), so the job list is watched this long for
# its label before the job is posted again. One slower still makes a copy, found by the label and canceled.
POST_SETTLE_S = 60.0
SETTLE_POLL_S = 3.0
SYNC_DEADLINE_S = 600.0  # a project folder's first upload (a re-sync sends only what changed)
# The metrics stream sends a sample a second, but stays silent (the client waits 10 s) while a RUNNING job's
# hardware is not up yet: job_status waits this long at most, then shows no figures.
METRICS_DEADLINE_S = 2.0


class HfJobsBackend:
    name = "hf"
    place = "Hugging Face Jobs"
    words = Words(job="a Hugging Face job", the_backend="the hf backend", flavor_kind="Jobs flavor",
                  catalog="the Jobs hardware catalog", instead="backend='local'",
                  lost_ledger="a retry of a Hugging Face job or sweep with the same idempotency_key finds its jobs "
                              "on the Hub again")
    reads_local_paths = False
    bills = True
    chooses_flavor = True
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
    def catalog(token: str | None, *, offline: bool) -> Catalog:
        return jobs_catalog(token, offline=offline)

    @staticmethod
    def claims(job_id: str) -> bool:
        return JOB_ID.fullmatch(job_id) is not None

    def __init__(self, token: str | None = None):
        self._token = token

    def image(self, spec: JobSpec) -> str:
        return jobs_commands.image(spec)

    def command(self, spec: JobSpec) -> list[str]:
        return jobs_commands.command(spec)

    def environment(self, script: Script, spec: JobSpec | None = None) -> dict[str, str]:
        return jobs_commands.environment(script, spec)

    def volumes(self, spec: JobSpec) -> list:
        from huggingface_hub import Volume

        if not spec.output_bucket:
            return []
        return [Volume(type="bucket", source=spec.output_bucket, mount_path=spec.output_mount, read_only=False)]

    def upload(self, uploads: list, namespace: str | None, *, dry_run: bool = False, share=None) -> list:
        """The caller's local files into the account's private jobs-artifacts bucket (jobs_uploads.send)."""
        return jobs_uploads.send(hub_api(self._token), uploads, namespace, token=self._token, dry_run=dry_run,
                                 share=share)

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
                        lambda: sync_folder(api, run, spec.namespace), self._token, deadline_s=SYNC_DEADLINE_S)]

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
        post = self._poster(api, script, spec, labels)
        unanswered, failure = 0, None  # POSTs sent without a readable answer: each may still make its job
        for attempt in range(SUBMIT_ATTEMPTS):
            if failure is not None:  # the last POST's job may have appeared while we waited
                found = self._posted(submission, namespace, failure, settle=False)
                if found:
                    return self._kept(found, namespace, doubted=unanswered > len(found))
            try:
                ref = post()
            except TrainError:
                raise
            except Exception as exc:
                unanswered += status_of(exc) is None and not unsent(exc)
                found = self._failed_post(exc, submission, namespace, attempt=attempt, unanswered=unanswered)
                if found:
                    return self._kept(found, namespace, doubted=unanswered > len(found))
                failure = exc
                time.sleep(RETRY_BACKOFF_S * 2**attempt)
                continue
            return ref if failure is None else self._after_repost(ref, submission, namespace, unanswered)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _poster(self, api, script: Script, spec: JobSpec, labels: dict[str, str]):
        """One POST of the job, as often as submit needs it: its environment, secrets and volumes made once."""
        env, secrets = self.environment(script, spec), self.secrets(spec)
        volumes = self.volumes(spec) + self.synced_folder(spec, api)
        if spec.uploads:  # sent by upload() before: mounted read-only where the script reads them
            volumes += jobs_uploads.volumes(jobs_uploads.bucket_of(api, spec.namespace), list(spec.uploads))
        network = ({"network_group": spec.network_group, "network_aliases": [rendezvous.node_alias(spec.node_rank)]}
                   if spec.network_group else {})
        return lambda: job_ref(api.run_job(
            image=self.image(spec), command=self.command(spec), env=env, secrets=secrets, flavor=spec.flavor,
            timeout=spec.timeout_seconds, labels=labels, volumes=volumes or None, namespace=spec.namespace,
            **network))

    def _failed_post(self, exc: BaseException, submission: str, namespace: str | None, *, attempt: int,
                     unanswered: int) -> list[JobRef]:
        """After a POST that raised: the jobs it (or an earlier POST) made, else [] when it may be posted again;
        raises when it may not (a refusal, an answer that is no job, the last attempt)."""
        if refused(exc) or (unsent(exc) and not transient(exc)):
            error = hub_error("submitting the job to Hugging Face Jobs", exc, self._token, instead=self.words.instead)
            said = "" if "nothing was launched" in str(error) else "; the Hub made no job"
            raise type(error)(f"{error}{said}") from None
        found = self._posted(submission, namespace, exc)
        if found:
            return found
        made = not transient(exc)  # answered 2xx with a body that is no job: posting again makes a second
        if made or attempt == SUBMIT_ATTEMPTS - 1:
            if unanswered:
                raise self._unknown(exc, attempt + 1) from None
            raise hub_error(f"submitting the job ({SUBMIT_ATTEMPTS} attempts)", exc, self._token) from None
        return []

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
        unanswered = status_of(exc) is None and not unsent(exc)
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
        return [job_ref(job) for job in found]

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
            created_at=iso(job.created_at),
            started_at=iso(job.started_at),
            finished_at=iso(job.finished_at),
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
