"""Multi-node runs as the GPUs would run them, replayed on CPU: the launcher's own arguments read by accelerate's and
torch's own parsers, the environment `accelerate launch` gives every rank, 2-rank gloo replays of the FSDP loading
path, of what an FSDP checkpoint gathers on rank 0, and of the rendezvous waiting for a node that starts late.

Issue 30: item 7 (no GPU device_map under FSDP; each machine must hold what the ranks load), the FULL_STATE_DICT
suspicion (checkpoints sharded where the nodes share a folder), item 8 (the rendezvous outwaits the nodes' start)."""

import dataclasses
import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hf_train_mcp.nodes import rendezvous
from hf_train_mcp.nodes import rules as multinode
from hf_train_mcp.backends.hf_jobs import HfJobsBackend
from hf_train_mcp.errors import NoFitError, TrainError
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from tests.conftest import needs_training
from tests.helpers import free_port, torchrun_command
from tests.replay import accelerate_env, fsdp_ranks_load, torchrun

# Llama-3.1-8B's config.json (meta-llama/Llama-3.1-8B): 32 layers, hidden 4096, vocab 128256, MLP 14336, 8.03B
LLAMA_8B = ModelSize(8_030_261_248, 32, 4096, 128_256, 14_336, "config.json", dtype="bfloat16", model_type="llama")
LLAMA_70B = dataclasses.replace(LLAMA_8B, params=70_553_706_496, layers=80, hidden=8192, intermediate=28_672)
RUN = dict(model="meta-llama/Llama-3.1-8B", dataset="org/chat", hub_model_id="me/llama-8nodes", peft="full",
           nodes=8, flavor="a10g-largex2", max_steps=50, timeout="2h")


def plan(size: ModelSize = LLAMA_8B, **overrides):
    request = TrainingRequest(**{**RUN, **overrides})
    return plan_run(request, backend="hf", size=size, catalog=fallback_catalog(), namespace="me",
                    data=DataFacts(num_rows=10_000, mean_tokens=600))


def node_command(run_plan, rank: int) -> str:
    spec = dataclasses.replace(run_plan.job_spec(), node_rank=rank, network_group="hftm-x")
    return HfJobsBackend(token="t").command(spec)[-1]


def torchrun_config(args: list[str]):
    """torch's LaunchConfig for these launcher arguments, as accelerate hands them to torchrun (_run_torchrun)."""
    import torch.distributed.run as distrib_run
    from accelerate.commands.launch import _filter_args, _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    parsed, _, _ = _validate_launch_command(launch_command_parser().parse_args([*args, "train.py"]))
    prepare_multi_gpu_env(parsed)
    filtered = _filter_args(parsed, distrib_run.get_args_parser(),
                            ["--training_script", parsed.training_script, "--training_script_args",
                             parsed.training_script_args])
    return distrib_run.config_from_args(filtered)[0]


# --- item 7: under FSDP the model is loaded with no GPU device_map ------------------------------------------------
@needs_training
def test_a_multi_node_full_fine_tune_loads_with_no_gpu_device_map_under_fsdp(tmp_path: Path, monkeypatch) -> None:
    """Llama-3.1-8B on 8 nodes of a10g-largex2, full: FSDP shards it over 16 A10Gs, but a device_map of the
    rank's GPU would load all ~32 GB of fp32 weights onto a 24 GB card first."""
    import torch

    run = plan()
    assert run.nodes == 8 and run.config["peft"] == "full"
    command = node_command(run, 3)
    assert "--use_fsdp" in command and "--fsdp_cpu_ram_efficient_loading true" in command
    (tmp_path / "train.py").write_text(run.render().text)
    script = runpy.run_path(str(tmp_path / "train.py"), run_name="hftm_script_under_test")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    for name, value in accelerate_env(rendezvous.launcher_args(nodes=8, rank=3, gpus=2, full=True)).items():
        monkeypatch.setenv(name, value)  # what accelerate launch gives each rank: ACCELERATE_USE_FSDP=true, ...
    kwargs = script["model_init_kwargs"]({"dtype": "float32"})
    assert "device_map" in kwargs and kwargs["device_map"] is None  # None, not absent: TRL would make it "auto"
    monkeypatch.delenv("ACCELERATE_USE_FSDP")  # one machine's GPUs (DDP, no FSDP): each rank's own GPU, as before
    assert script["model_init_kwargs"]({"dtype": "float32"})["device_map"] == {"": 1}


@needs_training
@pytest.mark.training
def test_two_ranks_load_the_model_under_fsdps_environment_on_the_cpu_not_a_gpu(tiny_model: Path,
                                                                              tmp_path: Path) -> None:
    """2 gloo ranks with the environment accelerate launch sets for a multi-node full fine-tune: the script's
    kwargs go through TRL's create_model_from_path as TRL's trainers pass them. No rank places the model on a GPU
    (device_map None); both hold a whole copy in CPU memory: transformers 5.24 loads every rank's weights though
    FSDP_CPU_RAM_EFFICIENT_LOADING is set (only buffers are left to rank 0's broadcast), which is what the
    planner's host-memory check (multinode.host_ram_refusal) counts. Should transformers load the other ranks on
    the meta device again, this test says so and the check can count one copy a machine."""
    import json

    run = plan()
    (tmp_path / "train.py").write_text(run.render().text)
    env = accelerate_env(rendezvous.launcher_args(nodes=2, rank=1, gpus=1, full=True))
    assert env["ACCELERATE_USE_FSDP"] == "true" and env["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "true"
    reports = fsdp_ranks_load(tmp_path, tiny_model, env=env)
    assert [r["kwargs"] for r in reports] == [{"device_map": None}] * 2
    assert [r["devices"] for r in reports] == [["cpu"], ["cpu"]], reports  # no GPU; and not "meta" on rank 1


def test_each_machine_must_hold_what_its_ranks_load_and_what_a_full_checkpoint_gathers() -> None:
    """Llama-3.1-8B on a10g-largex2 (92 GB, 2 ranks of ~32 GB each) is accepted; a 70B is not, on any flavor's
    machine: 8 ranks x 282 GB. Its refusal says why and what to send; nothing is planned."""
    assert plan().flavor == "a10g-largex2"
    with pytest.raises(TrainError, match="loads the whole model in fp32 into the machine's memory"):
        plan(LLAMA_70B, flavor="h200x8", nodes=4)
    with pytest.raises(NoFitError, match="machine's memory"):
        plan(LLAMA_70B, flavor=None, nodes=8)
    # a 20B model on one GPU of a 186 GB machine: its fp32 copy (80 GB) fits, the Adam state a full checkpoint
    # gathers on rank 0 (160 GB) does not; a bucket every node mounts shards the checkpoints instead
    checks = dict(params=20_000_000_000, ram_gb=186, gpus=1)
    assert "send output_bucket" in (multinode.host_ram_refusal(**checks, full_checkpoints=True) or "")
    assert multinode.host_ram_refusal(**checks, full_checkpoints=False) is None
    assert plan(peft="lora").nodes == 8  # adapters: no FSDP, nothing gathered


# --- the FULL_STATE_DICT suspicion: what a checkpoint gathers on rank 0 -----------------------------------------
def test_checkpoints_are_sharded_where_every_node_writes_to_one_bucket() -> None:
    with_bucket = plan(output_bucket="me/ckpts")
    assert "--fsdp_state_dict_type SHARDED_STATE_DICT" in node_command(with_bucket, 1)
    assert "--fsdp_state_dict_type FULL_STATE_DICT" in node_command(plan(), 1)  # each node's own disk: whole
    shared = accelerate_env(rendezvous.launcher_args(nodes=2, rank=1, gpus=2, full=True, shared_output=True))
    assert shared["FSDP_STATE_DICT_TYPE"] == "SHARDED_STATE_DICT"


@needs_training
def test_the_final_model_is_gathered_whole_after_sharded_checkpoints(tmp_path: Path) -> None:
    """transformers' save_model writes the weights only under FULL_STATE_DICT: the script switches accelerate's
    plugin before the final save and push, with FULL's own configs (set_state_dict_type keeps stale ones)."""
    import types

    from accelerate.utils import FullyShardedDataParallelPlugin
    from torch.distributed.fsdp import FullStateDictConfig, FullOptimStateDictConfig, StateDictType

    (tmp_path / "train.py").write_text(plan(output_bucket="me/ckpts").render().text)
    script = runpy.run_path(str(tmp_path / "train.py"), run_name="hftm_script_under_test")
    plugin = FullyShardedDataParallelPlugin(state_dict_type="SHARDED_STATE_DICT", sync_module_states=False,
                                            cpu_ram_efficient_loading=False)
    trainer = types.SimpleNamespace(accelerator=types.SimpleNamespace(state=types.SimpleNamespace(fsdp_plugin=plugin)))
    script["full_state_dict_for_final_save"](trainer)
    assert plugin.state_dict_type == StateDictType.FULL_STATE_DICT
    assert isinstance(plugin.state_dict_config, FullStateDictConfig)
    assert isinstance(plugin.optim_state_dict_config, FullOptimStateDictConfig)
    no_fsdp = types.SimpleNamespace(accelerator=types.SimpleNamespace(state=types.SimpleNamespace()))
    script["full_state_dict_for_final_save"](no_fsdp)  # DDP: nothing to switch
    text = (tmp_path / "train.py").read_text()
    final_save = text.index('trainer.save_model(CONFIG["output_dir"])')
    assert text.index("full_state_dict_for_final_save(trainer)") < final_save


GATHER = '''
import json, os, sys
import torch
import torch.distributed as dist
from accelerate import PartialState

PartialState(cpu=True)  # gloo, and accelerate's logging
from accelerate.utils import FullyShardedDataParallelPlugin
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

torch.manual_seed(0)
model = FSDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)), device_id=torch.device("cpu"),
             use_orig_params=True)
optimizer = torch.optim.AdamW(model.parameters())
model(torch.randn(2, 64)).sum().backward()
optimizer.step()
# the plugin accelerate builds from the launcher's FSDP_STATE_DICT_TYPE (sync_module_states is GPU-only)
plugin = FullyShardedDataParallelPlugin(state_dict_type=os.environ["FSDP_STATE_DICT_TYPE"], sync_module_states=False,
                                        cpu_ram_efficient_loading=False)
# the call accelerate's save_fsdp_optimizer makes, in its context (accelerate/utils/fsdp_utils.py)
with FSDP.state_dict_type(model, plugin.state_dict_type, plugin.state_dict_config, plugin.optim_state_dict_config):
    state = FSDP.optim_state_dict(model, optimizer).get("state", {})


def held(value):
    if isinstance(value, dict):
        return sum(held(v) for v in value.values())
    local = value.to_local() if hasattr(value, "to_local") else value
    if hasattr(local, "local_shards"):
        return sum(s.tensor.numel() * s.tensor.element_size() for s in local.local_shards())
    return local.numel() * local.element_size() if torch.is_tensor(local) and local.dim() else 0


with open(f"held-{dist.get_rank()}.json", "w") as f:
    json.dump({"bytes": held(state)}, f)
dist.barrier()
'''


@needs_training
@pytest.mark.training
@pytest.mark.parametrize("shared_output", [False, True])
def test_what_a_checkpoint_gathers_on_rank_zero_follows_the_launcher(shared_output: bool, tmp_path: Path) -> None:
    """2 gloo ranks of a real FSDP model after an AdamW step, checkpointed the way the launcher's state-dict type
    says: FULL_STATE_DICT puts all of Adam's state (8 bytes a parameter) in rank 0's memory, SHARDED_STATE_DICT
    leaves each rank its half."""
    import json

    env = accelerate_env(rendezvous.launcher_args(nodes=2, rank=1, gpus=1, full=True, shared_output=shared_output))
    proc = torchrun(tmp_path, GATHER, env={"FSDP_STATE_DICT_TYPE": env["FSDP_STATE_DICT_TYPE"]})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    held = [json.loads((tmp_path / f"held-{rank}.json").read_text())["bytes"] for rank in (0, 1)]
    adam = 2 * 4 * 2 * (64 * 64 + 64)  # two fp32 moments of two 64x64 layers with biases
    assert held == ([adam // 2, adam // 2] if shared_output else [adam, 0]), held


# --- item 8: the rendezvous outwaits the nodes' start and installs ----------------------------------------------
def test_the_rendezvous_waits_as_long_as_nodes_may_start_apart_plus_their_installs() -> None:
    pytest.importorskip("accelerate")
    seconds = rendezvous.rendezvous_timeout_s()
    assert seconds >= (multinode.START_BOUND_MIN + rendezvous.INSTALL_MARGIN_MIN) * 60 >= 30 * 60
    assert f"--rdzv_conf timeout={seconds}" in node_command(plan(), 2)
    for full in (True, False):
        config = torchrun_config(rendezvous.launcher_args(nodes=2, rank=1, gpus=2, full=full))
        assert int(config.rdzv_configs["timeout"]) == seconds  # not LaunchConfig's 900 s default
        assert config.rdzv_backend == "static" and config.max_nodes == 2


RENDEZVOUS = '''
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
print(f"JOINED rank {dist.get_rank()} of {int(total.item())}", flush=True)
dist.destroy_process_group()
'''


def launch_node(tmp_path: Path, args: list[str], port: int) -> subprocess.Popen:
    """One node's `accelerate launch` with the run's launcher arguments, rank 0's alias pointed at this machine."""
    args = list(args)
    args[args.index("--main_process_ip") + 1] = "127.0.0.1"
    args[args.index("--main_process_port") + 1] = str(port)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONWARNINGS", None)
    return subprocess.Popen([str(Path(sys.executable).with_name("accelerate")), "launch", *args, "rendezvous.py"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@needs_training
@pytest.mark.training
def test_a_node_that_starts_late_joins_within_the_rendezvous_timeout_and_not_after(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """Two `accelerate launch` nodes with the launcher's own arguments, the start bound shrunk to seconds through
    the same code path: node 1 starting 20 s after node 0 joins when the rendezvous waits 90 s, while node 0 alone
    gives up with torch's DistStoreError once a 6 s rendezvous has passed (the two runs side by side, on two
    ports: the lone node's wait overlaps the late node's 20 s)."""
    (tmp_path / "rendezvous.py").write_text(RENDEZVOUS)
    monkeypatch.setattr(rendezvous, "INSTALL_MARGIN_MIN", 0.0)
    monkeypatch.setattr(multinode, "START_BOUND_MIN", 0.1)  # 6 s
    lone_port = free_port()
    alone = launch_node(tmp_path, rendezvous.launcher_args(nodes=2, rank=0, gpus=1, full=True), lone_port)

    monkeypatch.setattr(multinode, "START_BOUND_MIN", 1.5)  # 90 s
    port = next(p for p in iter(free_port, None) if p != lone_port)
    first = launch_node(tmp_path, rendezvous.launcher_args(nodes=2, rank=0, gpus=1, full=True), port)
    time.sleep(20)
    late = launch_node(tmp_path, rendezvous.launcher_args(nodes=2, rank=1, gpus=1, full=True), port)
    out, _ = alone.communicate(timeout=240)
    assert alone.returncode != 0 and "DistStoreError" in out and "1/2 clients joined" in out, out[-3000:]
    outs = [p.communicate(timeout=240)[0] for p in (first, late)]
    assert [p.returncode for p in (first, late)] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    assert "JOINED rank 0 of 2" in outs[0] and "JOINED rank 1 of 2" in outs[1]
