"""A sweep planned before anything is launched: every run of the grid planned like a submission, pinned to what
was approved (backend, flavor, timeout, its own worst case) and the whole sweep's worst case held to the budget."""

import hashlib
import json
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hf_train_mcp import backends
from hf_train_mcp.access import question_name
from hf_train_mcp.errors import BudgetError, TrainError
from hf_train_mcp.jobs.keys import KEY_PREFIX, refuse_reserved_key
from hf_train_mcp.jobs.prepared import Prepared, Progress
from hf_train_mcp.planning.budget import operator_cap, worst_case_usd
from hf_train_mcp.contract.requests import SweepRequest, TrainingRequest


def run_key(sweep_id: str, index: int) -> str:
    return f"{sweep_id}-{index}"


def _cents_up(amount: float) -> float:
    return math.ceil(round(amount * 100, 6)) / 100


@dataclass(frozen=True)
class PlannedRun:
    """One run of a sweep as approved: its grid values, its pinned request, its plan."""

    params: dict[str, Any]
    pinned: TrainingRequest
    prepared: Prepared


@dataclass
class SweepPlan:
    """A sweep planned and checked, not launched: what a confirmation shows and what submit_sweep stores."""

    req: SweepRequest
    sweep_id: str
    backend_name: str
    runs: list["PlannedRun"]
    warnings: list[str] = field(default_factory=list)
    new_upload_bytes: int | None = None  # the local files its runs read that the bucket lacks, once asked

    @property
    def worst_case_cost_usd(self) -> float:
        """What the runs may bill at most: the sum of their pinned caps."""
        return round(sum(run.pinned.max_cost_usd or 0.0 for run in self.runs), 2)

    @property
    def estimated_cost_usd(self) -> float | None:
        costs = [run.prepared.common.get("estimated_cost_usd") for run in self.runs]
        return None if any(c is None for c in costs) else round(sum(costs), 2)

    @property
    def common(self) -> dict[str, Any]:
        """What a confirmation question reads (as of one submission's plan)."""
        flavors = sorted({run.prepared.common["flavor"] for run in self.runs})
        timeouts = sorted({run.prepared.common["timeout"] for run in self.runs})
        hours = [run.prepared.common.get("estimated_hours") for run in self.runs]
        return {"flavor": ", ".join(flavors), "timeout": f"{', '.join(timeouts)} each",
                "estimated_hours": None if any(h is None for h in hours) else sum(hours),
                "estimated_cost_usd": self.estimated_cost_usd}

    @property
    def summary(self) -> str:
        first = self.runs[0].prepared
        return f"a sweep of {len(self.runs)} {first.plan.method.upper()} runs of {question_name(first.model)}"

    @property
    def nodes(self) -> int:
        """The machines each run takes (a sweep's runs share their shape)."""
        return max(run.prepared.nodes for run in self.runs)


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


def plan_sweep(preview: Callable[[TrainingRequest], Prepared], req: SweepRequest, backend_name: str,
               progress: Progress | None) -> SweepPlan:
    """Plan every run (data, memory fit, flavor, timeout, per-run budget) and check the sum of their worst
    cases against max_cost_usd and the operator's cap; raise before anything is launched. preview(run): a
    training run's plan, as a submission previews it."""
    refuse_reserved_key(req.idempotency_key)
    sweep_id = sweep_id_for(req.idempotency_key)
    combos = req.combinations()
    runs = []
    for index, params in enumerate(combos):
        if progress:
            progress(f"planning run {index + 1} of {len(combos)}: {json.dumps(params)}")
        run = run_request(req, params, sweep_id, index)
        try:
            prepared = preview(run)
        except TrainError as exc:
            raise type(exc)(f"the run with {json.dumps(params)} cannot be launched: {exc}") from None  # same code
        runs.append(PlannedRun(params=params, pinned=pin(prepared, backend_name), prepared=prepared))
    plan = SweepPlan(req=req, sweep_id=sweep_id, backend_name=backend_name, runs=runs)
    check_sweep_budget(req, plan)
    plan.warnings = sorted({w for run in runs for w in run.prepared.plan.warnings})
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
    each = max(run.pinned.max_cost_usd or 0.0 for run in plan.runs)
    raise BudgetError(
        f"the sweep's worst case ${worst:.2f} ({len(plan.runs)} runs, each up to ${each:.2f}: timeout x price) is "
        f"over {name} (${budget:.2f}); nothing was launched. Send fewer grid values (or max_runs), a shorter "
        f"timeout or max_steps in base, a cheaper flavor, or raise the budget.")
