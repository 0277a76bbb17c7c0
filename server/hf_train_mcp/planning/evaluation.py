"""evaluate_model's plan: the held-out rows (the training job's own, or a dataset), what the evaluation measures,
and the script's CONFIG, rendered from templates/evaluate.py.j2."""

import uuid
from dataclasses import dataclass
from pathlib import Path

from hf_train_mcp import backends, methods
from hf_train_mcp.access import is_local
from hf_train_mcp.data.rules import candidate_formats
from hf_train_mcp.errors import TrainError
from hf_train_mcp.estimate.hardware import Catalog
from hf_train_mcp.estimate.jobs import EvalWork, evaluation_on, evaluation_options
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.methods.grpo import (MAX_COMPLETION_LENGTH, REFERENCE_COLUMNS, reward_code_dependencies,
                                        reward_functions)
from hf_train_mcp.contract.requests import EvaluateRequest
from hf_train_mcp.contract.results import DatasetReport
from hf_train_mcp.planning.followups import common_config, followup_plan, followup_timeout, place
from hf_train_mcp.planning.hyperparameters import DataFacts
from hf_train_mcp.planning.subjects import Subject
from hf_train_mcp.planning.training import BASE_DEPENDENCIES, RunPlan

EVAL_ROWS = 200  # held-out rows scored when num_samples is not given: enough for a stable mean, cheap to run
COMPARE_SAMPLES = 3  # prompts answered side by side by the base and the fine-tune
SAMPLE_TOKENS = 96
# lm-evaluation-harness: the well-kept harness with a stable Python API (simple_evaluate), PEFT adapters as a
# model argument, and the largest registry of standard tasks (the Open LLM Leaderboard's first version used it)
LM_EVAL = "lm-eval>=0.4.8,<0.5"
PREFERENCE_FORMATS = ("preference", "implicit_preference")


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


def evaluation_kind(spec: methods.MethodSpec) -> str:
    """What the evaluation of a method's model measures (the evaluate template's branch): loss, preference,
    reward, ..."""
    return spec.eval_metric


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
    completion = MAX_COMPLETION_LENGTH.resolve(getattr(training, "max_completion_length", None))
    compare = min(COMPARE_SAMPLES, rows) if not spec.classifier else 0
    work = _eval_work(req, subject, spec, facts, rows=rows, compare=compare, completion=completion)
    if req.tasks and not req.num_samples:
        warnings.append("benchmarks run on every item of each task without num_samples (hours for large tasks); "
                        "num_samples=200 is a cheap first look")
    flavor, estimate, price = place(req, "evaluation", evaluation_options(size, work, catalog),
                                    lambda info: evaluation_on(size, work, info), catalog=catalog, backend=backend,
                                    warnings=warnings)
    timeout = followup_timeout(req, estimate, backend=backend, flavor=flavor, price=price, warnings=warnings)
    pushes, trackio_space, card_repo = _result_targets(subject, backend, namespace)
    config = {
        **common_config(subject, backend, size),
        "method": method, "eval_metric": evaluation_kind(spec), "classifier": spec.classifier,
        **_data_config(data, spec),
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
    return followup_plan(req, backend=backend, flavor=flavor, estimate=estimate, price=price, timeout=timeout,
                         config=config, dependencies=dependencies, namespace=namespace, template="evaluate",
                         warnings=warnings, trackio_space=trackio_space, reward_code=reward_code)


def _eval_work(req: EvaluateRequest, subject: Subject, spec: methods.MethodSpec, facts: DataFacts, *, rows: int,
               compare: int, completion: int) -> EvalWork:
    """What the evaluation computes: rows scored, tokens generated (side-by-side samples, rewarded completions),
    benchmark items."""
    rewarded = evaluation_kind(spec) == "reward"  # greedy completions scored by the reward functions
    generated = compare * SAMPLE_TOKENS * (2 if subject.kind == "adapter" else 1)
    if rewarded:
        generated += rows * completion
    return EvalWork(rows=0 if rewarded else rows, tokens_per_row=facts.mean_tokens or spec.tokens_per_example,
                    sequences_per_row=spec.sequences_per_example, generated_tokens=generated,
                    generation_calls=compare + (rows if rewarded else 0),
                    benchmark_items=len(req.tasks or []) * (req.num_samples or 1000))


def _data_config(data: EvalData | None, spec: methods.MethodSpec) -> dict:
    """CONFIG's held-out rows: where they come from and how they are read."""
    return {
        "dataset": data.dataset if data else None, "dataset_split": data.split if data else "train",
        "dataset_config": data.config if data else None, "column_mapping": data.column_mapping if data else {},
        "keep_columns": list(spec.keep_columns) if spec.keep_columns else None,
        "eval_split": data.eval_split if data else None,
        "seed": data.seed if data else 42, "held_out": data.held_out if data else None,
    }
