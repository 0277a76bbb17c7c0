"""Sweeps: a grid of training runs under one budget, started at most max_parallel at a time, and pruned when a
run's loss trails the others' (ranking.py compares them).

The server plans every run and checks the whole sweep's worst case before anything is launched, stores the
sweep in the ledger and starts the first runs; a detached supervisor (`python -m hf_train_mcp.shell.sweep_supervisor`, its own
session, like the local runner) starts the rest as slots free up, so a sweep goes on when the conversation (and a
stdio server with it) has ended. Each run is an ordinary keyed submission (`<sweep_id>-<index>`), so however
often a launch is retried, by whichever process, a run is one job.
"""

import contextvars
import fcntl
import hashlib
import json
import math
import os
import statistics
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hf_train_mcp import backends, methods

from hf_train_mcp.jobs import retries
from hf_train_mcp.backends.base import SubmissionUnknown
from hf_train_mcp.access import question_name
from hf_train_mcp.detach import spawn_once
from hf_train_mcp.errors import TrainError, BudgetError
from hf_train_mcp.jobs.host import Host
from hf_train_mcp.hub import HubUnreachable, hub_token, scrub
from hf_train_mcp.stages import SETTLED_STAGES, TERMINAL_STAGES
from hf_train_mcp.jobs.ledger import PENDING, SUBMITTING, KeyConflict, SubmissionInProgress, SweepRecord
from hf_train_mcp.jobs.keys import KEY_PREFIX, adopted, refuse_reserved_key
from hf_train_mcp.jobs.ledger import SweepRunRecord, now_iso
from hf_train_mcp.paths import data_home
from hf_train_mcp.jobs.prepared import Prepared
from hf_train_mcp.planning.budget import operator_cap, worst_case_usd
from hf_train_mcp.contract.requests import SweepRequest, TrainingRequest


LOCK_FD_ENV = "HF_TRAIN_SWEEP_LOCK_FD"  # the supervisor's lock, taken and handed over by the process starting it
READERS = 8  # jobs read at once: a silent running job's log read waits seconds, the Hub rate-limits a flood
PRUNE_MARGIN = 0.10  # a run is pruned when its loss is this much above the others' median at the same step
PRUNE_AFTER = 0.2  # ... and only after this fraction of its steps (early losses are noise)
PRUNE_FLOOR = 0.1  # the margin is at least 10% of this (a loss or reward near 0 makes any gap relative-huge)
STALE_LAUNCH_S = 600  # a launch claimed this long ago by a process that has not finished it is taken over
CANCEL_FAILED = "the sweep was canceled, but canceling this run's job failed: retried until it has ended"
POLL_ENV = "HF_TRAIN_SWEEP_POLL_S"
POLL_DEFAULT_S = 30.0
# request fields that differ between runs without being what was compared
NOT_PARAMS = frozenset({"idempotency_key", "run_name", "project", "hub_model_id", "dry_run", "timeout", "flavor",
                        "max_cost_usd", "trackio_space_id", "output_bucket"})


def poll_seconds() -> float:
    try:
        return max(0.1, float(os.environ.get(POLL_ENV, POLL_DEFAULT_S)))
    except ValueError:
        return POLL_DEFAULT_S


def run_key(sweep_id: str, index: int) -> str:
    return f"{sweep_id}-{index}"


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


def _cents_up(amount: float) -> float:
    return math.ceil(round(amount * 100, 6)) / 100


# --- planning ------------------------------------------------------------------------------------------------
@dataclass
class SweepPlan:
    """A sweep planned and checked, not launched: what a confirmation shows and what submit_sweep stores."""

    req: SweepRequest
    sweep_id: str
    backend_name: str
    runs: list[tuple[dict[str, Any], TrainingRequest, Prepared]]  # params, pinned request, its plan
    warnings: list[str] = field(default_factory=list)

    @property
    def worst_case_cost_usd(self) -> float:
        """What the runs may bill at most: the sum of their pinned caps."""
        return round(sum(pinned.max_cost_usd or 0.0 for _, pinned, _ in self.runs), 2)

    @property
    def estimated_cost_usd(self) -> float | None:
        costs = [prepared.common.get("estimated_cost_usd") for _, _, prepared in self.runs]
        return None if any(c is None for c in costs) else round(sum(costs), 2)

    @property
    def common(self) -> dict[str, Any]:
        """What a confirmation question reads (as of one submission's plan)."""
        flavors = sorted({prepared.common["flavor"] for _, _, prepared in self.runs})
        timeouts = sorted({prepared.common["timeout"] for _, _, prepared in self.runs})
        hours = [prepared.common.get("estimated_hours") for _, _, prepared in self.runs]
        return {"flavor": ", ".join(flavors), "timeout": f"{', '.join(timeouts)} each",
                "estimated_hours": None if any(h is None for h in hours) else sum(hours),
                "estimated_cost_usd": self.estimated_cost_usd}

    @property
    def summary(self) -> str:
        first = self.runs[0][2]
        return f"a sweep of {len(self.runs)} {first.plan.method.upper()} runs of {question_name(first.model)}"

    @property
    def nodes(self) -> int:
        """The machines each run takes (a sweep's runs share their shape)."""
        return max(prepared.nodes for _, _, prepared in self.runs)


def run_request(req: SweepRequest, params: dict[str, Any], sweep_id: str, index: int) -> TrainingRequest:
    """One run's submit_training request: the base, its grid values, its own key, output repo and run name, all
    in one Trackio project."""
    base = dict(req.base)
    own: dict[str, Any] = {"idempotency_key": run_key(sweep_id, index), "dry_run": req.dry_run,
                           "project": base.pop("project", None) or sweep_id,
                           "run_name": f"{base.pop('run_name', None) or sweep_id}-{index}"[:96]}
    if base.get("hub_model_id"):
        owner, name = base.pop("hub_model_id").split("/")
        own["hub_model_id"] = f"{owner}/{name[:90].rstrip('.-_')}-{index}"
    return TrainingRequest(**base, **params, **own)


def sweep_id_for(key: str | None) -> str:
    """A keyed sweep's id follows from its key: a retry after the ledger was lost names the same runs
    (`<sweep_id>-<i>`), whose jobs the Hub finds by their key labels instead of launching them again."""
    if key is None:
        return KEY_PREFIX + uuid.uuid4().hex[:12]
    return KEY_PREFIX + hashlib.sha256(f"sweep:{key}".encode()).hexdigest()[:12]


def plan_sweep(core: Host, req: SweepRequest, backend_name: str, progress) -> SweepPlan:
    """Plan every run (data, memory fit, flavor, timeout, per-run budget) and check the sum of their worst
    cases against max_cost_usd and the operator's cap; raise before anything is launched."""
    refuse_reserved_key(req.idempotency_key)
    sweep_id = sweep_id_for(req.idempotency_key)
    combos = req.combinations()
    runs = []
    for index, params in enumerate(combos):
        if progress:
            progress(f"planning run {index + 1} of {len(combos)}: {json.dumps(params)}")
        run = run_request(req, params, sweep_id, index)
        try:
            prepared = core.preview(run, kind="train")
        except TrainError as exc:
            raise type(exc)(f"the run with {json.dumps(params)} cannot be launched: {exc}") from None  # same code
        runs.append((params, pin(prepared, backend_name), prepared))
    plan = SweepPlan(req=req, sweep_id=sweep_id, backend_name=backend_name, runs=runs)
    check_sweep_budget(req, plan)
    plan.warnings = sorted({w for _, _, prepared in runs for w in prepared.plan.warnings})
    return plan


def pin(prepared: Prepared, backend_name: str) -> TrainingRequest:
    """The run as approved (paths resolved, the validated mapping adopted): its backend, flavor and timeout
    fixed, and its worst case as its own max_cost_usd, so a run started later by the supervisor cannot run
    elsewhere or cost more than the sweep was approved for."""
    update: dict[str, Any] = {"timeout": prepared.plan.timeout_seconds, "backend": backend_name}
    if backends.traits(backend_name).chooses_flavor:  # a fixed hardware has no flavor to pin
        update["flavor"] = prepared.plan.flavor
    price = prepared.plan.usd_per_hour
    if price:  # the exact worst case, up to the cent (the plan's is rounded either way)
        update["max_cost_usd"] = _cents_up(worst_case_usd(prepared.plan.timeout_seconds, price))
    return prepared.req.model_copy(update=update)


def check_sweep_budget(req: SweepRequest, plan: SweepPlan) -> None:
    limits = [(v, name) for v, name in ((req.max_cost_usd, "max_cost_usd"),
                                        (operator_cap(), "this server's cap HF_TRAIN_MAX_COST_USD")) if v is not None]
    worst = plan.worst_case_cost_usd
    if not limits or worst == 0:
        return
    budget, name = min(limits)
    if round(worst, 5) <= round(budget, 5):
        return
    each = max(pinned.max_cost_usd or 0.0 for _, pinned, _ in plan.runs)
    raise BudgetError(
        f"the sweep's worst case ${worst:.2f} ({len(plan.runs)} runs, each up to ${each:.2f}: timeout x price) is "
        f"over {name} (${budget:.2f}); nothing was launched. Send fewer grid values (or max_runs), a shorter "
        f"timeout or max_steps in base, a cheaper flavor, or raise the budget.")


# --- launching -----------------------------------------------------------------------------------------------
def store_and_start(core: Host, plan: SweepPlan, progress) -> tuple[SweepRecord, list[str]]:
    """Store the sweep (or find the one its key already names), start its first max_parallel runs, then its
    supervisor (a server that dies in between leaves a running sweep, which the next server start resumes)."""
    req = plan.req
    first = plan.runs[0][2]
    record = SweepRecord(
        sweep_id=plan.sweep_id, idempotency_key=req.idempotency_key, created_at=now_iso(),
        backend=plan.backend_name, request_json=req.model_dump_json(), max_parallel=req.max_parallel,
        prune=int(req.prune), state="running", estimated_cost_usd=plan.estimated_cost_usd,
        worst_case_cost_usd=plan.worst_case_cost_usd, trackio_url=first.trackio_url,
        warnings_json=json.dumps(plan.warnings))
    runs = [SweepRunRecord(sweep_id=plan.sweep_id, idx=index, params_json=json.dumps(params),
                           request_json=pinned.model_dump_json(), state="queued",
                           estimated_cost_usd=prepared.common.get("estimated_cost_usd"),
                           worst_case_cost_usd=pinned.max_cost_usd or 0.0)
            for index, (params, pinned, prepared) in enumerate(plan.runs)]
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


def launch(core: Host, run: SweepRunRecord) -> None:
    """Claim a queued run, submit it (its key makes a retry return the job already posted), record its job."""
    sweep = core.ledger.sweep(run.sweep_id)
    if sweep is None or sweep.state != "running":
        return
    if not core.ledger.update_sweep_run(run.sweep_id, run.idx, only_if_state=run.state, state="launching",
                                        claimed_at=now_iso()):
        return  # another supervisor (or the server) has it
    request = TrainingRequest.model_validate_json(run.request_json)
    try:
        submission = core.submit_training(request, sweep_run=True)
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
        adopted(core, request.idempotency_key, submission.job_id)  # a cancel marked it meanwhile: it keeps its job
    if core.ledger.sweep(run.sweep_id).state == "canceled":  # canceled while this run was being posted
        if cancel_runs(core, run.sweep_id)[1]:  # its cancel failed: the supervisor retries it
            ensure_supervised(core, core.ledger.sweep(run.sweep_id))


def _run_job(core: Host, run: SweepRunRecord, *, recover: bool) -> str | None:
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


def ensure_supervised(core: Host, sweep: SweepRecord | None) -> None:
    """Start the sweep's supervisor unless it has ended (a canceled one: once no run's cancel is retried) or one
    holds the sweep's lock. The lock is taken here and handed to the supervisor started (an inherited descriptor),
    so it is held before it starts: a retry while it imports cannot start a second, the pid file names the one."""
    if sweep is None or (sweep.state != "running" and not cancel_pending(core, sweep)):
        return
    spawn_once(_lock(sweep.sweep_id), [sys.executable, "-m", "hf_train_mcp.shell.sweep_supervisor", sweep.sweep_id],
               lock_env=LOCK_FD_ENV)


def resume(core: Host) -> None:
    """Supervise again every sweep still running (a supervisor dies with its machine or container)."""
    for sweep in [*core.ledger.sweeps(state="running"), *core.ledger.sweeps(state="canceled")]:
        ensure_supervised(core, sweep)  # a canceled one only while a run's cancel is still retried


def supervise_once(core: Host, sweep_id: str) -> bool:
    """One look at a sweep: note each active run's progress, prune, start queued runs into free slots (a canceled
    sweep: cancel again the runs whose cancel failed). Whether the sweep still needs watching."""
    sweep = core.ledger.sweep(sweep_id)
    if sweep is not None and cancel_pending(core, sweep):  # canceled, but a run's job still bills
        return bool(cancel_runs(core, sweep_id)[1])
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


def prune(core: Host, run: SweepRunRecord, metric: str, value: float, median: float) -> bool:
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


def cancel_sweep(core: Host, sweep_id: str) -> tuple[str, str]:
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
    canceled, failed = cancel_runs(core, sweep_id)
    said = f"sweep canceled: {canceled} started run(s) canceled, {dropped} queued run(s) dropped" + (
        f"; {pending} run(s) being submitted are canceled once their job appears" if pending else "")
    if failed:
        ensure_supervised(core, core.ledger.sweep(sweep_id))
        said += "".join(f"; run {i} (job {job}) could not be canceled ({why}) and still bills" for i, job, _, why
                        in failed) + f": its supervisor retries until it has ended (or call cancel_job({sweep_id}))"
    return (failed[0][2] if failed else "CANCELED"), said


def cancel_runs(core: Host, sweep_id: str) -> tuple[int, list[tuple[int, str, str, str]]]:
    """Cancel the job of each launched run of a canceled sweep that still goes, one failing stopping none of the
    others: (how many were canceled, [(run, job id, its stage, why) of each that failed])."""
    canceled, failed = 0, []
    for run in (r for r in core.ledger.sweep_runs(sweep_id) if r.state == "launched" and r.job_id):
        try:
            if core.job_stage(run.job_id) not in SETTLED_STAGES:
                core.cancel_job(run.job_id)
                canceled += 1
        except TrainError as exc:
            core.ledger.update_sweep_run(sweep_id, run.idx, note=CANCEL_FAILED)
            stage = getattr(core.ledger.get(run.job_id), "stage", "RUNNING")
            failed.append((run.idx, run.job_id, stage, scrub(str(exc), hub_token())[:300]))
        else:
            if run.note == CANCEL_FAILED:
                core.ledger.update_sweep_run(sweep_id, run.idx, note="canceled with its sweep")
    return canceled, failed


def cancel_pending(core: Host, sweep: SweepRecord) -> bool:
    """A canceled sweep with a run whose cancel failed: its supervisor must retry it."""
    return sweep.state == "canceled" and any(r.note == CANCEL_FAILED for r in core.ledger.sweep_runs(sweep.sweep_id))


# --- pruning -------------------------------------------------------------------------------------------------
def watched(method: str) -> tuple[str, bool]:
    """The training metric a method's runs are compared on while they train: (name, lower is better). GRPO's
    loss says little (it hovers near 0); its mean reward is what improves. A run_script job (method 'script')
    is compared on the loss its log reports."""
    if method not in methods.REGISTRY:
        return "loss", True
    return ("reward", False) if methods.get(method).eval_metric == "reward" else ("loss", True)


def loss_at(history: list[list[float]], step: float) -> float | None:
    """A run's value at `step`, interpolated between the points seen (None before its first or past its last)."""
    points = [(s, value) for s, _, value in history if value is not None]
    if not points or step > points[-1][0] or step < points[0][0]:
        return None
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if s0 <= step <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return points[-1][1]


def trailing(histories: dict[int, list[list[float]]], active: set[int], *, lower_is_better: bool = True,
             margin: float = PRUNE_MARGIN, after: float = PRUNE_AFTER) -> list[tuple[int, float, float]]:
    """(run, its value, the others' median) for each active run whose latest value is worse than the median of
    the other runs' values at the same step by more than `margin` (relative, at least PRUNE_FLOOR absolute),
    once past `after` of its steps. A run whose value is not a number (diverged) trails at once."""
    sign = 1.0 if lower_is_better else -1.0
    worse = []
    for index in sorted(active):
        history = histories.get(index) or []
        if not history:
            continue
        step, total, value = history[-1]
        if value is not None and not math.isfinite(value):
            worse.append((index, value, math.nan))
            continue
        if value is None or not total or step < after * total:
            continue
        others = [v for other, points in histories.items() if other != index
                  and (v := loss_at(points, step)) is not None and math.isfinite(v)]
        if not others:
            continue
        median = statistics.median(others)
        if sign * (value - median) > margin * max(abs(median), PRUNE_FLOOR) + 1e-9:
            worse.append((index, value, median))
    return worse
