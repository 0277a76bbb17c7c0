"""How the nodes of a run across machines meet: rank 0's alias and port in the network group, how long a node
waits there for the others, and each node's `accelerate launch` arguments."""

import shlex

from hf_train_mcp.nodes import rules

MASTER_ALIAS = "node0"  # rank 0's alias in the group: the rendezvous every node dials
MASTER_PORT = 29500
# ...and each then installs the header's pins into its own venv before its launcher dials the rendezvous: minutes
# that differ between machines (a cold uv cache, a slow mirror, torch's 2-3 GB of wheels)
INSTALL_MARGIN_MIN = 10.0


def node_alias(rank: int) -> str:
    return f"node{rank}"


def rendezvous_timeout_s() -> int:
    """How long a node's launcher waits at the rendezvous for the others: the latest a node may start after the
    first (START_BOUND_MIN, then jobs/node_ranks.py stops the run) plus the spread of their installs. torch's static
    rendezvous (`--rdzv_backend static`) waits `rdzv_conf` timeout seconds, 900 unless set
    (torch/distributed/launcher/api.py LaunchConfig), for every node's TCPStore to join: a node 15-20 min behind
    the first ended in DistStoreError after both had billed."""
    return int((rules.START_BOUND_MIN + INSTALL_MARGIN_MIN) * 60)


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


def shell_words(args: list[str]) -> str:
    """Launcher arguments for a `sh -c` line: quoted, except the group's prefix variable the job sets."""
    return " ".join(a if a.startswith("${HF_NETWORK_GROUP_PREFIX}") else shlex.quote(a) for a in args)
