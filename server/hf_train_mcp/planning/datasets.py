"""The data a job reads, checked before it is planned: a training set validated (refused with the mapping that
fixes it, or its suggested mapping and config adopted), and an evaluation's held-out rows."""

import json
from pathlib import Path

from hf_train_mcp import backends, methods
from hf_train_mcp.access import Access, is_local
from hf_train_mcp.data.formats import reads_images
from hf_train_mcp.data.validate import conversational, image_facts, outside_images, validate_dataset
from hf_train_mcp.errors import DatasetError, TrainError
from hf_train_mcp.models.family import family_of
from hf_train_mcp.models.refusals import method_refusal
from hf_train_mcp.models.files import model_files
from hf_train_mcp.contract.requests import EvaluateRequest, TrainingRequest
from hf_train_mcp.contract.results import DatasetReport
from hf_train_mcp.planning.evaluation import EvalData, job_data, method_for_format
from hf_train_mcp.planning.hyperparameters import DataFacts
from hf_train_mcp.planning.subjects import Subject


def refusal(report: DatasetReport, dataset: str, problem: str) -> str:
    """Why a dataset was refused, with the mapping that fixes it when there is one."""
    errors = "; ".join(i.message + (f" (row {i.row})" if i.row is not None else "")
                       for i in report.issues if i.severity == "error")
    mapping = (f" Suggested column_mapping: {json.dumps(report.suggested_column_mapping)}."
               if report.suggested_column_mapping else "")
    return (f"dataset {dataset!r} {problem}: {errors}.{mapping} Fix the data or pass column_mapping; nothing was "
            "launched.")


def _model_fault(req: TrainingRequest, token: str | None, report: DatasetReport) -> TrainError | None:
    """What the model alone rules out for the method, whatever its rows (remote code, a type transformers does not
    know, a chat method for an encoder, a head it has no class for): validation reports it among the data's issues,
    which `refusal` words as the data's fault ("Fix the data or pass column_mapping"). The files and the rows'
    format validation read (rows with images: the refusal says what the model reads instead)."""
    try:
        family = family_of(model_files(req.model, token))
    except Exception:  # unreadable: the validation's refusal says what it can
        return None
    images = bool(report.detected_format) and reads_images(report.detected_format)
    found = method_refusal(family, req.model, methods.get(req.method), vision=images)
    # images for a model that reads none stay the data's fault, as check_models says it (error code "dataset")
    return (DatasetError if images else TrainError)(found) if found else None


def checked_dataset(req: TrainingRequest, token: str | None,
                    access: Access) -> tuple[TrainingRequest, DataFacts, list[str]]:
    """Validate the dataset (unless skipped): refuse one with errors, adopt its suggested mapping and config."""
    if req.skip_validation:  # the format goes unchecked, never what the job may open
        outside = outside_images(req.dataset, req.column_mapping, access)
        if outside is not None:
            raise DatasetError(f"{outside.message}. Nothing was submitted.")
        return req, DataFacts(), ["dataset validation skipped: format problems will surface in the job"]
    report = validate_dataset(req.dataset, req.method, split=req.dataset_split, config=req.dataset_config,
                              column_mapping=req.column_mapping, token=token, max_length=req.max_length,
                              access=access, model=req.model)  # token lengths size the run
    if not report.valid:
        raise _model_fault(req, token, report) or DatasetError(refusal(report, req.dataset,
                                                                        f"will not train with {req.method}"))
    warnings = []
    # The job gets exactly the mapping validation approved: a partial one completed by the suggestion.
    if (report.suggested_column_mapping or {}) != (req.column_mapping or {}):
        req = req.model_copy(update={"column_mapping": report.suggested_column_mapping})
        warnings.append(f"applied column_mapping {json.dumps(report.suggested_column_mapping)} from validation")
    if req.dataset_config is None and report.config and report.config != "default":
        req = req.model_copy(update={"dataset_config": report.config})
    first = report.sample_rows[0] if report.sample_rows else {}
    if report.token_stats is None:
        why = report.no_token_stats or "no tokenizer"
        warnings.append(f"{why}: the estimate and default timeout assume "
                        f"{methods.get(req.method).tokens_per_example} tokens per row; pass timeout= for longer rows")
    data = DataFacts(num_rows=report.num_rows, mean_tokens=report.token_stats.mean if report.token_stats else None,
                     conversational=conversational(report.detected_format, first), **image_facts(report))
    return req, data, warnings


def eval_data(req: EvaluateRequest, subject: Subject, backend_name: str, token: str | None, warnings: list[str],
              access: Access) -> tuple[EvalData | None, DataFacts]:
    if req.dataset:
        where = backends.traits(backend_name)
        if not where.reads_local_paths and not backends.mounts_uploads(backend_name) and is_local(req.dataset):
            words = backends.traits(backend_name).words
            raise TrainError(f"dataset {req.dataset!r} is a local path, which {words.job} cannot read: "
                             f"push it to the Hub first, or use {words.instead}")
        dataset = str(Path(req.dataset).expanduser().resolve()) if is_local(req.dataset) else req.dataset
        split = req.split or ("train" if is_local(dataset) else "test")
        tokenizer = subject.ref if subject.kind == "full" or subject.card_folder else subject.base_model
        if tokenizer and is_local(tokenizer) and access.remote:
            tokenizer = None  # token counts only: not worth opening a path to a remote caller
        check = lambda method: validate_dataset(dataset, method, split=split, token=token, model=tokenizer,
                                                access=access)  # noqa: E731
        # a model of unknown training: the data says what to measure (prompts with reference answers:
        # rewards; pairs: preference accuracy; anything else: loss on the answers)
        report = check(subject.method or "grpo")
        method = subject.method or method_for_format(report)
        if method != (subject.method or "grpo"):
            report = check(method)
        if not report.valid:
            raise DatasetError(refusal(report, dataset, f"cannot be evaluated as {method} data"))
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
