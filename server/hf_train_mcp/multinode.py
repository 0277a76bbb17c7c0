"""Multi-node runs: one Jobs job per node in one network group, started by a multi-node launcher.

What a run across nodes is, as pure functions: which requests may span nodes, the flavor the estimator sees (all
the nodes' GPUs at all the nodes' price, linked by the slower inter-node network), each node's launch command,
and the run's one stage made of its nodes' stages. Launching the other nodes and watching them is in node_runs.py.
"""

import re
import shlex
from dataclasses import replace
from typing import Any

from hf_train_mcp import methods

MAX_NODES = 8
MASTER_ALIAS = "node0"  # rank 0's alias in the group: the rendezvous every node dials
MASTER_PORT = 29500
# The nodes must all be running within this bound: a node left scheduling keeps the others waiting at the
# rendezvous, billed for nothing.
START_BOUND_MIN = 20.0
NODE_KIND = "node"  # the ledger kind of ranks 1..N-1 (rank 0's record stands for the run)
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


def node_alias(rank: int) -> str:
    return f"node{rank}"


def node_flavor(info: Any, nodes: int) -> Any:
    """The flavor the estimator sees for `nodes` machines of `info`: all their GPUs, at all their price (its name
    stays the flavor each node runs on)."""
    return replace(info, gpus=info.gpus * nodes, usd_per_hour=info.usd_per_hour * nodes)


def launcher_args(*, nodes: int, rank: int, gpus: int, full: bool) -> list[str]:
    """accelerate's multi-node arguments for one node: the machine's rank, every process of the run, rank 0's
    alias as the rendezvous, and FSDP (full shard, a full state dict gathered on rank 0 for the push) when the
    whole model trains; LoRA runs data parallel."""
    args = ["--num_machines", str(nodes), "--machine_rank", str(rank), "--num_processes", str(nodes * gpus),
            "--main_process_ip", f"${{HF_NETWORK_GROUP_PREFIX}}{MASTER_ALIAS}", "--main_process_port",
            str(MASTER_PORT), "--rdzv_backend", "static", "--same_network"]
    if full:
        args += ["--use_fsdp", "--fsdp_sharding_strategy", "FULL_SHARD", "--fsdp_auto_wrap_policy",
                 "TRANSFORMER_BASED_WRAP", "--fsdp_state_dict_type", "FULL_STATE_DICT", "--fsdp_use_orig_params",
                 "true", "--fsdp_cpu_ram_efficient_loading", "true", "--fsdp_sync_module_states", "true"]
    return args


def shell_words(args: list[str]) -> str:
    """Launcher arguments for a `sh -c` line: quoted, except the group's prefix variable the job sets."""
    return " ".join(a if a.startswith("${HF_NETWORK_GROUP_PREFIX}") else shlex.quote(a) for a in args)


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
