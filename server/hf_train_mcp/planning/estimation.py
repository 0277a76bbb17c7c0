"""estimate_cost: the modelled time, money and memory of a run on every flavor, replaced by a finished
measurement of the same step when one exists; measure=True launches that measurement job (confirmed like any
paid job)."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from hf_train_mcp.methods import defaults as D
from hf_train_mcp import backends, engines, methods
from hf_train_mcp.nodes import rules as node_rules
from hf_train_mcp.estimate.advice import flavor_warnings, model_warnings
from hf_train_mcp.stages import TERMINAL_STAGES
from hf_train_mcp.backends.local import has_cuda
from hf_train_mcp.data.validate import image_facts, validate_dataset
from hf_train_mcp.durations import MAX_TIMEOUT_S
from hf_train_mcp.errors import TrainError, NoFitError
from hf_train_mcp.estimate import constants as EC
from hf_train_mcp.estimate.cost import FlavorEstimate, how_to_fit, scaling, tokens_counted
from hf_train_mcp.estimate.workload import Workload
from hf_train_mcp.estimate.hardware import get_catalog
from hf_train_mcp.access import Access
from hf_train_mcp.hub import hub_token
from hf_train_mcp.jobs.ledger import PENDING, JobRecord, Ledger, SubmissionInProgress
from hf_train_mcp.estimate.measured import PROBE_STEPS, apply_measurement, attempt_key, probe_key, usable
from hf_train_mcp.estimate.measured import prefix as measure_prefix
from hf_train_mcp.planning import copies
from hf_train_mcp.planning.hyperparameters import DataFacts, Hyper
from hf_train_mcp.planning.placement import estimate_flavors
from hf_train_mcp.planning.training import check_models
from hf_train_mcp.jobs.prepared import Prepared, Progress
from hf_train_mcp.jobs.uploads import UPLOAD_BYTES_PER_S, shown_bytes
from hf_train_mcp.contract.requests import EstimateRequest, RunShape, TrainingRequest
from hf_train_mcp.contract.results import CostEstimate, FlavorOption, HardwareList, HardwareRow, Measurement, Submission
from hf_train_mcp.planning.planner import Planner, default_backend

log = logging.getLogger(__name__)


@dataclass
class _Basis:
    """What every answer of estimate_cost starts from: the model's size, the hyperparameters, the data's facts,
    the catalog, every flavor ranked and the one chosen."""

    size: Any
    hyper: Hyper
    data: DataFacts
    token_source: str | None
    catalog: Any
    ranked: list[FlavorEstimate]
    chosen: FlavorEstimate
    warnings: list[str]
    mapping: dict[str, str] | None = None  # the dataset's columns as validation maps them (a job reads them so)

    def workload(self, chosen: FlavorEstimate) -> Workload:
        gpus = self.catalog.flavors[chosen.flavor].gpus if chosen.flavor in self.catalog.flavors else 1
        return self.hyper.workload(self.size, gpus * self.hyper.nodes, self.data)


class Estimator:
    def __init__(self, *, planner: Planner, access: Access, ledger: Callable[[], Ledger],
                 report: Callable[[str, int], Any], submit: Callable[..., Submission]) -> None:
        """planner: sizes models and plans the measurement job; ledger(): the ledger, opened on first use;
        report(job_id, tail): a job's report and measurement (following.Reading); submit(req, kind=, confirm=):
        a keyed submission (the core's submit_training)."""
        self.planner, self.access = planner, access
        self._ledger, self._report, self._submit = ledger, report, submit

    @property
    def ledger(self) -> Ledger:
        return self._ledger()

    def estimate_cost(self, req: EstimateRequest, *, progress: Progress | None = None,
                      confirm: "Callable[[Prepared], None] | None" = None) -> CostEstimate:
        """confirm: called with the measurement job's plan before measure=True launches it; it raises to stop."""
        basis = self._basis(req, progress)
        chosen, measurement, warnings = basis.chosen, None, basis.warnings
        if req.dataset:
            chosen, measurement = self._measured(req, basis.workload(chosen), chosen, basis.catalog, req.measure,
                                                 warnings, confirm)
        size, hyper, data, catalog = basis.size, basis.hyper, basis.data, basis.catalog
        fitting = [e for e in basis.ranked if e.fits]
        gpus = (catalog.flavors[chosen.flavor].gpus if chosen.flavor in catalog.flavors else 1) * hyper.nodes
        work = hyper.workload(size, gpus, data)
        warnings += _warnings(chosen, work, fitting, size, hyper, req.model)
        fastest = min(fitting, key=lambda e: e.hours) if fitting else None
        upload_h, upload = self._upload_time(req, basis.mapping)  # before the job starts: its time, not its bill
        return CostEstimate(
            flavor=chosen.flavor, fits=chosen.fits, memory_gb_needed=chosen.memory.gb,
            gpu_memory_gb=chosen.gpu_memory_gb, hours=round(chosen.hours + upload_h, 2), cost_usd=chosen.cost_usd,
            recommended_timeout=chosen.recommended_timeout, steps=chosen.steps,
            effective_batch_size=hyper.schedule(size.billions, gpus).effective(gpus),
            alternatives=[FlavorOption(flavor=e.flavor, fits=e.fits, hours=round(e.hours + upload_h, 2),
                                       cost_usd=e.cost_usd) for e in basis.ranked if e.flavor != chosen.flavor][:8],
            fastest=FlavorOption(flavor=fastest.flavor, fits=True, hours=round(fastest.hours + upload_h, 2),
                                 cost_usd=fastest.cost_usd) if fastest else None,
            assumptions={**_assumptions(chosen, size, work, data, basis.token_source, catalog.source),
                         **_scaling(size, work, catalog.flavors.get(chosen.flavor), hyper.nodes), **upload},
            warnings=warnings, measurement=measurement,
        )

    def _upload_time(self, req: EstimateRequest, mapping: dict[str, str] | None) -> tuple[float, dict[str, str]]:
        """(hours, the assumption said) of sending the run's local files to the bucket at UPLOAD_BYTES_PER_S,
        where its backend reads them as uploaded copies: all of them, as a first submission sends them."""
        if not backends.mounts_uploads(req.backend or default_backend()):
            return 0.0, {}
        uploads = copies.uploads_for([(req.model, "model"), (req.dataset, "dataset"),
                                      (getattr(req, "teacher_model", None), "teacher model")], mapping=mapping,
                                     access=self.access)
        size = sum(u.size for u in uploads)
        if not size:
            return 0.0, {}
        seconds = size / UPLOAD_BYTES_PER_S
        return seconds / 3600, {"upload": f"{shown_bytes(size)} of local files sent to your private bucket at "
                                          f"{shown_bytes(UPLOAD_BYTES_PER_S)}/s: +{seconds / 60:.1f} min before the "
                                          "job starts (not billed; a later submission sends only what changed)"}

    def measurement_preview(self, req: EstimateRequest, *, progress: Progress | None = None) -> Prepared | None:
        """The measurement job estimate_cost(measure=True) would launch, planned (and kept, like any preview) but
        not launched; None when it would launch none (a measurement of these settings ran or is running)."""
        if not req.measure:
            return None
        basis = self._basis(req, progress)
        work = basis.workload(basis.chosen)
        backend_name, _, key = self._measurement_key(req, work, basis.chosen)
        attempts = self._measurements(key)
        report, probe = self._last_measurement(attempts)
        if report is not None and not (report.stage in TERMINAL_STAGES and not usable(probe)):
            return None  # running, or measured: nothing is launched
        request = _probe_request(req, work, basis.chosen, backend_name, attempt_key(key, len(attempts) + 1))
        if self.ledger.by_idempotency_key(request.idempotency_key) is not None:
            return None  # its key already names a job (or one being submitted): a launch would return that one
        prepared = self.planner.prepare_submission(request, backend_name, kind="probe", progress=progress)
        self.planner.keep(prepared.req, prepared, kind="probe")
        return prepared

    def _basis(self, req: EstimateRequest, progress: Progress | None) -> _Basis:
        step = progress or (lambda message: None)
        if req.measure and not req.dataset:
            raise TrainError("measure=True runs a few training steps on the real data: pass dataset too")
        token = hub_token()
        step(f"reading the size of {req.model}")
        size = self.planner.model_size(req.model, token, offline=False)
        teacher = self.planner.teacher_size(req, token, offline=False)
        hyper = Hyper.of(req, teacher_params=teacher.params if teacher else None)
        warnings: list[str] = []
        if size.note:
            warnings.append(f"model size taken from its {size.source}: the Hub metadata could not be read "
                            f"({size.note})")
        data, token_source, mapping = self._data_facts(req, hyper, token, warnings, progress)
        check_models(req, size, teacher=teacher, data=data)  # what submit_training would refuse, refused here too
        step("reading the hardware catalog and prices")
        catalog = get_catalog(token, backend=req.backend or default_backend())
        if catalog.note:
            warnings.append(catalog.note)
        ranked = estimate_flavors(hyper, size, catalog, data)
        return _Basis(size=size, hyper=hyper, data=data, token_source=token_source, catalog=catalog, ranked=ranked,
                      chosen=_chosen(req.flavor, ranked, catalog, req.engine), warnings=warnings, mapping=mapping)

    def _data_facts(self, req: EstimateRequest, hyper: Hyper, token: str | None, warnings: list[str],
                    progress: Progress | None) -> tuple[DataFacts, str | None, dict[str, str] | None]:
        """Rows and mean tokens per row: as stated, else from the dataset (its tokenizer), else the method's
        default (said in warnings); where the token count came from; the columns as validation maps them."""
        rows, mean = req.num_examples, req.tokens_per_example
        token_source, images, mapping = ("stated" if mean else None), {}, None
        if req.dataset:  # also for the rows' images, which a stated token count leaves out
            report = validate_dataset(req.dataset, hyper.method, model=req.model, max_length=hyper.max_length,
                                      token=token, access=self.access, progress=progress)
            rows, images, mapping = rows or report.num_rows, image_facts(report), report.suggested_column_mapping
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
        return DataFacts(num_rows=rows, mean_tokens=mean, **images), token_source, mapping

    def _measurements(self, key: str) -> list[JobRecord]:
        """The measurement jobs of these settings, newest first (kind 'probe' only: a key is not proof)."""
        return [r for r in self.ledger.keyed(measure_prefix(key)) if r.kind == "probe" and not r.job_id.startswith(PENDING)]

    def finished_measurement(self, key: str) -> dict | None:
        """The numbers of the newest measurement of these settings that measured something."""
        for record in self._measurements(key):
            measured = record.measured or (self._report(record.job_id, 0).measured if record.settled else None)
            if usable(measured):
                return measured
        return None

    def _last_measurement(self, attempts: list[JobRecord]) -> tuple[Any, dict | None]:
        """(the newest attempt's report, its numbers), or (None, None) before any attempt."""
        if not attempts:
            return None, None
        reading = self._report(attempts[0].job_id, 0)
        return reading.report, reading.measured

    def _measure(self, req: EstimateRequest, work: Workload, chosen: FlavorEstimate, backend_name: str, key: str,
                 warnings: list[str], confirm: "Callable[[Prepared], None] | None") -> Measurement | None:
        """Launch the measurement job of these settings (confirmed like any paid job)."""
        request = _probe_request(req, work, chosen, backend_name, key)
        try:
            sub = self._submit(request, kind="probe", confirm=confirm)
        except SubmissionInProgress:
            warnings.append("a measurement of these settings is being submitted by another call; ask again shortly")
            return None
        warnings.append(f"measuring on {sub.flavor}: job {sub.job_id} runs {PROBE_STEPS} optimizer steps at the "
                        f"real batch size (at most {sub.timeout}, ${sub.worst_case_cost_usd or 0:.2f}); call "
                        "estimate_cost again with the same arguments once it has finished")
        warnings += [f"it reads your local files from your private bucket: {u['bucket']}/{u['path']} ({u['files']} "
                     f"file(s), {shown_bytes(u['bytes'])}); to delete them: {u['delete']}" for u in sub.uploads or []]
        return Measurement(job_id=sub.job_id, stage=sub.stage, job_url=sub.job_url)

    def _measurement_key(self, req: EstimateRequest, work: Workload, chosen: FlavorEstimate) -> tuple[str, str, str]:
        """(backend, the flavor measured on, the key of a measurement of these settings there)."""
        backend_name = req.backend or default_backend()
        target = backends.traits(backend_name).flavor(cuda=has_cuda()) or chosen.flavor
        key = probe_key(model=req.model, dataset=req.dataset, dataset_config=req.dataset_config,
                        dataset_split=req.dataset_split, flavor=target, backend=backend_name, method=req.method,
                        peft=req.peft, per_device_batch_size=work.per_device_batch_size,
                        gradient_accumulation=work.gradient_accumulation, max_length=work.max_length,
                        options=methods.get(req.method).sizing_options(req), lora=D.LORA)
        return backend_name, target, key

    def _measured(self, req: EstimateRequest, work: Workload, chosen: FlavorEstimate, catalog, measure: bool,
                  warnings: list[str], confirm: "Callable[[Prepared], None] | None" = None
                  ) -> tuple[FlavorEstimate, Measurement | None]:
        """The modelled estimate, replaced by a finished measurement of the same step; with measure=True a
        measurement job is launched unless one is running or has measured (a failed one is tried again)."""
        backend_name, target, key = self._measurement_key(req, work, chosen)
        where = backends.traits(backend_name)
        attempts = self._measurements(key)
        report, probe = self._last_measurement(attempts)
        ended = report is not None and report.stage in TERMINAL_STAGES
        failed = ended and not usable(probe)  # an ended measurement that measured nothing is a failed one
        if measure and (report is None or failed):
            if failed:
                warnings.append(f"the previous measurement {report.job_id} ended {report.stage}"
                                + (f" ({report.error})" if report.error else " without measuring") + "; measuring again")
            return chosen, self._measure(req, work, chosen, backend_name, attempt_key(key, len(attempts) + 1),
                                         warnings, confirm)
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
        if not where.chooses_flavor:  # its own hardware (this machine): no container, installs or bill
            measured = replace(measured, flavor=target, overhead_seconds=0.0, cost_usd=0.0,
                               hours=measured.train_seconds / 3600,
                               gpu_memory_gb=float(probe.get("gpu_memory_gb") or 0.0))
        return measured, measurement

    @staticmethod
    def list_hardware() -> HardwareList:
        catalog = get_catalog(hub_token())
        rows = [HardwareRow(flavor=f.name, gpu=f.gpu.model if f.gpu else None, gpus=f.gpus,
                            gpu_memory_gb=f.gpu_memory_gb, bf16=bool(f.gpu and f.gpu.bf16),
                            usd_per_hour=round(f.usd_per_hour, 2))
                for f in catalog.flavors.values()]
        return HardwareList(source=catalog.source, flavors=sorted(rows, key=lambda r: r.usd_per_hour))


def _probe_request(req: EstimateRequest, work: Workload, chosen: FlavorEstimate, backend_name: str,
                   key: str) -> TrainingRequest:
    """The measurement job's request: these settings' run, keyed, refused when no flavor fits it."""
    if not chosen.fits:
        raise NoFitError(f"no flavor fits this run ({chosen.reasons[0]}): measuring it would only run out of "
                         "memory; " + how_to_fit(work, None) + " Nothing was launched.")
    return TrainingRequest(
        model=req.model, dataset=req.dataset, backend=backend_name,
        flavor=chosen.flavor if backends.traits(backend_name).chooses_flavor else None, idempotency_key=key,
        **{k: v for k, v in req.model_dump(include=set(RunShape.model_fields)).items()
           if v is not None and k not in ("model", "backend", "flavor")},
    )


def _chosen(flavor: str | None, ranked: list[FlavorEstimate], catalog: Any, engine: str | None) -> FlavorEstimate:
    """The caller's flavor, else the cheapest that fits, else the one with the most memory."""
    if flavor:
        if flavor not in catalog.flavors or catalog.flavors[flavor].gpu is None:
            raise TrainError(f"{flavor!r} is not a GPU flavor in the catalog; estimate_cost lists the flavors that "
                             "exist")
        refusal = engines.refusal_for_hardware(engine, flavor, catalog.flavors[flavor].gpus, True)
        if refusal:  # the ranking holds only the flavors the engine runs on
            raise TrainError(refusal)
        found = next((e for e in ranked if e.flavor == flavor), None)
        if found is None:  # only multi-GPU flavors are ranked for a run across nodes
            raise TrainError(f"nodes runs on a multi-GPU flavor (each node's GPUs first, then the network between "
                             f"them); {flavor} has one GPU: pick e.g. 'a100x8' or 'h200x8', or drop nodes")
        return found
    fitting = [e for e in ranked if e.fits]
    return fitting[0] if fitting else max(ranked, key=lambda e: e.gpu_memory_gb)


def _warnings(chosen: FlavorEstimate, work: Workload, fitting: list[FlavorEstimate], size: Any,
              hyper: Hyper, model: str) -> list[str]:
    """What the caller should know about the chosen flavor's estimate."""
    out = []
    if not chosen.fits:
        out.append(f"does not fit: {chosen.reasons[0]}. " + how_to_fit(work, fitting[0] if fitting else None))
    out += flavor_warnings(chosen.flavor, chosen.hours, model_type=size.model_type or model.lower(),
                           save_steps=work.save_steps) + model_warnings(size, work.peft)
    if chosen.recommended_timeout_seconds > MAX_TIMEOUT_S:
        out.append(f"the recommended timeout {chosen.recommended_timeout} is over the 7-day limit of one job, so "
                   "submit_training refuses this run: lower max_steps or epochs, pick a faster flavor, or train in "
                   "parts with resume_from")
    if (size.active or size.experts) and not chosen.measured:
        out.append("mixture-of-experts timing rests on few measured runs (expect up to ~2x either way); the timeout "
                   "has a wider margin, and measure=True measures the real pace")
    if hyper.spec.generates and not chosen.measured:
        out.append(f"{hyper.spec.title}'s generation time assumes each step's longest completion reaches "
                   f"max_completion_length ({hyper.options['max_completion_length']} tokens); shorter completions finish sooner "
                   "(measure=True measures the real pace)")
    return out


def _assumptions(chosen: FlavorEstimate, size: Any, work: Workload, data: DataFacts, token_source: str | None,
                 prices: str) -> dict[str, Any]:
    """What the estimate rests on, so the caller can correct it."""
    assumptions = {
        "params_billions": round(size.billions, 3), "params_source": size.source,
        **({"active_params_billions": round(size.compute_params / 1e9, 3)} if size.active else {}),
        "num_examples": data.num_rows, "tokens_per_example": data.mean_tokens, "tokens_source": token_source,
        "tokens_total": int(chosen.tokens), **tokens_counted(work, chosen),
        "tokens_per_second": int(chosen.tokens_per_second),
        **({"image_tokens_per_example": round(data.images_per_row * size.tokens_per_image(data.image_pixels), 1)}
           if data.vision else {}),
        "throughput": "measured" if chosen.measured else "modelled",
        "per_device_batch_size": work.per_device_batch_size,
        "gradient_accumulation": work.gradient_accumulation, "max_length": work.max_length,
        "overhead_minutes": round(chosen.overhead_seconds / 60, 1), "prices": prices,
        "billing": "per minute while the job is starting or running (not while scheduling)",
        **engine_assumptions(work.framework),
    }
    if chosen.step is not None and not chosen.measured:
        step = chosen.step
        assumptions["seconds_per_step"] = {k: round(v, 3) for k, v in (
            ("compute", step.compute), ("dequantise", step.dequantise), ("generation", step.generation),
            ("communication", step.communication), ("other", step.fixed + step.optimizer)) if v}
    return assumptions


def _scaling(size: Any, work: Workload, info: Any, nodes: int) -> dict[str, Any]:
    """The multi-GPU scaling the estimate used (assumptions.multi_gpu), on a flavor of several GPUs or nodes."""
    whole = node_rules.node_flavor(info, nodes) if info is not None and nodes > 1 else info
    note = scaling(size, work, whole) if whole is not None else None
    return {"multi_gpu": note} if note else {}


def engine_assumptions(engine: str) -> dict[str, Any]:
    """What the estimate takes from the engine when it is not plain TRL: its speed and memory factors."""
    spec = engines.get(engine)
    if spec.name == engines.DEFAULT:
        return {}
    return {"engine": {
        "name": spec.name,
        "speed": f"compute and 4-bit unpacking {EC.CALIBRATED.unsloth_speedup:.2f}x TRL's (fitted on Unsloth's "
                 "published single-GPU runs)",
        "memory": f"checkpointed activations x{spec.checkpoint_share} (offloaded to CPU RAM), LM-head logits "
                  f"x{spec.logits_share} (chunked fused loss), weights and optimizer state as TRL's",
    }}
