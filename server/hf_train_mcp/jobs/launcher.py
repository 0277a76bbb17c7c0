"""Launching a planned job and recovering from the ones whose server died mid-submission.

A job is posted once: its idempotency key is reserved in the ledger, its submission journalled with a one-off
label before the POST, and a server killed in between leaves an entry the next call looks up on the backend.
"""

import json
import logging
import time
import uuid
from dataclasses import replace
from collections.abc import Callable
from typing import Any

from hf_train_mcp.backends.base import Backend, JobRef, SubmissionUnknown, submission_labels
from hf_train_mcp.backends.local import process_alive
from hf_train_mcp.errors import TrainError, ConflictError, HubError
from hf_train_mcp.hub import needs_token, hub_token
from hf_train_mcp.durations import minutes_since
from hf_train_mcp.jobs import keys
from hf_train_mcp.jobs.ledger import PENDING, SUBMITTING, UNKNOWN, JobRecord, KeyConflict, Ledger, claim_id, now_iso
from hf_train_mcp.jobs.prepared import Prepared, Progress, Share
from hf_train_mcp.bucket_inputs import ARTIFACTS_BUCKET, MOUNT_ROOT, Sent, Upload, saying_files
from hf_train_mcp.jobs.uploads import shown_bytes
from hf_train_mcp.contract.results import Submission
from hf_train_mcp.jobs import duplicates
from hf_train_mcp.nodes import rules as node_rules
from hf_train_mcp.jobs import node_ranks
from hf_train_mcp.jobs import retries
from hf_train_mcp.stages import TERMINAL_STAGES

log = logging.getLogger(__name__)
RECOVER_AFTER_MIN = 2  # a live server's POST (3 attempts with timeouts) never takes this long
RECOVERY_RETRY_S = 60
RECOVERY_SCAN_S = 5.0  # status calls look for orphaned submissions at most this often (submit always looks)
ABANDON_AFTER_MIN = 30


def submission_of(record: JobRecord, extra_warnings: list[str] | None = None, *, ledger: Any = None,
                  sent: list[Sent] | None = None) -> Submission:
    """What submit_training (and the follow-ups) answer for a job of the ledger (with `ledger`, a run's nodes;
    with `sent`, what this call uploaded for it: else nothing was)."""
    nodes = [record.job_id, *(n.job_id for n in node_ranks.nodes_of(ledger, record)  # not a journal's label
                              if not n.job_id.startswith(SUBMITTING))] \
        if ledger is not None and node_ranks.is_run(record) else None
    if record.stopped:
        extra_warnings = [f"the run was stopped: {record.stopped}", *(extra_warnings or [])]
    return Submission(
        job_id=record.job_id, backend=record.backend, stage=record.stage, job_url=record.job_url,
        hub_model_id=record.hub_model_id, model_url=record.model_url, trackio_url=record.trackio_url,
        flavor=record.flavor or "", timeout=record.timeout or "", estimated_hours=record.estimated_hours,
        estimated_cost_usd=record.estimated_cost_usd, effective_batch_size=record.effective_batch_size or 0,
        worst_case_cost_usd=record.worst_case_cost_usd, script_sha256=record.script_sha256,
        warnings=[*(extra_warnings or []), *record.warnings], node_job_ids=nodes,
        uploads=[s.summary() for s in sent] if sent else [
            Sent(entry["bucket"], Upload.from_record(entry), 0).summary() for entry in record.uploads] or None,
    )


def checked_run(runs: node_ranks.RunControl, run: JobRecord) -> JobRecord:
    """A run handed back without having been launched by this call (adopted, recovered, a keyed retry): the
    rule of node_ranks applied now (a node never posted, with no server left to post it, stops the whole run and
    says so) and its watcher started, which applies it until every node has ended. The run as recorded then."""
    try:
        runs.job_stage(run.job_id)  # a run's stage is its job_status, which applies the rule
    except TrainError as exc:  # the watcher looks again
        log.info("could not look at run %s now: %s", run.job_id, exc)
    node_ranks.ensure_watched(run)
    return runs.ledger.get(run.job_id) or run


def _planned_record(prepared: Prepared, submission: str, claim: str | None, sent: list[Sent]) -> JobRecord:
    """The ledger's entry of a submission about to be posted (journalled under its one-off label)."""
    req, plan, common = prepared.req, prepared.plan, prepared.common
    return JobRecord(
        job_id=SUBMITTING + submission, backend=prepared.backend_name, namespace=prepared.namespace,
        method=plan.method, model=prepared.model, dataset=prepared.dataset, request_json=req.model_dump_json(),
        script_sha256=prepared.script.sha256,
        script_path=None, job_dir=None, stage="SCHEDULING", flavor=plan.flavor, timeout=common["timeout"],
        job_url=None, hub_model_id=common["hub_model_id"], model_url=prepared.model_url,
        trackio_url=prepared.trackio_url, output_bucket=plan.output_bucket, estimated_hours=common["estimated_hours"],
        estimated_cost_usd=common["estimated_cost_usd"], effective_batch_size=plan.effective_batch_size,
        warnings_json=json.dumps(plan.warnings), idempotency_key=None, created_at=now_iso(),
        worst_case_cost_usd=plan.worst_case_cost_usd, claim=claim or claim_id(),
        output_dir=plan.config["output_dir"], kind=prepared.kind, parent_job_id=prepared.parent_job_id,
        asked_json=prepared.asked, submission=submission,
        secrets_json=json.dumps(list(prepared.spec.run.secrets)) if prepared.spec.run else None,  # masked in its logs
        uploads_json=json.dumps([{**s.upload.recorded(), "bucket": s.bucket} for s in sent]) if sent else None,
    )


def _posted_record(planned: JobRecord, ref: JobRef, backend: Backend, prepared: Prepared, *, nodes: int) -> JobRecord:
    """The ledger's entry of a posted job: its planned entry with what the backend answered."""
    model_url, trackio_url = prepared.model_url, prepared.trackio_url
    if not backend.pushes_to_hub and prepared.kind in ("train", "export"):  # the output stays in the job's folder
        model_url = f"{ref.url}/{backend.output_dir}"
    if not backend.pushes_to_hub and prepared.kind == "train":
        trackio_url = f"{ref.url}/trackio"
    return replace(
        planned, job_id=ref.job_id, namespace=ref.namespace, stage=ref.stage, job_url=ref.url,
        script_path=f"{ref.job_dir}/train.py" if ref.job_dir else None, job_dir=ref.job_dir,
        model_url=model_url, trackio_url=trackio_url, idempotency_key=prepared.req.idempotency_key,
        created_at=ref.created_at or now_iso(), doubted=int(ref.doubted),
        claim=claim_id() if nodes > 1 else None,  # this server posts its other nodes (node_ranks.posting)
        output_dir=f"{ref.job_dir}/output" if ref.job_dir else prepared.plan.config["output_dir"],
    )


def _labelled(spec: Any, prepared: Prepared, submission: str) -> Any:
    """The job's spec with the labels that find it again: its submission's, its idempotency key's, what was asked."""
    key = prepared.req.idempotency_key
    asked = {retries.ASKED_LABEL: retries.asked_label(prepared.asked)} if key and prepared.asked else {}
    return replace(spec, labels=submission_labels({**spec.labels, **asked}, submission, key))


def _found_is_this_call(ref: JobRef, planned: JobRecord, key: str, uploads: list[Upload]) -> bool:
    """A job found on the Hub by this call's idempotency key, refused when it is another call's (another kind,
    another label, other copies read); whether it read this call's uploads (then recorded as its own)."""
    found_kind = (ref.labels or {}).get("kind", planned.kind)
    if found_kind != planned.kind:
        raise KeyConflict(f"idempotency_key {key!r} already names job {ref.job_id}, a {found_kind} job: use "
                          f"another key for this {planned.kind} job")
    found_asked = (ref.labels or {}).get(retries.ASKED_LABEL)
    if found_asked and planned.asked_json and found_asked not in retries.asked_labels(planned.asked_json):
        # the label is one hash: which part differs cannot be told, and the caller may have sent the same ones
        content = [name for name in retries.CONTENT_FIELDS if name in json.loads(planned.asked_json)]
        raise KeyConflict(retries.conflict_message(key, f"job {ref.job_id} (found on the Hub by its label)",
                                                   [" or ".join(["arguments", *content])]))
    # what it reads says it whatever its label holds (a sweep run's is its arguments alone): other copies than
    # this call's files make are a job on other bytes
    read = {mount for mount in ref.mounts if mount.startswith(f"{MOUNT_ROOT}/")}
    if read and read != {u.mount for u in uploads}:
        raise KeyConflict(retries.conflict_message(key, f"job {ref.job_id} (found on the Hub by its label)",
                                                   [retries.CONTENT_FIELDS[2]]))
    asked = planned.asked_json or "{}"  # its label holds what it read only where the call's content is part of it
    return bool(read) or (found_asked == retries.asked_label(asked)
                          and any(name in json.loads(asked) for name in retries.CONTENT_FIELDS))


class Launcher:
    def __init__(self, runs: node_ranks.RunControl, *, ledger: Callable[[], Ledger],
                 backend: Callable[[str], Backend]) -> None:
        """runs: what a run's nodes need (their stage, a cancel); ledger(): the ledger, opened on first use;
        backend(name) opens a backend."""
        self.runs, self.backend, self._ledger = runs, backend, ledger
        self._recovery_tried: dict[str, float] = {}
        self._recovery_scanned = -RECOVERY_SCAN_S

    @property
    def ledger(self) -> Ledger:
        return self._ledger()

    def launch(self, prepared: Prepared, claim: str | None, progress: Progress | None = None) -> Submission:
        req, plan, script, spec = prepared.req, prepared.plan, prepared.script, prepared.spec
        backend = self.backend(prepared.backend_name)
        if req.dry_run:
            return Submission(job_id=None, stage=None, job_url=None, model_url=prepared.model_url,
                              trackio_url=prepared.trackio_url, script=script.text, command=backend.command(spec),
                              uploads=self._would_send(backend, prepared) or None, **prepared.common)
        if backend.reads_local_paths:  # a job on this machine reads the Hub with the server's token, if it must
            spec = replace(spec, read_token=self._local_job_reads_private(prepared.reads, plan.warnings))
        if claim is not None and not self.ledger.renew(req.idempotency_key, claim):
            raise ConflictError(f"another server took over idempotency_key {req.idempotency_key!r} while this one was "
                             "preparing; nothing was submitted here: call again to get that server's job")
        submission = uuid.uuid4().hex[:12]
        if backend.labels_submissions:  # before the upload: a job the key names was posted with its own copies,
            adopted = self._keyed_on_hub(backend, _planned_record(prepared, submission, claim, []),
                                         req.idempotency_key, claim, prepared.uploads)
            if adopted is not None:
                return adopted
        sent = self._send(backend, prepared, progress)
        if progress:
            progress(f"submitting to {backend.place}")
        if spec.nodes > 1:  # rank 0 of a run across machines: the group every node joins, named by this submission
            spec = replace(spec, network_group=node_rules.group_name(submission), node_rank=0)
        node_spec = spec  # what ranks 1..N-1 are posted with (their own labels, no idempotency key)
        planned = _planned_record(prepared, submission, claim, sent)
        journal = None
        if backend.labels_submissions:  # a server killed mid-POST leaves this; _recover_submissions finds the job
            spec = _labelled(spec, prepared, submission)
            self.ledger.journal(planned)
            journal = planned.job_id
        try:
            ref = self._submit(backend, script, spec, planned if journal else None)
        except TrainError as exc:  # the files stay in the bucket: the answer says where, as a launch's does
            raise saying_files(exc, sent)
        record = _posted_record(planned, ref, backend, prepared, nodes=spec.nodes)
        if not self.ledger.record(record, claim, journal=journal):
            record.warnings_json = json.dumps([*plan.warnings, f"idempotency_key {req.idempotency_key!r} was taken "
                                               "over by another server while this slow submission ran"])
        duplicates.record_copies(self.ledger, record, ref.copies)
        if spec.nodes > 1:
            try:
                self._post_nodes(backend, script, node_spec, record)
            except TrainError as exc:  # a run stopped on a node never posted: its answer says where the files are
                raise saying_files(exc, sent)
        elif record.doubted:  # a copy may still appear: its watcher looks the label up, and cancels it
            node_ranks.ensure_watched(record)
        return submission_of(record, ledger=self.ledger, sent=sent)

    @staticmethod
    def _send(backend: Backend, prepared: Prepared, progress: Progress | None) -> list[Sent]:
        """The job's local files put in place before it is posted (nothing is posted if they cannot be)."""
        if not prepared.uploads:
            return []
        total = sum(u.size for u in prepared.uploads)
        if progress:
            progress(f"checking your bucket for the {shown_bytes(total)} of local files the job reads")

        def share(done: int, of: int) -> None:
            if progress:
                progress(Share(f"uploading local files: {shown_bytes(done)} of {shown_bytes(of)}", done, of))
        return backend.upload(prepared.uploads, prepared.namespace, share=share)

    def count_uploads(self, prepared: Any) -> None:
        """Set what a launch of this plan (a sweep: of all its runs, which share their uploads) would upload that
        the bucket lacks; all of it when the bucket cannot be asked."""
        runs = getattr(prepared, "runs", None)
        parts = [run.prepared for run in runs] if runs is not None else [prepared]
        uploads = list({u.place: u for part in parts for u in part.uploads if u.files}.values())
        prepared.new_upload_bytes = 0
        if uploads:
            try:
                sent = self.backend(parts[0].backend_name).upload(uploads, parts[0].namespace, dry_run=True)
                prepared.new_upload_bytes = sum(s.new_bytes or 0 for s in sent)
            except TrainError:
                prepared.new_upload_bytes = sum(u.size for u in uploads)

    @staticmethod
    def _would_send(backend: Backend, prepared: Prepared) -> list[dict]:
        """A dry run's account of the uploads: what is already in the bucket is asked when a token can ask."""
        if not prepared.uploads:
            return []
        if prepared.namespace and hub_token():
            try:
                return [s.summary() for s in backend.upload(prepared.uploads, prepared.namespace, dry_run=True)]
            except TrainError as exc:
                prepared.common["warnings"].append(f"could not look in your bucket for what is there already: {exc}")
        bucket = f"{prepared.namespace or '<your namespace>'}/{ARTIFACTS_BUCKET}"
        return [Sent(bucket, upload, None).summary() for upload in prepared.uploads]

    def _submit(self, backend: Backend, script: Any, spec: Any, journal: JobRecord | None) -> Any:
        """POST the job (its journal entry written): a POST whose outcome cannot be told keeps the entry as
        UNKNOWN, watched, so that its job is found whenever the Hub shows it; only a POST known to have made no
        job drops it."""
        try:
            return backend.submit(script, spec)
        except SubmissionUnknown as exc:
            if journal is not None:  # no server posts it any more: the next look asks the Hub at once, and a watcher
                self.ledger.update_stage(journal.job_id, UNKNOWN)
                node_ranks.ensure_watched(journal)
            if spec.nodes > 1:  # recovery stops it if it appears (_recover)
                raise SubmissionUnknown(f"{exc}. It is rank 0 of a run across {spec.nodes} machines whose other "
                                        "nodes were not posted: if it appears it is canceled; to launch the run, "
                                        "submit again with a new idempotency_key") from None
            raise  # the job may exist: the journal entry lets the next call find it
        except BaseException:
            if journal is not None:
                self.ledger.forget(journal.job_id)
            raise

    def _post_nodes(self, backend: Backend, script: Any, spec: Any, run: JobRecord) -> None:
        """Ranks 1..N-1 of a run whose rank 0 is recorded, then the run's watcher; the claim this server holds on
        the run while it posts them is given up however that ends (a node missing then is missing for good)."""
        try:
            node_ranks.post_nodes(self.runs, backend, script, spec, run)
        finally:  # a run stopped on a node that could not be posted too: it cancels what is found later
            self.ledger.set_claim(run.job_id, None)
            run.claim = None
            node_ranks.ensure_watched(run)

    def _keyed_on_hub(self, backend: Backend, planned: JobRecord, key: str | None,
                      claim: str | None, uploads: list[Upload]) -> Submission | None:
        """The job the Hub holds for this idempotency key (its label), adopted: the ledger is not the only memory
        of which keys launched, since it can be lost or moved aside. A Hub that cannot be read is no reason to
        refuse: the ledger's reservation of the key still guards it. The job's uploads are recorded when it mounts
        this call's copies, or its label says it was this very call (content included): its follow-ups mount them."""
        if not key:
            return None
        try:
            ref = backend.find_keyed(key, planned.namespace)
        except TrainError as exc:
            log.info("could not look for an earlier job with idempotency_key %r: %s", key, exc)
            return None
        if ref is None:
            return None
        same_call = _found_is_this_call(ref, planned, key, uploads)
        note = f"idempotency_key matched job {ref.job_id}: returned it instead of submitting again"
        known = self.ledger.get(ref.job_id)
        if known is not None:  # recorded without its key (a reservation taken over): the key stays free
            if claim is not None:
                self.ledger.release(key, claim)
            return submission_of(known, extra_warnings=[note], ledger=self.ledger)
        bucket = f"{ref.namespace or planned.namespace}/{ARTIFACTS_BUCKET}"
        record = replace(planned, job_id=ref.job_id, namespace=ref.namespace, stage=ref.stage, job_url=ref.url,
                         idempotency_key=key, created_at=ref.created_at or planned.created_at, claim=None,
                         submission=(ref.labels or {}).get("submission") or planned.submission,
                         uploads_json=json.dumps([{**u.recorded(), "bucket": bucket} for u in uploads])
                         if uploads and same_call else None)
        nodes = {}
        if node_ranks.is_run(record):  # its nodes too (found in its network group), before any of it is recorded
            try:
                nodes = node_ranks.find_nodes(backend, record, ref)
            except TrainError as exc:
                raise HubError(f"idempotency_key {key!r} names job {ref.job_id} on the Hub, rank 0 of a run across "
                               f"machines, but its other nodes could not be looked up ({exc}): nothing was "
                               "submitted; call again with the same idempotency_key to adopt the whole run") from None
        self.ledger.record(record, claim)
        log.warning("adopted job %s: the Hub has it under idempotency_key %r, the ledger did not", ref.job_id, key)
        if node_ranks.is_run(record):
            node_ranks.record_nodes(self.ledger, record, nodes)
            record = checked_run(self.runs, record)
        return submission_of(record, ledger=self.ledger, extra_warnings=[
            note + " (found on the Hub by its label; the ledger had lost it)"])

    def recover_submissions(self, *, now: bool = False) -> None:
        """Record the jobs of submissions whose server died between the POST and the ledger write: the job is
        found on the Hub by its one-off `submission` label. One that never reached the Hub is dropped.
        Status calls scan at most every RECOVERY_SCAN_S; `now` (a submission about to reserve its key) always."""
        if not now and time.monotonic() - self._recovery_scanned < RECOVERY_SCAN_S:
            return
        self._recovery_scanned = time.monotonic()
        for entry in self.ledger.submissions():
            pid = int(entry.claim.split("-", 1)[0]) if entry.claim and entry.claim[0].isdigit() else None
            age = minutes_since(entry.created_at) or 0.0
            if pid is not None and process_alive(pid) and age < RECOVER_AFTER_MIN and entry.stage != UNKNOWN:
                continue  # still being posted by a live server
            if time.monotonic() - self._recovery_tried.get(entry.job_id, -RECOVERY_RETRY_S) < RECOVERY_RETRY_S:
                continue  # looked it up a moment ago: do not make every call pay for a Hub that is down
            self._recovery_tried[entry.job_id] = time.monotonic()
            self._recover(entry, abandon=age >= ABANDON_AFTER_MIN, cancel_canceled=True)

    def recover_submission(self, key: str) -> JobRecord | None:
        """The job an idempotency key names, looking its unfinished submissions up on the Hub at once, whoever
        posts them (a sweep's cancel must find the job of a run whose launcher was killed mid-POST)."""
        for entry in self.ledger.submissions():
            if json.loads(entry.request_json).get("idempotency_key") == key:
                self._recover(entry, abandon=False, cancel_canceled=False)
        found = self.ledger.by_idempotency_key(key)
        return None if found is None or found.job_id.startswith((PENDING, SUBMITTING)) else found

    def _recover(self, entry: JobRecord, *, abandon: bool, cancel_canceled: bool) -> None:
        """Look one journal entry's job up by its label: record it, or (abandon) drop the entry and free its key
        once the Hub has said for long enough that there is no such job. A sweep run's job is given to its run,
        and (cancel_canceled) canceled when its sweep was canceled meanwhile; a node of a run that has ended is
        canceled; jobs the label finds beyond the oldest are its copies, canceled."""
        key = json.loads(entry.request_json).get("idempotency_key")
        try:
            found = duplicates.find_all(self.backend(entry.backend), entry.job_id.removeprefix(SUBMITTING),
                                        entry.namespace)
        except TrainError as exc:
            log.info("could not look up submission %s: %s", entry.job_id, exc)
            return
        if not found:
            if abandon:
                self.ledger.forget(entry.job_id)
                if key:
                    self.ledger.release(key, entry.claim)
            return
        ref = found[0]
        record = replace(entry, job_id=ref.job_id, namespace=ref.namespace, stage=ref.stage, job_url=ref.url,
                         created_at=ref.created_at or entry.created_at, idempotency_key=key, claim=None,
                         submission=entry.job_id.removeprefix(SUBMITTING),
                         doubted=int(entry.stage == UNKNOWN or len(found) > 1))
        self.ledger.record(record, entry.claim, journal=entry.job_id)
        log.warning("recorded job %s, submitted by a server that stopped before recording it", ref.job_id)
        duplicates.record_copies(self.ledger, record, found[1:])
        for copy in found[1:]:
            self._cancel(copy.job_id, "a second job of one submission")
        run = self.ledger.get(entry.parent_job_id) if entry.kind == node_rules.NODE_KIND else None
        if run is not None and (run.stopped or run.stage in TERMINAL_STAGES):
            self._cancel(ref.job_id, f"a node of run {run.job_id}, which has ended")
        if key and keys.adopted(self.ledger, key, ref.job_id) and cancel_canceled:
            self._cancel(ref.job_id, "a job of a canceled sweep")  # else the next look at the sweep cancels it
        if node_ranks.is_run(record):  # rank 0, recorded only now: its launch never got to post the other nodes
            node_ranks.stop_run(self.runs, record, f"its launch did not finish (the server stopped, or the Hub did "
                               f"not answer, before the other {node_ranks.expected_nodes(record) - 1} node(s) were "
                               "posted), so it could not train")
        elif record.doubted:  # a copy may still appear: its watcher looks the label up, and cancels it
            node_ranks.ensure_watched(record)

    def _cancel(self, job_id: str, what: str) -> None:
        try:
            self.runs.cancel_job(job_id)
        except TrainError as exc:  # the next look tries again (job_status, the watcher, the sweep's supervisor)
            log.warning("could not cancel job %s, %s: %s", job_id, what, exc)

    @staticmethod
    def _local_job_reads_private(repos: list[tuple[str, str]], warnings: list[str]) -> bool:
        """A local job gets HF_TOKEN only when the Hub says a repo it reads is gated or private."""
        verdict = needs_token(hub_token(), repos) if repos else False
        if verdict is None:
            warnings.append("could not ask the Hub whether the model or dataset is gated or private: the job runs "
                            "without HF_TOKEN")
        return bool(verdict)
