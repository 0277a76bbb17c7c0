"""The core both shells call: one method per tool, plain pydantic in and out, TrainError for fixable problems."""

import json
import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hf_train_mcp import defaults as D
from hf_train_mcp import backends, methods, sweeps
from hf_train_mcp.access import STDIO, Access, is_local
from hf_train_mcp.backends.base import TERMINAL_STAGES, Backend, JobGone, JobState, LogRead, SubmissionUnknown
from hf_train_mcp.backends.base import submission_labels
from hf_train_mcp.backends.local import process_alive, has_cuda
from hf_train_mcp.chat_template import has_chat_template
from hf_train_mcp.data import rules
from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp.durations import MAX_TIMEOUT_S, format_duration
from hf_train_mcp.errors import TrainError
from hf_train_mcp.estimate import constants as EC
from hf_train_mcp.estimate.hardware import get_catalog
from hf_train_mcp.estimate.sizing import ModelSize, model_size
from hf_train_mcp.followup import EvalData, Subject, job_data, method_for_format, plan_evaluation, plan_export
from hf_train_mcp.followup import check_job_inputs, subject_from_job, subject_from_ref
from hf_train_mcp.hub import HubUnreachable, adapter_config, hub_endpoint, hub_token, needs_token, resolve_identity
from hf_train_mcp.hub import existing_repo, scrub
from hf_train_mcp.ledger import PENDING, SETTLED_STAGES, SUBMITTING, JobRecord, Ledger, now_iso
from hf_train_mcp.ledger import KeyConflict, SubmissionInProgress
from hf_train_mcp.logparse import ParsedLog, parse_log, probe_metrics
from hf_train_mcp.estimate.cost import FlavorEstimate, Workload, how_to_fit
from hf_train_mcp.measure import apply_measurement, attempt_key, config_key, probe_key, usable
from hf_train_mcp.measure import prefix as measure_prefix
from hf_train_mcp.prepared import Prepared, Progress
from hf_train_mcp.planning import PROBE_STEPS, DataFacts, Hyper, estimate_flavors, plan_run
from hf_train_mcp.request import EstimateRequest, EvaluateRequest, ExportRequest, RunShape, TrainingRequest
from hf_train_mcp.request import CompareRequest, SweepRequest, ValidateRequest
from hf_train_mcp.schemas import (
    CancelResult,
    Comparison,
    CostEstimate,
    FlavorOption,
    DatasetReport,
    HardwareList,
    HardwareRow,
    JobList,
    JobReport,
    JobSummary,
    LogPage,
    Measurement,
    Submission,
    SweepResult,
)

log = logging.getLogger(__name__)
PREVIEW_TTL_S = 300.0
PREVIEWS_KEPT = 16


class _Previewed(Exception):
    """Raised by a preview's confirm hook: the plan is caught, nothing is launched."""


STATUS_LOG_LINES = 300  # read more than we show: the last HFTM_LOG line may sit above warnings
SCHEDULING_ALERT_MIN = 15


RECOVER_AFTER_MIN = 2  # a live server's POST (3 attempts with timeouts) never takes this long
RECOVERY_RETRY_S = 60
RECOVERY_SCAN_S = 5.0  # status calls look for orphaned submissions at most this often (submit always looks)
ABANDON_AFTER_MIN = 30
SETTLED_LOGS_CACHED = 256  # finished jobs whose last log lines are kept in memory (their logs never change)


def _claim() -> str:
    """A one-off owner id for a reservation or journal entry; the pid lets others see its server died."""
    return f"{os.getpid()}-{uuid.uuid4().hex}"


def _minutes_since(iso: str | None) -> float | None:
    if not iso:
        return None
    started = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (datetime.now(UTC) - started).total_seconds() / 60


def default_backend() -> str:
    chosen = os.environ.get("HF_TRAIN_BACKEND")
    if chosen in backends.NAMES:
        return chosen
    return backends.default(token=hub_token())


def refusal(report: DatasetReport, dataset: str, problem: str) -> str:
    """Why a dataset was refused, with the mapping that fixes it when there is one."""
    errors = "; ".join(i.message + (f" (row {i.row})" if i.row is not None else "")
                       for i in report.issues if i.severity == "error")
    mapping = (f" Suggested column_mapping: {json.dumps(report.suggested_column_mapping)}."
               if report.suggested_column_mapping else "")
    return (f"dataset {dataset!r} {problem}: {errors}.{mapping} Fix the data or pass column_mapping; nothing was "
            "launched.")


class Core:
    def __init__(self, ledger: Ledger | None = None, access: Access = STDIO):
        self._ledger = ledger
        self.access = access
        self._recovery_tried: dict[str, float] = {}
        self._recovery_scanned = -RECOVERY_SCAN_S
        self._settled_logs: OrderedDict[str, tuple[int, LogRead, ParsedLog]] = OrderedDict()
        self._previews: dict[str, tuple[float, Prepared]] = {}

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:  # opened on first use: tools/list must not touch the disk
            self._ledger = Ledger()
        return self._ledger

    def backend(self, name: str) -> Backend:
        return backends.open(name, access=self.access, token=hub_token())

    # --- validate_dataset -------------------------------------------------------------------------------
    def validate_dataset(self, req: ValidateRequest, *, progress: Progress | None = None) -> DatasetReport:
        return validate_dataset(req.dataset, req.method, split=req.split, config=req.config,
                                column_mapping=req.column_mapping, model=req.model, max_length=req.max_length,
                                token=hub_token(), access=self.access, progress=progress)

    # --- submit_training --------------------------------------------------------------------------------
    def _model_size(self, model: str, token: str | None, offline: bool) -> ModelSize:
        self.access.check_ref(model, "model")
        try:
            return model_size(model, token, offline=offline)
        except ValueError as exc:
            raise TrainError(str(exc)) from None

    def _teacher_size(self, req: RunShape, token: str | None, offline: bool) -> ModelSize | None:
        """A distillation's teacher: its forwards and its weights count in the time and memory."""
        teacher = getattr(req, "teacher_model", None)
        return self._model_size(teacher, token, offline=offline) if teacher else None

    def _resume_source(self, req: TrainingRequest, backend_name: str) -> tuple[str | None, str | None]:
        """(Hub repo, folder) that holds the checkpoint `resume_from` names; (None, None) without resume_from."""
        if not req.resume_from:
            return None, None
        previous = self.ledger.get(req.resume_from)
        if previous is None:
            if "/" in req.resume_from and not is_local(req.resume_from):
                return req.resume_from, None
            raise TrainError(f"resume_from={req.resume_from!r} is neither a job id from list_jobs nor a Hub repo "
                             "'owner/name'")
        check_job_inputs(self.access, previous, TrainingRequest.model_validate_json(previous.request_json))
        if not backends.traits(previous.backend).pushes_to_hub:
            if not backends.traits(backend_name).reads_local_paths:
                raise TrainError(f"job {req.resume_from} ran on this machine: its checkpoints are not on the Hub; "
                                 f"resume it with backend={previous.backend!r}")
            return None, previous.output_dir
        if previous.output_bucket and previous.output_bucket == req.output_bucket and previous.output_dir:
            return None, previous.output_dir  # the same bucket is mounted: its checkpoints are right there
        if previous.hub_model_id:
            return previous.hub_model_id, None
        raise TrainError(f"job {req.resume_from} pushed no model repo to resume from; pass a Hub repo id")

    def _check_access(self, req: Any, backend_name: str) -> None:
        if backends.traits(backend_name).needs_local_jobs_permission:
            self.access.check_local_jobs()
        if getattr(req, "reward_code", None):
            self.access.check_reward_code()
        for ref, what in ((req.model, "model"), (getattr(req, "dataset", None), "dataset"),
                          (getattr(req, "teacher_model", None), "teacher model")):
            if ref and self.ledger_job(ref) is None:  # a job id names this server's own output, not a caller's path
                self.access.check_ref(ref, what)

    def ledger_job(self, ref: str | None) -> JobRecord | None:
        """The job `ref` names, when it is a job id of this server's ledger (evaluate/export take either)."""
        if not ref or "/" in ref.strip() or is_local(ref):
            return None
        return self.ledger.get(ref.strip())

    def existing_submission(self, req: Any) -> Any:
        """The job (or sweep) an idempotency key already names (a retry returns it instead of launching)."""
        if not req.idempotency_key or req.dry_run:
            return None
        if isinstance(req, SweepRequest):
            return self.ledger.sweep_by_key(req.idempotency_key)
        found = self.ledger.by_idempotency_key(req.idempotency_key)
        return None if found is None or found.job_id.startswith(PENDING) else found

    def submit_training(self, req: TrainingRequest, *, kind: str = "train", progress: Progress | None = None,
                        confirm: "Callable[[Prepared], None] | None" = None, sweep_run: bool = False) -> Submission:
        """kind='probe': the measurement job of estimate_cost(measure=True) (the preflight alone, nothing pushed).
        confirm: called with the plan before anything is launched; it raises to stop the submission.
        sweep_run: a run of a sweep, keyed by it."""
        return self._submit(req, kind, progress, confirm, sweep_run=sweep_run)

    # --- sweeps -----------------------------------------------------------------------------------------
    def submit_sweep(self, req: SweepRequest, *, progress: Progress | None = None,
                     confirm: "Callable[[Any], None] | None" = None) -> SweepResult:
        existing = self.existing_submission(req)
        if existing is not None:
            self.check_sweep_access(existing)
            sweeps.ensure_supervised(self, existing)
            return sweeps.sweep_result(self, existing, [
                f"idempotency_key matched sweep {existing.sweep_id}: returned it instead of launching again"])
        plan = self._prepare(req, self._sweep_backend(req), kind="sweep", progress=progress)
        if req.dry_run:
            return sweeps.dry_run_result(plan)
        if confirm is not None:
            confirm(plan)
        record, warnings = sweeps.store_and_start(self, plan, progress)
        return sweeps.sweep_result(self, record, warnings)

    def check_sweep_access(self, sweep: Any) -> None:
        """A sweep on this machine is as out of reach as its jobs for a caller who may not run local jobs."""
        if backends.traits(sweep.backend).needs_local_jobs_permission:
            self.access.check_local_jobs()

    @staticmethod
    def _sweep_backend(req: SweepRequest) -> str:
        return req.base.get("backend") or default_backend()

    def compare_runs(self, req: CompareRequest) -> Comparison:
        return sweeps.compare(self, req)

    def evaluate_model(self, req: EvaluateRequest, *, progress: Progress | None = None,
                       confirm: "Callable[[Prepared], None] | None" = None) -> Submission:
        return self._submit(req, "evaluate", progress, confirm)

    def export_model(self, req: ExportRequest, *, progress: Progress | None = None,
                     confirm: "Callable[[Prepared], None] | None" = None) -> Submission:
        return self._submit(req, "export", progress, confirm)

    def _submit(self, req: Any, kind: str, progress: Progress | None,
                confirm: "Callable[[Prepared], None] | None", *, sweep_run: bool = False) -> Submission:
        """Plan, confirm and launch one job; an idempotency key already used returns its job instead. Keys
        shaped like the server's own (measurements', sweep runs') are refused on every tool: one taken by
        another kind of job would wedge the measurement or sweep run it belongs to."""
        sweeps.refuse_reserved_key(req.idempotency_key, probe=kind == "probe", sweep_run=sweep_run)
        backend_name = req.backend or default_backend()
        self._check_access(req, backend_name)

        def submit(claim: str | None) -> Submission:
            prepared = self._prepare(req, backend_name, kind=kind, progress=progress)
            if confirm is not None and not req.dry_run:
                confirm(prepared)
            return self._launch(prepared, claim, progress)

        if req.idempotency_key and not req.dry_run:
            self._recover_submissions(now=True)  # a key whose server died mid-submit belongs to the job it posted
            claim = _claim()
            existing = self.ledger.reserve(req.idempotency_key, claim)
            if existing is not None:
                if existing.job_id.startswith(PENDING):
                    raise SubmissionInProgress(f"a submission with idempotency_key {req.idempotency_key!r} is in "
                                               "progress; call again in a few seconds to get its job")
                if backends.traits(existing.backend).needs_local_jobs_permission:
                    self.access.check_local_jobs()
                if existing.kind != kind:
                    raise KeyConflict(f"idempotency_key {req.idempotency_key!r} already names job {existing.job_id}, "
                                      f"a {existing.kind} job: use another key for this {kind} job")
                return self._submission(existing, extra_warnings=[
                    f"idempotency_key matched job {existing.job_id}: returned it instead of submitting again"])
            try:
                return submit(claim)
            except SubmissionUnknown:
                raise  # the job may exist: the key stays held until recovery finds the job or gives up
            except BaseException:
                self.ledger.release(req.idempotency_key, claim)
                raise
        return submit(None)

    def _checked_dataset(self, req: TrainingRequest, token: str | None
                         ) -> tuple[TrainingRequest, DataFacts, list[str]]:
        """Validate the dataset (unless skipped): refuse one with errors, adopt its suggested mapping and config."""
        if req.skip_validation:
            return req, DataFacts(), ["dataset validation skipped: format problems will surface in the job"]
        report = validate_dataset(req.dataset, req.method, split=req.dataset_split, config=req.dataset_config,
                                  column_mapping=req.column_mapping, token=token, max_length=req.max_length,
                                  access=self.access, model=req.model)  # token lengths size the run
        if not report.valid:
            raise TrainError(refusal(report, req.dataset, f"will not train with {req.method}"))
        warnings = []
        # The job gets exactly the mapping validation approved: a partial one completed by the suggestion.
        if (report.suggested_column_mapping or {}) != (req.column_mapping or {}):
            req = req.model_copy(update={"column_mapping": report.suggested_column_mapping})
            warnings.append(f"applied column_mapping {json.dumps(report.suggested_column_mapping)} from validation")
        if req.dataset_config is None and report.config and report.config != "default":
            req = req.model_copy(update={"dataset_config": report.config})
        first = report.sample_rows[0] if report.sample_rows else {}
        conversational = report.detected_format in ("messages", "conversational_prompt_completion") or any(
            rules.is_conversation(first.get(c)) for c in ("prompt", "chosen", "rejected", "completion"))
        if report.token_stats is None:
            why = next((i.message for i in report.issues if "token statistics" in i.message), "no tokenizer")
            warnings.append(f"{why}: the estimate and default timeout assume "
                            f"{methods.get(req.method).tokens_per_example} tokens per row; pass timeout= for longer rows")
        data = DataFacts(num_rows=report.num_rows, mean_tokens=report.token_stats.mean if report.token_stats else None,
                         conversational=conversational)
        return req, data, warnings

    @staticmethod
    def _check_chat_template(req: TrainingRequest, token: str | None) -> None:
        if has_chat_template(req.model, token, local=is_local(req.model)) is False:
            raise TrainError(f"{req.model} has no chat template and this dataset is conversational, so the job would "
                             "fail when it formats the first row: send chat_template='chatml', or use the model's "
                             "instruct/chat version. Nothing was submitted.")

    def preview(self, req: Any, *, kind: str = "train", progress: Progress | None = None) -> Prepared:
        """Everything a submission decides before it launches (validated data, plan, script), kept for a few
        minutes so that a confirmation asked in between does not plan the same request twice."""
        if kind == "probe":
            return self._measurement_preview(req, progress)
        if kind == "sweep":  # each run is checked as it is planned
            backend_name = self._sweep_backend(req)
        else:
            backend_name = req.backend or default_backend()
            self._check_access(req, backend_name)
        prepared = self._prepare(req, backend_name, kind=kind, progress=progress)
        self._previews[self._preview_key(req, kind)] = (time.monotonic(), prepared)
        while len(self._previews) > PREVIEWS_KEPT:
            self._previews.pop(next(iter(self._previews)))
        return prepared

    def _measurement_preview(self, req: EstimateRequest, progress: Progress | None) -> Prepared | None:
        """The measurement job estimate_cost(measure=True) would launch, planned and kept like any preview; None
        when it would launch none (a measurement of these settings ran or is running)."""
        if not req.measure:
            return None
        caught: list[Prepared] = []

        def stop(prepared: Prepared) -> None:
            caught.append(prepared)
            raise _Previewed

        try:
            self.estimate_cost(req, progress=progress, confirm=stop)
        except _Previewed:
            prepared = caught[0]
            self._previews[self._preview_key(prepared.req, "probe")] = (time.monotonic(), prepared)
            return prepared
        return None

    @staticmethod
    def _preview_key(req: Any, kind: str) -> str:
        return f"{kind}:{type(req).__name__}:{req.model_dump_json()}"

    def _prepare(self, req: Any, backend_name: str, *, kind: str = "train",
                 progress: Progress | None = None) -> Prepared:
        cached = self._previews.pop(self._preview_key(req, kind), None)
        if cached is not None and time.monotonic() - cached[0] < PREVIEW_TTL_S:
            return cached[1]
        prepare = {"evaluate": self._prepare_evaluation, "export": self._prepare_export,
                   "sweep": self._prepare_sweep}.get(kind, self._prepare_training)
        return prepare(req, backend_name, kind=kind, progress=progress or (lambda message: None))

    def _prepare_sweep(self, req: SweepRequest, backend_name: str, *, kind: str,
                       progress: Progress) -> "sweeps.SweepPlan":
        return sweeps.plan_sweep(self, req, backend_name, progress)

    @staticmethod
    def _namespace(req: Any, backend_name: str, token: str | None) -> str | None:
        """Whose account an HF job runs under (a dry run without a token guesses it from hub_model_id)."""
        if not backends.traits(backend_name).has_namespace:
            return None
        if token or not req.dry_run:
            return resolve_identity(token).name
        return req.hub_model_id.split("/")[0] if getattr(req, "hub_model_id", None) else None

    def _prepare_training(self, req: TrainingRequest, backend_name: str, *, kind: str,
                          progress: Progress) -> Prepared:
        step = progress
        where = backends.traits(backend_name)
        here = not where.catalog_from_hub  # sized and planned offline: nothing is asked of the Hub
        if not where.reads_local_paths:
            for ref, what in ((req.model, "model"), (req.dataset, "dataset"), (req.teacher_model, "teacher_model")):
                if ref and is_local(ref):
                    raise TrainError(f"{what} {ref!r} is a local path, which a Hugging Face job cannot read: push it "
                                     "to the Hub first, or use backend='local'")
        token = None if here else hub_token()
        namespace = self._namespace(req, backend_name, token)
        if where.reads_local_paths:  # the job runs in its own folder: relative paths must not change meaning
            req = req.model_copy(update={ref: str(Path(getattr(req, ref)).expanduser().resolve())
                                         for ref in ("model", "dataset", "teacher_model")
                                         if getattr(req, ref) and is_local(getattr(req, ref))})
        step(f"validating {req.dataset}")
        req, data, warnings = self._checked_dataset(req, token or hub_token())
        if req.resume_from and not req.output_bucket:
            previous = self.ledger.get(req.resume_from)
            if previous is not None and previous.output_bucket:  # resume where its checkpoints are
                req = req.model_copy(update={"output_bucket": previous.output_bucket})
        if data.conversational and req.chat_template is None:
            self._check_chat_template(req, token or hub_token())
        step(f"sizing {req.model}")
        size = self._model_size(req.model, token, offline=here)
        teacher = self._teacher_size(req, token, offline=here)
        catalog = get_catalog(token, offline=here)
        resume_repo, resume_dir = self._resume_source(req, backend_name)
        step("planning and rendering the script")
        plan_args = dict(backend=backend_name, size=size, catalog=catalog, namespace=namespace, data=data,
                         local_cuda=has_cuda(), resume_repo=resume_repo, resume_dir=resume_dir, probe_only=kind == "probe",
                         teacher=teacher)
        plan = plan_run(req, **plan_args)
        if kind == "train" and where.bills and plan.estimate is not None:
            measured = self._finished_measurement(config_key(plan.config, flavor=plan.flavor, backend=backend_name))
            if measured:  # a measurement of this run's steps on this flavor: its time, not the model's
                plan = plan_run(req.model_copy(update={"flavor": plan.flavor}), **plan_args, measured=measured)
        plan.warnings[:0] = warnings
        pushes = where.pushes_to_hub and kind == "train"
        reads = [("model", req.model), ("dataset", req.dataset), ("model", req.teacher_model),
                 *([("model", resume_repo)] if resume_repo else [])]
        return self._package(req, backend_name, kind, namespace, plan, hub_model_id=req.hub_model_id if pushes else None,
                             model=req.model, dataset=req.dataset, reads=reads)

    def _package(self, req: Any, backend_name: str, kind: str, namespace: str | None, plan: Any, *,
                 hub_model_id: str | None, model: str, dataset: str | None, reads: list[tuple[str, str | None]],
                 parent_job_id: str | None = None, model_url: str | None = None,
                 trackio_url: str | None = None) -> Prepared:
        """The rendered script, the job spec and what the Submission will say, for any kind of job."""
        script = plan.render()
        spec = plan.job_spec(kind)
        endpoint = hub_endpoint()
        if hub_model_id:
            model_url = f"{endpoint}/{hub_model_id}"
        if plan.trackio_space_id:
            trackio_url = f"{endpoint}/spaces/{plan.trackio_space_id}"
        estimate = plan.estimate
        common = dict(
            backend=backend_name, hub_model_id=hub_model_id,
            flavor=plan.flavor, timeout=format_duration(plan.timeout_seconds),
            estimated_hours=round(estimate.hours, 2) if estimate else None,
            estimated_cost_usd=estimate.cost_usd if estimate else None,
            effective_batch_size=plan.effective_batch_size, script_sha256=script.sha256, warnings=plan.warnings,
            worst_case_cost_usd=plan.worst_case_cost_usd,
        )
        return Prepared(req=req, backend_name=backend_name, kind=kind, namespace=namespace, plan=plan, script=script,
                        spec=spec, model_url=model_url, trackio_url=trackio_url, common=common, model=model,
                        dataset=dataset, reads=[(what, ref) for what, ref in reads if ref and not is_local(ref)],
                        parent_job_id=parent_job_id)

    # --- evaluate_model and export_model ---------------------------------------------------------------
    def _subject(self, ref: str, backend_name: str, token: str | None) -> Subject:
        record = self.ledger_job(ref)
        if record is not None:
            if backends.traits(record.backend).needs_local_jobs_permission:
                self.access.check_local_jobs()
            return subject_from_job(record, self.job_stage(record.job_id), backend_name, self.access)
        return subject_from_ref(ref.strip(), access=self.access, backend_name=backend_name,
                                adapter_config=lambda repo: adapter_config(repo, token))

    def _followup_start(self, req: Any, backend_name: str, progress: Progress
                        ) -> tuple[str | None, str | None, Subject, ModelSize, Any]:
        """(token, namespace, subject, its size, catalog): what an evaluation and an export both resolve first."""
        here = not backends.traits(backend_name).catalog_from_hub  # sized offline: nothing is asked of the Hub
        token = None if here else hub_token()
        namespace = self._namespace(req, backend_name, token)
        progress(f"finding {req.model}")
        subject = self._subject(req.model, backend_name, token or hub_token())
        if subject.training and subject.training.reward_code:
            self.access.check_reward_code()  # the evaluation runs the job's reward code again
        progress(f"sizing {subject.sized_by}")
        size = self._model_size(subject.sized_by, token, offline=here)
        return token, namespace, subject, size, get_catalog(token, offline=here)

    def _eval_data(self, req: EvaluateRequest, subject: Subject, backend_name: str, token: str | None,
                   warnings: list[str]) -> tuple[EvalData | None, DataFacts]:
        if req.dataset:
            if not backends.traits(backend_name).reads_local_paths and is_local(req.dataset):
                raise TrainError(f"dataset {req.dataset!r} is a local path, which a Hugging Face job cannot read: "
                                 "push it to the Hub first, or use backend='local'")
            dataset = str(Path(req.dataset).expanduser().resolve()) if is_local(req.dataset) else req.dataset
            split = req.split or ("train" if is_local(dataset) else "test")
            tokenizer = subject.ref if subject.kind == "full" or subject.card_folder else subject.base_model
            if tokenizer and is_local(tokenizer) and self.access.remote:
                tokenizer = None  # token counts only: not worth opening a path to a remote caller
            check = lambda method: validate_dataset(dataset, method, split=split, token=token, model=tokenizer,
                                                    access=self.access)  # noqa: E731
            # a model of unknown training: the data says what to measure (prompts with reference answers:
            # rewards; pairs: preference accuracy; anything else: loss on the answers)
            report = check(subject.method or "grpo")
            method = subject.method or method_for_format(report)
            if method != (subject.method or "grpo"):
                report = check(method)
            if not report.valid:
                raise TrainError(refusal(report, dataset, f"cannot be evaluated as {method} data"))
            data = EvalData(dataset=dataset, split=split,
                            config=report.config if report.config not in (None, "default") else None,
                            column_mapping=report.suggested_column_mapping or {}, eval_split=None, seed=42,
                            method=method, held_out=f"split `{split}`")
            return data, DataFacts(num_rows=report.num_rows,
                                   mean_tokens=report.token_stats.mean if report.token_stats else None)
        if subject.training is not None:
            return job_data(subject, req.num_samples, warnings), DataFacts()
        if not req.tasks:
            raise TrainError("nothing to evaluate on: pass dataset (and split) with held-out rows, tasks (benchmark "
                             "names such as hellaswag), or the job_id of a training job. Nothing was launched.")
        return None, DataFacts()

    def _prepare_evaluation(self, req: EvaluateRequest, backend_name: str, *, kind: str,
                            progress: Progress) -> Prepared:
        token, namespace, subject, size, catalog = self._followup_start(req, backend_name, progress)
        warnings: list[str] = []
        progress("reading the held-out data")
        data, facts = self._eval_data(req, subject, backend_name, token or hub_token(), warnings)
        progress("planning and rendering the script")
        plan = plan_evaluation(req, subject, data, facts, backend=backend_name, size=size, catalog=catalog,
                               namespace=namespace, warnings=warnings)
        job = subject.job
        return self._package(
            req, backend_name, kind, namespace, plan, hub_model_id=None, model=subject.ref,
            dataset=data.dataset if data else None,
            reads=[("model", subject.ref), ("model", subject.base_model), ("dataset", data.dataset if data else None)],
            parent_job_id=job.job_id if job else None,
            model_url=(job.model_url if job else None) or (None if is_local(subject.ref) else
                                                          f"{hub_endpoint()}/{subject.ref}"),
            trackio_url=job.trackio_url if job and backend_name == job.backend else None)

    def _prepare_export(self, req: ExportRequest, backend_name: str, *, kind: str, progress: Progress) -> Prepared:
        token, namespace, subject, size, catalog = self._followup_start(req, backend_name, progress)
        warnings: list[str] = []
        progress("planning and rendering the script")
        plan = plan_export(req, subject, backend=backend_name, size=size, catalog=catalog, namespace=namespace,
                           warnings=warnings)
        if not backends.traits(backend_name).pushes_to_hub and req.hub_model_id:
            warnings.append(f"backend={backend_name!r} keeps the export in the job folder; hub_model_id is not pushed")
        if plan.config["hub_model_id"]:
            self._check_export_target(plan.config["hub_model_id"], token or hub_token(), plan.warnings,
                                      dry_run=req.dry_run)
        return self._package(
            req, backend_name, kind, namespace, plan, hub_model_id=plan.config["hub_model_id"], model=subject.ref,
            dataset=None, reads=[("model", subject.ref), ("model", subject.base_model)],
            parent_job_id=subject.job.job_id if subject.job else None)

    @staticmethod
    def _check_export_target(repo: str, token: str | None, warnings: list[str], *, dry_run: bool) -> None:
        """An export into an adapter's repo would leave both in one repo (loaders then read the adapter); into any
        other existing repo it is committed on top of what is there, which the caller should know first. A target
        that could not be checked is not pushed to (a dry run only says so)."""
        try:
            held = existing_repo(repo, token)
        except TrainError as exc:
            if not dry_run:
                raise TrainError(f"could not check whether {repo} exists before pushing the export there ({exc}); "
                                 "nothing was launched: call again in a minute") from None
            warnings.append(f"could not check whether {repo} exists yet ({exc}); a real export checks it first")
            return
        if held == "adapter":
            raise TrainError(f"{repo} already holds a LoRA adapter: an export there would mix the two (loaders "
                             "would read the adapter); send another hub_model_id. Nothing was launched.")
        if held == "model":
            warnings.append(f"{repo} already exists: the export is committed on top of its files (its history keeps "
                            "the old ones)")

    def _launch(self, prepared: Prepared, claim: str | None, progress: Progress | None = None) -> Submission:
        req, backend_name, kind, namespace = prepared.req, prepared.backend_name, prepared.kind, prepared.namespace
        plan, script, spec, common = prepared.plan, prepared.script, prepared.spec, prepared.common
        model_url, trackio_url = prepared.model_url, prepared.trackio_url
        backend = self.backend(backend_name)
        if req.dry_run:
            return Submission(job_id=None, stage=None, job_url=None, model_url=model_url, trackio_url=trackio_url,
                              script=script.text, command=backend.command(spec), **common)
        if progress:
            progress(f"submitting to {backend.place}")
        if backend.reads_local_paths:  # a job on this machine reads the Hub with the server's token, if it must
            spec = replace(spec, read_token=self._local_job_reads_private(prepared.reads, plan.warnings))
        if claim is not None and not self.ledger.renew(req.idempotency_key, claim):
            raise TrainError(f"another server took over idempotency_key {req.idempotency_key!r} while this one was "
                             "preparing; nothing was submitted here: call again to get that server's job")
        submission = uuid.uuid4().hex[:12]
        planned = JobRecord(
            job_id=SUBMITTING + submission, backend=backend_name, namespace=namespace, method=plan.method,
            model=prepared.model, dataset=prepared.dataset, request_json=req.model_dump_json(),
            script_sha256=script.sha256,
            script_path=None, job_dir=None, stage="SCHEDULING", flavor=plan.flavor, timeout=common["timeout"],
            job_url=None, hub_model_id=common["hub_model_id"], model_url=model_url, trackio_url=trackio_url,
            output_bucket=plan.output_bucket, estimated_hours=common["estimated_hours"],
            estimated_cost_usd=common["estimated_cost_usd"], effective_batch_size=plan.effective_batch_size,
            warnings_json=json.dumps(plan.warnings), idempotency_key=None, created_at=now_iso(),
            worst_case_cost_usd=plan.worst_case_cost_usd, claim=claim or _claim(),
            output_dir=plan.config["output_dir"], kind=kind, parent_job_id=prepared.parent_job_id,
        )
        journal = None
        if backend.labels_submissions:  # a server killed mid-POST leaves this; _recover_submissions finds the job
            adopted = self._keyed_on_hub(backend, planned, req.idempotency_key, claim)
            if adopted is not None:
                return adopted
            spec = replace(spec, labels=submission_labels(spec.labels, submission, req.idempotency_key))
            self.ledger.journal(planned)
            journal = planned.job_id
        try:
            ref = backend.submit(script, spec)
        except SubmissionUnknown:
            raise  # the job may exist: the journal entry lets the next call find it
        except BaseException:
            if journal:
                self.ledger.forget(journal)
            raise
        if not backend.pushes_to_hub and kind in ("train", "export"):  # the output stays in the job's folder
            model_url = f"{ref.url}/{backend.output_dir}"
        if not backend.pushes_to_hub and kind == "train":
            trackio_url = f"{ref.url}/trackio"
        record = replace(
            planned, job_id=ref.job_id, namespace=ref.namespace, stage=ref.stage, job_url=ref.url,
            script_path=f"{ref.job_dir}/train.py" if ref.job_dir else None, job_dir=ref.job_dir,
            model_url=model_url, trackio_url=trackio_url, idempotency_key=req.idempotency_key,
            created_at=ref.created_at or now_iso(), claim=None,
            output_dir=f"{ref.job_dir}/output" if ref.job_dir else plan.config["output_dir"],
        )
        if not self.ledger.record(record, claim, journal=journal):
            record.warnings_json = json.dumps([*plan.warnings, f"idempotency_key {req.idempotency_key!r} was taken "
                                               "over by another server while this slow submission ran"])
        return self._submission(record)

    def _keyed_on_hub(self, backend: Backend, planned: JobRecord, key: str | None,
                      claim: str | None) -> Submission | None:
        """The job the Hub holds for this idempotency key (its label), adopted: the ledger is not the only memory
        of which keys launched, since it can be lost or moved aside. A Hub that cannot be read is no reason to
        refuse: the ledger's reservation of the key still guards it."""
        if not key:
            return None
        try:
            ref = backend.find_keyed(key, planned.namespace)
        except TrainError as exc:
            log.info("could not look for an earlier job with idempotency_key %r: %s", key, exc)
            return None
        if ref is None:
            return None
        found_kind = (ref.labels or {}).get("kind", planned.kind)
        if found_kind != planned.kind:
            raise KeyConflict(f"idempotency_key {key!r} already names job {ref.job_id}, a {found_kind} job: use "
                              f"another key for this {planned.kind} job")
        note = f"idempotency_key matched job {ref.job_id}: returned it instead of submitting again"
        known = self.ledger.get(ref.job_id)
        if known is not None:  # recorded without its key (a reservation taken over): the key stays free
            if claim is not None:
                self.ledger.release(key, claim)
            return self._submission(known, extra_warnings=[note])
        record = replace(planned, job_id=ref.job_id, namespace=ref.namespace, stage=ref.stage, job_url=ref.url,
                         idempotency_key=key, created_at=ref.created_at or planned.created_at, claim=None)
        self.ledger.record(record, claim)
        log.warning("adopted job %s: the Hub has it under idempotency_key %r, the ledger did not", ref.job_id, key)
        return self._submission(record, extra_warnings=[note + " (found on the Hub by its label; the ledger had "
                                                        "lost it)"])

    def _recover_submissions(self, *, now: bool = False) -> None:
        """Record the jobs of submissions whose server died between the POST and the ledger write: the job is
        found on the Hub by its one-off `submission` label. One that never reached the Hub is dropped.
        Status calls scan at most every RECOVERY_SCAN_S; `now` (a submission about to reserve its key) always."""
        if not now and time.monotonic() - self._recovery_scanned < RECOVERY_SCAN_S:
            return
        self._recovery_scanned = time.monotonic()
        for entry in self.ledger.submissions():
            pid = int(entry.claim.split("-", 1)[0]) if entry.claim and entry.claim[0].isdigit() else None
            age = _minutes_since(entry.created_at) or 0.0
            if pid is not None and process_alive(pid) and age < RECOVER_AFTER_MIN:
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
        and (cancel_canceled) canceled when its sweep was canceled meanwhile."""
        key = json.loads(entry.request_json).get("idempotency_key")
        try:
            found = backends.open(entry.backend, access=self.access, token=hub_token())
            ref = found.find(entry.job_id.removeprefix(SUBMITTING), entry.namespace)
        except TrainError as exc:
            log.info("could not look up submission %s: %s", entry.job_id, exc)
            return
        if ref is None:
            if abandon:
                self.ledger.forget(entry.job_id)
                if key:
                    self.ledger.release(key, entry.claim)
            return
        self.ledger.record(replace(entry, job_id=ref.job_id, namespace=ref.namespace, stage=ref.stage,
                                   job_url=ref.url, created_at=ref.created_at or entry.created_at,
                                   idempotency_key=key, claim=None), entry.claim, journal=entry.job_id)
        log.warning("recorded job %s, submitted by a server that stopped before recording it", ref.job_id)
        if key and sweeps.adopted(self, key, ref.job_id) and cancel_canceled:
            try:
                self.cancel_job(ref.job_id)
            except TrainError as exc:  # the next look at the sweep (compare_runs, cancel_job) cancels it
                log.warning("could not cancel job %s of a canceled sweep: %s", ref.job_id, exc)

    @staticmethod
    def _local_job_reads_private(repos: list[tuple[str, str]], warnings: list[str]) -> bool:
        """A local job gets HF_TOKEN only when the Hub says a repo it reads is gated or private."""
        verdict = needs_token(hub_token(), repos) if repos else False
        if verdict is None:
            warnings.append("could not ask the Hub whether the model or dataset is gated or private: the job runs "
                            "without HF_TOKEN")
        return bool(verdict)

    @staticmethod
    def _submission(record: JobRecord, extra_warnings: list[str] | None = None) -> Submission:
        return Submission(
            job_id=record.job_id, backend=record.backend, stage=record.stage, job_url=record.job_url,
            hub_model_id=record.hub_model_id, model_url=record.model_url, trackio_url=record.trackio_url,
            flavor=record.flavor or "", timeout=record.timeout or "", estimated_hours=record.estimated_hours,
            estimated_cost_usd=record.estimated_cost_usd, effective_batch_size=record.effective_batch_size or 0,
            worst_case_cost_usd=record.worst_case_cost_usd, script_sha256=record.script_sha256,
            warnings=[*(extra_warnings or []), *record.warnings],
        )

    # --- job_status and friends -------------------------------------------------------------------------
    def _locate(self, job_id: str) -> tuple[str, str, str | None, JobRecord | None]:
        """(backend, bare job id, namespace, ledger record) for a job id or 'namespace/job_id'."""
        job_id = job_id.strip()
        record = self.ledger.get(job_id)
        if record is not None:
            return record.backend, job_id, record.namespace, record
        if self.access.remote:  # a remote caller reaches the jobs this server launched, not all of the token's
            raise TrainError(f"no job {job_id!r} was launched through this server: pass a job_id from list_jobs")
        owner = backends.owner_of(job_id)
        if not backends.traits(owner).has_namespace:
            return owner, job_id, None, None
        if "/" in job_id:
            namespace, bare = job_id.rsplit("/", 1)
            return owner, bare, namespace, self.ledger.get(bare)
        return owner, job_id, resolve_identity(hub_token()).name, None

    def _state(self, job_id: str) -> tuple[Backend, str, str | None, JobRecord | None, JobState]:
        backend_name, bare, namespace, record = self._locate(job_id)
        backend = self.backend(backend_name)
        # its stage can no longer change: no need to ask the backend, once an inspect has recorded how it ended
        if record is not None and record.settled and record.finished_at:
            return backend, bare, namespace, record, JobState(
                stage=record.stage, message=record.message, created_at=record.created_at,
                started_at=record.started_at, finished_at=record.finished_at, url=record.job_url)
        try:
            state = backend.inspect(bare, namespace)
        except JobGone:
            if record is None:
                raise
            state = JobState(stage="DELETED", message="the backend no longer has this job (deleted, or expired)",
                             created_at=record.created_at, url=record.job_url)
        except HubUnreachable as exc:
            if record is None:
                raise
            state = JobState(stage=record.stage, created_at=record.created_at, finished_at=record.finished_at,
                             url=record.job_url, stale=f"{exc} Showing the last known state from the ledger.")
        if record is not None and (record.stage != state.stage or state.stage in SETTLED_STAGES):
            self.ledger.update_stage(bare, state.stage, state.finished_at, started_at=state.started_at,
                                     message=state.message)
        return backend, bare, namespace, record, state

    def job_status(self, job_id: str, tail: int = 20) -> JobReport:
        return self._report(job_id, tail)[0]

    def job_stage(self, job_id: str) -> str:
        """Only the stage (what a subscription watches): no logs read."""
        return self._state(job_id)[4].stage

    def _report(self, job_id: str, tail: int) -> tuple[JobReport, dict | None]:
        """The job's report and its preflight measurement (from the log, or the ledger once seen)."""
        self._recover_submissions()
        backend, bare, namespace, record, state = self._state(job_id)
        read, parsed = self._status_logs(backend, bare, namespace, state, tail)
        parsed = replace(parsed, metrics=dict(parsed.metrics))  # the cached parse stays as read
        measured = parsed.probe or (record.measured if record else None)
        if parsed.probe and record is not None and record.measured != parsed.probe:
            self.ledger.set_measured(bare, parsed.probe)
        if measured and not parsed.probe:  # the preflight line has scrolled out of the tail
            parsed.metrics.update(probe_metrics(measured))
        error = None
        if state.stage == "ERROR":
            error = parsed.error or state.message or "the job failed without an error line; read log_tail"
        trackio_url = record.trackio_url if record else None
        model_url = record.model_url if record else None
        next_step = state.stale or self._next_step(state, parsed, bare, record, trackio_url, model_url)
        if read.note:
            next_step += f" ({read.note}: the log tail may be short; job_logs reads it again)"
        return JobReport(
            job_id=bare, backend=backend.name, stage=state.stage, message=state.message,
            job_url=state.url or (record.job_url if record else None), created_at=state.created_at,
            started_at=state.started_at, finished_at=state.finished_at, progress=parsed.progress,
            last_metrics=parsed.metrics, log_tail=read.lines[-tail:] if tail else [], error=error,
            trackio_url=trackio_url, model_url=model_url, next_step=next_step, stale=bool(state.stale),
        ), measured

    def _status_logs(self, backend: Backend, job_id: str, namespace: str | None, state: JobState,
                     tail: int) -> tuple[LogRead, ParsedLog]:
        """The log lines job_status shows and what they say; a settled job's are read once and kept."""
        wanted = max(tail, STATUS_LOG_LINES)
        cached = self._settled_logs.get(job_id)
        if cached is not None and (cached[0] >= wanted or len(cached[1].lines) < cached[0]):  # or the whole log
            self._settled_logs.move_to_end(job_id)
            return cached[1], cached[2]
        if state.stage in ("SCHEDULING", "DELETED") or state.stale:
            return LogRead([]), parse_log([])
        read = self._logs(backend, job_id, namespace, tail=wanted, finished=state.stage in TERMINAL_STAGES)
        parsed = parse_log(read.lines)
        # kept once the log is known to be whole: the Hub's log can lag its stage, so wait for the final line
        finished_log = parsed.done or parsed.error is not None or backend.logs_final_when_settled
        if state.stage in SETTLED_STAGES and read.complete and finished_log:
            self._settled_logs[job_id] = (wanted, read, parsed)
            while len(self._settled_logs) > SETTLED_LOGS_CACHED:
                self._settled_logs.popitem(last=False)
        return read, parsed

    def _next_step(self, state: JobState, parsed, job_id: str, record: JobRecord | None, trackio_url: str | None,
                   model_url: str | None) -> str:
        stage = state.stage
        if stage == "SCHEDULING":
            waited = _minutes_since(state.created_at)
            if waited is not None and waited >= SCHEDULING_ALERT_MIN and record and record.flavor:
                others = self._alternative_flavors(record.flavor)
                return (f"Still waiting for {record.flavor} hardware after {waited:.0f} min: it may be scarce right "
                        f"now. cancel_job and resubmit with another flavor that fits"
                        + (f", e.g. {', '.join(others)}" if others else "") + " (estimate_cost lists them).")
            return ("Waiting for hardware: check again in a minute. If it stays in SCHEDULING for over "
                    f"{SCHEDULING_ALERT_MIN} minutes, cancel_job and resubmit on another flavor.")
        if trackio_url and trackio_url.startswith("file://"):
            folder = trackio_url.removeprefix("file://")
            dashboard = f" Dashboard: TRACKIO_DIR={folder} trackio show --project hf-train-mcp."
        else:
            dashboard = f" Live curves: {trackio_url}." if trackio_url else ""
        kind = record.kind if record else "train"
        if stage == "RUNNING":
            done = f"{parsed.progress.percent}% done" if parsed.progress.percent is not None else "starting up"
            doing = {"evaluate": "The evaluation", "export": "The export", "probe": "The measurement"}.get(kind, "Training")
            return f"{doing} is {done}; check again in a few minutes (do not poll in a tight loop).{dashboard}"
        if stage == "COMPLETED" and kind == "evaluate":
            return ("Evaluated: the results are in last_metrics, in the model card's Evaluation section and in the "
                    f"Trackio project; the HFTM_SAMPLE lines of job_logs compare base and fine-tuned answers.{dashboard}")
        if stage == "COMPLETED" and kind == "export":
            return f"Exported: the model is at {model_url}." if model_url else "Exported."
        if stage == "COMPLETED":
            return (f"Finished. The model is at {model_url}; evaluate_model(model='{job_id}') measures it on held-out "
                    "data." if model_url else "Finished.") + dashboard
        if stage == "ERROR":
            return parsed.hint or (f"Read error and log_tail, fix the cause, then resubmit (resume_from='{job_id}' "
                                   "continues from the last checkpoint).")
        if stage == "CANCELED":
            return f"Canceled. Resubmit with resume_from='{job_id}' to continue from the last checkpoint."
        return "The job no longer exists on the backend; its pushed checkpoints and model repo, if any, remain."

    @staticmethod
    def _alternative_flavors(flavor: str) -> list[str]:
        """Other GPU flavors with at least as much memory per GPU, cheapest first (hardware is scarce per type)."""
        catalog = get_catalog(offline=True)
        current = catalog.flavors.get(flavor)
        if current is None or current.gpu is None:
            return []
        others = [f for f in catalog.flavors.values() if f.gpu is not None and f.name != flavor
                  and f.gpu.model != current.gpu.model and f.gpu_memory_gb >= current.gpu_memory_gb]
        return [f.name for f in sorted(others, key=lambda f: f.usd_per_hour)[:3]]

    @staticmethod
    def _logs(backend: Backend, job_id: str, namespace: str | None, *, tail: int | None, finished: bool,
              upto: int | None = None) -> LogRead:
        """Log lines with this server's token masked: a job that prints its environment must not leak it."""
        token = hub_token()
        read = backend.logs(job_id, namespace, tail=tail, finished=finished, upto=upto)
        read.lines = [scrub(line, token) for line in read.lines]
        return read

    def job_logs(self, job_id: str, offset: int = 0, limit: int = 200) -> LogPage:
        backend, bare, namespace, _, state = self._state(job_id)
        if state.stale:
            raise HubUnreachable(state.stale.removesuffix(" Showing the last known state from the ledger.") +
                                 " The logs live on the Hub: try again in a minute.")
        finished = state.stage in TERMINAL_STAGES
        read = LogRead([]) if state.stage in ("SCHEDULING", "DELETED") else self._logs(
            backend, bare, namespace, tail=None, finished=finished, upto=offset + limit + 1)  # +1: is there more?
        page = read.lines[offset:offset + limit]
        next_offset = offset + len(page)
        return LogPage(job_id=bare, offset=offset, lines=page, next_offset=next_offset,
                       finished=finished and read.complete and next_offset >= len(read.lines), note=read.note)

    def cancel_job(self, job_id: str) -> CancelResult:
        sweep = self.ledger.sweep(job_id) if job_id.startswith(sweeps.KEY_PREFIX) else None
        if sweep is not None:
            self.check_sweep_access(sweep)
            return CancelResult(job_id=job_id, stage="CANCELED", message=sweeps.cancel_sweep(self, job_id))
        backend, bare, namespace, record, state = self._state(job_id)
        if state.stage in TERMINAL_STAGES:
            return CancelResult(job_id=bare, stage=state.stage, message=f"already {state.stage}; nothing to cancel")
        backend.cancel(bare, namespace)
        after = backend.inspect(bare, namespace)
        if record is not None:  # the backend's word (the job may still be RUNNING while it stops)
            self.ledger.update_stage(bare, after.stage, after.finished_at, started_at=after.started_at,
                                     message=after.message)
        message = backend.cancel_note
        return CancelResult(job_id=bare, stage=after.stage, message=message)

    def list_jobs(self, stage: str | None = None, limit: int = 20) -> JobList:
        self._recover_submissions()
        jobs = []
        unreachable = set()  # backends that did not answer: the rest of the list comes from the ledger
        # Local jobs are this machine's; a caller who may not run them here may not read them either.
        only = backends.permitted(local_jobs=self.access.local_jobs)
        for record in self.ledger.list(limit=limit * 3 if stage else limit, backends=only):
            current, stale = record.stage, False
            if current not in TERMINAL_STAGES:
                try:
                    if record.backend in unreachable:
                        raise HubUnreachable("skipped")
                    state = self.backend(record.backend).inspect(record.job_id, record.namespace)
                    current = state.stage
                    if current != record.stage:
                        self.ledger.update_stage(record.job_id, current, state.finished_at,
                                                 started_at=state.started_at, message=state.message)
                except JobGone:
                    current = "DELETED"
                    self.ledger.update_stage(record.job_id, current)
                except HubUnreachable:
                    unreachable.add(record.backend)
                    stale = True
                except TrainError as exc:
                    log.info("could not refresh %s: %s", record.job_id, exc)
                    stale = True
            if stage and current != stage:
                continue
            jobs.append(JobSummary(job_id=record.job_id, backend=record.backend, stage=current,
                                   created_at=record.created_at, model=record.model, method=record.method,
                                   hub_model_id=record.hub_model_id, job_url=record.job_url, stale=stale))
            if len(jobs) >= limit:
                break
        return JobList(jobs=jobs)

    # --- hardware and cost ------------------------------------------------------------------------------
    def list_hardware(self) -> HardwareList:
        catalog = get_catalog(hub_token())
        rows = [HardwareRow(flavor=f.name, gpu=f.gpu.model if f.gpu else None, gpus=f.gpus,
                            gpu_memory_gb=f.gpu_memory_gb, bf16=bool(f.gpu and f.gpu.bf16),
                            usd_per_hour=round(f.usd_per_hour, 2))
                for f in catalog.flavors.values()]
        return HardwareList(source=catalog.source, flavors=sorted(rows, key=lambda r: r.usd_per_hour))


    def estimate_cost(self, req: EstimateRequest, *, progress: Progress | None = None,
                      confirm: "Callable[[Prepared], None] | None" = None) -> CostEstimate:
        """confirm: called with the measurement job's plan before measure=True launches it; it raises to stop."""
        model, flavor, dataset = req.model, req.flavor, req.dataset
        step = progress or (lambda message: None)
        num_examples, tokens_per_example, measure = req.num_examples, req.tokens_per_example, req.measure
        if measure and not dataset:
            raise TrainError("measure=True runs a few training steps on the real data: pass dataset too")
        token = hub_token()
        step(f"reading the size of {model}")
        size = self._model_size(model, token, offline=False)
        teacher = self._teacher_size(req, token, offline=False)
        hyper = Hyper.of(req, teacher_params=teacher.params if teacher else None)
        warnings: list[str] = []
        if size.note:
            warnings.append(f"model size taken from its {size.source}: the Hub metadata could not be read "
                            f"({size.note})")
        rows, mean, token_source = num_examples, tokens_per_example, "stated" if tokens_per_example else None
        if dataset and (rows is None or mean is None):
            report = validate_dataset(dataset, hyper.method, model=model, max_length=hyper.max_length, token=token,
                                      access=self.access, progress=progress)
            rows = rows or report.num_rows
            if mean is None and report.token_stats:
                mean, token_source = report.token_stats.mean, f"{report.token_stats.sampled_rows} sampled rows"
            if not report.valid:
                warnings.append("the dataset has format errors for this method: run validate_dataset")
        if rows is None and not hyper.max_steps:
            warnings.append(f"no dataset size given: assumed {EC.DEFAULT_NUM_EXAMPLES} examples; pass dataset or "
                            "num_examples")
        if mean is None:
            mean, token_source = hyper.spec.tokens_per_example, "default for the method"
            warnings.append(f"no token statistics: assumed {mean} tokens per example; pass tokens_per_example or a "
                            "dataset with a reachable tokenizer")
        data = DataFacts(num_rows=rows, mean_tokens=mean)
        step("reading Jobs hardware and prices")
        catalog = get_catalog(token)
        if catalog.note:
            warnings.append(catalog.note)
        ranked = estimate_flavors(hyper, size, catalog, data)
        if flavor:
            if flavor not in catalog.flavors or catalog.flavors[flavor].gpu is None:
                raise TrainError(f"{flavor!r} is not a GPU flavor in the catalog; estimate_cost lists the flavors that exist")
            chosen = next(e for e in ranked if e.flavor == flavor)
        else:
            fitting = [e for e in ranked if e.fits]
            chosen = fitting[0] if fitting else max(ranked, key=lambda e: e.gpu_memory_gb)
        measurement = None
        if dataset:
            work = hyper.workload(size, catalog.flavors[chosen.flavor].gpus, data)
            chosen, measurement = self._measured(req, work, chosen, catalog, measure, warnings, confirm)
        fitting = [e for e in ranked if e.fits]
        fastest = min(fitting, key=lambda e: e.hours) if fitting else None
        gpus = catalog.flavors[chosen.flavor].gpus if chosen.flavor in catalog.flavors else 1
        work = hyper.workload(size, gpus, data)
        if not chosen.fits:
            warnings.append(f"does not fit: {chosen.reasons[0]}. "
                            + how_to_fit(work, fitting[0] if fitting else None))
        if chosen.flavor.startswith("t4"):
            warnings.append("T4 has no bf16 (fp16 mixed precision instead, which can overflow); l4x1 has bf16")
        if chosen.hours > 4:
            warnings.append(f"over 4 h ({chosen.hours:.1f} h): make sure checkpoints are pushed (the default) and "
                            "consider a multi-GPU flavor")
        if chosen.recommended_timeout_seconds > MAX_TIMEOUT_S:
            warnings.append(f"the recommended timeout {chosen.recommended_timeout} is over the 7-day limit of one "
                            "job, so submit_training refuses this run: lower max_steps or epochs, pick a faster "
                            "flavor, or train in parts with resume_from")
        if (size.active or size.experts) and not chosen.measured:
            warnings.append("mixture-of-experts timing rests on few measured runs (expect up to ~2x either way); the "
                            "timeout has a wider margin, and measure=True measures the real pace")
        if hyper.spec.generates and not chosen.measured:
            warnings.append(f"{hyper.spec.title}'s generation time assumes each step's longest completion reaches "
                            f"max_completion_length ({hyper.completion_length} tokens); shorter completions finish "
                            "sooner (measure=True measures the real pace)")
        assumptions = {
            "params_billions": round(size.billions, 3), "params_source": size.source,
            **({"active_params_billions": round(size.compute_params / 1e9, 3)} if size.active else {}),
            "num_examples": rows, "tokens_per_example": mean, "tokens_source": token_source,
            "tokens_total": int(chosen.tokens), "tokens_per_second": int(chosen.tokens_per_second),
            "throughput": "measured" if chosen.measured else "modelled",
            "per_device_batch_size": work.per_device_batch_size,
            "gradient_accumulation": work.gradient_accumulation, "max_length": work.max_length,
            "overhead_minutes": round(chosen.overhead_seconds / 60, 1), "prices": catalog.source,
            "billing": "per minute while the job is starting or running (not while scheduling)",
        }
        if chosen.step is not None and not chosen.measured:
            step = chosen.step
            assumptions["seconds_per_step"] = {k: round(v, 3) for k, v in (
                ("compute", step.compute), ("dequantise", step.dequantise), ("generation", step.generation),
                ("communication", step.communication), ("other", step.fixed + step.optimizer)) if v}
        return CostEstimate(
            flavor=chosen.flavor, fits=chosen.fits, memory_gb_needed=chosen.memory.gb,
            gpu_memory_gb=chosen.gpu_memory_gb, hours=round(chosen.hours, 2), cost_usd=chosen.cost_usd,
            recommended_timeout=chosen.recommended_timeout, steps=chosen.steps,
            effective_batch_size=hyper.schedule(size.billions, gpus).effective(gpus),
            alternatives=[FlavorOption(flavor=e.flavor, fits=e.fits, hours=round(e.hours, 2), cost_usd=e.cost_usd)
                          for e in ranked if e.flavor != chosen.flavor][:8],
            fastest=FlavorOption(flavor=fastest.flavor, fits=True, hours=round(fastest.hours, 2),
                                 cost_usd=fastest.cost_usd) if fastest else None,
            assumptions=assumptions, warnings=warnings, measurement=measurement,
        )

    def _measurements(self, key: str) -> list[JobRecord]:
        """The measurement jobs of these settings, newest first (kind 'probe' only: a key is not proof)."""
        return [r for r in self.ledger.keyed(measure_prefix(key)) if r.kind == "probe" and not r.job_id.startswith(PENDING)]

    def _finished_measurement(self, key: str) -> dict | None:
        """The numbers of the newest measurement of these settings that measured something."""
        for record in self._measurements(key):
            measured = record.measured or (self._report(record.job_id, 0)[1] if record.settled else None)
            if usable(measured):
                return measured
        return None

    def _measured(self, req: EstimateRequest, work: Workload, chosen: FlavorEstimate, catalog, measure: bool,
                  warnings: list[str], confirm: "Callable[[Prepared], None] | None" = None
                  ) -> tuple[FlavorEstimate, Measurement | None]:
        """The modelled estimate, replaced by a finished measurement of the same step; with measure=True a
        measurement job is launched unless one is running or has measured (a failed one is tried again)."""
        backend_name = req.backend or default_backend()
        where = backends.traits(backend_name)
        target = where.flavor(cuda=has_cuda()) or chosen.flavor
        key = probe_key(model=req.model, dataset=req.dataset, dataset_config=req.dataset_config,
                        dataset_split=req.dataset_split, flavor=target, backend=backend_name, method=req.method,
                        peft=req.peft, per_device_batch_size=work.per_device_batch_size,
                        gradient_accumulation=work.gradient_accumulation, max_length=work.max_length,
                        packing=work.packing, num_generations=work.num_generations,
                        max_completion_length=work.max_completion_length, lora=D.LORA,
                        teacher_model=getattr(req, "teacher_model", None))
        attempts = self._measurements(key)
        report, probe = self._report(attempts[0].job_id, 0) if attempts else (None, None)
        ended = report is not None and report.stage in TERMINAL_STAGES
        failed = ended and not usable(probe)  # an ended measurement that measured nothing is a failed one
        if measure and (report is None or failed):
            if not chosen.fits:
                raise TrainError(f"no flavor fits this run ({chosen.reasons[0]}): measuring it would only run out of "
                                 "memory; " + how_to_fit(work, None) + " Nothing was launched.")
            if failed:
                warnings.append(f"the previous measurement {report.job_id} ended {report.stage}"
                                + (f" ({report.error})" if report.error else " without measuring") + "; measuring again")
            request = TrainingRequest(
                model=req.model, dataset=req.dataset, backend=backend_name,
                flavor=chosen.flavor if where.catalog_from_hub else None,
                idempotency_key=attempt_key(key, len(attempts) + 1),
                **{k: v for k, v in req.model_dump(include=set(RunShape.model_fields)).items()
                   if v is not None and k not in ("model", "backend", "flavor")},
            )
            try:
                sub = self.submit_training(request, kind="probe", confirm=confirm)
            except SubmissionUnknown:
                raise
            except TrainError as exc:
                if "in progress" not in str(exc):
                    raise
                warnings.append("a measurement of these settings is being submitted by another call; ask again shortly")
                return chosen, None
            warnings.append(f"measuring on {sub.flavor}: job {sub.job_id} runs {PROBE_STEPS} optimizer steps at the "
                            f"real batch size (at most {sub.timeout}, ${sub.worst_case_cost_usd or 0:.2f}); call "
                            "estimate_cost again with the same arguments once it has finished")
            return chosen, Measurement(job_id=sub.job_id, stage=sub.stage, job_url=sub.job_url)
        if report is None:
            return chosen, None
        measurement = Measurement(job_id=report.job_id, stage=report.stage, job_url=report.job_url,
                                  error=report.error or ("ended without measuring" if failed else None))
        if not usable(probe):
            if failed:
                warnings.append(f"the measurement {report.job_id} ended {report.stage}"
                                + (f": {report.error}" if report.error else " without measuring")
                                + "; measure=True tries again")
                if report.error and "out of memory" in report.error.lower():
                    chosen = replace(chosen, fits=False, reasons=[f"the measurement ran out of GPU memory on "
                                                                  f"{chosen.flavor}"])
            else:
                warnings.append(f"still measuring: job {report.job_id} is {report.stage}; call again once it finished")
            return chosen, measurement
        measurement = measurement.model_copy(update={k: probe.get(k) for k in (
            "seconds_per_step", "tokens_per_second", "peak_memory_gb", "device")})
        if not work.packing and work.mean_length < work.max_length:
            warnings.append(f"peak memory was measured on sampled rows; a batch of rows at max_length "
                            f"({work.max_length} tokens) may need up to ~{chosen.memory.gb:.0f} GB (modelled)")
        price = catalog.flavors[chosen.flavor].usd_per_hour if where.bills else 0.0
        measured = apply_measurement(chosen, probe, price)
        if not where.catalog_from_hub:  # its own hardware (this machine): no container, installs or bill
            measured = replace(measured, flavor=target, overhead_seconds=0.0, cost_usd=0.0,
                               hours=measured.train_seconds / 3600,
                               gpu_memory_gb=float(probe.get("gpu_memory_gb") or 0.0))
        return measured, measurement
