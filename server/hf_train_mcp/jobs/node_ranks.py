"""The nodes of a run across machines (nodes/rules.py): ranks 1..N-1 posted after rank 0, whose record stands for
the run, then read, cancelled and watched together so that no node bills on its own.

A node that fails or is cancelled, a node that never got posted (its server stopped between the POSTs) or nodes
that do not all start within multinode.START_BOUND_MIN stop the others. job_status applies this rule on every
look, and a watcher started detached (`python -m hf_train_mcp.shell.node_supervisor RUN_ID`, one per run, holding the run's
lock; shell/node_supervisor.py) applies it until every node has ended, after the server has exited too. A node whose POST
ended without an answer stops the run too; if the Hub made it after all, recovery records it by its label and the
rule cancels it. The same watcher watches a single job whose POST went unanswered (duplicates.py).
"""

import json
import logging
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from hf_train_mcp.jobs import duplicates
from hf_train_mcp.backends.base import JobRef, SubmissionUnknown, submission_labels
from hf_train_mcp.backends.local import process_alive
from hf_train_mcp.detach import spawn_once
from hf_train_mcp.durations import minutes_since
from hf_train_mcp.errors import HubError, TrainError
from hf_train_mcp.jobs.ledger import SUBMITTING, UNKNOWN, JobRecord, claim_id, now_iso
from hf_train_mcp.nodes.rules import NODE_KIND, START_BOUND_MIN, group_name, run_stage
from hf_train_mcp.paths import data_home
from hf_train_mcp.stages import TERMINAL_STAGES

log = logging.getLogger(__name__)
_watch_log = logging.getLogger("hf_train_mcp.shell.node_supervisor")  # the detached watcher's own log
LOCK_ENV = "HF_TRAIN_NODES_LOCK_FD"
MISSING_AFTER_MIN = 3.0  # a node still unrecorded this long after rank 0: its server stopped between the POSTs
NO_JOB = ("MISSING", UNKNOWN)  # node stages without a job id: never posted; posted with no answer (or posting)


class RunControl(Protocol):
    """What the nodes of a run need of the core: the ledger, a run's status and stage (which apply the rule), a
    cancel (every node of a run), and crash recovery of submissions whose POST went unanswered. service.Core is
    one."""

    @property
    def ledger(self) -> Any: ...

    def job_status(self, job_id: str, tail: int = 20) -> Any: ...

    def job_stage(self, job_id: str) -> str: ...

    def cancel_job(self, job_id: str) -> Any: ...

    def recover_submissions(self, *, now: bool = False) -> None: ...


@dataclass(frozen=True)
class NodeState:
    rank: int
    job_id: str | None  # None: never posted
    stage: str
    message: str | None = None


def expected_nodes(run: JobRecord) -> int:
    return int(json.loads(run.request_json).get("nodes") or 1)


def is_run(record: JobRecord | None) -> bool:
    """A training job that stands for several nodes (its own record is rank 0's)."""
    return record is not None and record.kind == "train" and expected_nodes(record) > 1


def nodes_of(ledger: Any, run: JobRecord) -> list[JobRecord]:
    """Ranks 1..N-1 as the ledger holds them."""
    return sorted(ledger.children([run.job_id], NODE_KIND), key=lambda r: r.node_rank or 0)


def post_nodes(jobs: RunControl, backend: Any, script: Any, spec: Any, run: JobRecord) -> list[str]:
    """Post ranks 1..N-1 of a run whose rank 0 is recorded. A node that cannot be posted, or whose POST ended
    without telling whether the Hub made its job, stops the run: every node posted so far is canceled, and the
    error names the run and says what was done (the run's watcher cancels the unknown node if it appears)."""
    ids = []
    for rank in range(1, spec.nodes):
        try:
            ids.append(_post_node(jobs, backend, script, spec, run, rank))
        except BaseException as exc:
            if isinstance(exc, SubmissionUnknown):
                what = (f"node {rank} of {spec.nodes} may or may not have been created (its submission got no answer "
                        "that tells, and the Hub's job list did not show it)")
            else:
                why = str(exc) if isinstance(exc, TrainError) else type(exc).__name__
                what = f"node {rank} of {spec.nodes} could not be submitted ({why})"
            unknown = isinstance(exc, SubmissionUnknown)
            raise HubError(_stopped_at_post(jobs, run, rank, what, unknown=unknown)) from None
    return ids


def _stopped_at_post(jobs: RunControl, run: JobRecord, rank: int, what: str, *, unknown: bool) -> str:
    """Stop a run whose next node could not be posted: its record says why, every node posted so far is canceled.
    What the caller is told."""
    done = stop_run(jobs, run, what)
    later = (f" If the Hub made node {rank} after all, the run's watcher finds it by its label and cancels it."
             if unknown else "")
    return (f"run {run.job_id} was stopped: {what}. {done}.{later} Submit again with a new idempotency_key (this "
            "one names the stopped run); job_status shows each node.")


def stop_run(jobs: RunControl, run: JobRecord, why: str) -> str:
    """Stop a run for good: its record keeps `why` (every later look says it, and cancels whatever of it still
    goes), every node posted so far is canceled, and its watcher retries what failed. What was done."""
    jobs.ledger.set_stopped(run.job_id, why)
    jobs.ledger.update_stage(run.job_id, run.stage, message=f"{why}: the run was stopped")
    try:
        done = jobs.cancel_job(run.job_id).message  # every node of the run posted so far (following.py)
    except TrainError as cancel_error:
        log.warning("could not cancel run %s: %s", run.job_id, cancel_error)
        done = f"canceling the nodes posted so far failed ({cancel_error}); the run's watcher retries until they are"
    ensure_watched(run)
    return done


def _post_node(jobs: RunControl, backend: Any, script: Any, spec: Any, run: JobRecord, rank: int) -> str:
    """One node, journalled before its POST like any job (crash recovery records it by its label)."""
    submission = uuid.uuid4().hex[:12]
    planned = replace(run, job_id=SUBMITTING + submission, kind=NODE_KIND, parent_job_id=run.job_id,
                      node_rank=rank, idempotency_key=None, claim=claim_id(), stage="SCHEDULING", job_url=None,
                      message=f"node {rank} of run {run.job_id}", created_at=now_iso(), submission=submission,
                      doubted=0)
    labels = submission_labels({**spec.labels, "kind": NODE_KIND, "node-rank": str(rank)}, submission, None)
    jobs.ledger.journal(planned)
    try:
        ref = backend.submit(script, replace(spec, node_rank=rank, labels=labels))
    except SubmissionUnknown:
        jobs.ledger.update_stage(planned.job_id, UNKNOWN)  # no server posts it any more: recovery asks at once
        raise
    except BaseException:
        jobs.ledger.forget(planned.job_id)
        raise
    record = replace(planned, job_id=ref.job_id, namespace=ref.namespace, stage=ref.stage, job_url=ref.url,
                     created_at=ref.created_at or planned.created_at, claim=None, doubted=int(ref.doubted))
    jobs.ledger.record(record, None, journal=planned.job_id)
    duplicates.record_copies(jobs.ledger, record, ref.copies)  # a second node of this rank: canceled
    return ref.job_id


def find_nodes(backend: Any, run: JobRecord, rank0: JobRef) -> dict[int, JobRef]:
    """The nodes the backend holds for a run whose rank 0 is being adopted from it (the ledger that recorded them
    was lost), found in the run's network group: the oldest of each rank. Raises TrainError when they cannot be
    looked up (rank 0 alone must not pass for the run)."""
    finder = getattr(backend, "find_group", None)
    if finder is None or not run.submission:
        return {}
    request = (rank0.labels or {}).get("request")  # every job of the run carries it (planning/training.py)
    labels = {"kind": NODE_KIND, **({"request": request} if request else {})}
    found: dict[int, JobRef] = {}
    for ref in finder(group_name(run.submission), labels, run.namespace):
        rank = (ref.labels or {}).get("node-rank", "")
        if rank.isdigit() and 0 < int(rank) < expected_nodes(run):
            found.setdefault(int(rank), ref)  # a later one of a rank is a copy: its own label finds it later
    return found


def record_nodes(ledger: Any, run: JobRecord, found: dict[int, JobRef]) -> None:
    """Record the nodes find_nodes found as the run's."""
    for rank, ref in sorted(found.items()):
        if ledger.get(ref.job_id) is None:
            ledger.record(replace(run, job_id=ref.job_id, kind=NODE_KIND, parent_job_id=run.job_id, node_rank=rank,
                                  idempotency_key=None, claim=None, stage=ref.stage, job_url=ref.url,
                                  created_at=ref.created_at or run.created_at, doubted=0, stopped=None,
                                  submission=(ref.labels or {}).get("submission"),
                                  message=f"node {rank} of run {run.job_id}"))


def node_states(follow: Any, run: JobRecord, rank0_stage: str, rank0_message: str | None) -> list[NodeState]:
    """Every node's stage, rank 0 first (as job_status just read it); a rank never posted is MISSING, one whose
    POST is under way or ended without an answer is UNKNOWN (no job id yet: recovery looks it up by its label).
    A node whose POST went unanswered has its copies canceled. follow.job_state(job_id) -> JobState reads one
    job; follow.cancel_one(job_id) cancels one."""
    states = [NodeState(0, run.job_id, rank0_stage, rank0_message)]
    recorded = {r.node_rank: r for r in nodes_of(follow.ledger, run)}
    for rank in range(1, expected_nodes(run)):
        record = recorded.get(rank)
        if record is None:
            states.append(NodeState(rank, None, "MISSING"))
            continue
        if record.job_id.startswith(SUBMITTING):
            states.append(NodeState(rank, None, UNKNOWN, "its submission's outcome is looked up by its label"))
            continue
        duplicates.stop_copies(follow, record)
        try:
            state = follow.job_state(record.job_id)
            states.append(NodeState(rank, record.job_id, state.stage, state.message))
        except TrainError as exc:  # unreadable for now: its last known stage
            log.info("node %s of %s: %s", record.job_id, run.job_id, exc)
            states.append(NodeState(rank, record.job_id, record.stage, record.message))
    return states


def verdict(run: JobRecord, states: list[NodeState]) -> str | None:
    """Why the run's nodes still going must be stopped, or None. A run the server stopped stays stopped, for
    its own reason (the nodes it canceled then are no new one)."""
    going = [s for s in states if s.stage not in TERMINAL_STAGES and s.stage not in NO_JOB]
    if not going:
        return None
    if run.stopped:
        return run.stopped
    ended = [s for s in states if s.stage in ("ERROR", "CANCELED", "DELETED")]
    if ended:
        first = ended[0]
        detail = f": {first.message}" if first.message and first.stage == "ERROR" else ""
        return f"node {first.rank} is {first.stage}{detail}; the other nodes cannot go on without it"
    age = minutes_since(run.created_at) or 0.0
    missing = [s.rank for s in states if s.stage in NO_JOB]
    if missing and (age >= MISSING_AFTER_MIN or not posting(run)):
        return (f"node(s) {', '.join(map(str, missing))} were never submitted, or not known to be (the server "
                "stopped, or the Hub did not answer, between the nodes' submissions)")
    if any(s.stage == "SCHEDULING" for s in states) and age >= START_BOUND_MIN:
        return f"the nodes did not all start within {START_BOUND_MIN:.0f} min (the backend had no room for all of them)"
    return None


def posting(run: JobRecord) -> bool:
    """Whether a live server is still posting the run's other nodes (its claim on the run's record, launcher.py):
    until it ends, a node not posted yet is not missing."""
    head = (run.claim or "").split("-", 1)[0]
    return head.isdigit() and process_alive(int(head))


@dataclass(frozen=True)
class Stop:
    """What canceling a run's nodes did."""

    states: list[NodeState]  # after it: a canceled node's stage as its backend then said
    canceled: list[int]  # ranks whose cancel was accepted
    failed: list[tuple[int, str]]  # (rank, why) of nodes whose cancel failed: they run on

    @property
    def unknown(self) -> list[int]:
        return [s.rank for s in self.states if s.stage == UNKNOWN]

    @property
    def missing(self) -> list[int]:
        return [s.rank for s in self.states if s.stage == "MISSING"]


def cancel_nodes(follow: Any, run: JobRecord, states: list[NodeState]) -> Stop:
    """Cancel every node still going (follow.cancel_one(job_id) -> CancelResult)."""
    after, canceled, failed = [], [], []
    for state in states:
        if state.job_id and state.stage not in TERMINAL_STAGES:
            try:
                state = replace(state, stage=follow.cancel_one(state.job_id).stage)
                canceled.append(state.rank)
            except TrainError as exc:  # the watcher, or the next look, tries again
                log.warning("could not cancel node %s of run %s: %s", state.job_id, run.job_id, exc)
                failed.append((state.rank, str(exc)))
        after.append(state)
    return Stop(after, canceled, failed)


def stopped(why: str, stop: Stop) -> str:
    """The run's message once the rule stopped it: what was canceled, and what was not (yet)."""
    never = (f"; node(s) {', '.join(map(str, stop.missing))} have no job (never posted, or not found), so none "
             "to cancel" if stop.missing else "")
    if not stop.failed and not stop.unknown:
        return f"{why}: the run was stopped, every node {'that has a job ' if never else ''}canceled{never}"
    said = [f"node {rank} could not be canceled ({err}) and runs on: retried on each look and by the run's "
            "watcher until it is" for rank, err in stop.failed]
    if stop.unknown:
        said.append(f"node(s) {', '.join(map(str, stop.unknown))} may exist: canceled once the Hub shows them")
    return f"{why}: the run was stopped; " + "; ".join(said) + never


def cancel_said(stop: Stop) -> str:
    """cancel_job's answer for a run: which nodes were canceled, which were not and why."""
    said = []
    if stop.canceled:
        said.append(f"canceled {len(stop.canceled)} of {len(stop.states)} nodes (node(s) "
                    f"{', '.join(map(str, stop.canceled))}): billing stops when each ends")
    said += [f"node {rank} could not be canceled ({err}) and runs on: the run's watcher retries until it is, or "
             "call cancel_job again" for rank, err in stop.failed]
    if stop.unknown:
        said.append(f"node(s) {', '.join(map(str, stop.unknown))} may exist (their submission had no answer): the "
                    "run's watcher cancels them once the Hub shows them")
    return "; ".join(said) or "every node has ended; nothing to cancel"


def enforce(follow: Any, run: JobRecord, states: list[NodeState]) -> tuple[str, Stop] | None:
    """Apply the rule: the message of the run just stopped (said on its record) and what stopping did, or None."""
    why = verdict(run, states)
    if why is None:
        return None
    if not run.stopped:
        follow.ledger.set_stopped(run.job_id, why)
    stop = cancel_nodes(follow, run, states)
    message = stopped(why, stop)
    follow.ledger.update_stage(run.job_id, stop.states[0].stage, message=message)
    return message, stop


def run_view(states: list[NodeState], stop: Stop | None = None) -> str:
    """The run's stage: a missing or unknown node counts as one still scheduling; while a node whose cancel
    failed runs on, the run is not over (its stage is that node's)."""
    if stop is not None and stop.failed:
        rank = stop.failed[0][0]
        return next(s.stage for s in stop.states if s.rank == rank)
    return run_stage([("SCHEDULING" if s.stage in NO_JOB else s.stage) for s in states])


# --- the detached watcher ---------------------------------------------------------------------------------------
def lock_path(run_id: str) -> Path:
    folder = data_home() / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{run_id.replace('/', '_')}.lock"


def ensure_watched(run: JobRecord) -> None:
    """Start the watcher of a run (or of a job a copy of which may appear) unless one holds its lock."""
    try:
        spawn_once(lock_path(run.job_id), [sys.executable, "-m", "hf_train_mcp.shell.node_supervisor", run.job_id],
                   lock_env=LOCK_ENV)
    except OSError as exc:  # job_status applies the rule too, whenever the run is looked at
        log.warning("could not start the watcher of run %s: %s", run.job_id, exc)


def watch(jobs: RunControl, run_id: str, *, poll: Callable[[], float],
          sleep: Callable[[float], None] = time.sleep) -> int:
    """The watcher's loop: one look (watch_once) every poll() seconds until nothing is left to watch. The clock
    is passed in: the detached watcher (shell/node_supervisor.py) sleeps for real, a test need not."""
    while True:
        try:
            if not watch_once(jobs, run_id):
                return 0
        except Exception:  # a Hub hiccup must not end the watch: look again next round
            _watch_log.exception("run %s: look failed", run_id)
        sleep(poll())


def watch_once(jobs: RunControl, job_id: str) -> bool:
    """One look at a run, or at a job whose POST went unanswered (job_status applies the rules: a run's nodes, a
    submission's copies), or at a submission whose job is not known to exist (its journal entry); False once
    every node has ended and no copy is awaited (the journal entry is gone)."""
    record = jobs.ledger.get(job_id)
    if record is None:
        return False
    if record.job_id.startswith(SUBMITTING):  # a POST whose outcome could not be told: looked up until found
        jobs.recover_submissions(now=True)  # (then recorded, and watched if it must be) or given up on
        return jobs.ledger.get(job_id) is not None
    report = jobs.job_status(job_id, tail=0)
    ledger = jobs.ledger
    if any(duplicates.awaited(ledger, r) for r in (ledger.get(job_id) or record, *nodes_of(ledger, record))):
        return True
    if not is_run(record):
        return False
    nodes = report.nodes or []
    return report.stage not in TERMINAL_STAGES or any(
        n.stage not in TERMINAL_STAGES for n in nodes if n.job_id) or any(n.stage == UNKNOWN for n in nodes)
