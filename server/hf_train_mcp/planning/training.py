"""TrainingRequest -> RunPlan: every default resolved, flavor and timeout chosen, the script's CONFIG built."""

import hashlib
import json
import math
import os
import uuid
from dataclasses import dataclass, field, fields
from typing import Any

from hf_train_mcp.methods import defaults as D
from hf_train_mcp import backends, engines, methods
from hf_train_mcp.nodes import rules as multinode
from hf_train_mcp.backends.base import JobSpec
from hf_train_mcp.planning.cards import training_card
from hf_train_mcp.models.chat_template import CHATML, SHAREGPT_ROLES
from hf_train_mcp.durations import format_duration, header_duration
from hf_train_mcp.errors import DatasetError, NoFitError, TrainError
from hf_train_mcp.estimate import constants as EC
from hf_train_mcp.estimate.advice import flavor_warnings, model_warnings
from hf_train_mcp.estimate.cost import FlavorEstimate, estimate_on, how_to_fit
from hf_train_mcp.estimate.workload import Workload
from hf_train_mcp.estimate.hardware import Catalog
from hf_train_mcp.estimate.measured import apply_measurement, probe_config, probe_timeout
from hf_train_mcp.models.family import (UNKNOWN, Family, lora_reaches_experts, lora_target_refusal,
                                       quantization_refusal, training_refusal)
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.hub import hub_endpoint
from hf_train_mcp.planning.budget import chosen_timeout, within_budget, worst_case_usd
from hf_train_mcp.rendering.script import Script, render_script
from hf_train_mcp.rendering.config import FOLLOWUP_SCHEMAS, ScriptConfig
from hf_train_mcp.contract.requests import Request, RunShape, TrainingRequest

# Upper bounds at the next major: a job started next year must still run the API this script was written for.
# torch < 2.11: from 2.11 on, PyPI's torch wheels are built for CUDA 13, which needs a 580+ host driver; the
# CUDA 12.8 builds run on every Jobs GPU (and the script stops at once if a GPU flavor still sees no CUDA).
BASE_DEPENDENCIES = ["trl>=1.0,<2", "transformers>=5.0,<6", "datasets>=4.0,<6", "accelerate>=1.4,<2",
                     "peft>=0.15,<1", "trackio>=0.4,<1", "torch>=2.6,<2.11"]
BUCKET_MOUNT = "/outputs"
# LoRA on a vision-language model's language tower alone (TRL's VLM recipes): the vision encoder and the projector
# stay frozen. The tower is `language_model` (Qwen2/2.5/3-VL, LLaVA, LLaVA-NeXT, Gemma 3, Mllama, PaliGemma) or
# `text_model` (Idefics2/3, SmolVLM), the names transformers' own get_decoder() looks for; PEFT matches a string
# target against each module's whole name (re.fullmatch), so vision blocks' own q/k/v/o or gate/up/down_proj
# (SigLIP, Mllama's encoder, Qwen2.5-VL's, Idefics2's perceiver) are left out.
LANGUAGE_TOWER = r"(.*\.)?(language_model|text_model)\.(.*\.)?(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
SEQUENCE_CLASSIFIER = "AutoModelForSequenceClassification"


@dataclass(frozen=True)
class DataFacts:
    """What validation learned about the dataset, for sizing the run."""

    num_rows: int | None = None
    mean_tokens: float | None = None
    conversational: bool = False  # rows hold lists of messages: the tokenizer needs a chat template
    vision: bool = False  # rows hold messages and images: a vision-language model's processor reads them
    images_per_row: float = 0.0  # images a row holds, on average in the sample
    image_pixels: tuple[float, float] | None = None  # their mean (height, width), where the viewer said them


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


@dataclass(frozen=True)
class Hyper:
    """The hyperparameters that size a run (a TrainingRequest or an estimate_cost call), before defaults."""

    method: str
    peft: str
    epochs: float | None = None
    max_steps: int | None = None
    max_length: int | None = None
    per_device_batch_size: int | None = None
    gradient_accumulation: int | None = None
    eval_split: float | None = None
    save_steps: int | None = None
    teacher_params: int | None = None  # distillation: the teacher's size (sized by the caller)
    engine: str = engines.DEFAULT  # what trains it: its speed and memory (engines.py)
    options: dict[str, Any] = field(default_factory=dict)  # the method's own sizing options, resolved
    nodes: int = 1  # machines of the flavor, each its own job (multinode.py)

    @classmethod
    def of(cls, req: "RunShape", teacher_params: int | None = None) -> "Hyper":
        """From a submit_training or estimate_cost request (the latter has no eval_split or save_steps)."""
        common = {f: getattr(req, f) for f in cls.__dataclass_fields__
                  if f not in ("options", "engine", "nodes") and hasattr(req, f)}
        return cls(**common, engine=req.engine or engines.DEFAULT, teacher_params=teacher_params,
                   options=methods.get(req.method).sizing_options(req), nodes=getattr(req, "nodes", None) or 1)

    @property
    def spec(self) -> methods.MethodSpec:
        return methods.get(self.method)

    @property
    def generations(self) -> int:
        """Completions sampled per prompt: a GRPO group, one otherwise."""
        return self.spec.group_size(self.options)

    @property
    def resolved_epochs(self) -> float:
        return self.epochs or self.spec.epochs

    @property
    def resolved_max_length(self) -> int:
        return self.max_length or self.spec.max_length

    def schedule(self, billions: float, gpus: int) -> D.Schedule:
        return D.schedule(self.method, billions, gpus, batch=self.per_device_batch_size,
                          accumulation=self.gradient_accumulation, num_generations=self.generations)

    def workload(self, size: ModelSize, gpus: int, data: DataFacts) -> Workload:
        """`gpus`: every GPU of the run (all the nodes' together)."""
        sched = self.schedule(size.billions, gpus)
        physical = {k: v for k, v in self.options.items() if k in WORKLOAD_FIELDS}  # packing, completion lengths
        return Workload(
            method=self.method, peft=self.peft,
            num_examples=data.num_rows or EC.DEFAULT_NUM_EXAMPLES,
            # an image is its patch grid of tokens beside the text (validation counts the text alone)
            tokens_per_example=(data.mean_tokens or self.spec.tokens_per_example)
            + data.images_per_row * size.tokens_per_image(data.image_pixels),
            epochs=self.resolved_epochs, max_steps=self.max_steps, max_length=self.resolved_max_length,
            per_device_batch_size=sched.per_device_batch_size, gradient_accumulation=sched.gradient_accumulation,
            **{**physical, "num_generations": self.generations},
            eval_split=self.eval_split or 0.0, save_steps=self.save_steps or D.SAVE_STEPS,
            teacher_params=self.teacher_params, framework=self.engine,
            nodes=self.nodes, sharded=self.nodes > 1 and self.peft == "full",  # FSDP across machines
            cut=not data.vision,  # vision rows are trained whole (no max_length cut): sized so
        )


WORKLOAD_FIELDS = frozenset(f.name for f in fields(Workload))


def estimate_flavors(hyper: Hyper, size: ModelSize, catalog: Catalog, data: DataFacts) -> list[FlavorEstimate]:
    """Every GPU flavor with its own schedule (accumulation shrinks as GPUs grow), cheapest first; across nodes,
    the multi-GPU flavors, each as all its nodes together."""
    results = [estimate_node_flavor(hyper, size, f, data) for f in catalog.flavors.values()
               if f.gpu is not None and (hyper.nodes == 1 or f.gpus > 1) and engines.runs_on(hyper.engine, f.gpus)]
    return sorted(results, key=lambda e: (e.cost_usd, e.hours))


def estimate_node_flavor(hyper: Hyper, size: ModelSize, info: Any, data: DataFacts) -> FlavorEstimate:
    """One flavor's estimate: on one machine, or on hyper.nodes of them (all their GPUs, at all their price)."""
    whole = multinode.node_flavor(info, hyper.nodes) if hyper.nodes > 1 else info
    return estimate_on(size, hyper.workload(size, whole.gpus, data), whole)


def choose_flavor(hyper: Hyper, size: ModelSize, catalog: Catalog, data: DataFacts,
                  shared_output: bool = False, *, flavor_kind: str) -> FlavorEstimate:
    """The cheapest GPU flavor whose memory fits (its machines' too, across nodes); a clear error with what would
    fit otherwise."""
    ranked = estimate_flavors(hyper, size, catalog, data)
    gpu_fits = [e for e in ranked if e.fits]
    fitting = [e for e in gpu_fits if not host_ram_refusal(hyper, size, catalog.flavors[e.flavor], shared_output)]
    if gpu_fits and not fitting:  # the GPUs would do, the machines' memory would not
        first = gpu_fits[0].flavor
        raise NoFitError(f"{hyper.nodes} x {first}: "
                         f"{host_ram_refusal(hyper, size, catalog.flavors[first], shared_output)}")
    if not fitting:
        largest = max(ranked, key=lambda e: e.gpu_memory_gb)
        raise NoFitError(
            f"no {flavor_kind} fits this run (~{largest.memory.gb:.0f} GB per GPU needed, the largest GPU has "
            f"{largest.gpu_memory_gb:.0f} GB). " + how_to_fit(hyper.workload(size, 1, data), None)
        )
    return fitting[0]


def host_ram_refusal(hyper: Hyper, size: ModelSize, info: Any, shared_output: bool) -> str | None:
    """Why a multi-node full fine-tune's machines of `info` cannot hold its model and checkpoints in CPU memory
    (multinode.host_ram_refusal), or None; shared_output: checkpoints sharded into a bucket every node mounts."""
    if hyper.nodes <= 1 or hyper.peft != "full":
        return None
    return multinode.host_ram_refusal(params=size.params, ram_gb=info.ram_gb, gpus=info.gpus,
                                      copies=2 if hyper.spec.full_reference_copy else 1,
                                      full_checkpoints=not shared_output)


def _placement(req: TrainingRequest, where: type, hyper: "Hyper", size: ModelSize, catalog: Catalog,
               data: DataFacts, *, local_cuda: bool, measured: dict | None,
               warnings: list[str]) -> tuple[str, int, FlavorEstimate | None]:
    """(flavor, GPUs, estimate): this machine's own hardware, a CPU flavor, the caller's GPU flavor, or the
    cheapest that fits; a finished measurement replaces the modelled time."""
    if not where.chooses_flavor:  # this machine's own hardware
        if hyper.nodes > 1:
            raise TrainError(where.words.no_nodes)
        _check_engine(req, where, where.flavor(cuda=local_cuda), 1, local_cuda)
        if req.peft == "qlora" and not local_cuda:
            raise TrainError(f"peft='qlora' needs a CUDA GPU (bitsandbytes 4-bit) and {where.place} has none: "
                             f"send peft='lora', or {where.words.instead} with a GPU flavor")
        if req.flavor:
            warnings.append(f"flavor {req.flavor!r} is ignored by {where.words.the_backend}")
        return where.flavor(cuda=local_cuda), 1, None
    else:
        if req.flavor and req.flavor.startswith("cpu-"):
            _check_engine(req, where, req.flavor, 1, False)
            if req.peft == "qlora":
                raise TrainError(f"peft='qlora' needs a GPU flavor, not {req.flavor!r}")
            warnings.append(f"{req.flavor} has no GPU: fine for a smoke test of a tiny model, far too slow otherwise")
            return req.flavor, 1, None
        else:
            if req.flavor:
                info = catalog.flavors.get(req.flavor)
                if info is None or info.gpu is None:
                    raise TrainError(f"flavor {req.flavor!r} is not in {where.words.catalog}; estimate_cost lists "
                                     "the flavors that exist")
                if hyper.nodes > 1 and info.gpus < 2:
                    raise TrainError(f"nodes={hyper.nodes} runs on a multi-GPU flavor (each node's GPUs first, "
                                     f"then the network between them); {req.flavor} has one GPU: pick e.g. "
                                     "'a100x8' or 'h200x8', or drop nodes")
                refusal = host_ram_refusal(hyper, size, info, bool(req.output_bucket))
                if refusal:
                    raise TrainError(f"{hyper.nodes} x {req.flavor}: {refusal}. Nothing was launched.")
                _check_engine(req, where, req.flavor, info.gpus, True)
                work = hyper.workload(size, info.gpus * hyper.nodes, data)
                estimate = estimate_node_flavor(hyper, size, info, data)
                if not estimate.fits:
                    warnings.append(f"{req.flavor} is likely too small: {estimate.reasons[0]}. {how_to_fit(work, None)}")
            else:
                estimate = choose_flavor(hyper, size, catalog, data, shared_output=bool(req.output_bucket),
                                         flavor_kind=where.words.flavor_kind)
            flavor = estimate.flavor
            gpus = catalog.flavors[flavor].gpus
            if measured:
                estimate = apply_measurement(estimate, measured, catalog.flavors[flavor].usd_per_hour)
                warnings.append(f"time measured on {flavor} ({measured['seconds_per_step']} s per step): "
                                f"~{format_duration(estimate.train_seconds)} of training")
            warnings += flavor_warnings(flavor, estimate.hours, model_type=size.model_type or req.model.lower(),
                                        save_steps=req.save_steps or D.SAVE_STEPS)
    return flavor, gpus, estimate


def _check_engine(req: TrainingRequest, where: type, flavor: str, gpus: int, has_gpu: bool) -> None:
    refusal = engines.refusal_for_hardware(req.engine, flavor, gpus, has_gpu,
                                           gpu_backend=backends.gpu_backend(where.name))
    if refusal:
        raise TrainError(refusal)


def _run_timeout(req: TrainingRequest, where: type, estimate: FlavorEstimate | None, *, probe_only: bool,
                 warnings: list[str]) -> int:
    """The caller's timeout (warned when short), else the estimate's recommendation, else the backend's default."""
    if probe_only:
        return req.timeout or probe_timeout(estimate)
    return chosen_timeout(req.timeout, estimate, where.default_timeout_s, warnings)


def _config(req: TrainingRequest, spec: Any, hyper: "Hyper", sched: Any, *, flavor: str, gpus: int,
            output_dir: str, run_name: str, dropout: float, push: bool, trackio_space: str | None,
            resume_repo: str | None, resume_dir: str | None, probe_only: bool, steps: int | None,
            data: DataFacts) -> dict:
    """The script's CONFIG: every value a literal, every default resolved."""
    method, generations = req.method, hyper.generations
    lr_full, lr_lora = spec.learning_rate
    learning_rate = req.learning_rate or (lr_full if req.peft == "full" else lr_lora)
    eval_batch = sched.per_device_batch_size
    if spec.grouped and (eval_batch * gpus) % generations:
        eval_batch = generations // math.gcd(generations, gpus)  # TRL needs whole groups in the eval batch too
    return {
        "method": method,
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
        "learning_rate": learning_rate,
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
        "chat_template": CHATML if req.chat_template == "chatml" else None,
        "probe": None,
        **spec.config(req),  # what only this method's template reads (beta, reward functions, the teacher, ...)
        **spec.data_config(data),  # and what it learns from the data (SFT: images)
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
    (validate_dataset asks model_family.training_refusal too): the method's own checks (a distillation teacher of
    another vocabulary size), images for a model that is no vision-language model, a chat method for a model that
    writes no text, a classification or reward head the model has no class for (model_family.py decides), a
    checkpoint stored quantized that the job cannot train so, LoRA target names that name none of the model's
    modules (where its weights' names are known), and a LoRA dropout PEFT refuses on fused experts."""
    spec = methods.get(req.method)
    try:
        spec.check_sizes(req, size, teacher)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    family = size.family or Family(UNKNOWN)
    refusal = training_refusal(family, req.model, method=req.method, generative=not spec.classifier,
                               vision=data.vision, sequence_head=spec.auto_class == SEQUENCE_CLASSIFIER,
                               appends_eos=spec.appends_eos)
    if refusal:
        raise (DatasetError if data.vision else TrainError)(refusal)
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
    generations = hyper.generations
    push = where.pushes_to_hub and not probe_only
    if push and not req.hub_model_id:
        raise TrainError(f"hub_model_id is required for backend={backend!r} (e.g. 'your-name/qwen-sft'): without a "
                         "push the trained model is lost when the job ends")

    flavor, gpus, estimate = _placement(req, where, hyper, size, catalog, data, local_cuda=local_cuda,
                                        measured=measured, warnings=warnings)
    warnings += model_warnings(size, req.peft)

    sched = hyper.schedule(size.billions, gpus * hyper.nodes)
    effective = sched.effective(gpus * hyper.nodes)
    if spec.grouped and effective % generations:
        raise TrainError(f"GRPO needs per_device_batch_size x gradient_accumulation x GPUs ({effective}) divisible "
                         f"by num_generations ({generations}); change one of them")

    timeout = _run_timeout(req, where, estimate, probe_only=probe_only, warnings=warnings)

    price = 0.0 if not where.bills else (catalog.flavors[flavor].usd_per_hour * hyper.nodes
                                         if flavor in catalog.flavors else None)
    timeout = within_budget(req, flavor if hyper.nodes == 1 else f"{hyper.nodes} x {flavor}", price, timeout,
                            estimate, warnings)

    if not where.pushes_to_hub and req.hub_model_id:
        warnings.append(f"{where.words.the_backend} keeps the model in the job folder; hub_model_id is not pushed")
    trackio_space = None
    if push:
        trackio_space = req.trackio_space_id or f"{namespace or req.hub_model_id.split('/')[0]}/trackio"
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
