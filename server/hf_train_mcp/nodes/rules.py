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
# ...and each then installs the header's pins into its own venv before its launcher dials the rendezvous: minutes
# that differ between machines (a cold uv cache, a slow mirror, torch's 2-3 GB of wheels)
INSTALL_MARGIN_MIN = 10.0
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


def node_alias(rank: int) -> str:
    return f"node{rank}"


def node_flavor(info: Any, nodes: int) -> Any:
    """The flavor the estimator sees for `nodes` machines of `info`: all their GPUs, at all their price (its name
    stays the flavor each node runs on)."""
    return replace(info, gpus=info.gpus * nodes, usd_per_hour=info.usd_per_hour * nodes)


def rendezvous_timeout_s() -> int:
    """How long a node's launcher waits at the rendezvous for the others: the latest a node may start after the
    first (START_BOUND_MIN, then node_runs stops the run) plus the spread of their installs. torch's static
    rendezvous (`--rdzv_backend static`) waits `rdzv_conf` timeout seconds, 900 unless set
    (torch/distributed/launcher/api.py LaunchConfig), for every node's TCPStore to join: a node 15-20 min behind
    the first ended in DistStoreError after both had billed."""
    return int((START_BOUND_MIN + INSTALL_MARGIN_MIN) * 60)


def launcher_args(*, nodes: int, rank: int, gpus: int, full: bool, shared_output: bool = False) -> list[str]:
    """accelerate's multi-node arguments for one node: the machine's rank, every process of the run, rank 0's
    alias as the rendezvous (waiting for late nodes, see rendezvous_timeout_s), and FSDP (full shard) when the
    whole model trains; LoRA runs data parallel.

    FSDP checkpoints: a FULL_STATE_DICT checkpoint gathers the whole model and the whole optimizer (Adam: 8 bytes a
    parameter) into rank 0's CPU memory at every save (accelerate's save_fsdp_optimizer, FullOptimStateDictConfig
    (offload_to_cpu=True, rank0_only=True)). With a folder every node shares (shared_output: an output bucket
    mounted on each) the checkpoints are SHARDED_STATE_DICT, each rank writing its own part and nothing gathered; the
    script gathers the full state dict once, for the final save and push (full_state_dict_for_final_save). Without
    one a sharded checkpoint would leave each node's parts on its own disk and push only rank 0's node's: those
    runs keep full checkpoints, and the planner checks rank 0's machine can hold them (host_ram_refusal)."""
    args = ["--num_machines", str(nodes), "--machine_rank", str(rank), "--num_processes", str(nodes * gpus),
            "--main_process_ip", f"${{HF_NETWORK_GROUP_PREFIX}}{MASTER_ALIAS}", "--main_process_port",
            str(MASTER_PORT), "--rdzv_backend", "static", "--rdzv_conf", f"timeout={rendezvous_timeout_s()}",
            "--same_network"]
    if full:
        args += ["--use_fsdp", "--fsdp_sharding_strategy", "FULL_SHARD", "--fsdp_auto_wrap_policy",
                 "TRANSFORMER_BASED_WRAP", "--fsdp_state_dict_type",
                 "SHARDED_STATE_DICT" if shared_output else "FULL_STATE_DICT", "--fsdp_use_orig_params",
                 "true", "--fsdp_cpu_ram_efficient_loading", "true", "--fsdp_sync_module_states", "true"]
    return args


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
