"""Replaying a job's GPU branches on CPU, in process: the script an HF job on an A10G would get for a request,
loaded without running main(), and its trainer built as main() builds it under the GPU's precision (HFTM_PRECISION:
bf16 or fp16 autocast with activation checkpointing) and QLoRA's real 4-bit (HFTM_QLORA_ON_CPU: bitsandbytes' CPU
backend). The families' replay tests (tests/test_gpu_replay_*.py) share these."""

import runpy
from pathlib import Path
from typing import Any

import pytest

from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from tests.helpers import RENDER_SIZE


def replay_script(tmp_path: Path, model: Path, data: Path, **fields: Any) -> dict[str, Any]:
    """The script an HF job on an A10G would run for this request, loaded without running main(), writing here."""
    request = TrainingRequest(**{"model": str(model), "dataset": str(data), "hub_model_id": "me/out",
                                 "flavor": "a10g-large", "max_steps": 2, "per_device_batch_size": 4,
                                 "gradient_accumulation": 1, "learning_rate": 1e-3, "save_steps": 100, **fields})
    plan = plan_run(request, backend="hf", size=RENDER_SIZE, catalog=fallback_catalog(), namespace="me",
                    data=DataFacts(num_rows=16))
    path = tmp_path / "train.py"
    path.write_text(plan.render().text)
    script = runpy.run_path(str(path), run_name="hftm_replay")
    script["CONFIG"].update(output_dir=str(tmp_path / "out"), trackio=False, push_to_hub=False, hub_model_id=None)
    return script


def planned_script(tmp_path: Path, model: Path, data: Path, *, images: bool = False, **fields: Any) -> dict[str, Any]:
    """The script an HF job on an A10G gets for this request as the server plans it: sized from the model's own
    folder, chat_template='chatml' where the model has none (what the server asks for conversational rows), rows
    with images planned for the vision-language path; loaded without running main()."""
    from hf_train_mcp.estimate.sizing import model_size
    from hf_train_mcp.models.chat_template import has_chat_template

    conversational = fields.get("method", "sft") not in ("text-classification", "image-classification", "embedding")
    if conversational and has_chat_template(str(model), None, local=True) is False:
        fields.setdefault("chat_template", "chatml")
    request = TrainingRequest(**{"model": str(model), "dataset": str(data), "hub_model_id": "me/out",
                                 "flavor": "a10g-large", "max_steps": 1, "per_device_batch_size": 2,
                                 "gradient_accumulation": 1, "learning_rate": 1e-3, "save_steps": 100, **fields})
    facts = DataFacts(num_rows=16, conversational=conversational, vision=images, images_per_row=1.0 if images else 0)
    plan = plan_run(request, backend="hf", size=model_size(str(model), offline=True), catalog=fallback_catalog(),
                    namespace="me", data=facts)
    path = tmp_path / "train.py"
    path.write_text(plan.render().text)
    script = runpy.run_path(str(path), run_name="hftm_replay")
    script["CONFIG"].update(output_dir=str(tmp_path / "out"), trackio=False, push_to_hub=False, hub_model_id=None)
    return script


def gpu_trainer(script: dict[str, Any], monkeypatch: pytest.MonkeyPatch, precision: str):
    """The job's trainer under the GPU's precision (and QLoRA's 4-bit) as its main() builds it."""
    monkeypatch.setenv("HFTM_PRECISION", precision)
    monkeypatch.setenv("HFTM_QLORA_ON_CPU", "1")
    if precision == "fp16":
        fp16_autocast_as_on_a_gpu(monkeypatch)
    prec = script["precision"]()
    assert prec["gradient_checkpointing"] and prec[precision]
    train, evaluation = script["load_training_data"]()
    return script["new_trainer"](prec, script["load_processing"](), train, evaluation)


def fp16_autocast_as_on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """accelerate turns fp16 autocast and its grad scaler on off the CPU only (accelerator.py: `mixed_precision ==
    "fp16" and self.device.type != "cpu"`): on CPU an fp16 run would train in plain half precision, which no GPU
    job does. Turned on as on a T4: torch's CPU autocast has float16, its GradScaler a CPU backend. The scaler
    starts at 2**8, not 2**16: at 2**16 its first steps overflow and are skipped (on a GPU too, until it has
    halved enough), and two steps (the first at the warm-up's zero learning rate) would move nothing."""
    import accelerate
    import torch

    real = accelerate.Accelerator.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if self.state.mixed_precision == "fp16" and self.device.type == "cpu":
            self.native_amp, self.scaler = True, torch.amp.GradScaler("cpu", init_scale=2.0**8)

    monkeypatch.setattr(accelerate.Accelerator, "__init__", init)


def checkpointing_on(trainer) -> bool:
    args = trainer.args
    return bool(getattr(args, "activation_checkpointing", None) or getattr(args, "gradient_checkpointing", None))


def two_ranks(tmp_path: Path, model: Path, data: Path, precision: str = "bf16", sized: bool = False, **fields: Any):
    """The local job for this request run as a multi-GPU flavor runs it (torchrun, one process a GPU), on 2 gloo
    ranks under the GPU's precision (activation checkpointing on): the finished process, output in
    tmp_path/output. sized: planned with the size read from the model's folder, as the server plans it."""
    from hf_train_mcp.estimate.sizing import model_size

    import os
    import subprocess

    from tests.helpers import free_port, torchrun_command

    request = TrainingRequest(**{"model": str(model), "dataset": str(data), "backend": "local", "max_steps": 2,
                                 "per_device_batch_size": 2, "gradient_accumulation": 1, "save_steps": 100,
                                 **fields})
    size = model_size(str(model), offline=True) if sized else RENDER_SIZE
    plan = plan_run(request, backend="local", size=size, catalog=fallback_catalog(), namespace=None,
                    data=DataFacts(num_rows=16))
    (tmp_path / "train.py").write_text(plan.render().text)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRACKIO_DIR": str(tmp_path / "trackio"), "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "HFTM_PRECISION": precision}
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run(torchrun_command("--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                                           str(free_port()), script="train.py"),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420)


def accelerate_env(args: list[str]) -> dict[str, str]:
    """The environment `accelerate launch` gives every rank for these launcher arguments (its own parser and
    prepare_multi_gpu_env, as multi_gpu_launcher calls them)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    parsed, _, _ = _validate_launch_command(launch_command_parser().parse_args([*args, "train.py"]))
    env = prepare_multi_gpu_env(parsed)
    return {k: v for k, v in env.items() if k.startswith(("ACCELERATE_", "FSDP_"))}


def torchrun(tmp_path: Path, script: str, *args: str, env: dict[str, str] | None = None, timeout: int = 300):
    """`script` (a worker's text) on 2 gloo ranks in tmp_path, offline: the finished process."""
    import os
    import subprocess

    from tests.helpers import free_port, torchrun_command

    (tmp_path / "worker.py").write_text(script)
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1", **(env or {})}
    full_env.pop("PYTHONWARNINGS", None)
    return subprocess.run(torchrun_command("--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                                           str(free_port()), script="worker.py", args=args), cwd=tmp_path,
                          env=full_env, capture_output=True, text=True, timeout=timeout)


# Each rank of a multi-node run loads the model as the script in tmp_path/train.py would on its GPU machine (its
# model_init_kwargs under CUDA), through TRL's own loader, and writes what it got.
_LOADING = '''
import json, os, runpy, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
script = runpy.run_path("train.py", run_name="hftm_script_under_test")
script["CONFIG"]["model"] = sys.argv[1]
real = torch.cuda.is_available
torch.cuda.is_available = lambda: True  # the GPU branch: what the kwargs would be on the paid machine
kwargs = script["model_init_kwargs"]({"dtype": "float32"})
torch.cuda.is_available = real
from trl.trainer.utils import create_model_from_path  # what TRL's trainers load a model id with

model = create_model_from_path(sys.argv[1], **kwargs)
report = {"rank": dist.get_rank(), "kwargs": {k: v for k, v in kwargs.items() if k != "dtype"},
          "class": type(model).__name__, "devices": sorted({p.device.type for p in model.parameters()}),
          "buffers": sorted({b.device.type for b in model.buffers()})}
with open(f"loaded-{dist.get_rank()}.json", "w") as f:
    json.dump(report, f)
dist.barrier()
dist.destroy_process_group()
'''


def fsdp_ranks_load(tmp_path: Path, model: Path, *, env: dict[str, str]) -> list[dict]:
    """2 gloo ranks load `model` with tmp_path/train.py's kwargs under `env` (accelerate_env's): each rank's report
    (kwargs but dtype, the class, the devices of its parameters and buffers)."""
    import json

    proc = torchrun(tmp_path, _LOADING, str(model), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((tmp_path / f"loaded-{rank}.json").read_text()) for rank in (0, 1)]
