"""The planner's decisions for odd model files, replayed as a GPU job runs them (bf16 autocast with activation
checkpointing, QLoRA's real 4-bit on bitsandbytes' CPU backend; tests/replay.py), each script planned with the
size the server reads from the model's own folder (tests/test_family_plans.py checks the plans themselves): a
mixture of experts whose experts transformers fuses trains its default LoRA and QLoRA; a checkpoint stored in
bitsandbytes 4-bit trains LoRA (QLoRA in effect) and is refused a full fine-tune; ['all-linear'] reaches PEFT as
its shorthand; a local convolutional classifier is sized alike by every tool."""

import runpy
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.errors import TrainError
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.estimate.sizing import model_size
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp_demo.tiny import example_rows, write_images, write_jsonl
from tests.conftest import needs_training
from tests.helpers import CHAT_ROWS, call
from tests.replay import gpu_trainer

pytestmark = [needs_training, pytest.mark.training, pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def planned(tmp_path: Path, model: Path, data: Path, **fields: Any) -> dict[str, Any]:
    """The script an HF job on an A10G gets for this request, planned with the size read from the model's folder,
    loaded without running main()."""
    request = TrainingRequest(**{"model": str(model), "dataset": str(data), "hub_model_id": "me/out",
                                 "flavor": "a10g-large", "max_steps": 2, "per_device_batch_size": 2,
                                 "gradient_accumulation": 1, "learning_rate": 1e-3, "save_steps": 100, **fields})
    plan = plan_run(request, backend="hf", size=model_size(str(model), offline=True), catalog=fallback_catalog(),
                    namespace="me", data=DataFacts(num_rows=16))
    path = tmp_path / "train.py"
    path.write_text(plan.render().text)
    script = runpy.run_path(str(path), run_name="hftm_replay")
    script["CONFIG"].update(output_dir=str(tmp_path / "out"), trackio=False, push_to_hub=False, hub_model_id=None)
    return script


def tiny_moe(tiny_model: Path, folder: Path, model_type: str) -> Path:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if (folder / "config.json").exists():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    experts = dict(num_local_experts=4) if model_type == "mixtral" else dict(num_experts=4, moe_intermediate_size=32)
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  num_experts_per_tok=2, max_position_embeddings=512,
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **experts)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# --- 2: fused-expert mixtures of experts train their default LoRA and QLoRA -----------------------------------------
@pytest.mark.parametrize("peft", ["lora", "qlora"])
@pytest.mark.parametrize("model_type", ["qwen3_moe", "mixtral"])
def test_a_fused_expert_moe_trains_its_default_lora(model_type: str, peft: str, tiny_model: Path, tmp_path: Path,
                                                    tmp_path_factory: pytest.TempPathFactory, offline,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """PEFT turns all-linear into parameter wrappers on the fused experts and router, which refuse lora_dropout
    0.05 when the trainer is built: the plan sends 0. What the adapter reaches: attention's q/k/v/o as modules,
    the router and the experts' gate_up_proj/down_proj as parameters; under QLoRA the experts stay bf16."""
    import math

    import bitsandbytes as bnb
    import torch

    model = tiny_moe(tiny_model, tmp_path_factory.getbasetemp() / f"tiny-{model_type}", model_type)
    script = planned(tmp_path, model, write_jsonl(tmp_path / "chat.jsonl", CHAT_ROWS), peft=peft)
    assert script["CONFIG"]["lora"]["dropout"] == 0.0
    trainer = gpu_trainer(script, monkeypatch, "bf16")
    config = trainer.model.peft_config["default"]
    assert {"gate.weight", "gate_up_proj", "down_proj"} <= set(config.target_parameters)
    assert {"q_proj", "k_proj", "v_proj", "o_proj"} <= set(config.target_modules)
    base = trainer.model.get_base_model()
    experts = [p for n, p in base.named_parameters() if n.endswith("gate_up_proj") and p.dim() == 3]
    assert experts and all(p.dtype == torch.bfloat16 if peft == "qlora" else True for p in experts)
    assert (peft == "qlora") == any(isinstance(m, bnb.nn.Linear4bit) for m in base.modules())
    assert math.isfinite(trainer.train().training_loss)


# --- 4: a checkpoint stored in bitsandbytes 4-bit -------------------------------------------------------------------
@pytest.fixture(scope="module")
def stored_4bit(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Path:
    """The tiny Qwen2 quantized to 4-bit and saved, as unsloth's *-bnb-4bit repos are made."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

    folder = tmp_path_factory.mktemp("stored-4bit") / "tiny-bnb-4bit"
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                      bnb_4bit_compute_dtype=torch.bfloat16)
    AutoModelForCausalLM.from_pretrained(tiny_model, quantization_config=quantization,
                                         device_map={"": "cpu"}).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(folder)
    return folder


def test_a_stored_4bit_checkpoint_is_read_without_transformers_and_trains_lora_as_qlora(
        stored_4bit: Path, tiny_model: Path, tmp_path: Path, offline, monkeypatch: pytest.MonkeyPatch) -> None:
    import math

    import bitsandbytes as bnb

    size, original = model_size(str(stored_4bit), offline=True), model_size(str(tiny_model), offline=True)
    assert size.quantization.method == "bitsandbytes_4bit" and original.quantization is None
    # counted from the config (within its formula's 1%), not from the safetensors' packed bytes
    assert abs(size.params / original.params - 1) < 0.01 and "safetensors" not in size.source
    data = write_jsonl(tmp_path / "chat.jsonl", CHAT_ROWS)
    with pytest.raises(TrainError, match="peft='lora'"):
        planned(tmp_path, stored_4bit, data, peft="full")
    script = planned(tmp_path, stored_4bit, data, peft="lora")
    trainer = gpu_trainer(script, monkeypatch, "bf16")
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in trainer.model.get_base_model().modules())
    assert math.isfinite(trainer.train().training_loss)


# --- 13: ['all-linear'] reaches PEFT as its shorthand; names the model lacks are refused ------------------------------
def test_all_linear_in_a_list_trains(tiny_model: Path, tmp_path: Path, offline, monkeypatch: pytest.MonkeyPatch
                                     ) -> None:
    import math

    script = planned(tmp_path, tiny_model, write_jsonl(tmp_path / "chat.jsonl", CHAT_ROWS), peft="lora",
                     lora_target_modules=["all-linear"])
    trainer = gpu_trainer(script, monkeypatch, "bf16")
    targets = {name.rsplit(".", 1)[-1] for name in trainer.model.peft_config["default"].target_modules}
    assert {"q_proj", "down_proj"} <= targets
    assert math.isfinite(trainer.train().training_loss)


def test_target_names_a_local_model_lacks_are_refused_from_its_safetensors(tiny_model: Path, tmp_path: Path,
                                                                         offline) -> None:
    """The folder's safetensors headers name its modules: BERT's 'query'/'value' on a Qwen2 adapt nothing."""
    data = write_jsonl(tmp_path / "chat.jsonl", CHAT_ROWS)
    with pytest.raises(TrainError, match="NoMatchingPeftModuleError.*'q_proj'"):
        planned(tmp_path, tiny_model, data, peft="lora", lora_target_modules=["query", "value"])
    script = planned(tmp_path, tiny_model, data, peft="lora", lora_target_modules=["query", "v_proj"])
    assert script["CONFIG"]["lora"]["target_modules"] == ["query", "v_proj"]


# --- 14: a local convolutional classifier, sized alike by every tool -------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("family", ["resnet", "convnext"])
async def test_a_local_convnet_is_sized_from_its_safetensors_by_every_tool(family: str, tmp_path: Path, offline
                                                                           ) -> None:
    from transformers import AutoModelForImageClassification

    from tests.tiny_encoders import build_image_encoder

    model = build_image_encoder(tmp_path / family, family)
    params = sum(p.numel() for p in AutoModelForImageClassification.from_pretrained(model).parameters())
    write_images(tmp_path / "data", example_rows("image-classification", 16))
    data = str(tmp_path / "data" / "images")
    base = {"model": str(model), "dataset": data, "method": "image-classification"}
    async with Client(build_server()) as client:
        report = await call(client, "validate_dataset", {"dataset": data, "model": str(model),
                                                         "method": "image-classification"})
        estimate = await call(client, "estimate_cost", base)
        plan = await call(client, "submit_training", {**base, "backend": "local", "dry_run": True})
    assert report["valid"] and plan["warnings"] is not None
    size = model_size(str(model), offline=True)
    assert size.params == params and "safetensors headers" in size.source
    assert estimate["assumptions"]["params_billions"] == round(params / 1e9, 3)
    assert "convolutional" in estimate["assumptions"]["params_source"]
