"""What follows a training run: an evaluation or an export job, planned like training (CONFIG of literals, a
flavor that fits, a timeout whose worst case fits the budget) and rendered from templates/evaluate.py.j2 and
templates/export.py.j2.

`resolve_subject` finds what the job works on: the `job_id` of a finished training job (its base model, adapter,
data and held-out split come from the ledger), a local folder, or a Hub repo.
"""

import json
import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from hf_train_mcp.access import Access, is_local
from hf_train_mcp.planning.cards import card_config, hub_ref
from hf_train_mcp.models.chat_template import CHATML
from hf_train_mcp.data.rules import candidate_formats
from hf_train_mcp.data.validate import outside_images
from hf_train_mcp.errors import AccessError, TrainError, NoFitError, NotFoundError
from hf_train_mcp.estimate.hardware import Catalog
from hf_train_mcp.estimate.jobs import (
    EvalWork,
    ExportWork,
    JobEstimate,
    cheapest,
    evaluation_on,
    evaluation_options,
    export_on,
    export_options,
)
from hf_train_mcp.estimate.sizing import DTYPE_BYTES, ModelSize
from hf_train_mcp.hub import hub_endpoint
from hf_train_mcp.jobs.ledger import JobRecord
from hf_train_mcp.models.family import Family, followup_method, followup_refusal
from hf_train_mcp.planning.budget import chosen_timeout, within_budget, worst_case_usd
from hf_train_mcp.planning.training import BASE_DEPENDENCIES, DataFacts, RunPlan, expects_gpu
from hf_train_mcp.contract.requests import EvaluateRequest, ExportRequest, TrainingRequest
from hf_train_mcp.contract.results import DatasetReport
from hf_train_mcp import backends, methods
from hf_train_mcp.methods.grpo import (MAX_COMPLETION_LENGTH, REFERENCE_COLUMNS, reward_code_dependencies,
                                        reward_functions)

EVAL_ROWS = 200  # held-out rows scored when num_samples is not given: enough for a stable mean, cheap to run
COMPARE_SAMPLES = 3  # prompts answered side by side by the base and the fine-tune
SAMPLE_TOKENS = 96
# lm-evaluation-harness: the well-kept harness with a stable Python API (simple_evaluate), PEFT adapters as a
# model argument, and the largest registry of standard tasks (the Open LLM Leaderboard's first version used it)
LM_EVAL = "lm-eval>=0.4.8,<0.5"
# config.json model types of the encoders llama.cpp's convert_hf_to_gguf.py converts as embedding models (its
# conversion/bert.py registrations, llama-cpp-python 0.3.36's tree): the pooling comes from modules.json
GGUF_ENCODERS = frozenset({"bert", "camembert", "distilbert", "roberta", "xlm-roberta", "nomic_bert", "neobert",
                           "eurobert", "jina_bert", "modernbert"})
GGUF_DEPENDENCIES = ["gguf>=0.17", "sentencepiece>=0.2", "protobuf>=4", "numpy>=1.26"]
CMAKE = "cmake>=3.28"  # llama-quantize is built in the job: the image has a compiler, not cmake
# llama.cpp's sources at a pinned release: the tree llama-cpp-python's sdist vendors (PyPI never replaces a
# published file; the script checks the sha256 too), not a clone of a moving HEAD
LLAMA_CPP_REPO = {
    "version": "llama-cpp-python 0.3.36",
    "url": "https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/"
           "llama_cpp_python-0.3.36.tar.gz",
    "sha256": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
    "root": "llama_cpp_python-0.3.36/vendor/llama.cpp",
}
PREFERENCE_FORMATS = ("preference", "implicit_preference")


@dataclass(frozen=True)
class Subject:
    """The model a follow-up job reads."""

    ref: str  # the adapter or model folder, or Hub repo, the job loads
    kind: str  # "adapter" (LoRA/QLoRA on base_model) or "full"
    base_model: str | None
    method: str | None  # how it was trained, when known
    job: JobRecord | None = None
    training: TrainingRequest | None = None
    card_folder: str | None = None  # a local training output whose README.md an evaluation updates

    @property
    def sized_by(self) -> str:
        """The model whose size decides memory and time (an adapter is small; its base is not). A full fine-tune of
        a training job is sized by its base too: the same parameters, in the dtype the export writes (the base's),
        where the fine-tune's own config.json says fp32 (its master weights)."""
        if self.base_model and (self.kind == "adapter" or self.training is not None):
            return self.base_model
        return self.ref


def _from_folder(folder: Path, method: str | None, access: Access) -> tuple[str, str | None, str | None]:
    """(kind, base model, method) of a saved adapter or model."""
    adapter = folder / "adapter_config.json"
    if adapter.exists():
        config = json.loads(adapter.read_text())
        task = config.get("task_type")
        labelled = (folder / "labels.json").exists()
        return "adapter", config.get("base_model_name_or_path"), method or methods.for_peft_task(task, labelled=labelled)
    if (folder / "config.json").exists():
        return "full", None, method
    raise TrainError(f"{access.shown(folder)} holds neither an adapter (adapter_config.json) nor a model "
                     "(config.json)")


def check_job_inputs(access: Access, record: JobRecord, training: TrainingRequest) -> None:
    """A follow-up of a job reads what that job read: a caller who could not have named those paths itself may
    not reach them through the job (its output folder is this server's own, and open to it)."""
    source = f"job {record.job_id}"
    for ref, what in ((training.model, "model"), (training.dataset, "dataset"),
                      (getattr(training, "teacher_model", None), "teacher model")):
        access.check_derived(ref, what, source)
    if outside_images(training.dataset, training.column_mapping, access) is not None:  # images its rows name
        raise AccessError(f"{source} reads local files outside the folders callers over {access.over} may use (its "
                          "rows' images, or links in its data folder), so this server will not run it for you; ask "
                          "the operator, or work on a model pushed to the Hub")


def subject_from_job(record: JobRecord, stage: str, backend_name: str, access: Access) -> Subject:
    if record.kind != "train":
        raise TrainError(f"job {record.job_id} is a {record.kind} job, not a training job: pass the job_id of a "
                         "finished submit_training job (list_jobs)")
    if stage != "COMPLETED":
        more = (" it did not finish; its pushed checkpoints can be resumed with submit_training(resume_from=...)"
                if stage in ("ERROR", "CANCELED", "DELETED") else " wait until job_status says COMPLETED")
        raise TrainError(f"job {record.job_id} is {stage}:{more}. Nothing was launched.")
    training = TrainingRequest.model_validate_json(record.request_json)
    check_job_inputs(access, record, training)
    kind = "full" if training.peft == "full" else "adapter"
    if not backends.traits(record.backend).pushes_to_hub:
        if not backends.traits(backend_name).reads_local_paths:
            raise TrainError(f"job {record.job_id} ran on {backends.traits(record.backend).place}, so its model is "
                             "not on the Hub: use "
                             f"backend={record.backend!r}, or push its output folder to the Hub and pass that repo id")
        folder = Path(record.output_dir or "")
        if not folder.is_dir():
            raise NotFoundError(f"the output of job {record.job_id} ({access.shown(folder)}) is gone from this machine")
        return Subject(ref=str(folder), kind=kind, base_model=training.model, method=training.method, job=record,
                       training=training, card_folder=str(folder))
    if not record.hub_model_id:
        raise TrainError(f"job {record.job_id} pushed no model repo; pass a Hub repo id instead")
    return Subject(ref=record.hub_model_id, kind=kind, base_model=training.model, method=training.method,
                   job=record, training=training)


def subject_from_ref(ref: str, *, access: Access, backend_name: str, adapter_config, labelled) -> Subject:
    """A local folder (stdio, or a folder the operator allowed over HTTP) or a Hub repo.
    adapter_config(repo) -> dict | None reads a Hub repo's adapter_config.json, and labelled(repo) -> bool whether it
    holds labels.json (a classifier's classes)."""
    access.check_ref(ref, "model")
    if is_local(ref):
        if not backends.traits(backend_name).reads_local_paths:
            words = backends.traits(backend_name).words
            raise TrainError(f"model {ref!r} is a local path, which {words.job} cannot read: push it to the "
                             f"Hub first, or use {words.instead}")
        folder = Path(ref).expanduser().resolve()
        if not folder.is_dir():
            raise NotFoundError(f"model {ref!r} is neither a folder on this machine nor a job_id from list_jobs")
        kind, base, method = _from_folder(folder, None, access)
        if kind == "adapter" and base and is_local(base):
            base = str((folder / base).resolve()) if not os.path.isabs(base) else base
            access.check_derived(base, "base model", f"the adapter {ref!r}")
        return Subject(ref=str(folder), kind=kind, base_model=base, method=method)
    config = adapter_config(ref)
    if config is None:
        return Subject(ref=ref, kind="full", base_model=None, method=None)
    return Subject(ref=ref, kind="adapter", base_model=config.get("base_model_name_or_path"),
                   method=methods.for_peft_task(config.get("task_type"), labelled=labelled(ref)))


def for_family(subject: Subject, family: Family | None, what: str) -> Subject:
    """A model whose training this server does not know (a Hub repo, a folder) is planned for the family its own
    files say (model_family.py): an embedding model as a SentenceTransformer, a classifier by its head, a reward
    model by its one score; a family no follow-up can read is refused with what to send instead. `what`:
    'evaluation' or 'export'."""
    if subject.method is not None or family is None:
        return subject
    refusal = followup_refusal(family, subject.ref, what)
    if refusal:
        raise TrainError(refusal)
    method = followup_method(family)
    return replace(subject, method=method) if method else subject


@dataclass(frozen=True)
class EvalData:
    """Where the evaluation's rows come from, resolved."""

    dataset: str | None
    split: str
    config: str | None
    column_mapping: dict
    eval_split: float | None
    seed: int
    method: str  # its spec's eval_metric: loss (and perplexity), preference (accuracy) or reward (mean)
    held_out: str  # what the card says about the rows


def method_for_format(report: DatasetReport) -> str:
    """The metric's method for data validated as GRPO data (whose mapping renames prompt aliases only): every
    format the rows make counts, not only the one GRPO reads them as."""
    renamed = {source: target for target, source in (report.suggested_column_mapping or {}).items()}
    columns = {renamed.get(column, column) for column in report.columns}
    found = candidate_formats(columns, report.sample_rows[0] if report.sample_rows else {})
    if set(found) & set(PREFERENCE_FORMATS):
        return "dpo"
    if set(found) & set(methods.get("embedding").formats):  # texts to embed: an embedding model's data
        return "embedding"
    if "prompt_only" in found and columns & set(REFERENCE_COLUMNS):
        return "grpo"
    return "sft"


def job_data(subject: Subject, num_samples: int | None, warnings: list[str]) -> EvalData:
    """The training job's own held-out rows: the same seeded split of the same mapped data."""
    training = subject.training
    assert training is not None
    if training.eval_split:
        held_out = f"the {training.eval_split:.0%} held out by job {subject.job.job_id} (seed {training.seed})"
    else:
        held_out = f"rows job {subject.job.job_id} trained on (it held none out)"
        warnings.append(f"job {subject.job.job_id} held no rows out (eval_split unset): it is evaluated on rows it "
                        "trained on, so the loss is optimistic; pass dataset and split for unseen data")
    return EvalData(dataset=training.dataset, split=training.dataset_split, config=training.dataset_config,
                    column_mapping=training.column_mapping or {}, eval_split=training.eval_split, seed=training.seed,
                    method=training.method, held_out=held_out)


def _estimate_note(estimate: JobEstimate | None) -> dict:
    return {"estimated_hours": round(estimate.hours, 2) if estimate else None,
            "estimated_cost_usd": estimate.cost_usd if estimate else None}


def _place(req, kind: str, options: list[JobEstimate], on_flavor, catalog: Catalog, backend: str,
           warnings: list[str]) -> tuple[str, JobEstimate | None, float]:
    """(flavor, estimate, $/hour): the caller's flavor, else the cheapest that fits."""
    where = backends.traits(backend)
    if not where.chooses_flavor:  # one hardware of its own
        if req.flavor:
            warnings.append(f"flavor {req.flavor!r} is ignored by backend={backend!r}")
        from hf_train_mcp.backends.local import has_cuda

        return where.flavor(cuda=has_cuda()), None, 0.0
    if req.flavor:
        info = catalog.flavors.get(req.flavor)
        if info is None:
            raise TrainError(f"flavor {req.flavor!r} is not in {where.words.catalog}; list_hardware lists them")
        try:
            estimate = on_flavor(info)
        except ValueError:  # a CPU flavor for an evaluation: allowed for tiny models, not estimated
            warnings.append(f"{req.flavor} has no GPU: fine for a tiny model, far too slow otherwise")
            return req.flavor, None, info.usd_per_hour
        if not estimate.fits:
            warnings.append(f"{req.flavor} is likely too small: {estimate.reasons[0]}")
        return req.flavor, estimate, info.usd_per_hour
    best = cheapest(options)
    if best is None:
        largest = max(options, key=lambda e: e.available_gb)
        raise NoFitError(f"no {where.words.flavor_kind} fits this {kind}: {largest.reasons[0]}. Nothing was launched.")
    return best.flavor, best, catalog.flavors[best.flavor].usd_per_hour


def _timeout(req, estimate: JobEstimate | None, backend: str, flavor: str, price: float,
             warnings: list[str]) -> int:
    timeout = chosen_timeout(req.timeout, estimate, backends.traits(backend).default_timeout_s, warnings)
    return within_budget(req, flavor, price, timeout, estimate, warnings)


def _plan(req, *, backend: str, flavor: str, estimate: JobEstimate | None, price: float, timeout: int,
          config: dict, dependencies: list[str], namespace: str | None, template: str, warnings: list[str],
          trackio_space: str | None = None, reward_code: str | None = None) -> RunPlan:
    config["expects_gpu"] = expects_gpu(flavor)
    return RunPlan(request=req, backend=backend, flavor=flavor, gpus=1, timeout_seconds=timeout,
                   effective_batch_size=0, estimate=estimate,
                   worst_case_cost_usd=None if price is None else round(worst_case_usd(timeout, price), 2),
                   config=config, dependencies=dependencies, namespace=namespace, trackio_space_id=trackio_space,
                   warnings=warnings, template=template, reward_code=reward_code)


VISION_CLASSES = ("AutoModelForImageTextToText", "AutoProcessor")  # a vision-language model and its processor


def _vision(size: ModelSize) -> bool:
    """A vision-language model, as its files say (model_family.py): flat (Qwen2-VL) or nested (LLaVA) alike."""
    return size.family.vision_language if size.family and size.family.known else bool(size.image_tokens)


def _common_config(subject: Subject, backend: str, size: ModelSize) -> dict:
    """What every follow-up script reads of the model; a vision-language model loads with its processor."""
    training = subject.training
    spec = methods.get(subject.method or "sft")
    vision = _vision(size)
    auto_class, processor = VISION_CLASSES if vision else (spec.auto_class, spec.processor)
    return {
        "auto_class": auto_class, "processor": processor, "vision": vision,
        "model": subject.ref, "model_kind": subject.kind,
        "base_model": subject.base_model, "method": subject.method or "sft",
        "peft": training.peft if training else ("lora" if subject.kind == "adapter" else "full"),
        "chat_template": CHATML if training and training.chat_template == "chatml" else None,
        "max_length": (training.max_length if training else None) or methods.get(subject.method or "sft").max_length,
        "output_dir": backends.traits(backend).output_dir,
        "probe": None,
    }


def _result_targets(subject: Subject, backend: str, namespace: str | None) -> tuple[bool, str | None, str | None]:
    """(pushes, Trackio space, card repo) of an evaluation: its training run's Trackio project, and the evaluated
    model's card when that model is the caller's own repo."""
    pushes, training = backends.traits(backend).pushes_to_hub, subject.training
    trackio_space = None
    if pushes:
        trackio_space = (training.trackio_space_id if training else None) or (
            f"{namespace}/trackio" if namespace else None)
    card_repo = None
    if pushes and not is_local(subject.ref) and namespace and subject.ref.split("/")[0] == namespace:
        card_repo = subject.ref
    return pushes, trackio_space, card_repo


def plan_evaluation(req: EvaluateRequest, subject: Subject, data: EvalData | None, facts: DataFacts, *,
                    backend: str, size: ModelSize, catalog: Catalog, namespace: str | None,
                    warnings: list[str]) -> RunPlan:
    method = data.method if data else (subject.method or "sft")
    spec = methods.get(method)
    if req.tasks and spec.classifier:
        raise TrainError(f"benchmarks (tasks) score a language model's answers, and a {spec.summary} writes none: "
                         "evaluate it on held-out rows (dataset and split, or its training job's). Nothing was "
                         "launched.")
    training = subject.training
    rows = min(req.num_samples or EVAL_ROWS, facts.num_rows or EVAL_ROWS) if data else 0
    tokens = facts.mean_tokens or spec.tokens_per_example
    completion = MAX_COMPLETION_LENGTH.resolve(getattr(training, "max_completion_length", None))
    compare = min(COMPARE_SAMPLES, rows) if not spec.classifier else 0
    rewarded = spec.eval_metric == "reward"  # greedy completions scored by the reward functions
    generated = compare * SAMPLE_TOKENS * (2 if subject.kind == "adapter" else 1)
    if rewarded:
        generated += rows * completion
    work = EvalWork(rows=0 if rewarded else rows, tokens_per_row=tokens,
                    sequences_per_row=spec.sequences_per_example, generated_tokens=generated,
                    generation_calls=compare + (rows if rewarded else 0),
                    benchmark_items=len(req.tasks or []) * (req.num_samples or 1000))
    if req.tasks and not req.num_samples:
        warnings.append("benchmarks run on every item of each task without num_samples (hours for large tasks); "
                        "num_samples=200 is a cheap first look")
    flavor, estimate, price = _place(req, "evaluation", evaluation_options(size, work, catalog),
                                     lambda info: evaluation_on(size, work, info), catalog, backend, warnings)
    timeout = _timeout(req, estimate, backend, flavor, price, warnings)
    pushes, trackio_space, card_repo = _result_targets(subject, backend, namespace)
    config = {
        **_common_config(subject, backend, size),
        "method": method, "eval_metric": spec.eval_metric, "classifier": spec.classifier,
        "dataset": data.dataset if data else None, "dataset_split": data.split if data else "train",
        "dataset_config": data.config if data else None, "column_mapping": data.column_mapping if data else {},
        "keep_columns": list(spec.keep_columns) if spec.keep_columns else None, "eval_split": data.eval_split if data else None,
        "seed": data.seed if data else 42, "held_out": data.held_out if data else None,
        "num_samples": rows or req.num_samples, "compare_samples": compare, "sample_tokens": SAMPLE_TOKENS,
        "max_completion_length": completion,
        "reward_funcs": reward_functions(training) if training else ["accuracy", "think_format"],
        "tasks": list(req.tasks or []),
        "card_folder": subject.card_folder if not pushes else None, "card_repo": card_repo,
        "project": (training.project if training else None) or "hf-train-mcp",
        "run_name": f"eval-{subject.job.job_id if subject.job else uuid.uuid4().hex[:6]}",
        "trackio_space_id": trackio_space,
        "trackio_dir": str(Path(subject.job.job_dir) / "trackio") if subject.job and subject.job.job_dir and
        not pushes else None,
        "push_to_hub": False, "hub_model_id": None,
    }
    reward_code = getattr(training, "reward_code", None) if training else None  # re-run: it needs its imports
    dependencies = [*BASE_DEPENDENCIES, *spec.dependencies, *([LM_EVAL] if req.tasks else []),
                    *reward_code_dependencies(reward_code)]
    return _plan(req, backend=backend, flavor=flavor, estimate=estimate, price=price, timeout=timeout, config=config,
                 dependencies=dependencies, namespace=namespace, template="evaluate", warnings=warnings,
                 trackio_space=trackio_space, reward_code=getattr(training, "reward_code", None) if training else None)


def export_target(req: ExportRequest, subject: Subject, backend: str) -> str | None:
    """The repo an export pushes to: hub_model_id, else beside the source (`<repo>-merged`, `<repo>-GGUF`)."""
    if not backends.traits(backend).pushes_to_hub:
        return None
    source = subject.job.hub_model_id if subject.job else (None if is_local(subject.ref) else subject.ref)
    if req.hub_model_id:
        if req.hub_model_id.lower() in {(source or "").lower(), subject.ref.lower()}:  # on top of what it reads
            # (Hub ids are case-insensitive)
            raise TrainError(f"hub_model_id {req.hub_model_id!r} is the repo being exported: the export would be "
                             f"mixed into it; send another, e.g. {_beside(req.hub_model_id, req.format)!r}. Nothing "
                             "was launched.")
        return req.hub_model_id
    if not source:
        raise TrainError("hub_model_id is required: where should the exported model be pushed ('owner/name')?")
    return _beside(source, req.format)


def _beside(repo: str, format: str) -> str:
    return f"{repo}-GGUF" if format == "gguf" else f"{repo}-merged"


def export_dtype(subject: Subject, size: ModelSize) -> str:
    """What the export loads and writes, as export_on sizes it: the base model's dtype (config.json; bf16 for most).
    A full fine-tune of ours is sized by its base (Subject.sized_by) but saved fp32 masters: never "auto" for it."""
    if size.dtype in DTYPE_BYTES:
        return size.dtype
    return "bfloat16" if subject.kind == "full" and subject.training is not None else "auto"


def _exportable(req: ExportRequest, subject: Subject, size: ModelSize) -> bool:
    """Whether the model is a classifier; refused: GGUF of what llama.cpp cannot run or this server cannot convert,
    and a model this export cannot write."""
    classifier = bool(subject.method and methods.get(subject.method).classifier)
    if _vision(size) and req.format == "gguf":
        raise TrainError("GGUF export of a vision-language model needs its vision projector (mmproj) converted too, "
                         "which this server does not do yet: export format='merged' and convert with llama.cpp's "
                         "own tools. Nothing was launched.")
    spec = methods.get(subject.method) if subject.method else None
    embedding = bool(spec and spec.model_library == "sentence-transformers")
    if embedding and req.format == "gguf" and size.model_type not in GGUF_ENCODERS:
        raise TrainError(f"llama.cpp's converter takes embedding models built on BERT-style encoders "
                         f"({', '.join(sorted(GGUF_ENCODERS))}); this one is a {size.model_type or 'unknown'!r} model. "
                         "format='merged' makes an adapter a standalone SentenceTransformer. Nothing was launched.")
    if classifier and not embedding and req.format == "gguf":
        summary = methods.get(subject.method).summary
        raise TrainError(f"{'an' if summary[0] in 'aeiou' else 'a'} {summary} is a classifier, which llama.cpp does "
                         "not run: GGUF does not apply. format='merged' makes an adapter a standalone model. Nothing "
                         "was launched.")
    if not classifier and size.model_type and not size.config_vocab:
        raise TrainError(f"{subject.sized_by} is a {size.model_type!r} model without a vocabulary (no vocab_size in "
                         "its config.json): export_model writes causal language models (merged or GGUF). Nothing "
                         "was launched.")
    return classifier


def plan_export(req: ExportRequest, subject: Subject, *, backend: str, size: ModelSize, catalog: Catalog,
                namespace: str | None, warnings: list[str]) -> RunPlan:
    classifier = _exportable(req, subject, size)
    spec = methods.get(subject.method) if subject.method else None
    library = spec.model_library if spec else "transformers"
    # an embedding's quality lives in its vector: 8 bits by default, where a chat model takes 4
    default = "q8_0" if library == "sentence-transformers" else "q4_k_m"
    quantization = (req.quantization or default) if req.format == "gguf" else None
    if req.format == "merged" and subject.kind == "full":
        warnings.append("this model is a full fine-tune, already standalone: the export re-saves it as safetensors "
                        "with its tokenizer")
    work = ExportWork(format=req.format, quantization=quantization, merge=subject.kind == "adapter")
    flavor, estimate, price = _place(req, "export", export_options(size, work, catalog),
                                     lambda info: export_on(size, work, info), catalog, backend, warnings)
    if size.params > 30e9 and backends.traits(backend).pushes_to_hub:
        warnings.append(f"a {size.billions:.0f}B export holds the whole model in memory and writes "
                        f"~{size.params * 6 / 1e9:.0f} GB to disk")
    timeout = _timeout(req, estimate, backend, flavor, price, warnings)
    target = export_target(req, subject, backend)
    stem = (target or subject.ref).rstrip("/").split("/")[-1].removesuffix("-GGUF")
    training = subject.training
    base = subject.base_model if subject.kind == "adapter" else subject.ref
    source = subject.job.hub_model_id if subject.job and subject.job.hub_model_id else hub_ref(subject.ref)
    what = (f"GGUF ({quantization}) of `{source or subject.ref}` for llama.cpp, Ollama and LM Studio"
            if req.format == "gguf" else
            f"`{source or subject.ref}` merged into its base `{base}`: a standalone model, no adapter needed")
    config = {
        **_common_config(subject, backend, size),
        "format": req.format, "quantization": quantization, "file_stem": stem, "classifier": classifier,
        "model_library": library,
        "dtype": export_dtype(subject, size), "total_steps": 3 if quantization not in (None, "f16", "q8_0") else 2,
        "llama_cpp_repo": LLAMA_CPP_REPO, "card_source": subject.card_folder or source,
        "push_to_hub": target is not None, "hub_model_id": target, "private": req.private,
    }
    endpoint = hub_endpoint()
    config["card"] = card_config(
        title=target or stem, summary=what + ", exported by hf-train-mcp.",
        base_model=(source or base) if req.format == "gguf" else base,
        datasets=[training.dataset] if training else [], library_name=None if req.format == "gguf" else library,
        tags=["gguf", "llama.cpp", quantization] if req.format == "gguf" else
        ["merged", "trl" if library == "transformers" else library],
        settings={"format": req.format, "quantization": quantization, "source": source or subject.ref,
                  "base model": base, "hardware": flavor},
        **_estimate_note(estimate), usd_per_hour=price,
        trackio_url=f"{endpoint}/spaces/{training.trackio_space_id}" if training and training.trackio_space_id
        else None,
        base_model_relation="quantized" if req.format == "gguf" else "merge",
        pipeline_tag=spec.pipeline_tag if spec else "text-generation")
    dependencies = ["transformers>=5.0,<6", "peft>=0.15,<1", "accelerate>=1.4,<2", "torch>=2.6,<2.11",
                    "safetensors>=0.4", *(spec.dependencies if spec else ())]
    if req.format == "gguf":
        dependencies += GGUF_DEPENDENCIES + ([CMAKE] if config["total_steps"] == 3 else [])
    return _plan(req, backend=backend, flavor=flavor, estimate=estimate, price=price, timeout=timeout, config=config,
                 dependencies=dependencies, namespace=namespace, template="export", warnings=warnings)
