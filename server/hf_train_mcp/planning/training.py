"""TrainingRequest -> RunPlan: every default resolved, flavor and timeout chosen, the script's CONFIG built."""

import hashlib
import json
import math
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from hf_train_mcp.methods import defaults as D
from hf_train_mcp import backends, engines, methods
from hf_train_mcp.backends.base import JobSpec
from hf_train_mcp.planning.cards import training_card
from hf_train_mcp.models.chat_template import CHATML, IMAGE_SLOT, SHAREGPT_ROLES, VISION_CHATML
from hf_train_mcp.durations import header_duration
from hf_train_mcp.errors import DatasetError, TrainError
from hf_train_mcp.estimate.advice import model_warnings
from hf_train_mcp.estimate.cost import FlavorEstimate
from hf_train_mcp.estimate.hardware import Catalog
from hf_train_mcp.estimate.measured import probe_config, probe_timeout
from hf_train_mcp.models.family import UNKNOWN, Family
from hf_train_mcp.models.refusals import (lora_reaches_experts, lora_target_refusal, method_refusal,
                                          quantization_refusal, unnamed_architecture_refusal)
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.hub import hub_endpoint
from hf_train_mcp.planning.budget import chosen_timeout, within_budget, worst_case_usd
from hf_train_mcp.rendering.script import Script, render_script
from hf_train_mcp.rendering.config import FOLLOWUP_SCHEMAS, ScriptConfig
from hf_train_mcp.contract.requests import Request, RunShape, TrainingRequest
from hf_train_mcp.planning.hyperparameters import DataFacts, Hyper
from hf_train_mcp.planning.placement import estimate_flavors, estimate_node_flavor, placement

__all__ = ["BUCKET_MOUNT", "LANGUAGE_TOWER", "DataFacts", "Hyper", "RunPlan", "check_models", "estimate_flavors",
           "estimate_node_flavor", "lora_targets", "plan_run"]

# Upper bounds at the next major: a job started next year must still run the API this script was written for.
# torch < 2.11: from 2.11 on, PyPI's torch wheels are built for CUDA 13, which needs a 580+ host driver; the
# CUDA 12.8 builds run on every Jobs GPU (and the script stops at once if a GPU flavor still sees no CUDA).
# peft >= 0.22: the PEFT whose rewrite of LoRA targets on fused experts models/refusals.py FUSED_EXPERT_LORA is of
# (0.22 added qwen2_moe): a job must not resolve an older one that adapts other modules than the plan says
PEFT_REQUIREMENT = "peft>=0.22,<1"
BASE_DEPENDENCIES = ["trl>=1.0,<2", "transformers>=5.0,<6", "datasets>=4.0,<6", "accelerate>=1.4,<2",
                     PEFT_REQUIREMENT, "trackio>=0.4,<1", "torch>=2.6,<2.11"]
BUCKET_MOUNT = "/outputs"
# LoRA on a vision-language model's language tower alone (TRL's VLM recipes): the vision encoder and the projector
# stay frozen. The tower is `language_model` (Qwen2/2.5/3-VL, LLaVA, LLaVA-NeXT, Gemma 3, Mllama, PaliGemma) or
# `text_model` (Idefics2/3, SmolVLM), the names transformers' own get_decoder() looks for; PEFT matches a string
# target against each module's whole name (re.fullmatch), so vision blocks' own q/k/v/o or gate/up/down_proj
# (SigLIP, Mllama's encoder, Qwen2.5-VL's, Idefics2's perceiver) are left out.
LANGUAGE_TOWER = r"(.*\.)?(language_model|text_model)\.(.*\.)?(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"



@dataclass
class RunPlan:
    """A job fully decided: where it runs, for how long at most, and the CONFIG its script is rendered with."""

    request: Request
    backend: str
    flavor: str
    gpus: int
    timeout_seconds: int
    effective_batch_size: int
    estimate: FlavorEstimate | None
    worst_case_cost_usd: float | None  # what the job can bill at most: the whole timeout at the flavor's price
    config: dict
    dependencies: list[str]
    namespace: str | None
    trackio_space_id: str | None
    warnings: list[str] = field(default_factory=list)
    template: str | None = None  # templates/<template>.py.j2; a training job's is its method's
    reward_code: str | None = None  # GRPO user reward (training, or the evaluation of a GRPO run)
    output_bucket: str | None = None
    usd_per_hour: float | None = None  # the price the worst case was judged at (every node's together)
    nodes: int = 1  # jobs of `flavor`, one per machine, in one network group

    @property
    def method(self) -> str:
        return self.config["method"]

    @property
    def schema(self) -> type[ScriptConfig]:
        """The type of this script's CONFIG: a follow-up's, or its method's."""
        return FOLLOWUP_SCHEMAS.get(self.template or "") or methods.get(self.method).config_schema

    def render(self) -> Script:
        return render_script(self.template or self.method, self.schema, {
            "config": self.config,
            "dependencies": self.dependencies,
            "flavor": self.flavor,
            "jobs_table": backends.traits(self.backend).chooses_flavor,  # the header's [tool.hf-jobs] table
            "timeout": header_duration(self.timeout_seconds),
            "method_title": methods.get(self.method).title,
            "reward_code": self.reward_code,
            "sharegpt_roles": SHAREGPT_ROLES,
        })

    def job_spec(self, kind: str = "train") -> JobSpec:
        request_hash = hashlib.sha256(
            json.dumps(self.request.model_dump(mode="json"), sort_keys=True).encode()
        ).hexdigest()[:12]
        return JobSpec(
            method=self.method,
            flavor=self.flavor,
            gpus=self.gpus,
            timeout_seconds=self.timeout_seconds,
            labels={"hf-train-mcp": "1", "method": self.method, "request": request_hash, "kind": kind},
            dependencies=self.dependencies,
            namespace=self.namespace,
            output_bucket=self.output_bucket,
            output_mount=BUCKET_MOUNT if self.output_bucket else None,
            nodes=self.nodes, full=self.config.get("peft") == "full",
        )


def expects_gpu(flavor: str) -> bool:
    """Whether the job's hardware has a GPU (its script stops at once when torch sees none)."""
    return not flavor.startswith("cpu-") and flavor not in backends.gpuless_flavors()


def _dependencies(req: TrainingRequest, spec: methods.MethodSpec, data: DataFacts, size: ModelSize) -> list[str]:
    # Qwen2-VL's (and most VLMs') fast processors need torchvision, built for the torch the header pins
    deps = [*BASE_DEPENDENCIES, *spec.dependencies, *spec.request_dependencies(req),
            *(["torchvision>=0.21,<0.26"] if data.vision else [])]
    if req.peft == "qlora" or (size.quantization and size.quantization.bitsandbytes):  # a checkpoint stored in
        # bitsandbytes 4/8-bit loads only with it
        deps.append("bitsandbytes>=0.45")
    if req.use_liger_kernel:
        deps.append("liger-kernel>=0.5")
    return engines.dependencies(req.engine, deps)  # an engine's pin replaces ours of the same package


def _run_timeout(req: TrainingRequest, where: type, estimate: FlavorEstimate | None, *, probe_only: bool,
                 warnings: list[str]) -> int:
    """The caller's timeout (warned when short), else the estimate's recommendation, else the backend's default."""
    if probe_only:
        return req.timeout or probe_timeout(estimate)
    return chosen_timeout(req.timeout, estimate, where.default_timeout_s, warnings)


def _config(req: TrainingRequest, spec: Any, hyper: Hyper, sched: Any, *, flavor: str, gpus: int,
            output_dir: str, run_name: str, dropout: float, push: bool, trackio_space: str | None,
            resume_repo: str | None, resume_dir: str | None, probe_only: bool, steps: int | None,
            data: DataFacts) -> dict:
    """The script's CONFIG: every value a literal, every default resolved."""
    return {
        **_data_config(req, spec, data, dropout=dropout),
        **_schedule_config(req, spec, hyper, sched, gpus=gpus, steps=steps),
        "output_dir": output_dir,
        "trackio": not probe_only,
        "trackio_space_id": trackio_space,
        "project": req.project or "hf-train-mcp",
        "run_name": run_name,
        "push_to_hub": push,
        "hub_model_id": req.hub_model_id if push else None,
        "private": req.private,
        "resume_from_repo": resume_repo,
        "resume_from_dir": resume_dir,
        "expects_gpu": expects_gpu(flavor),
        "attn_implementation": None,  # transformers' default (sdpa)
        "chat_template": (VISION_CHATML if data.vision else CHATML) if req.chat_template == "chatml" else None,
        "image_slot": IMAGE_SLOT if data.vision and req.chat_template == "chatml" else None,
        "probe": None,
        **spec.config(req),  # what only this method's template reads (beta, reward functions, the teacher, ...)
        **spec.data_config(data),  # and what it learns from the data (SFT: images)
    }


def _data_config(req: TrainingRequest, spec: Any, data: DataFacts, *, dropout: float) -> dict:
    """CONFIG's model, data and adapter: what is trained on what."""
    return {
        "method": req.method,
        "engine": req.engine or engines.DEFAULT,
        "model": req.model,
        "dataset": req.dataset,
        "dataset_config": req.dataset_config,
        "dataset_split": req.dataset_split,
        "column_mapping": req.column_mapping or {},
        "keep_columns": list(spec.keep_columns) if spec.keep_columns else None,
        "eval_split": req.eval_split,
        "seed": req.seed,
        "peft": req.peft,
        "lora": {
            "r": req.lora_r or D.LORA["r"],
            "alpha": req.lora_alpha or D.LORA["alpha"],
            "dropout": dropout,
            "target_modules": lora_targets(req, data),
        },
    }


def _schedule_config(req: TrainingRequest, spec: Any, hyper: Hyper, sched: Any, *, gpus: int,
                     steps: int | None) -> dict:
    """CONFIG's schedule: learning rate, batches, lengths, logging and checkpoints."""
    generations = hyper.generations
    lr_full, lr_lora = spec.learning_rate
    eval_batch = sched.per_device_batch_size
    if spec.grouped and (eval_batch * gpus) % generations:
        eval_batch = generations // math.gcd(generations, gpus)  # TRL needs whole groups in the eval batch too
    return {
        "learning_rate": req.learning_rate or (lr_full if req.peft == "full" else lr_lora),
        "epochs": hyper.resolved_epochs,
        "max_steps": req.max_steps,
        "per_device_batch_size": sched.per_device_batch_size,
        "per_device_eval_batch_size": eval_batch,
        "gradient_accumulation": sched.gradient_accumulation,
        "max_length": hyper.resolved_max_length,
        "use_liger_kernel": req.use_liger_kernel,
        "logging_steps": 1 if steps and steps <= 50 else 10,
        "save_steps": req.save_steps or D.SAVE_STEPS,
        "save_total_limit": req.save_total_limit or D.SAVE_TOTAL_LIMIT,
    }


def _run_name_and_folder(req: TrainingRequest, where: type) -> tuple[str, str]:
    """One Trackio run and one bucket folder per job: two jobs of one request must not mix curves or checkpoints."""
    run_id = uuid.uuid4().hex[:6]
    run_name = req.run_name or f"{req.method}-{os.path.basename(req.model.rstrip('/'))[:80]}-{run_id}"
    if req.output_bucket:
        return run_name, f"{BUCKET_MOUNT}/{run_name if req.run_name is None else f'{run_name}-{run_id}'}"
    return run_name, where.output_dir


def check_models(req: "RunShape", size: ModelSize, *, teacher: ModelSize | None, data: DataFacts) -> None:
    """What the models' files rule out before anything is launched, for estimate_cost and submit_training alike
    (validate_dataset asks models/refusals.py method_refusal too): the method's own checks (a distillation teacher of
    another vocabulary size), images for a model that is no vision-language model, a chat method for a model that
    writes no text (or a distillation teacher that writes none or cannot be loaded), a classification or reward
    head the model has no class for (models/refusals.py decides), a language model whose config.json names no
    architectures for TRL to load, a checkpoint stored quantized that the job cannot train so, LoRA target names
    that name none of the model's modules (where its weights' names are known), and a LoRA dropout PEFT refuses on
    fused experts."""
    spec = methods.get(req.method)
    try:
        spec.check_sizes(req, size, teacher)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    family = size.family or Family(UNKNOWN)
    refusal = method_refusal(family, req.model, spec, vision=data.vision)
    if refusal:
        raise (DatasetError if data.vision else TrainError)(refusal)
    teacher_model = getattr(req, "teacher_model", None)
    if teacher is not None:  # TRL loads a distillation's teacher by its id too, as a model that writes text
        refusal = method_refusal(teacher.family or Family(UNKNOWN), teacher_model, spec, vision=False)
        if refusal:
            raise TrainError(f"teacher_model {teacher_model!r}: {refusal}")
    if not spec.classifier and req.engine is None:  # TRL loads the model (and a teacher) by its id
        refusal = unnamed_architecture_refusal(family, req.model, method=req.method) or (
            teacher and unnamed_architecture_refusal(teacher.family, teacher_model, method=req.method))
        if refusal:
            raise TrainError(refusal)
    refusal = quantization_refusal(size.quantization, req.model, peft=req.peft)
    targets = lora_targets(req, data)
    if not refusal and req.peft != "full" and isinstance(targets, list) and size.files is not None:
        refusal = lora_target_refusal(size.files.module_names(), targets, req.model)
    if refusal:
        raise TrainError(refusal)
    dropout = getattr(req, "lora_dropout", None)
    if dropout and req.peft != "full" and lora_reaches_experts(size.model_type, targets):
        raise TrainError(
            f"lora_dropout={dropout} cannot train {req.model} (model_type {size.model_type!r}): PEFT adapts its fused "
            "experts and router as parameters (lora.ParamWrapper), which refuses any dropout (a ValueError when "
            "the trainer is built). Send lora_dropout=0, or leave it out (the plan sends 0 for these models), or "
            "lora_target_modules without the experts' and router's names (e.g. ['q_proj', 'k_proj', 'v_proj', "
            "'o_proj']). Nothing was launched.")


def lora_targets(req: "RunShape", data: DataFacts) -> str | list[str]:
    """The LoRA target_modules a job gets: the caller's, else the language tower of a VLM on images, else
    all-linear."""
    return getattr(req, "lora_targets", None) or (LANGUAGE_TOWER if data.vision else D.LORA["target_modules"])


def lora_dropout(req: TrainingRequest, size: ModelSize, data: DataFacts, warnings: list[str]) -> float:
    """The caller's LoRA dropout, else the default; 0 where PEFT adapts a mixture of experts' fused experts as
    parameters (check_models refused a caller's nonzero one), said in warnings."""
    if req.lora_dropout is not None:
        return req.lora_dropout
    if req.peft != "full" and lora_reaches_experts(size.model_type, lora_targets(req, data)):
        warnings.append(f"lora_dropout 0 (not {D.LORA['dropout']}): PEFT adapts the fused experts and router of "
                        f"{size.model_type} models as parameters (lora.ParamWrapper), which take no dropout")
        return 0.0
    return D.LORA["dropout"]


def plan_run(req: TrainingRequest, *, backend: str, size: ModelSize, catalog: Catalog, namespace: str | None,
             data: DataFacts, local_cuda: bool = False, resume_repo: str | None = None, resume_dir: str | None = None,
             probe_only: bool = False, measured: dict | None = None, teacher: ModelSize | None = None) -> RunPlan:
    """probe_only: the plan of a measurement job (estimate_cost(measure=True)): the preflight alone, nothing pushed.
    measured: a finished measurement of this run on its flavor, which replaces the modelled time.
    teacher: the size of a distillation's teacher (its forwards and memory count)."""
    warnings: list[str] = []
    hyper = Hyper.of(req, teacher_params=teacher.params if teacher else None)
    spec = hyper.spec
    check_models(req, size, teacher=teacher, data=data)
    where = backends.traits(backend)
    push = where.pushes_to_hub and not probe_only
    if push and not req.hub_model_id:
        raise TrainError(f"hub_model_id is required for backend={backend!r} (e.g. 'your-name/qwen-sft'): without a "
                         "push the trained model is lost when the job ends")

    flavor, gpus, estimate = placement(req, where, hyper, size, catalog, data, local_cuda=local_cuda,
                                       measured=measured, warnings=warnings)
    warnings += model_warnings(size, req.peft)
    sched = hyper.schedule(size.billions, gpus * hyper.nodes)
    effective = sched.effective(gpus * hyper.nodes)
    if spec.grouped and effective % hyper.generations:
        raise TrainError(f"GRPO needs per_device_batch_size x gradient_accumulation x GPUs ({effective}) divisible "
                         f"by num_generations ({hyper.generations}); change one of them")
    price, timeout = _price_and_timeout(req, where, hyper, catalog, flavor, estimate, probe_only=probe_only,
                                        warnings=warnings)
    if not where.pushes_to_hub and req.hub_model_id:
        warnings.append(f"{where.words.the_backend} keeps the model in the job folder; hub_model_id is not pushed")
    trackio_space = (req.trackio_space_id or f"{namespace or req.hub_model_id.split('/')[0]}/trackio") if push else None
    steps = (estimate.steps if estimate else None) or req.max_steps
    run_name, output_dir = _run_name_and_folder(req, where)
    config = _config(req, spec, hyper, sched, flavor=flavor, gpus=gpus * hyper.nodes, output_dir=output_dir,
                     run_name=run_name, dropout=lora_dropout(req, size, data, warnings),
                     push=push, trackio_space=trackio_space, resume_repo=resume_repo, resume_dir=resume_dir,
                     probe_only=probe_only, steps=steps, data=data)
    if probe_only or req.preflight:
        config["probe"] = probe_config(size, hyper.workload(size, gpus, data), gpus, estimate, timeout,
                                        probe_only=probe_only)
    config["card"] = training_card(
        config, flavor=flavor, usd_per_hour=price, estimated_hours=round(estimate.hours, 2) if estimate else None,
        estimated_cost_usd=estimate.cost_usd if estimate else None, effective_batch_size=effective,
        trackio_url=f"{hub_endpoint()}/spaces/{trackio_space}" if trackio_space else None)
    return RunPlan(
        request=req, backend=backend, flavor=flavor, gpus=gpus, timeout_seconds=timeout,
        worst_case_cost_usd=None if price is None else round(worst_case_usd(timeout, price), 2),
        effective_batch_size=effective, estimate=estimate, config=config, namespace=namespace,
        dependencies=_dependencies(req, spec, data, size), trackio_space_id=trackio_space, warnings=warnings,
        reward_code=getattr(req, "reward_code", None), template=spec.template_name,
        output_bucket=req.output_bucket, usd_per_hour=price, nodes=hyper.nodes,
    )


def _price_and_timeout(req: TrainingRequest, where: type, hyper: Hyper, catalog: Catalog, flavor: str,
                       estimate: FlavorEstimate | None, *, probe_only: bool,
                       warnings: list[str]) -> tuple[float | None, int]:
    """(every node's price per hour together, or None when unknown; the timeout within the budget)."""
    timeout = _run_timeout(req, where, estimate, probe_only=probe_only, warnings=warnings)
    price = 0.0 if not where.bills else (catalog.flavors[flavor].usd_per_hour * hyper.nodes
                                         if flavor in catalog.flavors else None)
    timeout = within_budget(req, flavor if hyper.nodes == 1 else f"{hyper.nodes} x {flavor}", price, timeout,
                            estimate, warnings)
    return price, timeout
