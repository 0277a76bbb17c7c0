"""What an evaluation and an export job share when they are planned like training: a flavor that fits, a timeout
whose worst case fits the budget, the model's part of the script's CONFIG, and the RunPlan they end in."""

from hf_train_mcp import backends, methods
from hf_train_mcp.models.chat_template import CHATML
from hf_train_mcp.errors import NoFitError, TrainError
from hf_train_mcp.estimate.hardware import Catalog
from hf_train_mcp.estimate.jobs import JobEstimate, cheapest
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.planning.budget import chosen_timeout, within_budget, worst_case_usd
from hf_train_mcp.planning.subjects import Subject
from hf_train_mcp.planning.training import RunPlan, expects_gpu


def place(req, kind: str, options: list[JobEstimate], on_flavor, *, catalog: Catalog, backend: str,
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


def followup_timeout(req, estimate: JobEstimate | None, *, backend: str, flavor: str, price: float,
                     warnings: list[str]) -> int:
    timeout = chosen_timeout(req.timeout, estimate, backends.traits(backend).default_timeout_s, warnings)
    return within_budget(req, flavor, price, timeout, estimate, warnings)


def followup_plan(req, *, backend: str, flavor: str, estimate: JobEstimate | None, price: float, timeout: int,
          config: dict, dependencies: list[str], namespace: str | None, template: str, warnings: list[str],
          trackio_space: str | None = None, reward_code: str | None = None) -> RunPlan:
    config["expects_gpu"] = expects_gpu(flavor)
    return RunPlan(request=req, backend=backend, flavor=flavor, gpus=1, timeout_seconds=timeout,
                   effective_batch_size=0, estimate=estimate,
                   worst_case_cost_usd=None if price is None else round(worst_case_usd(timeout, price), 2),
                   config=config, dependencies=dependencies, namespace=namespace, trackio_space_id=trackio_space,
                   warnings=warnings, template=template, reward_code=reward_code)


VISION_CLASSES = ("AutoModelForImageTextToText", "AutoProcessor")  # a vision-language model and its processor


def is_vision(size: ModelSize) -> bool:
    """A vision-language model, as its files say (models/family.py): flat (Qwen2-VL) or nested (LLaVA) alike."""
    return size.family.vision_language if size.family and size.family.known else bool(size.image_tokens)


def common_config(subject: Subject, backend: str, size: ModelSize) -> dict:
    """What every follow-up script reads of the model; a vision-language model loads with its processor."""
    training = subject.training
    spec = methods.get(subject.method or "sft")
    vision = is_vision(size)
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
