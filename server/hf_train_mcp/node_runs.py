"""The nodes of a run across machines (multinode.py): ranks 1..N-1 posted after rank 0, whose record stands for
the run, then read, cancelled and watched together so that no node bills on its own.

A node that fails or is cancelled, a node that never got posted (its server stopped between the POSTs) or nodes
that do not all start within multinode.START_BOUND_MIN stop the others. job_status applies this rule on every
look, and a watcher started detached (`python -m hf_train_mcp.node_watcher RUN_ID`, one per run, holding the run's
lock; node_watcher.py) applies it until every node has ended, after the server has exited too.
"""

import json
import logging
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hf_train_mcp.backends.base import SubmissionUnknown, submission_labels
from hf_train_mcp.detach import spawn_once
from hf_train_mcp.durations import minutes_since
from hf_train_mcp.errors import TrainError
from hf_train_mcp.ledger import SUBMITTING, JobRecord, claim_id, now_iso
from hf_train_mcp.multinode import NODE_KIND, START_BOUND_MIN, run_stage
from hf_train_mcp.paths import data_home
from hf_train_mcp.stages import TERMINAL_STAGES

log = logging.getLogger(__name__)
LOCK_ENV = "HF_TRAIN_NODES_LOCK_FD"
MISSING_AFTER_MIN = 3.0  # a node still unrecorded this long after rank 0: its server stopped between the POSTs


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


def post_nodes(host: Any, backend: Any, script: Any, spec: Any, run: JobRecord) -> list[str]:
    """Post ranks 1..N-1 of a run whose rank 0 is recorded; one that cannot be posted stops the rest."""
    ids = []
    for rank in range(1, spec.nodes):
        try:
            ids.append(_post_node(host, backend, script, spec, run, rank))
        except SubmissionUnknown:
            raise  # the node may exist: its journal lets the next look record it, and the watcher stops the run
        except BaseException as exc:
            why = str(exc) if isinstance(exc, TrainError) else type(exc).__name__
            host.ledger.update_stage(run.job_id, run.stage, message=stopped(
                f"node {rank} of {spec.nodes} could not be submitted ({why})"))
            try:
                host.cancel_job(run.job_id)  # every node of the run posted so far
            except TrainError as cancel_error:
                log.warning("could not cancel run %s: %s", run.job_id, cancel_error)
            raise TrainError(f"node {rank} of {spec.nodes} could not be submitted ({why}); the {rank} node(s) "
                             "already posted were canceled, so nothing bills. Submit again with a new "
                             "idempotency_key (this one names the canceled run).") from None
    return ids


def _post_node(host: Any, backend: Any, script: Any, spec: Any, run: JobRecord, rank: int) -> str:
    """One node, journalled before its POST like any job (crash recovery records it by its label)."""
    submission = uuid.uuid4().hex[:12]
    planned = replace(run, job_id=SUBMITTING + submission, kind=NODE_KIND, parent_job_id=run.job_id,
                      node_rank=rank, idempotency_key=None, claim=claim_id(), stage="SCHEDULING", job_url=None,
                      message=f"node {rank} of run {run.job_id}", created_at=now_iso())
    labels = submission_labels({**spec.labels, "kind": NODE_KIND, "node-rank": str(rank)}, submission, None)
    host.ledger.journal(planned)
    try:
        ref = backend.submit(script, replace(spec, node_rank=rank, labels=labels))
    except SubmissionUnknown:
        raise
    except BaseException:
        host.ledger.forget(planned.job_id)
        raise
    host.ledger.record(replace(planned, job_id=ref.job_id, namespace=ref.namespace, stage=ref.stage,
                               job_url=ref.url, created_at=ref.created_at or planned.created_at, claim=None),
                       None, journal=planned.job_id)
    return ref.job_id


def node_states(follow: Any, run: JobRecord, rank0_stage: str, rank0_message: str | None) -> list[NodeState]:
    """Every node's stage, rank 0 first (as job_status just read it); a rank never posted is MISSING.
    follow.job_state(job_id) -> JobState reads one job."""
    states = [NodeState(0, run.job_id, rank0_stage, rank0_message)]
    recorded = {r.node_rank: r for r in nodes_of(follow.host.ledger, run)}
    for rank in range(1, expected_nodes(run)):
        record = recorded.get(rank)
        if record is None:
            states.append(NodeState(rank, None, "MISSING"))
            continue
        try:
            state = follow.job_state(record.job_id)
            states.append(NodeState(rank, record.job_id, state.stage, state.message))
        except TrainError as exc:  # unreadable for now: its last known stage
            log.info("node %s of %s: %s", record.job_id, run.job_id, exc)
            states.append(NodeState(rank, record.job_id, record.stage, record.message))
    return states


def verdict(run: JobRecord, states: list[NodeState]) -> str | None:
    """Why the run's nodes still going must be stopped, or None."""
    going = [s for s in states if s.stage not in TERMINAL_STAGES and s.stage != "MISSING"]
    if not going:
        return None
    ended = [s for s in states if s.stage in ("ERROR", "CANCELED", "DELETED")]
    if ended:
        first = ended[0]
        detail = f": {first.message}" if first.message and first.stage == "ERROR" else ""
        return f"node {first.rank} is {first.stage}{detail}; the other nodes cannot go on without it"
    age = minutes_since(run.created_at) or 0.0
    missing = [s.rank for s in states if s.stage == "MISSING"]
    if missing and age >= MISSING_AFTER_MIN:
        return (f"node(s) {', '.join(map(str, missing))} were never submitted (the server stopped between the "
                "nodes' submissions)")
    if any(s.stage == "SCHEDULING" for s in states) and age >= START_BOUND_MIN:
        return f"the nodes did not all start within {START_BOUND_MIN:.0f} min (Jobs had no room for all of them)"
    return None


def stopped(why: str) -> str:
    return f"{why}: the run was stopped, every node canceled"


def cancel_nodes(follow: Any, run: JobRecord, states: list[NodeState]) -> int:
    """Cancel every node still going (follow.cancel_one(job_id)); how many were."""
    count = 0
    for state in states:
        if state.job_id and state.stage not in TERMINAL_STAGES:
            try:
                follow.cancel_one(state.job_id)
                count += 1
            except TrainError as exc:  # the watcher, or the next look, tries again
                log.warning("could not cancel node %s of run %s: %s", state.job_id, run.job_id, exc)
    return count


def enforce(follow: Any, run: JobRecord, states: list[NodeState]) -> str | None:
    """Apply the rule: the reason the run was just stopped (said on its record), or None."""
    why = verdict(run, states)
    if why is not None:
        follow.host.ledger.update_stage(run.job_id, states[0].stage, message=stopped(why))
        cancel_nodes(follow, run, states)
    return why


def run_view(states: list[NodeState]) -> str:
    """The run's stage: a missing node counts as one still scheduling."""
    return run_stage([("SCHEDULING" if s.stage == "MISSING" else s.stage) for s in states])


# --- the detached watcher ---------------------------------------------------------------------------------------
def lock_path(run_id: str) -> Path:
    folder = data_home() / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{run_id.replace('/', '_')}.lock"


def ensure_watched(run: JobRecord) -> None:
    """Start the run's watcher unless one holds its lock."""
    try:
        spawn_once(lock_path(run.job_id), [sys.executable, "-m", "hf_train_mcp.node_watcher", run.job_id],
                   lock_env=LOCK_ENV)
    except OSError as exc:  # job_status applies the rule too, whenever the run is looked at
        log.warning("could not start the watcher of run %s: %s", run.job_id, exc)


def watch_once(host: Any, run_id: str) -> bool:
    """One look at the run (job_status applies the rule); False once every node has ended."""
    run = host.ledger.get(run_id)
    if run is None:
        return False
    report = host.job_status(run_id, tail=0)
    return report.stage not in TERMINAL_STAGES or any(
        n.stage not in TERMINAL_STAGES for n in (report.nodes or []) if n.job_id)
