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
