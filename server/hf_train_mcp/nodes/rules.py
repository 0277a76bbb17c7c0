"""Multi-node runs: one Jobs job per node in one network group, started by a multi-node launcher.

What a run across nodes is, as pure functions: which requests may span nodes, the flavor the estimator sees (all
the nodes' GPUs at all the nodes' price, linked by the slower inter-node network), what one machine's memory must
hold, and the run's one stage made of its nodes' stages. Each node's accelerate launcher is in nodes/rendezvous.py;
launching the other nodes and watching them in jobs/node_ranks.py.
"""

import re
from dataclasses import replace
from typing import Any

from hf_train_mcp import methods

MAX_NODES = 8
# The nodes must all be running within this bound: a node left scheduling keeps the others waiting at the
# rendezvous, billed for nothing.
START_BOUND_MIN = 20.0
NODE_KIND = "node"  # the ledger kind of ranks 1..N-1 (rank 0's record stands for the run)
# What a multi-node full fine-tune holds in a machine's CPU memory (host_ram_refusal): the share of it a run may
# plan on (the OS, the CUDA contexts and the data take the rest), and bytes per parameter
HOST_RAM_SHARE = 0.85
FP32_BYTES = 4
ADAM_BYTES = 8  # exp_avg and exp_avg_sq, fp32
GROUP_PATTERN = re.compile(r"^[a-z0-9-]{1,46}$")  # what Jobs accepts as a network group name


def check_request(req: Any) -> None:
    """What a run across nodes rules out before anything is planned (raise ValueError with the fix)."""
    nodes = getattr(req, "nodes", None)
    if not nodes:
        return
    spec = methods.get(req.method)
    if spec.library != "TRL":
        raise ValueError(f"nodes applies to the TRL methods; {req.method!r} trains on one machine: drop nodes")
    flavor = getattr(req, "flavor", None)
    if flavor and flavor.startswith("cpu-"):  # planning's CPU branch would post `nodes` GPU-less jobs
        raise ValueError(f"nodes runs on GPUs across machines; {flavor} has no GPU: send a multi-GPU flavor "
                         "(e.g. flavor='a100x8' or 'h200x8'), or drop nodes to smoke-test on one CPU machine")
    if req.peft == "qlora":
        raise ValueError("nodes with peft='qlora' is not offered: 4-bit weights are not sharded across machines "
                         "here; send peft='lora' (data parallel on every GPU) or peft='full' (FSDP shards the model)")
    if getattr(req, "preflight", False) or getattr(req, "measure", False):
        raise ValueError("a preflight or measure=True times steps on one machine: run it without nodes (the "
                         "estimate adds the network between machines), then submit with nodes")
    if getattr(req, "engine", None) == "unsloth":
        raise ValueError("engine='unsloth' trains on one GPU: drop nodes, or use engine='trl'")


def group_name(submission: str) -> str:
    """The run's network group: one per submission, so two runs never dial each other."""
    name = f"hftm-{submission}".lower()
    if not GROUP_PATTERN.fullmatch(name):
        raise ValueError(f"network group name {name!r}")
    return name


def node_flavor(info: Any, nodes: int) -> Any:
    """The flavor the estimator sees for `nodes` machines of `info`: all their GPUs, at all their price (its name
    stays the flavor each node runs on)."""
    return replace(info, gpus=info.gpus * nodes, usd_per_hour=info.usd_per_hour * nodes)


def host_ram_refusal(*, params: int, ram_gb: float | None, gpus: int, copies: int = 1,
                     full_checkpoints: bool) -> str | None:
    """Why one machine of a multi-node full fine-tune cannot hold what the run puts in its CPU memory, or None.

    Loading: on a multi-GPU run TRL loads the model id with `device_map=None` on every rank (trl/trainer/
    sft_trainer.py and its siblings: `if args.distributed_state.distributed_type in ["MULTI_GPU", "DEEPSPEED"]:
    model_init_kwargs["device_map"] = None`), and transformers 5.24 reads every rank's copy into CPU memory before
    FSDP shards it: its FSDP_CPU_RAM_EFFICIENT_LOADING path (modeling_utils.py `_move_missing_keys_from_meta_to_device`,
    `_initialize_missing_keys`) only skips buffers and initialisation on the other ranks, the weights are loaded
    on all of them. So each of the machine's `gpus` processes holds the fp32 model (a DPO/KTO reference too:
    `copies`) until FSDP moves it to the GPUs. Full checkpoints gather the whole Adam state (two fp32 moments) on
    rank 0."""
    if not ram_gb:
        return None
    usable = ram_gb * HOST_RAM_SHARE
    load_gb = gpus * copies * FP32_BYTES * params / 1e9
    if load_gb > usable:
        return (f"each of this flavor's {gpus} processes loads the whole model in fp32 into the machine's memory "
                f"before FSDP shards it (~{load_gb:.0f} GB of its {ram_gb:.0f} GB): pick a flavor with more memory "
                "per GPU (e.g. 'h200x8', 'a100x8'), or peft='lora'")
    gather_gb = ADAM_BYTES * params / 1e9
    if full_checkpoints and gather_gb > usable:
        return (f"every checkpoint gathers the whole optimizer state on rank 0's machine (~{gather_gb:.0f} GB of its "
                f"{ram_gb:.0f} GB): send output_bucket (checkpoints are then sharded, each node writing its part to "
                "the bucket), or pick a flavor with more memory")
    return None


def run_stage(stages: list[str]) -> str:
    """The run's stage from its nodes' (rank 0 first): a failed or stopped node decides it, then the slowest."""
    if "ERROR" in stages:
        return "ERROR"
    if any(s in ("CANCELED", "DELETED") for s in stages):
        return "CANCELED"
    if all(s == "COMPLETED" for s in stages):
        return "COMPLETED"
    if stages and stages[0] == "COMPLETED":  # rank 0 pushed the model; the others are ending
        return "COMPLETED"
    if any(s == "SCHEDULING" for s in stages):
        return "SCHEDULING"
    return "RUNNING"
