"""After training: evaluate_model and export_model through the MCP tools, on this machine (the tiny model, real
scripts) and on HF Jobs (the emulator: what is posted, and what is refused before anything is)."""

import ast
import json
import warnings
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.planning.export import LLAMA_CPP_REPO
from hf_train_mcp.service import Core
from tests.conftest import READ_TOKEN, WRITE_TOKEN, needs_training
from tests.emulator import Emulator, JobPlan, ViewerDataset
from tests.helpers import CAPYBARA_BASE as BASE
from tests.helpers import (CAPYBARA_ROWS, call, completed_training, decoded_script, finished, gguf_value, read_gguf,
                           refused, run_script, script_config)

pytestmark = pytest.mark.anyio


# --- on this machine: train, evaluate, export, every step through the tools ------------------------------------
@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_train_then_evaluate_then_merge_on_this_machine(tiny_model: Path, tmp_path: Path, offline) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "data.jsonl", example_rows("sft", 32))
    async with Client(build_server()) as client:
        trained = await call(client, "submit_training", {
            "model": str(tiny_model), "dataset": str(data), "backend": "local", "max_steps": 2,
            "per_device_batch_size": 2, "gradient_accumulation": 1, "max_length": 128, "eval_split": 0.25})
        report = await finished(client, trained["job_id"])
        assert report["stage"] == "COMPLETED", report
        output = Path(trained["model_url"].removeprefix("file://"))
        assert (output / "adapter_config.json").exists() and (output / "tokenizer.json").exists()
        card = (output / "README.md").read_text()
        assert card.startswith("---\n") and "library_name: peft" in card and "| LoRA r / alpha | 16 / 32 |" in card

        evaluation = await call(client, "evaluate_model", {"model": trained["job_id"], "backend": "local"})
        assert evaluation["job_id"] != trained["job_id"] and evaluation["model_url"] == trained["model_url"]
        report = await finished(client, evaluation["job_id"])
        assert report["stage"] == "COMPLETED", report
        metrics = report["last_metrics"]
        assert metrics["eval_rows"] == 8  # the 25% the training job held out, found again from the ledger
        assert metrics["eval_loss"] > 0 and metrics["perplexity"] == pytest.approx(2.718281828 ** metrics["eval_loss"],
                                                                                    rel=1e-2)
        assert "Evaluated" in report["next_step"]
        card = (output / "README.md").read_text()
        assert "## Evaluation" in card and f"| eval_loss | {metrics['eval_loss']} |" in card
        assert "held out by job " + trained["job_id"] in card
        logs = (await call(client, "job_logs", {"job_id": evaluation["job_id"], "limit": 2000}))["lines"]
        samples = [json.loads(line.split(" ", 1)[1]) for line in logs if line.startswith("HFTM_SAMPLE ")]
        assert samples and all(s["base"] is not None and s["fine_tuned"] is not None for s in samples)
        runs = list((Path(trained["job_url"].removeprefix("file://")) / "trackio").rglob("*"))
        assert runs, "the evaluation logs into the training run's Trackio folder"

        exported = await call(client, "export_model", {"model": trained["job_id"], "backend": "local"})
        report = await finished(client, exported["job_id"])
        assert report["stage"] == "COMPLETED", report
        merged = Path(exported["model_url"].removeprefix("file://"))
        files = {p.name for p in merged.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= files
        assert not {f for f in files if f.startswith("adapter")}, files
        assert "## Evaluation" in (merged / "README.md").read_text()  # the card carries the evaluation along

    tokenizer = AutoTokenizer.from_pretrained(merged)
    standalone = AutoModelForCausalLM.from_pretrained(merged).eval()
    with warnings.catch_warnings():  # peft calls a transformers alias deprecated in 5.x
        warnings.simplefilter("ignore", FutureWarning)
        reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), output).eval()
    ids = tokenizer("Write one sentence about the sea.", return_tensors="pt")
    with torch.no_grad():
        assert torch.allclose(standalone(**ids).logits, reference(**ids).logits, atol=1e-4)
        generated = standalone.generate(**ids, max_new_tokens=5, do_sample=False)
    assert generated.shape[1] == ids["input_ids"].shape[1] + 5


@pytest.mark.detached
@needs_training
@pytest.mark.training
@pytest.mark.parametrize("method, metric", [("dpo", "preference_accuracy"), ("grpo", "mean_reward")])
async def test_an_evaluation_picks_the_metric_from_the_data(method: str, metric: str, tiny_model: Path,
                                                             tmp_path: Path, offline) -> None:
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "held_out.jsonl", example_rows(method, 6))
    async with Client(build_server()) as client:
        evaluation = await call(client, "evaluate_model", {"model": str(tiny_model), "dataset": str(data),
                                                           "backend": "local", "num_samples": 4})
        report = await finished(client, evaluation["job_id"])
    assert report["stage"] == "COMPLETED", report
    assert report["last_metrics"]["eval_rows"] == 4 and 0.0 <= report["last_metrics"][metric] <= 1.0


@needs_training
@pytest.mark.training
def test_the_evaluation_script_runs_the_gpu_half_precision_branch_on_cpu(tiny_model: Path, tmp_path: Path,
                                                                          offline) -> None:
    """bf16 weights and compute (what a GPU job gets), forced on CPU: scoring and generation still work."""
    from hf_train_mcp.jobs.logs import parse_log
    from hf_train_mcp.contract.requests import EvaluateRequest
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "held_out.jsonl", example_rows("sft", 4))
    prepared = Core().preview(EvaluateRequest(model=str(tiny_model), dataset=str(data), backend="local",
                                              dry_run=True), kind="evaluate")
    proc = run_script(tmp_path, prepared.script.text, HFTM_PRECISION="bf16")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    parsed = parse_log(proc.stdout.splitlines())
    assert parsed.done and parsed.metrics["eval_loss"] > 0


@needs_training
@pytest.mark.training
def test_a_vision_language_model_is_evaluated_on_text_rows_as_text(tiny_model: Path, tmp_path: Path,
                                                                    offline) -> None:
    """Issue 30 review of the families, finding 10: a VLM (the usual path: a text SFT of Gemma 3 or Qwen2.5-VL,
    then evaluate_model) on rows without images: the model's family made the script read images (KeyError
    'images' after the model loaded). The rows decide: the text loss, on the VLM's own class."""
    from hf_train_mcp.jobs.logs import parse_log
    from hf_train_mcp.contract.requests import EvaluateRequest
    from hf_train_mcp_demo.tiny import build_tiny_vlm, example_rows, write_jsonl

    vlm = build_tiny_vlm(tmp_path / "vlm", tiny_model)
    data = write_jsonl(tmp_path / "held_out.jsonl", example_rows("sft", 4))
    prepared = Core().preview(EvaluateRequest(model=str(vlm), dataset=str(data), backend="local", dry_run=True),
                              kind="evaluate")
    assert script_config(prepared.script.text)["vision"]  # the family's guess, before the rows are read
    proc = run_script(tmp_path, prepared.script.text, HFTM_PRECISION="bf16")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    parsed = parse_log(proc.stdout.splitlines())
    assert parsed.done and parsed.metrics["eval_rows"] == 4 and parsed.metrics["eval_loss"] > 0


# --- on HF Jobs (the emulator) --------------------------------------------------------------------------------
@pytest.fixture
def trained_on_hub(hub: Emulator) -> Emulator:
    hub.datasets["trl-lib/Capybara"] = ViewerDataset({"default": {"train": CAPYBARA_ROWS, "test": CAPYBARA_ROWS[:5]}})
    hub.models.setdefault(BASE["model"], 494_000_000)
    return hub


@pytest.mark.detached
async def test_evaluating_a_hub_job_posts_an_evaluation_of_its_adapter_on_its_held_out_split(
        trained_on_hub: Emulator) -> None:
    hub = trained_on_hub
    async with Client(build_server()) as client:
        job = await completed_training(client, hub)
        before = len(hub.posted_jobs())
        hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1, log_lines=[
            "HFTM_START {}", 'HFTM_EVAL {"eval_rows": 4, "eval_loss": 1.25, "perplexity": 3.49}', "HFTM_DONE {}"]))
        evaluation = await call(client, "evaluate_model", {"model": job["job_id"], "idempotency_key": "eval-1"})
        spec = hub.posted_jobs()[before]
        assert spec["labels"]["kind"] == "evaluate" and spec["labels"]["hf-train-mcp"] == "1"
        assert spec["secrets"] == {"HF_TOKEN": WRITE_TOKEN}
        script = decoded_script(spec)
        for text in (script, json.dumps(spec["environment"]), json.dumps(spec["command"])):
            assert WRITE_TOKEN not in text and READ_TOKEN not in text
        config = script_config(script)
        assert config["model"] == BASE["hub_model_id"] and config["model_kind"] == "adapter"
        assert config["base_model"] == BASE["model"] and config["dataset"] == BASE["dataset"]
        assert config["eval_split"] == 0.1 and config["seed"] == 42  # the training job's own held-out rows
        assert config["card_repo"] == BASE["hub_model_id"] and config["project"] == "hf-train-mcp"
        assert config["trackio_space_id"] == "emu-user/trackio" and config["tasks"] == []
        assert evaluation["trackio_url"].endswith("/spaces/emu-user/trackio")
        assert spec["flavor"] == evaluation["flavor"] and evaluation["worst_case_cost_usd"] > 0

        report = await finished(client, evaluation["job_id"], 30)
        assert report["last_metrics"] == {"eval_rows": 4.0, "eval_loss": 1.25, "perplexity": 3.49}
        again = await call(client, "evaluate_model", {"model": job["job_id"], "idempotency_key": "eval-1"})
        assert again["job_id"] == evaluation["job_id"] and len(hub.posted_jobs()) == before + 1
        listed = Core().ledger.get(evaluation["job_id"])
        assert listed.kind == "evaluate" and listed.parent_job_id == job["job_id"]


async def test_benchmarks_add_lm_eval_to_the_job_and_cap_each_task(trained_on_hub: Emulator) -> None:
    async with Client(build_server()) as client:
        job = await completed_training(client, trained_on_hub)
        plan = await call(client, "evaluate_model", {"model": job["job_id"], "tasks": ["hellaswag", "arc_easy"],
                                                     "num_samples": 50, "dry_run": True})
    config = script_config(plan["script"])
    assert config["tasks"] == ["hellaswag", "arc_easy"] and config["num_samples"] == 50
    assert any(d.startswith("lm-eval") for d in _header_dependencies(plan["script"]))
    ast.parse(plan["script"])


def _header_dependencies(script: str) -> list[str]:
    header = script.split("# dependencies = [", 1)[1].split("# ]", 1)[0]
    return [json.loads(line.strip("# ,")) for line in header.splitlines() if line.strip("# ,")]


async def test_a_gguf_export_quantizes_in_the_job_and_names_files_as_llama_cpp_does(trained_on_hub: Emulator) -> None:
    async with Client(build_server()) as client:
        job = await completed_training(client, trained_on_hub)
        before = len(trained_on_hub.posted_jobs())
        plan = await call(client, "export_model", {"model": job["job_id"], "format": "gguf", "dry_run": True})
        assert len(trained_on_hub.posted_jobs()) == before  # a dry run posts nothing
        assert plan["hub_model_id"] == BASE["hub_model_id"] + "-GGUF"
        config = script_config(plan["script"])
        assert config["quantization"] == "q4_k_m" and config["file_stem"] == "qwen-sft"
        assert config["llama_cpp_repo"] == LLAMA_CPP_REPO and config["model_kind"] == "adapter"
        assert config["card"]["base_model"] == BASE["hub_model_id"]
        assert config["card"]["base_model_relation"] == "quantized"
        dependencies = _header_dependencies(plan["script"])
        assert any(d.startswith("gguf") for d in dependencies) and any(d.startswith("cmake") for d in dependencies)
        assert not any(d.startswith("trl") for d in dependencies)  # an export trains nothing
        # a 0.5B merge fits a CPU machine: no GPU is billed for it
        assert plan["flavor"].startswith("cpu-")

        q8 = await call(client, "export_model", {"model": job["job_id"], "format": "gguf", "quantization": "q8_0",
                                                 "dry_run": True, "hub_model_id": "emu-user/my-gguf"})
        assert q8["hub_model_id"] == "emu-user/my-gguf" and script_config(q8["script"])["file_stem"] == "my-gguf"
        assert not any(d.startswith("cmake") for d in _header_dependencies(q8["script"]))  # no llama-quantize build

        merged = await call(client, "export_model", {"model": job["job_id"]})
        spec = trained_on_hub.posted_jobs()[before]
        assert spec["labels"]["kind"] == "export" and merged["hub_model_id"] == BASE["hub_model_id"] + "-merged"
        assert WRITE_TOKEN not in decoded_script(spec) and spec["secrets"] == {"HF_TOKEN": WRITE_TOKEN}


async def test_a_70b_merge_gets_a_machine_with_the_memory_for_it_and_respects_the_budget(
        trained_on_hub: Emulator) -> None:
    hub = trained_on_hub
    hub.models["meta-llama/Llama-3.1-70B-Instruct"] = 70_600_000_000
    async with Client(build_server()) as client:
        job = await completed_training(client, hub, model="meta-llama/Llama-3.1-70B-Instruct", peft="qlora",
                                       hub_model_id="emu-user/llama70-qlora")
        plan = await call(client, "export_model", {"model": job["job_id"], "dry_run": True})
        ram = {"l4x4": 186, "a100-large": 142, "h200": 256}
        assert ram.get(plan["flavor"], 0) >= 70.6 * 2 * 1.25, plan["flavor"]
        assert any("holds the whole model in memory" in w for w in plan["warnings"])
        before = len(hub.posted_jobs())
        text = await refused(client, "export_model", {"model": job["job_id"], "max_cost_usd": 0.5})
        assert "max_cost_usd" in text and len(hub.posted_jobs()) == before


async def test_follow_ups_refuse_what_they_cannot_do_before_posting_anything(trained_on_hub: Emulator,
                                                                            tmp_path: Path) -> None:
    hub = trained_on_hub
    async with Client(build_server()) as client:
        hub.plan_next(JobPlan(scheduling_s=0.0, running_s=60.0))
        running = await call(client, "submit_training", {**BASE, "max_steps": 10})
        before = len(hub.posted_jobs())
        assert "RUNNING" in await refused(client, "evaluate_model", {"model": running["job_id"]})
        assert "RUNNING" in await refused(client, "export_model", {"model": running["job_id"]})
        done = await completed_training(client, hub)
        before = len(hub.posted_jobs())
        evaluation = await call(client, "evaluate_model", {"model": done["job_id"], "dry_run": True})
        assert evaluation["job_id"] is None
        hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
        real = await call(client, "evaluate_model", {"model": done["job_id"]})
        await finished(client, real["job_id"], 30)
        assert "not a training job" in await refused(client, "export_model", {"model": real["job_id"]})
        text = await refused(client, "evaluate_model", {"model": BASE["model"]})
        assert "nothing to evaluate" in text
        assert "quantization" in await refused(client, "export_model", {"model": done["job_id"],
                                                                          "quantization": "q8_0"})
        text = await refused(client, "evaluate_model", {"model": str(tmp_path), "backend": "hf"})
        assert "holds neither an adapter" in text  # a local folder is uploaded, once it holds a model
        hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
        await call(client, "submit_training", {**BASE, "max_steps": 10, "idempotency_key": "train-key"})
        text = await refused(client, "evaluate_model", {"model": done["job_id"], "idempotency_key": "train-key"})
        assert "a train job" in text
        assert len(hub.posted_jobs()) == before + 2  # the real evaluation and the keyed training only


async def test_a_hub_model_is_found_to_be_an_adapter_from_its_adapter_config(trained_on_hub: Emulator) -> None:
    hub = trained_on_hub
    hub.files[("someone/qwen-lora", "adapter_config.json")] = json.dumps(
        {"base_model_name_or_path": BASE["model"], "peft_type": "LORA", "task_type": "CAUSAL_LM"}).encode()
    hub.models.setdefault("someone/qwen-merged", 494_000_000)
    async with Client(build_server()) as client:
        adapter = await call(client, "export_model", {"model": "someone/qwen-lora", "dry_run": True,
                                                      "hub_model_id": "emu-user/qwen-merged"})
        whole = await call(client, "evaluate_model", {"model": "someone/qwen-merged", "dataset": "trl-lib/Capybara",
                                                      "dry_run": True})
    assert script_config(adapter["script"])["model_kind"] == "adapter"
    assert script_config(adapter["script"])["base_model"] == BASE["model"]
    config = script_config(whole["script"])
    assert config["model_kind"] == "full" and config["dataset_split"] == "test" and config["card_repo"] is None


# --- GGUF: llama.cpp's real converter (the llama_cpp fixture: conftest.py) ------------------------------------
def sentencepiece_tiny_model(tiny_model: Path, folder: Path) -> Path:
    """The tiny model with a SentencePiece tokenizer.model beside its tokenizer (as Llama 2 or Mistral ship one)."""
    import io
    import shutil

    import sentencepiece

    from hf_train_mcp_demo.tiny import example_rows

    shutil.copytree(tiny_model, folder)
    corpus = [json.dumps(r) for m in ("sft", "dpo") for r in example_rows(m, 64)]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(corpus), model_writer=model, vocab_size=200,
                                             model_type="bpe", minloglevel=2)
    (folder / "tokenizer.model").write_bytes(model.getvalue())
    return folder


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_a_gguf_export_converts_with_llama_cpp_and_quantizes_to_q8_0(tiny_model: Path, tmp_path: Path,
                                                                        llama_cpp: Path, offline, monkeypatch) -> None:
    source = sentencepiece_tiny_model(tiny_model, tmp_path / "tiny-chat")
    monkeypatch.setenv("HFTM_LLAMA_CPP", str(llama_cpp))
    async with Client(build_server()) as client:
        exported = await call(client, "export_model", {"model": str(source), "format": "gguf", "quantization": "q8_0",
                                                       "backend": "local"})
        report = await finished(client, exported["job_id"])
    assert report["stage"] == "COMPLETED", report
    gguf_file = Path(exported["model_url"].removeprefix("file://")) / "gguf" / "tiny-chat-q8_0.gguf"
    assert gguf_file.exists(), report["log_tail"]
    assert (gguf_file.parent / "README.md").read_text().count("gguf") >= 1

    gguf, reader = read_gguf(llama_cpp, gguf_file)
    assert gguf_value(reader, "general.architecture") == "qwen2"
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert len(reader.tensors) == 26
