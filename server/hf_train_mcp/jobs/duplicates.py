"""Copies of one submission: jobs the Hub made twice under one one-off `submission` label.

A POST that gets no answer may still make its job after the client gave up, and after the next POST made
another (a 90 s POST was seen). Every POST of one submission carries its label, so the copies are found by it:
the job kept is the oldest when the submission is posted (backends keep it), the one recorded afterwards; every
other is recorded as its copy (kind COPY_KIND, canceled, never listed) and canceled. While a copy may still
appear (LATE_JOB_MIN after a POST went unanswered: the record is `doubted`), each look at the job, and its
watcher (shell/node_supervisor.py), looks the label up again; cancel_job always does.
"""

import logging
import sqlite3
from dataclasses import replace
from typing import Any

from hf_train_mcp.backends.base import JobRef
from hf_train_mcp.durations import minutes_since
from hf_train_mcp.errors import TrainError
from hf_train_mcp.jobs.ledger import COPY_KIND, SUBMITTING, JobRecord
from hf_train_mcp.stages import TERMINAL_STAGES

log = logging.getLogger(__name__)
LATE_JOB_MIN = 30.0  # a POST's job appears within this or never (launching.ABANDON_AFTER_MIN's bound too)


def find_all(backend: Any, submission: str, namespace: str | None) -> list[JobRef]:
    """Every job with this `submission` label, oldest first (a backend without find_all makes no copies)."""
    finder = getattr(backend, "find_all", None)
    if finder is not None:
        return finder(submission, namespace)
    found = backend.find(submission, namespace)
    return [found] if found is not None else []


def record_copies(ledger: Any, job: JobRecord, refs: Any) -> None:
    """Record the jobs of `refs` other than `job` (and not yet recorded) as its copies."""
    for ref in refs:
        if ref.job_id == job.job_id or ledger.get(ref.job_id) is not None:
            continue
        try:
            _record_copy(ledger, job, ref)
        except sqlite3.IntegrityError:  # another look (the watcher, another server) recorded it a moment ago
            continue
        log.warning("job %s is a copy of job %s (submission %s): canceling it", ref.job_id, job.job_id,
                    job.submission)


def _record_copy(ledger: Any, job: JobRecord, ref: JobRef) -> None:
    ledger.record(replace(job, job_id=ref.job_id, kind=COPY_KIND, parent_job_id=job.job_id, stage=ref.stage,
                          job_url=ref.url, created_at=ref.created_at or job.created_at, idempotency_key=None,
                          claim=None, doubted=0, started_at=None, finished_at=None,
                          message=f"a second job of submission {job.submission} (a POST answered late): "
                                  f"canceled, {job.job_id} is the job"))


def awaited(ledger: Any, job: JobRecord) -> bool:
    """Whether a copy of `job` may still appear, or one found is not canceled yet."""
    if not job.doubted:
        return False
    young = (minutes_since(job.created_at) or 0.0) < LATE_JOB_MIN
    return young or any(c.stage not in TERMINAL_STAGES for c in ledger.children([job.job_id], COPY_KIND))


def stop_copies(follow: Any, job: JobRecord | None, *, search: bool | None = None) -> tuple[list[str], list[str]]:
    """Cancel the copies of `job` still going: those recorded (a cancel that failed before is tried again) and,
    with `search` (default: while one may appear), any new one its label finds. (canceled ids, problems).
    follow.cancel_one(job_id) cancels one job; follow.ledger is the ledger, follow.backend(name) opens a backend."""
    if job is None or job.kind == COPY_KIND or not job.submission or job.job_id.startswith(SUBMITTING):
        return [], []  # (a journal entry's job, if any, is recovery's to find: launcher.py)
    ledger, problems = follow.ledger, []
    if awaited(ledger, job) if search is None else search:
        try:
            record_copies(ledger, job, find_all(follow.backend(job.backend), job.submission, job.namespace))
        except TrainError as exc:
            problems.append(f"could not look for other jobs of its submission ({exc})")
    canceled = []
    for copy in ledger.children([job.job_id], COPY_KIND):
        if copy.stage in TERMINAL_STAGES:
            continue
        try:
            follow.cancel_one(copy.job_id)
            canceled.append(copy.job_id)
        except TrainError as exc:  # the next look, or the watcher, tries again
            problems.append(f"could not cancel {copy.job_id}, a second job of its submission ({exc})")
            log.warning("could not cancel job %s, a copy of %s: %s", copy.job_id, job.job_id, exc)
    return canceled, problems


def said(canceled: list[str], problems: list[str]) -> str:
    """What a cancel_job answer adds about the copies."""
    out = ""
    if canceled:
        out += (f"; also canceled {', '.join(canceled)}: the Hub made this submission twice (a POST answered after "
                "the client gave up)")
    if problems:
        out += "; " + "; ".join(problems) + ": cancel_job again (or job_status) retries"
    return out
