"""Sweeps: a grid of training runs under one budget, started at most max_parallel at a time, and pruned when a
run's loss trails the others' (pruning.py; results.py ranks them). This module launches, supervises and cancels
a sweep planned by plan.py.

The server plans every run and checks the whole sweep's worst case before anything is launched, stores the
sweep in the ledger and starts the first runs; a detached supervisor (`python -m hf_train_mcp.shell.sweep_supervisor`, its own
session, like the local runner) starts the rest as slots free up, so a sweep goes on when the conversation (and a
stdio server with it) has ended. Each run is an ordinary keyed submission (`<sweep_id>-<index>`), so however
often a launch is retried, by whichever process, a run is one job.
"""

import contextvars
import fcntl
import json
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hf_train_mcp import backends
from hf_train_mcp.access import Access
from hf_train_mcp.jobs import retries
from hf_train_mcp.backends.base import SubmissionUnknown
from hf_train_mcp.detach import spawn_once
from hf_train_mcp.durations import seconds_from_env
from hf_train_mcp.errors import TrainError
from hf_train_mcp.hub import HubUnreachable, hub_token, scrub
from hf_train_mcp.stages import SETTLED_STAGES, TERMINAL_STAGES
from hf_train_mcp.jobs.ledger import PENDING, SUBMITTING, KeyConflict, SubmissionInProgress, SweepRecord
from hf_train_mcp.jobs.keys import KEY_PREFIX, adopted
from hf_train_mcp.jobs.ledger import Ledger, SweepRunRecord, now_iso
from hf_train_mcp.jobs.prepared import Progress
from hf_train_mcp.paths import data_home
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.sweeps.job_control import JobControl
from hf_train_mcp.sweeps.plan import SweepPlan, run_key
from hf_train_mcp.sweeps.pruning import loss_at, trailing, watched

__all__ = ["CANCEL_FAILED", "KEY_PREFIX", "POLL_ENV", "cancel_sweep", "check_access", "ensure_supervised", "launch",
           "loss_at", "read_all", "resume", "run_key", "store_and_start", "supervise_once", "supervisor_alive",
           "trailing", "watched"]


LOCK_FD_ENV = "HF_TRAIN_SWEEP_LOCK_FD"  # the supervisor's lock, taken and handed over by the process starting it
READERS = 8  # jobs read at once: a silent running job's log read waits seconds, the Hub rate-limits a flood
STALE_LAUNCH_S = 600  # a launch claimed this long ago by a process that has not finished it is taken over
CANCEL_FAILED = "the sweep was canceled, but canceling this run's job failed: retried until it has ended"
POLL_ENV = "HF_TRAIN_SWEEP_POLL_S"
POLL_DEFAULT_S = 30.0


def poll_seconds() -> float:
    return seconds_from_env(POLL_ENV, POLL_DEFAULT_S)


def read_all(read: Callable[[Any], Any], items: list) -> list:
    """read(item) for every item, READERS at a time (each may wait seconds on a silent log), in order; a
    TrainError is returned in its item's place. Each read runs in a copy of the caller's context (what a
    remote caller may reach is a context variable)."""
    def one(item: Any) -> Any:
        try:
            return read(item)
        except TrainError as exc:
            return exc

    if len(items) <= 1:
        return [one(item) for item in items]
    with ThreadPoolExecutor(min(READERS, len(items)), thread_name_prefix="job-read") as pool:
        futures = [pool.submit(contextvars.copy_context().run, one, item) for item in items]
        return [future.result() for future in futures]


def store_and_start(core: JobControl, plan: SweepPlan, progress: Progress | None) -> tuple[SweepRecord, list[str]]:
    """Store the sweep (or find the one its key already names), start its first max_parallel runs, then its
    supervisor (a server that dies in between leaves a running sweep, which the next server start resumes)."""
    req = plan.req
    first = plan.runs[0].prepared
    record = SweepRecord(
        sweep_id=plan.sweep_id, idempotency_key=req.idempotency_key, created_at=now_iso(),
        backend=plan.backend_name, request_json=req.model_dump_json(), max_parallel=req.max_parallel,
        prune=int(req.prune), state="running", estimated_cost_usd=plan.estimated_cost_usd,
        worst_case_cost_usd=plan.worst_case_cost_usd, trackio_url=first.trackio_url,
        warnings_json=json.dumps(plan.warnings), access_json=core.access.recorded())
    runs = [SweepRunRecord(sweep_id=plan.sweep_id, idx=index, params_json=json.dumps(run.params),
                           request_json=run.pinned.model_dump_json(), state="queued",
                           estimated_cost_usd=run.prepared.common.get("estimated_cost_usd"),
                           worst_case_cost_usd=run.pinned.max_cost_usd or 0.0)
            for index, run in enumerate(plan.runs)]
    holder = core.ledger.create_sweep(record, runs)
    if holder is not None:
        retries.check_same_sweep(holder, req)
        ensure_supervised(core, holder)
        return holder, [f"idempotency_key matched sweep {holder.sweep_id}: returned it instead of launching again"]
    for run in runs[:req.max_parallel]:
        if progress:
            progress(f"starting run {run.idx + 1} of {len(runs)}")
        launch(core, run)
    ensure_supervised(core, record)
    return record, []


def _stale(run: SweepRunRecord) -> bool:
    """A launch claimed by a process that died before it finished (its key still guards against a double)."""
    if run.state != "launching" or not run.claimed_at:
        return False
    claimed = datetime.fromisoformat(run.claimed_at.replace("Z", "+00:00"))
    return (datetime.now(UTC) - claimed).total_seconds() > STALE_LAUNCH_S


def launch(core: JobControl, run: SweepRunRecord) -> None:
    """Claim a queued run, submit it (its key makes a retry return the job already posted), record its job."""
    sweep = core.ledger.sweep(run.sweep_id)
    if sweep is None or sweep.state != "running":
        return
    if not core.ledger.update_sweep_run(run.sweep_id, run.idx, only_if_state=run.state, state="launching",
                                        claimed_at=now_iso()):
        return  # another supervisor (or the server) has it
    request = TrainingRequest.model_validate_json(run.request_json)
    access = Access.from_record(sweep.access_json)  # the rights it was submitted under, whoever launches it now
    try:
        with access.serving():
            submission = core.for_caller(access).submit_training(request, sweep_run=True)
    except TrainError as exc:
        # a key already naming a job of another kind never frees itself: failed, or it is retried forever
        transient = not isinstance(exc, KeyConflict) and (
            isinstance(exc, HubUnreachable | SubmissionUnknown | SubmissionInProgress)
            or core.ledger.by_idempotency_key(request.idempotency_key) is not None)  # posted or being posted
        core.ledger.update_sweep_run(run.sweep_id, run.idx, only_if_state="launching",
                                     **({"state": "queued"} if transient else
                                        {"state": "failed", "note": scrub(str(exc), hub_token())[:500]}))
        return
    if not core.ledger.update_sweep_run(run.sweep_id, run.idx, only_if_state="launching", state="launched",
                                        job_id=submission.job_id):
        adopted(core.ledger, request.idempotency_key, submission.job_id)  # a cancel marked it meanwhile: it keeps its job
    if core.ledger.sweep(run.sweep_id).state == "canceled":  # canceled while this run was being posted
        if cancel_runs(core, run.sweep_id).failed:  # its cancel failed: the supervisor retries it
            ensure_supervised(core, core.ledger.sweep(run.sweep_id))


def _run_job(core: JobControl, run: SweepRunRecord, *, recover: bool) -> str | None:
    """The job of a run being launched, once the ledger holds it under the run's key; recover: look its
    submission up on the Hub now (its launcher may have been killed between the POST and the ledger write)."""
    key = run_key(run.sweep_id, run.idx)
    record = core.ledger.by_idempotency_key(key)
    if record is None:
        return None  # nothing was posted: no reservation, so no journal either
    if record.job_id.startswith((PENDING, SUBMITTING)):
        record = core.recover_submission(key) if recover else None
    if record is None:
        return None
    core.ledger.update_sweep_run(run.sweep_id, run.idx, only_if_state=run.state, state="launched",
                                 job_id=record.job_id)
    return record.job_id


def _lock(sweep_id: str) -> Path:
    folder = data_home() / "sweeps"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{sweep_id}.lock"


def supervisor_alive(sweep_id: str) -> bool:
    """Whether a supervisor holds the sweep's lock."""
    with open(_lock(sweep_id), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def ensure_supervised(core: JobControl, sweep: SweepRecord | None) -> None:
    """Start the sweep's supervisor unless it has ended (a canceled one: once no run's cancel is retried) or one
    holds the sweep's lock. The lock is taken here and handed to the supervisor started (an inherited descriptor),
    so it is held before it starts: a retry while it imports cannot start a second, the pid file names the one."""
    if sweep is None or (sweep.state != "running" and not cancel_pending(core.ledger, sweep)):
        return
    spawn_once(_lock(sweep.sweep_id), [sys.executable, "-m", "hf_train_mcp.shell.sweep_supervisor", sweep.sweep_id],
               lock_env=LOCK_FD_ENV)


def resume(core: JobControl) -> None:
    """Supervise again every sweep still running (a supervisor dies with its machine or container)."""
    for sweep in [*core.ledger.sweeps(state="running"), *core.ledger.sweeps(state="canceled")]:
        ensure_supervised(core, sweep)  # a canceled one only while a run's cancel is still retried


def supervise_once(core: JobControl, sweep_id: str) -> bool:
    """One look at a sweep: note each active run's progress, prune, start queued runs into free slots (a canceled
    sweep: cancel again the runs whose cancel failed). Whether the sweep still needs watching."""
    sweep = core.ledger.sweep(sweep_id)
    if sweep is not None and cancel_pending(core.ledger, sweep):  # canceled, but a run's job still bills
        return bool(cancel_runs(core, sweep_id).failed)
    if sweep is None or sweep.state != "running":
        return False
    runs = core.ledger.sweep_runs(sweep_id)
    for i, run in enumerate(runs):  # a launch whose job crash recovery has recorded since: launched
        if run.state == "launching" and not run.job_id and (job_id := _run_job(core, run, recover=False)):
            runs[i] = replace(run, state="launched", job_id=job_id)
    name, lower = watched(json.loads(sweep.request_json)["base"].get("method") or "sft")
    active = [run for run in runs if run.state == "launching" and not _stale(run)]
    looked = [run for run in runs if run.state == "launched" and run.job_id]
    unreachable = 0
    for run, report in zip(looked, read_all(lambda run: core.job_status(run.job_id, tail=0), looked)):
        if isinstance(report, TrainError):
            active.append(run)  # unreachable for now: it still holds its slot
            unreachable += 1
            continue
        if report.stage in TERMINAL_STAGES:
            continue
        active.append(run)
        step, total, value = report.progress.step, report.progress.total_steps, report.last_metrics.get(name)
        history = run.history
        if step and value is not None and (not history or history[-1][0] < step):
            run.history_json = json.dumps([*history, [step, total, value]])
            core.ledger.update_sweep_run(sweep_id, run.idx, history_json=run.history_json)
    if looked and unreachable == len(looked):
        raise HubUnreachable(f"no job of sweep {sweep_id} could be read: the backend did not answer")
    if sweep.prune:
        reference = {run.idx: run.history for run in runs if run.state not in ("pruned", "failed")}
        for index, value, median in trailing(reference, {run.idx for run in active if run.state == "launched"},
                                             lower_is_better=lower):
            run = next(r for r in active if r.idx == index)
            if prune(core, run, name, value, median):
                active.remove(run)
    waiting = [run for run in runs if run.state == "queued" or _stale(run)]
    for run in waiting[:max(0, sweep.max_parallel - len(active))]:
        launch(core, run)
    if not waiting and not active:
        core.ledger.set_sweep_state(sweep_id, "finished", only_if_state="running")
        return False
    return True


def prune(core: JobControl, run: SweepRunRecord, metric: str, value: float, median: float) -> bool:
    """Cancel a trailing run (first: a run marked pruned must have stopped billing), then record the saving."""
    try:
        core.cancel_job(run.job_id)
    except TrainError:
        return False  # still running and still holding its slot: try again next look
    step, total, _ = run.history[-1]
    left = 1 - step / total if total else 0.0
    core.ledger.update_sweep_run(
        run.sweep_id, run.idx, only_if_state="launched", state="pruned",
        saved_usd=round((run.estimated_cost_usd or 0.0) * left, 2),
        note=f"pruned at step {step}/{total}: {metric} {value:.4g} vs the others' {median:.4g} at that step")
    return True


def cancel_sweep(core: JobControl, sweep_id: str) -> tuple[str, str]:
    """Stop a sweep: no queued run starts, every started run is canceled, and so is a run being launched,
    whose job is looked up by its key (on the Hub too: its launcher may have been killed mid-POST). One whose
    job is not found yet is canceled by its launcher once posted, or by crash recovery once found; one whose
    cancel fails is said, and retried by the sweep's supervisor. (the stage to answer, what was done)"""
    core.ledger.set_sweep_state(sweep_id, "canceled", only_if_state="running")
    dropped = pending = 0
    for run in core.ledger.sweep_runs(sweep_id):
        if run.state in ("queued", "launching") and not run.job_id and _run_job(core, run, recover=True) is None:
            if core.ledger.update_sweep_run(sweep_id, run.idx, only_if_state=run.state, state="canceled",
                                            note="the sweep was canceled"):
                dropped += run.state == "queued"
                pending += run.state == "launching"
    done = cancel_runs(core, sweep_id)
    canceled, failed = done.canceled, done.failed
    said = f"sweep canceled: {canceled} started run(s) canceled, {dropped} queued run(s) dropped" + (
        f"; {pending} run(s) being submitted are canceled once their job appears" if pending else "")
    if failed:
        ensure_supervised(core, core.ledger.sweep(sweep_id))
        said += "".join(f"; run {f.index} (job {f.job_id}) could not be canceled ({f.why}) and still bills"
                        for f in failed) + f": its supervisor retries until it has ended (or call cancel_job({sweep_id}))"
    return (failed[0].stage if failed else "CANCELED"), said


@dataclass(frozen=True)
class FailedCancel:
    """A run whose job could not be canceled: it still bills until its supervisor's retry succeeds."""

    index: int
    job_id: str
    stage: str
    why: str


@dataclass(frozen=True)
class RunsCanceled:
    canceled: int  # jobs whose cancel was accepted
    failed: list[FailedCancel]


def cancel_runs(core: JobControl, sweep_id: str) -> RunsCanceled:
    """Cancel the job of each launched run of a canceled sweep that still goes, one failing stopping none of the
    others."""
    canceled, failed = 0, []
    for run in (r for r in core.ledger.sweep_runs(sweep_id) if r.state == "launched" and r.job_id):
        try:
            if core.job_stage(run.job_id) not in SETTLED_STAGES:
                core.cancel_job(run.job_id)
                canceled += 1
        except TrainError as exc:
            core.ledger.update_sweep_run(sweep_id, run.idx, note=CANCEL_FAILED)
            stage = getattr(core.ledger.get(run.job_id), "stage", "RUNNING")
            failed.append(FailedCancel(run.idx, run.job_id, stage, scrub(str(exc), hub_token())[:300]))
        else:
            if run.note == CANCEL_FAILED:
                core.ledger.update_sweep_run(sweep_id, run.idx, note="canceled with its sweep")
    return RunsCanceled(canceled, failed)


def cancel_pending(ledger: Ledger, sweep: SweepRecord) -> bool:
    """A canceled sweep with a run whose cancel failed: its supervisor must retry it."""
    return sweep.state == "canceled" and any(r.note == CANCEL_FAILED for r in ledger.sweep_runs(sweep.sweep_id))


def check_access(access: Access, sweep: Any) -> None:
    """A sweep on this machine is as out of reach as its jobs for a caller who may not run local jobs."""
    backends.check_permission(sweep.backend, access)
