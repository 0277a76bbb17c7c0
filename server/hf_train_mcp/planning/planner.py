"""Preparing a submission: the request checked (access, data, chat template), sized, planned and rendered into
a Prepared job (training, measurement, evaluation, export) or a sweep plan, before anything is launched.

Previews are kept a few minutes, so that a spend confirmation asked in between does not plan twice.
"""

import os
import time
from dataclasses import replace
from pathlib import Path
from collections.abc import Callable
from typing import Any

from hf_train_mcp import backends

from hf_train_mcp.access import is_local
from hf_train_mcp.backends.local import has_cuda
from hf_train_mcp.models.chat_template import has_chat_template
from hf_train_mcp.durations import format_duration
from hf_train_mcp.errors import TrainError
from hf_train_mcp.estimate.hardware import get_catalog
from hf_train_mcp.estimate.sizing import ModelSize, model_size
from hf_train_mcp.planning.evaluation import plan_evaluation
from hf_train_mcp.planning.export import plan_export
from hf_train_mcp.planning.subjects import Subject, check_job_inputs, for_family, subject_from_job, subject_from_ref
from hf_train_mcp.access import Access
from hf_train_mcp.jobs.ledger import JobRecord, Ledger
from hf_train_mcp.hub import adapter_config, hub_endpoint, hub_token, repo_has_file, resolve_identity
from hf_train_mcp.estimate.measured import config_key
from hf_train_mcp.models.files import custom_modules
from hf_train_mcp.planning.datasets import checked_dataset, eval_data
from hf_train_mcp.planning.training import plan_run
from hf_train_mcp.jobs.prepared import Prepared, Progress
from hf_train_mcp.jobs.uploads import Upload, check_total, mounted, named_content, shown_bytes, withheld_warnings
from hf_train_mcp.contract.requests import EvaluateRequest, ExportRequest, RunShape, ScriptRequest
from hf_train_mcp.contract.requests import SweepRequest, TrainingRequest
from hf_train_mcp.planning.user_script import plan_script
from hf_train_mcp.planning.user_script_source import local_content, read_source
from hf_train_mcp.jobs import keys, retries
from hf_train_mcp.planning import copies
from hf_train_mcp.user_scripts.source import source_kind
from hf_train_mcp.planning.targets import check_push_target, check_trackio_space

PREVIEW_TTL_S = 300.0
PREVIEWS_KEPT = 16


def default_backend() -> str:
    chosen = os.environ.get("HF_TRAIN_BACKEND")
    if chosen in backends.NAMES:
        return chosen
    return backends.default(token=hub_token())


def sweep_backend(req: SweepRequest) -> str:
    return req.base.get("backend") or default_backend()


class Planner:
    def __init__(self, *, access: Access, ledger: Callable[[], Ledger], job_stage: Callable[[str], str],
                 measured: Callable[[str], dict | None], plan_sweep: Callable[..., Any]) -> None:
        """ledger(): the ledger, opened on first use; job_stage(job_id): a job's stage (what a follow-up of it
        needs); measured(key): the numbers of a finished measurement of these settings, or None."""
        self.access = access
        self._ledger, self._job_stage, self._measured = ledger, job_stage, measured
        self._plan_sweep = plan_sweep  # sweeps.plan.plan_sweep: a sweep's runs are planned by the sweeps room
        self._previews: dict[str, tuple[float, Prepared]] = {}

    @property
    def ledger(self) -> Ledger:
        return self._ledger()

    def ledger_job(self, ref: str | None) -> JobRecord | None:
        """The job `ref` names, when it is a job id of this server's ledger (evaluate/export take either)."""
        if not ref or "/" in ref.strip() or is_local(ref):
            return None
        return self.ledger.get(ref.strip())

    def model_size(self, model: str, token: str | None, offline: bool) -> ModelSize:
        self.access.check_ref(model, "model")
        if is_local(model):  # the job would import the folder's own module classes (models/files.py custom_modules)
            self.access.check_model_code(model, custom_modules(Path(model).expanduser()))
        try:
            return model_size(model, token, offline=offline)
        except ValueError as exc:
            raise TrainError(str(exc)) from None

    def teacher_size(self, req: RunShape, token: str | None, offline: bool) -> ModelSize | None:
        """A distillation's teacher: its forwards and its weights count in the time and memory."""
        teacher = getattr(req, "teacher_model", None)
        return self.model_size(teacher, token, offline=offline) if teacher else None

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
        if previous.kind != "train":
            raise TrainError(f"resume_from={req.resume_from!r} is a {previous.kind} job, not a training job: resume "
                             "from a submit_training job (list_jobs), or a Hub repo 'owner/name' with checkpoints")
        check_job_inputs(self.access, previous, TrainingRequest.model_validate_json(previous.request_json))
        if not backends.traits(previous.backend).pushes_to_hub:
            if not backends.traits(backend_name).reads_local_paths:
                raise TrainError(f"job {req.resume_from} ran on {backends.traits(previous.backend).place}: its "
                                 "checkpoints are not on the Hub; "
                                 f"resume it with backend={previous.backend!r}")
            return None, previous.output_dir
        if previous.output_bucket and previous.output_bucket == req.output_bucket and previous.output_dir:
            return None, previous.output_dir  # the same bucket is mounted: its checkpoints are right there
        if previous.hub_model_id:
            return previous.hub_model_id, None
        raise TrainError(f"job {req.resume_from} pushed no model repo to resume from; pass a Hub repo id")

    def check_access(self, req: Any, backend_name: str) -> None:
        backends.check_permission(backend_name, self.access)
        if getattr(req, "reward_code", None):
            self.access.check_reward_code()
        if isinstance(req, ScriptRequest):
            self.access.check_scripts()
            if req.folder:
                self.access.check_path(req.folder, "folder")
            elif req.script is not None and source_kind(req.script) == "path":
                self.access.check_path(req.script, "script")
        for ref, what in ((getattr(req, "model", None), "model"), (getattr(req, "dataset", None), "dataset"),
                          (getattr(req, "teacher_model", None), "teacher model")):
            if ref and self.ledger_job(ref) is None:  # a job id names this server's own output, not a caller's path
                self.access.check_ref(ref, what)

    @staticmethod
    def _check_chat_template(req: TrainingRequest, token: str | None) -> None:
        if has_chat_template(req.model, token, local=is_local(req.model)) is False:
            raise TrainError(f"{req.model} has no chat template and this dataset is conversational, so the job would "
                             "fail when it formats the first row: send chat_template='chatml', or use the model's "
                             "instruct/chat version. Nothing was submitted.")

    def preview(self, req: Any, *, kind: str = "train", progress: Progress | None = None) -> Prepared:
        """Everything a submission decides before it launches (validated data, plan, script), kept for a few
        minutes so that a confirmation asked in between does not plan the same request twice."""
        if kind == "sweep":  # each run is checked as it is planned
            backend_name = sweep_backend(req)
        else:
            backend_name = req.backend or default_backend()
            self.check_access(req, backend_name)
        prepared = self.prepare(req, backend_name, kind=kind, progress=progress)
        self.keep(req, prepared, kind=kind)
        return prepared

    def keep(self, req: Any, prepared: Any, *, kind: str) -> None:
        """Keep a preview of `req` for the submission that follows its confirmation."""
        self._previews[self._preview_key(req, kind)] = (time.monotonic(), prepared)
        while len(self._previews) > PREVIEWS_KEPT:
            self._previews.pop(next(iter(self._previews)))

    def prepare_submission(self, req: Any, backend_name: str, *, kind: str,
                           progress: Progress | None = None) -> Prepared:
        """A job as it would be submitted: the caller's access checked, planned, and the call as sent kept on
        it (a retry with the same key is held to it)."""
        self.check_access(req, backend_name)
        prepared = self.prepare(req, backend_name, kind=kind, progress=progress)
        prepared.asked = retries.asked_json(req, backend_name, content=self.content(
            req, backend_name, getattr(prepared.plan, "source", None), prepared.uploads))
        return prepared

    def content(self, req: Any, backend_name: str, source: Any = None, planned: list[Upload] = (),
                recorded: list[dict] = ()) -> str | None:
        """The hash of the local files a call names, as they are now (a retry with its key is held to it):
        run_script's folder or file (`source`: its read), or the dataset and model folders a job on the Hub's
        machines reads as uploaded copies (`planned`: as this call planned them; `recorded`: a retry's, as the
        job its key names uploaded them). A sweep's run reads the copy
        its sweep uploaded, whatever the file holds when it is launched again: held to its arguments alone."""
        if isinstance(req, ScriptRequest):
            return local_content(req, self.access, source)
        if not backends.mounts_uploads(backend_name) or keys.sweep_of(req.idempotency_key):
            return None
        return named_content(req, self.access, planned, recorded)

    @staticmethod
    def _preview_key(req: Any, kind: str) -> str:
        return f"{kind}:{type(req).__name__}:{req.model_dump_json()}"

    def prepare(self, req: Any, backend_name: str, *, kind: str = "train",
                 progress: Progress | None = None) -> Prepared:
        cached = self._previews.pop(self._preview_key(req, kind), None)
        if cached is not None and time.monotonic() - cached[0] < PREVIEW_TTL_S:
            return cached[1]
        prepare = {"evaluate": self._prepare_evaluation, "export": self._prepare_export,
                   "sweep": self._prepare_sweep, "script": self._prepare_script}.get(kind, self._prepare_training)
        return prepare(req, backend_name, kind=kind, progress=progress or (lambda message: None))

    def _prepare_sweep(self, req: SweepRequest, backend_name: str, *, kind: str,
                       progress: Progress) -> Any:
        plan = self._plan_sweep(lambda run: self.preview(run, kind="train"), req, backend_name, progress)
        uploads = list({u.place: u for run in plan.runs for u in run.prepared.uploads}.values())
        check_total(uploads, per="one sweep")
        if uploads:  # one copy for every run: said once, where the sweep's answer has no field for it
            plan.warnings.append(f"the runs read {sum(u.count for u in uploads)} local file(s) "
                                 f"({shown_bytes(sum(u.size for u in uploads))}), sent once to your private "
                                 f"jobs-artifacts bucket ({', '.join(u.place for u in uploads)}) as the first run "
                                 "launches, and mounted read-only into each")
        return plan

    def _prepare_script(self, req: ScriptRequest, backend_name: str, *, kind: str, progress: Progress) -> Prepared:
        """run_script: the caller's program read (a URL fetched, a folder hashed) and planned like any job."""
        where = backends.traits(backend_name)
        token = hub_token() if where.chooses_flavor else None
        namespace = self._namespace(req, backend_name, token)
        progress("reading the script")
        source = read_source(req, self.access)
        plan = plan_script(req, source, backend=backend_name,
                           catalog=get_catalog(token, offline=not token, backend=backend_name),
                           namespace=namespace, access=self.access)
        return self._package(req, backend_name, kind, namespace, plan, hub_model_id=None, model=source.label,
                             dataset=None, reads=[])

    @staticmethod
    def _namespace(req: Any, backend_name: str, token: str | None) -> str | None:
        """Whose account an HF job runs under (a dry run without a token guesses it from hub_model_id)."""
        if not backends.traits(backend_name).has_namespace:
            return None
        if token or not req.dry_run:
            return resolve_identity(token, instead=backends.traits(backend_name).words.instead).name
        return req.hub_model_id.split("/")[0] if getattr(req, "hub_model_id", None) else None

    def _prepare_training(self, req: TrainingRequest, backend_name: str, *, kind: str,
                          progress: Progress) -> Prepared:
        step = progress
        where = backends.traits(backend_name)
        here = not where.chooses_flavor  # sized and planned offline: nothing is asked of the Hub
        mounting = backends.mounts_uploads(backend_name)  # local files travel to the job as uploaded copies
        req = _local_paths(req, where, mounting)
        token = None if here else hub_token()
        namespace = self._namespace(req, backend_name, token)
        step(f"validating {req.dataset}")
        resumed = copies.resumed_copies(self.ledger, req) if mounting else {}
        if "dataset" not in resumed:
            req, data, warnings = checked_dataset(req, token or hub_token(), self.access)
        else:  # the local file is gone: the run reads the copy the resumed job read
            req, data, warnings = copies.from_copy(self.ledger, req, resumed["dataset"])
        if req.resume_from and not req.output_bucket:
            previous = self.ledger.get(req.resume_from)
            if previous is not None and previous.output_bucket:  # resume where its checkpoints are
                req = req.model_copy(update={"output_bucket": previous.output_bucket})
        if data.conversational and req.chat_template is None:
            self._check_chat_template(req, token or hub_token())
        step(f"sizing {req.model}")  # a folder gone since the resumed job: by its upload's config.json
        size = self.model_size(copies.config_folder(resumed.get("model")) or req.model, token, offline=here)
        teacher_copy = copies.config_folder(resumed.get("teacher model"))
        teacher = (self.model_size(teacher_copy, token, offline=here) if teacher_copy
                   else self.teacher_size(req, token, offline=here))
        catalog = get_catalog(token, offline=here, backend=backend_name)
        resume_repo, resume_dir = self._resume_source(req, backend_name)
        step("planning and rendering the script")
        plan_args = dict(backend=backend_name, size=size, catalog=catalog, namespace=namespace, data=data,
                         local_cuda=has_cuda(), resume_repo=resume_repo, resume_dir=resume_dir, probe_only=kind == "probe",
                         teacher=teacher)
        plan = plan_run(req, **plan_args)
        if kind == "train" and where.bills and plan.estimate is not None:
            measured = self._measured(config_key(plan.config, flavor=plan.flavor, backend=backend_name))
            if measured:  # a measurement of this run's steps on this flavor: its time, not the model's
                plan = plan_run(req.model_copy(update={"flavor": plan.flavor}), **plan_args, measured=measured)
        plan.warnings[:0] = warnings
        pushes = where.pushes_to_hub and kind == "train"
        if pushes and req.hub_model_id:
            check_push_target(req.hub_model_id, token=token, access=self.access, warnings=plan.warnings,
                              pushed_before=self.ledger.pushed_to(req.hub_model_id), dry_run=req.dry_run)
        reads = [("model", req.model), ("dataset", req.dataset), ("model", req.teacher_model),
                 *([("model", resume_repo)] if resume_repo else [])]
        uploads = []
        if mounting:
            step("hashing the local files the job reads")
            uploads = copies.training_uploads(self.ledger, req, data, resumed, self.access)
            plan.warnings += copies.resumed_on_other_data(self.ledger, req, uploads)
        return self._package(req, backend_name, kind, namespace, plan, hub_model_id=req.hub_model_id if pushes else None,
                             model=req.model, dataset=req.dataset, reads=reads, uploads=uploads)

    def _package(self, req: Any, backend_name: str, kind: str, namespace: str | None, plan: Any, *,
                 hub_model_id: str | None, model: str, dataset: str | None, reads: list[tuple[str, str | None]],
                 parent_job_id: str | None = None, model_url: str | None = None,
                 trackio_url: str | None = None, uploads: list[Upload] = ()) -> Prepared:
        """The rendered script, the job spec and what the Submission will say, for any kind of job; uploaded
        local files read from their mounted copies."""
        if plan.trackio_space_id:  # trackio hands the Space the token
            check_trackio_space(plan.trackio_space_id, namespace=namespace, token=hub_token(),
                                access=self.access, warnings=plan.warnings)
        if uploads:
            plan.config = mounted(plan.config, list(uploads))
            plan.warnings += withheld_warnings(list(uploads))
        script = plan.render()
        spec = replace(plan.job_spec(kind), uploads=tuple(uploads))
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
                        parent_job_id=parent_job_id, uploads=list(uploads))

    def _subject(self, ref: str, backend_name: str, token: str | None) -> Subject:
        record = self.ledger_job(ref)
        if record is not None:
            backends.check_permission(record.backend, self.access)
            return subject_from_job(record, self._job_stage(record.job_id), backend_name, self.access)
        return subject_from_ref(ref.strip(), access=self.access, backend_name=backend_name,
                                adapter_config=lambda repo: adapter_config(repo, token),
                                labelled=lambda repo: repo_has_file(repo, "labels.json", token))

    def _followup_start(self, req: Any, backend_name: str, progress: Progress
                        ) -> tuple[str | None, str | None, Subject, ModelSize, Any]:
        """(token, namespace, subject, its size, catalog): what an evaluation and an export both resolve first."""
        here = not backends.traits(backend_name).chooses_flavor  # sized offline: nothing is asked of the Hub
        token = None if here else hub_token()
        namespace = self._namespace(req, backend_name, token)
        progress(f"finding {req.model}")
        subject = self._subject(req.model, backend_name, token or hub_token())
        if subject.training and subject.training.reward_code:
            self.access.check_reward_code()  # the evaluation runs the job's reward code again
        progress(f"sizing {subject.sized_by}")
        size = self.model_size(copies.sizing_folder(subject) or subject.sized_by, token, offline=here)
        subject = for_family(subject, size.family, "evaluation" if isinstance(req, EvaluateRequest) else "export",
                             quantization=size.quantization)
        return token, namespace, subject, size, get_catalog(token, offline=here, backend=backend_name)

    def _prepare_evaluation(self, req: EvaluateRequest, backend_name: str, *, kind: str,
                            progress: Progress) -> Prepared:
        token, namespace, subject, size, catalog = self._followup_start(req, backend_name, progress)
        warnings: list[str] = []
        progress("reading the held-out data")
        data, facts = eval_data(req, subject, backend_name, token or hub_token(), warnings, self.access)
        progress("planning and rendering the script")
        plan = plan_evaluation(req, subject, data, facts, backend=backend_name, size=size, catalog=catalog,
                               namespace=namespace, warnings=warnings)
        card = plan.config.get("card_repo")
        if card and self.access.remote and not self.ledger.pushed_to(card):  # targets.py: HTTP's pushes
            plan.config["card_repo"] = None
            plan.warnings.append(f"the results are not written to {card}'s card: over {self.access.over} only a "
                                 "repo a job of this server pushed to is written to; they are in the job's output")
        job = subject.job
        # a dataset the caller names is read as it is now (as it was just validated), never as the job's old copy
        recorded = [entry for entry in (job.uploads if job else []) if not (req.dataset and entry["role"] == "dataset")]
        uploads = copies.uploads_for([(subject.ref, "model"), (subject.base_model, "base model"),
                                      (data.dataset if data else None, "dataset")], access=self.access,
                                     mapping=data.column_mapping if data else None, recorded=recorded,
                                     ) if backends.mounts_uploads(backend_name) else []
        return self._package(
            req, backend_name, kind, namespace, plan, hub_model_id=None, model=subject.ref,
            dataset=data.dataset if data else None,
            reads=[("model", subject.ref), ("model", subject.base_model), ("dataset", data.dataset if data else None)],
            parent_job_id=job.job_id if job else None, uploads=uploads,
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
        target = plan.config["hub_model_id"]
        if target:
            check_push_target(target, token=token or hub_token(), access=self.access, warnings=plan.warnings,
                              pushed_before=self.ledger.pushed_to(target), dry_run=req.dry_run,
                              what="the export", export=True)
        uploads = copies.uploads_for([(subject.ref, "model"), (subject.base_model, "base model")], access=self.access,
                                     mapping=None, recorded=subject.job.uploads if subject.job else []
                                     ) if backends.mounts_uploads(backend_name) else []
        return self._package(
            req, backend_name, kind, namespace, plan, hub_model_id=plan.config["hub_model_id"], model=subject.ref,
            dataset=None, reads=[("model", subject.ref), ("model", subject.base_model)],
            parent_job_id=subject.job.job_id if subject.job else None, uploads=uploads)


def _local_paths(req: TrainingRequest, where: Any, mounting: bool) -> TrainingRequest:
    """The request with its local paths resolved where the job runs elsewhere (relative paths must not change
    meaning), or refused where the job cannot read them at all."""
    local = [name for name in ("model", "dataset", "teacher_model")
             if getattr(req, name) and is_local(getattr(req, name))]
    if not where.reads_local_paths and not mounting:
        for name in local:
            raise TrainError(f"{name} {getattr(req, name)!r} is a local path, which {where.words.job} cannot read: "
                             f"push it to the Hub first, or use {where.words.instead}")
    return req.model_copy(update={name: str(Path(getattr(req, name)).expanduser().resolve()) for name in local})
