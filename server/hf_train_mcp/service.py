"""The core both shells call: one short method per tool, plain pydantic in and out, TrainError for fixable problems.

A facade over the rooms that do the work, wired here with what each needs passed in: the planner (plan and
render), the launcher (post once, recover), following (status, logs, cancel, list), the estimator (time, money,
memory, measurements) and sweeps. Sweeps see the core as sweeps.job_control.JobControl and a run's nodes as
jobs.node_ranks.RunControl; no room imports this module.
"""

from collections.abc import Callable
from typing import Any

from hf_train_mcp import backends

from hf_train_mcp.jobs import node_ranks

from hf_train_mcp.jobs import keys, retries

from hf_train_mcp.sweeps import results as sweep_results

from hf_train_mcp.sweeps import sweep as sweeps  # its verbs read as sweeps.<verb>; tests patch them there
from hf_train_mcp.sweeps.plan import plan_sweep
from hf_train_mcp.access import STDIO, Access
from hf_train_mcp.backends.base import Backend, SubmissionUnknown
from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp.planning.estimation import Estimator
from hf_train_mcp.jobs.following import Following, Reading
from hf_train_mcp.hub import hub_token
from hf_train_mcp.jobs.launcher import Launcher, checked_run, claim_id, submission_of
from hf_train_mcp.jobs.ledger import PENDING, JobRecord, KeyConflict, Ledger, SubmissionInProgress
from hf_train_mcp.jobs.prepared import Prepared, Progress
from hf_train_mcp.contract.requests import CompareRequest, EstimateRequest, EvaluateRequest, ExportRequest, ScriptRequest
from hf_train_mcp.contract.requests import SweepRequest
from hf_train_mcp.contract.requests import TrainingRequest, ValidateRequest
from hf_train_mcp.contract.results import (CancelResult, Comparison, CostEstimate, DatasetReport, HardwareList, JobList,
                                  JobReport, LogPage, Submission, SweepResult)
from hf_train_mcp.planning import copies
from hf_train_mcp.planning.planner import Planner, default_backend, sweep_backend

__all__ = ["Core", "Prepared", "default_backend"]
Confirm = Callable[[Any], None]  # called with the plan before anything is launched; it raises to stop


class Core:
    def __init__(self, ledger: Ledger | None = None, access: Access = STDIO):
        self._ledger = ledger
        self.access = access
        self.launcher = Launcher(self, ledger=self._opened_ledger, backend=self.backend)
        self.following = Following(access=access, ledger=self._opened_ledger, backend=self.backend,
                                   recover=self.launcher.recover_submissions)
        self.planner = Planner(access=access, ledger=self._opened_ledger, job_stage=self.job_stage,
                               measured=self.finished_measurement, plan_sweep=plan_sweep)
        self.estimator = Estimator(planner=self.planner, access=access, ledger=self._opened_ledger,
                                   report=self.following.report, submit=self.submit_training)

    def for_caller(self, access: Access) -> "Core":
        """This core acting for a caller with `access` (a sweep's supervisor launching an HTTP caller's run)."""
        return self if access == self.access else Core(self.ledger, access)

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:  # opened on first use: tools/list must not touch the disk
            self._ledger = Ledger()
        return self._ledger

    def _opened_ledger(self) -> Ledger:
        return self.ledger

    def backend(self, name: str) -> Backend:
        return backends.open(name, access=self.access, token=hub_token())

    # --- the tools ----------------------------------------------------------------------------------------
    def validate_dataset(self, req: ValidateRequest, *, progress: Progress | None = None) -> DatasetReport:
        return validate_dataset(req.dataset, req.method, split=req.split, config=req.config,
                                column_mapping=req.column_mapping, model=req.model, max_length=req.max_length,
                                token=hub_token(), access=self.access, progress=progress)

    def estimate_cost(self, req: EstimateRequest, *, progress: Progress | None = None,
                      confirm: Confirm | None = None) -> CostEstimate:
        return self.estimator.estimate_cost(req, progress=progress, confirm=confirm)

    def submit_training(self, req: TrainingRequest, *, kind: str = "train", progress: Progress | None = None,
                        confirm: Confirm | None = None, sweep_run: bool = False) -> Submission:
        """kind='probe': the measurement job of estimate_cost(measure=True) (the preflight alone, nothing pushed).
        sweep_run: a run of a sweep, keyed by it."""
        return self._submit(req, kind, progress, confirm, sweep_run=sweep_run)

    def evaluate_model(self, req: EvaluateRequest, *, progress: Progress | None = None,
                       confirm: Confirm | None = None) -> Submission:
        return self._submit(req, "evaluate", progress, confirm)

    def export_model(self, req: ExportRequest, *, progress: Progress | None = None,
                     confirm: Confirm | None = None) -> Submission:
        return self._submit(req, "export", progress, confirm)

    def run_script(self, req: ScriptRequest, *, progress: Progress | None = None,
                   confirm: Confirm | None = None) -> Submission:
        return self._submit(req, "script", progress, confirm)

    def submit_sweep(self, req: SweepRequest, *, progress: Progress | None = None,
                     confirm: Confirm | None = None) -> SweepResult:
        existing = self.existing_submission(req)
        if existing is not None:
            self.check_sweep_access(existing)
            retries.check_same_sweep(existing, req)
            if backends.mounts_uploads(existing.backend) and copies.sweep_data_edited(
                    self.ledger, existing.sweep_id, req.base, self.access):
                raise KeyConflict(retries.conflict_message(req.idempotency_key, f"sweep {existing.sweep_id}",
                                                           [retries.CONTENT_FIELDS[2]]))
            sweeps.ensure_supervised(self, existing)
            return sweep_results.sweep_result(self, existing, [
                f"idempotency_key matched sweep {existing.sweep_id}: returned it instead of launching again"])
        plan = self.prepare(req, sweep_backend(req), kind="sweep", progress=progress)
        if req.dry_run:
            return sweep_results.dry_run_result(plan)
        if confirm is not None:
            confirm(plan)
        record, warnings = sweeps.store_and_start(self, plan, progress)
        return sweep_results.sweep_result(self, record, warnings)

    def compare_runs(self, req: CompareRequest) -> Comparison:
        return sweep_results.compare(self, req)

    def job_status(self, job_id: str, tail: int = 20) -> JobReport:
        return self.report(job_id, tail).report

    def job_logs(self, job_id: str, offset: int = 0, limit: int = 200) -> LogPage:
        return self.following.job_logs(job_id, offset, limit)

    def cancel_job(self, job_id: str) -> CancelResult:
        sweep = self.ledger.sweep(job_id) if job_id.startswith(keys.KEY_PREFIX) else None
        if sweep is not None:
            self.check_sweep_access(sweep)
            stage, message = sweeps.cancel_sweep(self, job_id)
            return CancelResult(job_id=job_id, stage=stage, message=message)
        return self.following.cancel(job_id)

    def list_jobs(self, stage: str | None = None, limit: int = 20) -> JobList:
        return self.following.list_jobs(stage, limit)

    def list_hardware(self) -> HardwareList:
        return self.estimator.list_hardware()

    # --- what sweeps and a run's nodes ask of the core (JobControl, RunControl), and the rooms' entry points ---
    def preview(self, req: Any, *, kind: str = "train", progress: Progress | None = None) -> Any:
        """Everything a submission decides before it launches, kept for a confirmation asked in between; kind
        'probe': the measurement job estimate_cost(measure=True) would launch (None when it would launch none)."""
        if kind == "probe":
            return self.estimator.measurement_preview(req, progress=progress)
        return self.planner.preview(req, kind=kind, progress=progress)

    def count_uploads(self, prepared: Any) -> None:
        """What of a previewed plan's local files the bucket lacks (prepared.new_upload_bytes): the upload question's
        figure."""
        self.launcher.count_uploads(prepared)

    def prepare(self, req: Any, backend_name: str, *, kind: str = "train", progress: Progress | None = None) -> Any:
        return self.planner.prepare(req, backend_name, kind=kind, progress=progress)

    def job_stage(self, job_id: str) -> str:
        """Only the stage (what a subscription watches): no logs read; a run across nodes, the run's."""
        if node_ranks.is_run(self.ledger.get(job_id.strip())):
            return self.report(job_id, 0).report.stage
        return self.following.state(job_id).state.stage

    def report(self, job_id: str, tail: int) -> Reading:
        return self.following.report(job_id, tail)

    def recover_submissions(self, *, now: bool = False) -> None:
        self.launcher.recover_submissions(now=now)

    def recover_submission(self, key: str) -> JobRecord | None:
        return self.launcher.recover_submission(key)

    def finished_measurement(self, key: str) -> dict | None:
        return self.estimator.finished_measurement(key)

    def model_size(self, model: str, token: str | None, offline: bool) -> Any:
        return self.planner.model_size(model, token, offline)

    def teacher_size(self, req: Any, token: str | None, offline: bool) -> Any:
        return self.planner.teacher_size(req, token, offline)

    def ledger_job(self, ref: str | None) -> JobRecord | None:
        """The job `ref` names, when it is a job id of this server's ledger (evaluate/export take either)."""
        return self.planner.ledger_job(ref)

    def existing_submission(self, req: Any) -> Any:
        """The job (or sweep) an idempotency key already names (a retry returns it instead of launching)."""
        if not req.idempotency_key or req.dry_run:
            return None
        if isinstance(req, SweepRequest):
            return self.ledger.sweep_by_key(req.idempotency_key)
        found = self.ledger.by_idempotency_key(req.idempotency_key)
        return None if found is None or found.job_id.startswith(PENDING) else found

    def check_sweep_access(self, sweep: Any) -> None:
        """A sweep on this machine is as out of reach as its jobs for a caller who may not run local jobs."""
        sweeps.check_access(self.access, sweep)

    def _submit(self, req: Any, kind: str, progress: Progress | None, confirm: Confirm | None, *,
                sweep_run: bool = False) -> Submission:
        """Plan, confirm and launch one job; an idempotency key already used returns its job instead. Keys
        shaped like the server's own (measurements', sweep runs') are refused on every tool: one taken by
        another kind of job would wedge the measurement or sweep run it belongs to."""
        keys.refuse_reserved_key(req.idempotency_key, probe=kind == "probe", sweep_run=sweep_run)
        backend_name = req.backend or default_backend()
        self.planner.check_access(req, backend_name)  # before a key is reserved

        def submit(claim: str | None) -> Submission:
            prepared = self.planner.prepare_submission(req, backend_name, kind=kind, progress=progress)
            if confirm is not None and not req.dry_run:
                confirm(prepared)
            return self.launcher.launch(prepared, claim, progress)

        if not req.idempotency_key or req.dry_run:
            return submit(None)
        self.recover_submissions(now=True)  # a key whose server died mid-submit belongs to the job it posted
        claim = claim_id()
        existing = self.ledger.reserve(req.idempotency_key, claim)
        if existing is not None:
            return self._keyed(req, kind, existing, backend_name)
        try:
            return submit(claim)
        except SubmissionUnknown:
            raise  # the job may exist: the key stays held until recovery finds the job or gives up
        except BaseException:
            self.ledger.release(req.idempotency_key, claim)
            raise

    def _keyed(self, req: Any, kind: str, existing: JobRecord, backend_name: str) -> Submission:
        """A retry: the job its key already names (or why it cannot be given)."""
        if existing.job_id.startswith(PENDING):
            raise SubmissionInProgress(f"a submission with idempotency_key {req.idempotency_key!r} is in progress; "
                                       "call again in a few seconds to get its job")
        backends.check_permission(existing.backend, self.access)
        if existing.kind != kind:
            raise KeyConflict(f"idempotency_key {req.idempotency_key!r} already names job {existing.job_id}, a "
                              f"{existing.kind} job: use another key for this {kind} job")
        changed = retries.changed_fields(existing.asked_json, retries.asked_json(
            req, backend_name, content=self.planner.content(req, backend_name, recorded=existing.uploads)))
        if changed:
            raise KeyConflict(retries.conflict_message(req.idempotency_key, f"job {existing.job_id}", changed))
        if node_ranks.is_run(existing) and not existing.settled:  # its server may have died before its nodes
            existing = checked_run(self, existing)
        return submission_of(existing, extra_warnings=[
            f"idempotency_key matched job {existing.job_id}: returned it instead of submitting again"],
            ledger=self.ledger)
