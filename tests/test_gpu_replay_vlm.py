"""Vision-language runs as the GPUs would run them, replayed on CPU: the LoRA target rendered for images against the
real module trees of every VLM family transformers has (tests/tiny_vlms.py), the processor's image budget against
the estimate's, and the rendered scripts trained in-process under forced bf16 / fp16 with gradient checkpointing
on, in real 4-bit on bitsandbytes' CPU backend, as a full fine-tune with its vision encoder frozen, and on 2 gloo
ranks (DDP).

Issue 30: item 4 (the language-tower target), the suspicions on Qwen2-VL's max_pixels and on peft='full' for a
VLM, and the GPU-branch replays of the vision-language family."""

import dataclasses
import json
import math
import os
import runpy
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hf_train_mcp.methods.sft import MAX_IMAGE_TOKENS
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.estimate.images import image_grid
from hf_train_mcp.planning.training import LANGUAGE_TOWER, DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp_demo.tiny import build_tiny_vlm, format_rows, write_images, write_jsonl
from tests.conftest import needs_training
from tests.helpers import RENDER_SIZE, free_port, torchrun_command
from tests.tiny_vlms import FAMILIES, QWEN2_VL_HUB_PIXELS, save_idefics3, save_qwen2_vl_images

pytestmark = needs_training

VLM_SIZE = dataclasses.replace(RENDER_SIZE, image_tokens=256)
PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def vlm_script(tmp_path: Path, **request: Any) -> dict:
    """The functions of the script an HF job gets for vision rows (a Qwen2-VL-sized model), main() not run."""
    fields = {"model": "Qwen/Qwen2-VL-2B-Instruct", "dataset": "org/vqa", "hub_model_id": "me/out", **request}
    plan = plan_run(TrainingRequest(**fields), backend="hf", size=VLM_SIZE, catalog=fallback_catalog(),
                    namespace="me", data=DataFacts(num_rows=1000, vision=True, images_per_row=1))
    (tmp_path / "train.py").write_text(plan.render().text)
    return runpy.run_path(str(tmp_path / "train.py"), run_name="hftm_script_under_test")


# --- item 4: the LoRA target adapts the language tower of every family, and nothing of the vision tower --------
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_rendered_lora_target_adapts_the_language_tower_of_every_vlm_family(family: str, tmp_path: Path) -> None:
    """PEFT's get_peft_model with the rendered target on transformers' own module tree: exactly the language tower's
    q/k/v/o and gate/up/down projections (Mllama's cross-attention too), none of the vision encoder's own (SigLIP's
    q/k/v_proj, Qwen2.5-VL's gate/up/down_proj, Mllama's o_proj) nor of a projector (Idefics2's perceiver)."""
    import torch
    from peft import get_peft_model
    from peft.tuners.lora import LoraLayer

    script = vlm_script(tmp_path)
    config = script["peft_config"]("CAUSAL_LM")
    assert config.target_modules == script["CONFIG"]["lora"]["target_modules"] == LANGUAGE_TOWER
    model = FAMILIES[family]()
    names = {id(module): name for name, module in model.named_modules()}
    text, vision = names[id(model.get_decoder())], names[id(model.get_encoder(modality="image"))]
    expected = {f"{text}.{name}" for name, module in model.get_decoder().named_modules()
                if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in PROJECTIONS}
    assert expected and any(name.startswith(vision + ".") and name.rsplit(".", 1)[-1] in PROJECTIONS
                            for name in names.values()) is (family not in ("qwen2_vl", "qwen3_vl"))
    adapted = {name.removeprefix("base_model.model.") for name, module in get_peft_model(model, config).named_modules()
               if isinstance(module, LoraLayer)}
    assert adapted == expected, sorted(adapted ^ expected)[:6]
    assert not any(name.startswith(vision + ".") for name in adapted)
    if family == "mllama":
        assert any(".cross_attn." in name for name in adapted)  # the layers that read the image


# --- max_pixels: a Hub Qwen2-VL processor makes one photo ~15k tokens ---------------------------------------------
def test_a_hub_qwen2_vl_processor_is_capped_at_the_image_budget_the_estimate_counts(tmp_path: Path) -> None:
    """Qwen/Qwen2-VL-2B-Instruct's preprocessor_config.json allows 12,845,056 pixels: a 4000x3000 photo is 15,229
    tokens there, in a row nothing cuts (vision rows keep max_length=None). The script's processor resizes it to at
    most MAX_IMAGE_TOKENS; the estimate reads the same file and counts the same number."""
    from PIL import Image
    from transformers import AutoImageProcessor

    folder = save_qwen2_vl_images(tmp_path / "qwen2-vl")
    hub = AutoImageProcessor.from_pretrained(folder)
    assert hub.get_number_of_image_patches(3000, 4000, {}) // hub.merge_size ** 2 > 15_000  # uncapped

    script = vlm_script(tmp_path)
    assert script["CONFIG"]["max_image_tokens"] == MAX_IMAGE_TOKENS == 1280
    script["CONFIG"]["model"] = str(folder)
    images = script["vision_processor"]()  # no video processor without torchvision: AutoProcessor gives the images'
    grid = images(images=[Image.new("RGB", (4000, 3000), "red")], return_tensors="pt")["image_grid_thw"][0]
    tokens = int(grid.prod()) // images.merge_size ** 2
    estimated = image_grid(json.loads((folder / "preprocessor_config.json").read_text())).tokens(3000, 4000)
    assert 1000 < tokens == estimated <= MAX_IMAGE_TOKENS
    small = images(images=[Image.new("RGB", (448, 448))], return_tensors="pt")["image_grid_thw"][0]
    assert int(small.prod()) // 4 == 256 == image_grid(QWEN2_VL_HUB_PIXELS).tokens(448, 448)  # under the cap: as is


# --- replays of the rendered scripts, in-process --------------------------------------------------------------
def vision_data(folder: Path, data_format: str = "vision_messages", n: int = 8) -> Path:
    rows = format_rows(data_format, n)  # a vision row is drawn from its index alone
    write_images(folder, rows)
    return write_jsonl(folder / "data.jsonl", rows)


def replay(tmp_path: Path, monkeypatch, model: Path, *, precision: str, method: str = "sft", peft: str = "lora",
           data_format: str = "vision_messages", qlora_on_cpu: bool = False, **request: Any) -> tuple[Any, dict]:
    """Render a local job for `model` on vision rows and run its main() here with HFTM_PRECISION forced (the GPU's
    autocast branch, gradient checkpointing on): (the trainer, its parameters before training)."""
    data = vision_data(tmp_path, data_format)
    req = TrainingRequest(model=str(model), dataset=str(data), backend="local", method=method, peft=peft,
                          max_steps=2, per_device_batch_size=2, gradient_accumulation=1, save_steps=100, **request)
    plan = plan_run(req, backend="local", size=VLM_SIZE, catalog=fallback_catalog(), namespace=None,
                    data=DataFacts(num_rows=8, vision=True, images_per_row=1), local_cuda=qlora_on_cpu)
    (tmp_path / "train.py").write_text(plan.render().text)
    monkeypatch.setenv("HFTM_PRECISION", precision)
    monkeypatch.chdir(tmp_path)
    script = runpy.run_path(str(tmp_path / "train.py"), run_name="hftm_replay")
    scope = script["main"].__globals__  # run_path returns a copy: the functions read this one
    scope["CONFIG"].update(trackio=False, expects_gpu=False)
    if qlora_on_cpu:  # the GPU's QLoRA branch: real 4-bit, on bitsandbytes' CPU backend
        force_qlora_on_cpu(scope, monkeypatch)
    made: list = []
    scope["new_trainer"] = _recording(scope, made)
    scope["main"]()
    return made[0], made[1]


def _recording(scope: dict, made: list):
    """new_trainer, keeping the trainer it returns and its parameters as built (before any step)."""
    real = scope["new_trainer"]

    def new_trainer(*args: Any, **kwargs: Any) -> Any:
        trainer = real(*args, **kwargs)
        made[:] = [trainer, {name: p.detach().float().clone() for name, p in trainer.model.named_parameters()}]
        return trainer

    return new_trainer


def force_qlora_on_cpu(scope: dict, monkeypatch) -> None:
    import torch

    quantization_config = scope["quantization_config"]

    def on_cpu(prec: dict) -> Any:
        with monkeypatch.context() as patch:  # its CUDA guard only: the config is the GPU's
            patch.setattr(torch.cuda, "is_available", lambda: True)
            return quantization_config(prec)

    model_init_kwargs = scope["model_init_kwargs"]
    scope["quantization_config"] = on_cpu
    scope["model_init_kwargs"] = lambda prec: {**model_init_kwargs(prec), "device_map": {"": "cpu"}}


def trained(trainer: Any, before: dict, prec: str) -> dict[str, bool]:
    """What the replay did: the losses finite, checkpointing on, the precision forced, and which weights moved."""
    losses = [e.get("loss", e.get("train_loss")) for e in trainer.state.log_history]
    assert losses and all(math.isfinite(x) for x in losses if x is not None), trainer.state.log_history
    assert any(getattr(m, "gradient_checkpointing", False) for m in trainer.model.modules())
    assert (trainer.args.bf16, trainer.args.fp16) == (prec == "bf16", prec == "fp16")
    after = dict(trainer.model.named_parameters())
    return {name: not after[name].detach().float().equal(value) for name, value in before.items()}


@pytest.mark.training
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_an_idefics3_smolvlm_layout_trains_with_lora_under_forced_half_precision(precision: str, tiny_model: Path,
                                                                              tmp_path: Path, monkeypatch) -> None:
    """SmolVLM's layout (model.text_model): the adapters land on its text tower and train (fp32, upcast), under bf16
    autocast or fp16 weights, with gradient checkpointing on; the vision encoder's weights do not move."""
    import torch

    model = save_idefics3(tmp_path / "idefics3", tiny_model)
    trainer, before = replay(tmp_path, monkeypatch, model, precision=precision)
    moved = trained(trainer, before, precision)
    lora = [n for n in moved if "lora_" in n]
    assert lora and all(".text_model." in n for n in lora)
    assert any(moved[n] for n in lora if "lora_B" in n)  # zero-initialised: trained, not just present
    assert not any(moved[n] for n in moved if ".vision_model." in n)
    assert {p.dtype for p in trainer.model.parameters() if p.requires_grad} == {torch.float32}  # upcast_trainable


@pytest.mark.training
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_an_idefics3_smolvlm_layout_trains_with_qlora_in_real_4_bit(tiny_model: Path, tmp_path: Path,
                                                                  monkeypatch) -> None:
    """The QLoRA branch with bitsandbytes' CPU backend: the language tower's projections are Linear4bit, the
    adapters sit on them and train."""
    import bitsandbytes as bnb
    from peft.tuners.lora import LoraLayer

    model = save_idefics3(tmp_path / "idefics3", tiny_model)
    trainer, before = replay(tmp_path, monkeypatch, model, precision="bf16", peft="qlora", qlora_on_cpu=True)
    moved = trained(trainer, before, "bf16")
    adapted = {n: m for n, m in trainer.model.named_modules() if isinstance(m, LoraLayer)}
    assert adapted and all(".text_model." in n and isinstance(m.get_base_layer(), bnb.nn.Linear4bit)
                           for n, m in adapted.items())
    assert any(moved[n] for n in moved if "lora_B" in n)


@pytest.mark.training
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_a_full_fine_tune_of_a_vlm_trains_its_language_model_and_projector_not_its_vision_encoder(
        tiny_model: Path, tmp_path: Path, monkeypatch) -> None:
    """peft='full' on a VLM: the vision encoder is frozen (frozen_vision_tower), the language model and the
    connector train in fp32 master weights under bf16 autocast; the card says so."""
    model = save_idefics3(tmp_path / "idefics3", tiny_model)
    trainer, before = replay(tmp_path, monkeypatch, model, precision="bf16", peft="full")
    moved = trained(trainer, before, "bf16")
    vision = [n for n in moved if ".vision_model." in n]
    assert vision and not any(moved[n] for n in vision)
    assert not any(p.requires_grad for n, p in trainer.model.named_parameters() if ".vision_model." in n)
    assert any(moved[n] for n in moved if ".text_model." in n) and any(moved[n] for n in moved if ".connector." in n)
    card = (tmp_path / "output" / "README.md").read_text()
    assert "| trained | language model and projector; vision encoder frozen |" in card


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
def test_qwen_vls_merger_keeps_training_when_its_vision_encoder_is_frozen(tmp_path: Path) -> None:
    """Qwen-VL's projector (the merger) lives inside `visual`: frozen_vision_tower leaves it trainable."""
    import types

    script = vlm_script(tmp_path, peft="full")
    for family in ("qwen2_vl", "qwen3_vl", "llava"):
        model = FAMILIES[family]()
        script["frozen_vision_tower"](types.SimpleNamespace(model=model))
        frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
        encoder = "model.visual." if family != "llava" else "model.vision_tower."
        assert frozen and all(n.startswith(encoder) and "merger" not in n for n in frozen), family
        assert any(p.requires_grad for n, p in model.named_parameters() if "merger" in n) is (family != "llava")


@pytest.mark.training
@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
@pytest.mark.parametrize(("method", "data_format", "extra"), [
    ("dpo", "vision_preference", {}),
    ("grpo", "vision_prompt_only", {"options": {"num_generations": 2, "max_completion_length": 8,
                                                "reward_funcs": ["length"]}})])
def test_vision_preference_and_grpo_runs_train_under_forced_bf16(method: str, data_format: str, extra: dict,
                                                                 tiny_model: Path, tmp_path: Path,
                                                                 monkeypatch) -> None:
    """The DPO and GRPO templates' vision paths (TRL's vision collators, generation from prompt and images) under
    bf16 autocast with gradient checkpointing, adapters on the language tower."""
    model = build_tiny_vlm(tmp_path / "vlm", tiny_model)
    trainer, before = replay(tmp_path, monkeypatch, model, precision="bf16", method=method, data_format=data_format,
                             **extra)
    moved = trained(trainer, before, "bf16")
    lora = [n for n in moved if "lora_B" in n]
    assert lora and all(".language_model." in n for n in lora)
    # GRPO's tiny random policy fills every completion to the limit: equal rewards, no advantage, no update
    assert any(moved[n] for n in lora) is (method == "dpo")
    assert not any(moved[n] for n in moved if ".vision_tower." in n)


@pytest.mark.training
def test_a_vlm_lora_run_trains_on_two_gloo_ranks(tiny_model: Path, tmp_path: Path) -> None:
    """DDP as a multi-GPU flavor's job runs it (torchrun, one process a GPU), on 2 gloo ranks: both ranks train the
    language tower's adapters on their share of the vision rows, rank 0 saves the adapter and the processor."""
    model = save_idefics3(tmp_path / "idefics3", tiny_model)
    data = vision_data(tmp_path)
    req = TrainingRequest(model=str(model), dataset=str(data), backend="local", max_steps=2, per_device_batch_size=1,
                          gradient_accumulation=1, save_steps=100)
    plan = plan_run(req, backend="local", size=VLM_SIZE, catalog=fallback_catalog(), namespace=None,
                    data=DataFacts(num_rows=8, vision=True, images_per_row=1))
    (tmp_path / "train.py").write_text(plan.render().text)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRACKIO_DIR": str(tmp_path / "trackio"), "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run(torchrun_command("--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                                           str(free_port()), script="train.py"), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=420)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    logs = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith("HFTM_LOG")]
    assert any(entry.get("step") == 2 for entry in logs) and "HFTM_DONE" in proc.stdout
    adapter = json.loads((tmp_path / "output" / "adapter_config.json").read_text())
    assert adapter["target_modules"] == LANGUAGE_TOWER
    assert (tmp_path / "output" / "processor_config.json").exists()


# --- the review of the families (issue 30, second round): finding 5 (a) -------------------------------------------
def test_a_full_fine_tune_of_a_vlm_on_text_rows_trains_its_language_model_alone(tmp_path: Path) -> None:
    """Text rows (a conversation SFT of Gemma 3 or Qwen2.5-VL) reach neither the vision encoder nor the projector:
    a full fine-tune trains the language model and its output layer, and nothing else is left trainable for DDP to
    wait on."""
    import types

    script = vlm_script(tmp_path, peft="full")
    script["CONFIG"]["vision"] = False
    for family in ("gemma3", "qwen2_5_vl", "llava", "idefics3"):
        model = FAMILIES[family]()
        script["frozen_vision_tower"](types.SimpleNamespace(model=model))
        text = {id(p) for m in (model.get_decoder(), model.get_output_embeddings()) for p in m.parameters()}
        trainable = {id(p) for p in model.parameters() if p.requires_grad}
        assert trainable == text, family
    assert script["CONFIG"]["card"]["settings"]["trained"].startswith("language model; vision encoder and projector")


@pytest.mark.training
@pytest.mark.parametrize("family", ["gemma3", "qwen2_5_vl"])
def test_a_full_fine_tune_of_a_vlm_on_text_rows_trains_on_two_gloo_ranks(family: str, tiny_model: Path,
                                                                        tmp_path: Path) -> None:
    """Finding 5 (a): under activation checkpointing transformers tells DDP not to look for unused parameters
    (trainer.py: `find_unused = not (self.model.is_activation_checkpointing or ...)`), and a trainable vision
    tower or projector that text rows never reach stopped the second step ("Expected to have finished reduction in
    the prior iteration"). Two gloo ranks, bf16 autocast, checkpointing on, as a multi-GPU flavor runs it."""
    from transformers import AutoTokenizer

    from tests.helpers import CHAT_ROWS
    from tests.replay import two_ranks

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = FAMILIES[family](len(tokenizer) + 8)
    model.config.get_text_config().eos_token_id = tokenizer.eos_token_id
    model.config.get_text_config().pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(tmp_path / family)
    tokenizer.save_pretrained(tmp_path / family)
    data = write_jsonl(tmp_path / "chat.jsonl", CHAT_ROWS * 4)
    proc = two_ranks(tmp_path, tmp_path / family, data, method="sft", peft="full")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "HFTM_DONE" in proc.stdout
    assert "vision encoder and projector frozen (text rows)" in (tmp_path / "output" / "README.md").read_text()
