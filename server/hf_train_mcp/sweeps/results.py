"""What submit_sweep and compare_runs answer: a sweep's runs as they stand, and the runs (or any jobs of the
ledger) ranked on one metric, evaluations included, with the settings that differ between them (to a remote
caller, hyperparameters only)."""

import json
import math
from dataclasses import dataclass, field
from typing import Any

from hf_train_mcp.errors import TrainError, NotFoundError
from hf_train_mcp.jobs.ledger import SweepRecord, SweepRunRecord
from hf_train_mcp.stages import SETTLED_STAGES
from hf_train_mcp.contract.requests import CompareRequest, TrainingRequest
from hf_train_mcp.contract.results import Comparison, RunRow, SweepResult, SweepRun
from hf_train_mcp.sweeps.job_control import JobControl
from hf_train_mcp.sweeps.plan import SweepPlan
from hf_train_mcp.sweeps.pruning import watched
from hf_train_mcp.sweeps.sweep import check_access, ensure_supervised, read_all

# request fields that differ between runs without being what was compared
NOT_PARAMS = frozenset({"idempotency_key", "run_name", "project", "hub_model_id", "dry_run", "timeout", "flavor",
                        "max_cost_usd", "trackio_space_id", "output_bucket"})


def sweep_result(core: JobControl, sweep: SweepRecord, warnings: list[str]) -> SweepResult:
    jobs = []
    for run in core.ledger.sweep_runs(sweep.sweep_id):
        job = core.ledger.get(run.job_id) if run.job_id else None
        jobs.append(SweepRun(index=run.idx, params=run.params, state=run.state, job_id=run.job_id,
                             stage=job.stage if job else None, job_url=job.job_url if job else None,
                             model_url=job.model_url if job else None,
                             worst_case_cost_usd=run.worst_case_cost_usd, note=run.note))
    queued = sum(job.state == "queued" for job in jobs)
    later = (f" {queued} run(s) wait for a free slot (max_parallel={sweep.max_parallel}) and start by themselves."
             if queued else "")
    return SweepResult(
        sweep_id=sweep.sweep_id, backend=sweep.backend, jobs=jobs, estimated_cost_usd=sweep.estimated_cost_usd,
        worst_case_cost_usd=sweep.worst_case_cost_usd or 0.0, max_parallel=sweep.max_parallel,
        trackio_url=sweep.trackio_url, warnings=[*json.loads(sweep.warnings_json), *warnings],
        next_step=f"compare_runs(sweep_id={sweep.sweep_id!r}) ranks the runs as they train; cancel_job("
                  f"job_id={sweep.sweep_id!r}) stops the whole sweep.{later}")


def dry_run_result(plan: SweepPlan) -> SweepResult:
    jobs = [SweepRun(index=index, params=run.params, state="queued",
                     worst_case_cost_usd=run.prepared.worst_case_cost_usd,
                     note=f"{run.prepared.common['flavor']}, timeout {run.prepared.common['timeout']}")
            for index, run in enumerate(plan.runs)]
    return SweepResult(
        sweep_id=None, backend=plan.backend_name, jobs=jobs, estimated_cost_usd=plan.estimated_cost_usd,
        worst_case_cost_usd=plan.worst_case_cost_usd, max_parallel=plan.req.max_parallel,
        trackio_url=plan.runs[0].prepared.trackio_url, warnings=plan.warnings,
        next_step="dry run: nothing was launched. Call again without dry_run (with an idempotency_key) to start it.")


def lower_is_better(metric: str) -> bool:
    return any(word in metric.lower() for word in ("loss", "perplexity", "ppl", "error", "runtime"))


EVALUATION = "evaluation/"  # the metrics of a run's evaluation job, kept apart from its training numbers
# the default ranking metric: the first that every run with metrics reports (a classifier's accuracy before its
# loss: what the family is judged by)
DEFAULT_METRICS = (EVALUATION + "eval_loss", EVALUATION + "preference_accuracy", EVALUATION + "mean_reward",
                   EVALUATION + "accuracy", EVALUATION + "cosine_accuracy", EVALUATION + "spearman", "eval_accuracy",
                   "eval_loss")


def default_metric(measured: list[dict[str, float]], method: str) -> str:
    """The first of DEFAULT_METRICS that every measured run reports, else what the method's runs are watched by."""
    return next((m for m in DEFAULT_METRICS if measured and all(m in metrics for metrics in measured)),
                watched(method).metric)


def compare(core: JobControl, req: CompareRequest) -> Comparison:
    warnings: list[str] = []
    compared = _compared(core, req)
    sweep = compared.sweep
    rows = read_all(lambda entry: _row(core, *entry), compared.entries)  # at once: each silent job's log read waits
    failed = next((row for row in rows if isinstance(row, TrainError)), None)
    if failed is not None:
        raise failed
    if sweep is not None and sweep.state == "running" and all(
            row.state not in ("queued", "launching") and (row.stage is None or row.stage in SETTLED_STAGES)
            for row in rows):
        core.ledger.set_sweep_state(sweep.sweep_id, "finished", only_if_state="running")
        sweep = core.ledger.sweep(sweep.sweep_id)
    measured = [row for row in rows if row.metrics]
    metric = req.metric or default_metric([row.metrics for row in measured], compared.method)
    lower = lower_is_better(metric)
    scored = [row for row in rows if metric in row.metrics and math.isfinite(row.metrics[metric])]
    scored.sort(key=lambda row: row.metrics[metric] if lower else -row.metrics[metric])
    diverged = [row for row in rows if metric in row.metrics and not math.isfinite(row.metrics[metric])]
    if diverged:
        warnings.append(f"{len(diverged)} run(s) report a {metric} that is not a number (diverged): ranked last")
    finished = [row for row in scored if row.stage == "COMPLETED"]
    best = (finished or scored or [None])[0]
    if best is not None and not finished:
        warnings.append("no run has completed yet: best_job_id is the best so far")
    if not scored:
        warnings.append(f"no run reports {metric!r} yet")
    saved = round(sum(run.saved_usd or 0.0 for run in compared.runs), 2) if sweep else None
    winner = best.job_id if best else None
    return Comparison(
        metric=metric, lower_is_better=lower, best_job_id=winner,
        runs=scored + diverged + [row for row in rows if metric not in row.metrics],
        sweep_state=sweep.state if sweep else None, saved_usd=saved, warnings=warnings,
        next_step=(f"evaluate_model(model={winner!r}) on held-out data, then export_model(model={winner!r})"
                   if winner and finished else "call again when the runs have trained further"))


@dataclass(frozen=True)
class _Compared:
    """What compare_runs ranks: the sweep (None for job ids), each entry's job id, shown settings and run state,
    the runs' method, and the sweep's runs as read first."""

    sweep: SweepRecord | None
    entries: list[tuple[str | None, dict[str, Any], str | None]]
    method: str
    runs: list[SweepRunRecord] = field(default_factory=list)


def _compared(core: JobControl, req: CompareRequest) -> _Compared:
    if req.sweep_id:
        sweep = core.ledger.sweep(req.sweep_id)
        if sweep is None:
            raise NotFoundError(f"no sweep {req.sweep_id!r} in this server's ledger: pass a sweep_id from submit_sweep")
        check_access(core.access, sweep)
        ensure_supervised(core, sweep)
        runs = core.ledger.sweep_runs(sweep.sweep_id)
        entries = [(run.job_id, shown_params(run.params, core.access.remote), run.state) for run in runs]
        return _Compared(sweep, entries, json.loads(sweep.request_json)["base"].get("method") or "sft", runs)
    records = []
    for job_id in dict.fromkeys(req.job_ids or []):
        record = core.ledger.get(job_id)
        if record is None:
            raise NotFoundError(f"job {job_id!r} is not in this server's ledger: compare_runs compares jobs it "
                             "launched (list_jobs lists them)")
        records.append(record)
    entries = [(record.job_id, shown_params(params, core.access.remote), None)
               for record, params in zip(records, differing(records))]
    return _Compared(None, entries, records[0].method or "sft")


def _row(core: JobControl, job_id: str | None, params: dict[str, Any], state: str | None) -> RunRow:
    if job_id is None:
        return RunRow(job_id=None, stage=None, params=params, metrics={}, state=state)
    report = core.job_status(job_id, tail=0)
    return RunRow(job_id=job_id, stage=report.stage, params=params, state=state,
                  metrics={**report.last_metrics, **evaluated(core, job_id)},
                  progress_percent=report.progress.percent)


def evaluated(core: JobControl, job_id: str) -> dict[str, float]:
    """The metrics of the job's latest completed evaluation, as evaluation/<name>."""
    for child in reversed(core.ledger.children([job_id], "evaluate")):
        if child.stage == "COMPLETED":
            return {EVALUATION + name: value for name, value in core.job_status(child.job_id, tail=0).last_metrics.items()}
    return {}


def _literal(annotation: Any) -> bool:
    """Whether a field takes only the server's own words (a Literal, or a list of them)."""
    from typing import Literal, get_args, get_origin

    return get_origin(annotation) is Literal or any(_literal(arg) for arg in get_args(annotation))


_NEVER_SHOWN = frozenset({"reward_code", "script", "env"})  # code (a run_script job's source) and its environment


def shown_params(params: dict[str, Any], remote: bool) -> dict[str, Any]:
    """What compare_runs shows of a run's settings: never code; to a remote caller only hyperparameters (numbers,
    switches and fixed choices), not names of models, data or repos that another user's run may hold."""
    fields = TrainingRequest.model_fields
    shown = {}
    for name, value in params.items():
        if name in _NEVER_SHOWN:
            continue
        plain = value is None or isinstance(value, bool | int | float)
        if remote and not plain and not (name in fields and _literal(fields[name].annotation)):
            continue
        shown[name] = value
    return shown


def differing(records: list) -> list[dict[str, Any]]:
    """For each job, the request fields whose values differ between the jobs (what was compared)."""
    requests = [record.request for record in records]
    names = sorted({name for request in requests for name in request} - NOT_PARAMS)
    varying = [name for name in names if len({json.dumps(r.get(name), sort_keys=True) for r in requests}) > 1]
    return [{name: request.get(name) for name in varying} for request in requests]

