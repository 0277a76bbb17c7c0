"""The rendered script's GPU-only branches, replayed on CPU: each test forces the branch (a fake CUDA answer,
a rank in the environment, fp16 weights) and checks what the script would do on the GPU the user pays for."""

import json
import runpy
import shutil
from pathlib import Path

import pytest

from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from tests.conftest import needs_training
from tests.helpers import RENDER_SIZE as SIZE
from tests.helpers import load_rendered as load
from tests.helpers import rendered, run_script

pytestmark = needs_training


@pytest.mark.parametrize("method", ["sft", "dpo", "grpo", "reward"])
def test_the_trainer_loads_the_model_after_the_distributed_state_exists(method: str, tmp_path: Path) -> None:
    """QLoRA on 2+ GPUs: loaded before the trainer's args, every rank's copy landed on GPU 0."""
    text = Path(rendered(tmp_path, method=method, peft="qlora", flavor="a10g-largex2")).read_text()
    # (the script's weightless_model builds the module tree on the meta device: that loads no weights)
    assert "Model.from_pretrained(" not in text and "ForCausalLM.from_pretrained(" not in text
    # the trainer is handed the model id with its quantization config (inline, or through trainer_model())
    assert 'model=CONFIG["model"]' in text or '"model": CONFIG["model"], "quantization_config": quantization_config(prec)' in text
    assert ("quantization_config=quantization_config(prec" in text  # reward: (prec, keep=heads)
            or "**trainer_model(prec" in text)


def test_each_rank_loads_a_quantized_model_onto_its_own_gpu(tmp_path: Path, monkeypatch) -> None:
    import torch

    script = load(tmp_path, peft="qlora", flavor="a10g-largex2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the GPU job's branch
    prec = {"dtype": "bfloat16"}
    assert script["model_init_kwargs"](prec) == {"dtype": "bfloat16", "device_map": {"": 1}}
    assert load(tmp_path, peft="lora")["model_init_kwargs"](prec)["device_map"] == {"": 1}  # own_gpu: this rank's
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the replays: bitsandbytes' CPU backend
    assert script["model_init_kwargs"](prec)["device_map"] == {"": "cpu"}
    assert "device_map" not in load(tmp_path, peft="lora")["model_init_kwargs"](prec)


def test_every_rank_reports_its_error_line_but_only_rank_zero_its_progress(tmp_path: Path, monkeypatch,
                                                                          capsys) -> None:
    script = load(tmp_path)
    monkeypatch.setenv("RANK", "1")
    script["emit"]("LOG", {"step": 1})
    script["emit"]("ERROR", {"type": "RuntimeError", "message": "CUDA error"})
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line.split(" ", 1)[1]) for line in lines] == [
        {"type": "RuntimeError", "message": "CUDA error", "rank": 1}]


@pytest.mark.parametrize(("emulated", "real", "mode"), [(True, True, "bf16"), (True, False, "fp16")])
def test_bf16_is_used_only_where_the_gpu_really_has_it(emulated: bool, real: bool, mode: str, tmp_path: Path,
                                                       monkeypatch) -> None:
    """T4 answers is_bf16_supported() with True through emulation; the script must ask without it."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: emulated if including_emulation else real)
    for peft, dtype in (("lora", "bfloat16" if mode == "bf16" else "float16"), ("full", "float32")):
        prec = load(tmp_path, peft=peft)["precision"]()
        assert (prec["bf16"], prec["fp16"], prec["dtype"]) == (mode == "bf16", mode == "fp16", dtype)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft vs transformers 5
def test_under_fp16_the_trainable_weights_are_upcast_for_the_grad_scaler(tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=1, dtype=torch.float16)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"], task_type="SEQ_CLS"),
                           autocast_adapter_dtype=False)
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert {p.dtype for p in trainable} == {torch.float16}  # adapters and the new `score` head
    load(tmp_path)["upcast_trainable"](model)
    assert {p.dtype for p in trainable} == {torch.float32}
    assert any(p.dtype == torch.float16 for p in model.parameters() if not p.requires_grad)  # the base stays half


def test_a_gpu_flavor_without_cuda_stops_at_once_with_a_clear_line(tmp_path: Path) -> None:
    script = load(tmp_path, flavor="a10g-large")
    assert script["CONFIG"]["expects_gpu"]
    with pytest.raises(SystemExit, match="sees no GPU"):
        script["require_gpu"]()
    load(tmp_path, flavor="cpu-basic")["require_gpu"]()  # a CPU flavor is fine on CPU


def test_the_header_pins_a_torch_built_for_cuda_12(tmp_path: Path) -> None:
    text = Path(rendered(tmp_path)).read_text()
    assert '"torch>=2.6,<2.11"' in text  # 2.11+ wheels on PyPI need CUDA 13 (a 580+ driver)


def test_checkpoints_are_resumed_only_when_asked(tmp_path: Path) -> None:
    output = tmp_path / "out"
    (output / "checkpoint-5").mkdir(parents=True)
    (output / "checkpoint-5" / "trainer_state.json").write_text("{}")
    script = load(tmp_path, output_bucket="me/bucket")
    script["CONFIG"]["output_dir"] = str(output)
    assert script["resume_checkpoint"]() is None  # a foreign checkpoint in the folder is not picked up
    script["CONFIG"]["resume_from_dir"] = str(output)
    assert script["resume_checkpoint"]() == str(output / "checkpoint-5")
    script["CONFIG"]["resume_from_dir"] = str(tmp_path / "empty")
    with pytest.raises(SystemExit, match="no checkpoint"):
        script["resume_checkpoint"]()


@pytest.mark.parametrize("gpus_flavor", ["a10g-large", "a10g-largex2", "a100x4", "h200x8"])
@pytest.mark.parametrize("generations", [2, 3, 4, 8, 16])
def test_grpo_eval_batches_hold_whole_groups_of_generations(gpus_flavor: str, generations: int,
                                                            tmp_path: Path) -> None:
    per_device = 3 if generations == 3 else 2
    request = TrainingRequest(model="Qwen/Qwen2-0.5B", dataset="org/data", hub_model_id="me/out", method="grpo",
                              flavor=gpus_flavor, eval_split=0.1, num_generations=generations,
                              per_device_batch_size=per_device, gradient_accumulation=generations)
    plan = plan_run(request, backend="hf", size=SIZE, catalog=fallback_catalog(), namespace="me",
                    data=DataFacts(num_rows=1000))
    assert plan.config["per_device_eval_batch_size"] * plan.gpus % generations == 0


@pytest.mark.training
def test_grpo_with_an_eval_split_trains_when_the_eval_batch_alone_would_not_divide(tiny_model: Path,
                                                                                    tmp_path: Path, offline) -> None:
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "data.jsonl", example_rows("grpo", 24))
    request = TrainingRequest(model=str(tiny_model), dataset=str(data), method="grpo", backend="local",
                              max_steps=1, per_device_batch_size=2, gradient_accumulation=2, num_generations=4,
                              max_completion_length=8, eval_split=0.2, save_steps=1)
    plan = plan_run(request, backend="local", size=SIZE, catalog=fallback_catalog(), namespace=None,
                    data=DataFacts())
    assert plan.config["per_device_eval_batch_size"] == 4
    proc = run_script(tmp_path, plan.render().text)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def without_chat_template(tiny_model: Path, folder: Path) -> Path:
    shutil.copytree(tiny_model, folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_conversational_data_on_a_model_without_a_chat_template_is_refused_with_the_fix(tiny_model: Path,
                                                                                       tmp_path: Path,
                                                                                       offline) -> None:
    from hf_train_mcp.errors import TrainError
    from hf_train_mcp.service import Core
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    base = without_chat_template(tiny_model, tmp_path / "base-model")
    data = write_jsonl(tmp_path / "chat.jsonl", example_rows("sft", 8))
    request = {"model": str(base), "dataset": str(data), "backend": "local", "dry_run": True}
    with pytest.raises(TrainError, match="chat_template='chatml'"):
        Core().submit_training(TrainingRequest(**request))
    fixed = Core().submit_training(TrainingRequest(**request, chat_template="chatml"))
    assert "<|im_start|>" in runpy.run_path(_write(tmp_path, fixed.script), run_name="x")["CONFIG"]["chat_template"]
    text = write_jsonl(tmp_path / "text.jsonl", [{"text": "plain"}] * 4)
    Core().submit_training(TrainingRequest(**{**request, "dataset": str(text)}))  # plain text needs no template


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "rendered.py"
    path.write_text(text)
    return str(path)


def test_the_final_push_names_the_dataset_as_trls_scripts_do(tmp_path: Path) -> None:
    text = Path(rendered(tmp_path)).read_text()
    assert 'trainer.push_to_hub(commit_message="hf-train-mcp: final model", dataset_name=CONFIG["dataset"])' in text


def test_the_offered_chatml_template_ends_assistant_turns_with_the_models_own_eos() -> None:
    import jinja2

    from hf_train_mcp.models.chat_template import CHATML

    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    text = jinja2.Template(CHATML).render(messages=messages, eos_token="</s>", add_generation_prompt=False)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|></s>\n"
