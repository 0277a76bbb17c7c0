"""Where a training run goes: this machine's own hardware, a CPU flavor, the caller's GPU flavor, or the cheapest
GPU flavor that fits (each node's machine too, across nodes)."""

from typing import Any

from hf_train_mcp import backends, engines
from hf_train_mcp.methods import defaults as D
from hf_train_mcp.nodes import rules as node_rules
from hf_train_mcp.durations import format_duration
from hf_train_mcp.errors import NoFitError, TrainError
from hf_train_mcp.estimate.advice import flavor_warnings
from hf_train_mcp.estimate.cost import FlavorEstimate, estimate_on, how_to_fit
from hf_train_mcp.estimate.hardware import Catalog
from hf_train_mcp.estimate.measured import apply_measurement
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.planning.hyperparameters import DataFacts, Hyper


def estimate_flavors(hyper: Hyper, size: ModelSize, catalog: Catalog, data: DataFacts) -> list[FlavorEstimate]:
    """Every GPU flavor with its own schedule (accumulation shrinks as GPUs grow), cheapest first; across nodes,
    the multi-GPU flavors, each as all its nodes together."""
    results = [estimate_node_flavor(hyper, size, f, data) for f in catalog.flavors.values()
               if f.gpu is not None and (hyper.nodes == 1 or f.gpus > 1) and engines.runs_on(hyper.engine, f.gpus)]
    return sorted(results, key=lambda e: (e.cost_usd, e.hours))


def estimate_node_flavor(hyper: Hyper, size: ModelSize, info: Any, data: DataFacts) -> FlavorEstimate:
    """One flavor's estimate: on one machine, or on hyper.nodes of them (all their GPUs, at all their price)."""
    whole = node_rules.node_flavor(info, hyper.nodes) if hyper.nodes > 1 else info
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
    (node_rules.host_ram_refusal), or None; shared_output: checkpoints sharded into a bucket every node mounts."""
    if hyper.nodes <= 1 or hyper.peft != "full":
        return None
    return node_rules.host_ram_refusal(params=size.params, ram_gb=info.ram_gb, gpus=info.gpus,
                                      copies=2 if hyper.spec.full_reference_copy else 1,
                                      full_checkpoints=not shared_output)



def placement(req: TrainingRequest, where: type, hyper: Hyper, size: ModelSize, catalog: Catalog,
              data: DataFacts, *, local_cuda: bool, measured: dict | None,
              warnings: list[str]) -> tuple[str, int, FlavorEstimate | None]:
    """(flavor, GPUs, estimate): this machine's own hardware, a CPU flavor, the caller's GPU flavor, or the
    cheapest that fits; a finished measurement replaces the modelled time."""
    if not where.chooses_flavor:
        return _this_machine(req, where, hyper, local_cuda=local_cuda, warnings=warnings)
    if req.flavor and req.flavor.startswith("cpu-"):
        _check_engine(req, where, req.flavor, 1, False)
        if req.peft == "qlora":
            raise TrainError(f"peft='qlora' needs a GPU flavor, not {req.flavor!r}")
        warnings.append(f"{req.flavor} has no GPU: fine for a smoke test of a tiny model, far too slow otherwise")
        return req.flavor, 1, None
    estimate = (_named_flavor(req, where, hyper, size, catalog, data, warnings) if req.flavor
                else choose_flavor(hyper, size, catalog, data, shared_output=bool(req.output_bucket),
                                   flavor_kind=where.words.flavor_kind))
    flavor = estimate.flavor
    if measured:
        estimate = apply_measurement(estimate, measured, catalog.flavors[flavor].usd_per_hour)
        warnings.append(f"time measured on {flavor} ({measured['seconds_per_step']} s per step): "
                        f"~{format_duration(estimate.train_seconds)} of training")
    warnings += flavor_warnings(flavor, estimate.hours, model_type=size.model_type or req.model.lower(),
                                save_steps=req.save_steps or D.SAVE_STEPS)
    return flavor, catalog.flavors[flavor].gpus, estimate


def _this_machine(req: TrainingRequest, where: type, hyper: Hyper, *, local_cuda: bool,
                  warnings: list[str]) -> tuple[str, int, None]:
    """This machine's own hardware: one machine, its one device."""
    if hyper.nodes > 1:
        raise TrainError(where.words.no_nodes)
    _check_engine(req, where, where.flavor(cuda=local_cuda), 1, local_cuda)
    if req.peft == "qlora" and not local_cuda:
        raise TrainError(f"peft='qlora' needs a CUDA GPU (bitsandbytes 4-bit) and {where.place} has none: "
                         f"send peft='lora', or {where.words.instead} with a GPU flavor")
    if req.flavor:
        warnings.append(f"flavor {req.flavor!r} is ignored by {where.words.the_backend}")
    return where.flavor(cuda=local_cuda), 1, None


def _named_flavor(req: TrainingRequest, where: type, hyper: Hyper, size: ModelSize, catalog: Catalog, data: DataFacts,
                  warnings: list[str]) -> FlavorEstimate:
    """The caller's GPU flavor, refused when it cannot run this at all, warned when it is likely too small."""
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
    return estimate


def _check_engine(req: TrainingRequest, where: type, flavor: str, gpus: int, has_gpu: bool) -> None:
    refusal = engines.refusal_for_hardware(req.engine, flavor, gpus, has_gpu,
                                           gpu_backend=backends.gpu_backend(where.name))
    if refusal:
        raise TrainError(refusal)

