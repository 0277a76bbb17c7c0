"""Issue 20's audit of the rendered scripts: each test replays, on CPU, the branch a paid job would take (a GPU
flavor, bf16, two ranks, a planted converter) and checks what the script does there."""

import hashlib
import io
import json
import os
import runpy
import subprocess
import sys
import tarfile
import types
from pathlib import Path
from typing import Any

import pytest

from hf_train_mcp.errors import TrainError
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.estimate.jobs import export_memory_gb
from hf_train_mcp.estimate.sizing import ModelSize, model_size
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from tests.conftest import needs_training
from tests.helpers import free_port, load_rendered, torchrun_command

QWEN_SMALL = ModelSize(494_000_000, 24, 896, 151_936, 4864, "test", config_vocab=151_936)


def script_of(tmp_path: Path, text: str, name: str = "script.py") -> dict[str, Any]:
    """The rendered script's functions and CONFIG, without running main()."""
    path = tmp_path / name
    path.write_text(text)
    return runpy.run_path(str(path), run_name="hftm_script_under_test")


def local_plan(model: Path, data: Path, **fields: Any):
    request = TrainingRequest(model=str(model), dataset=str(data), backend="local", **fields)
    return plan_run(request, backend="local", size=model_size(str(model)), catalog=fallback_catalog(),
                    namespace=None, data=DataFacts())


def fake_cuda(monkeypatch, gpus: int, bf16: bool = True) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: bf16)


# --- 15: sizing a model whose config has no vocabulary --------------------------------------------------------
VIT = {"model_type": "vit", "architectures": ["ViTForImageClassification"], "hidden_size": 192,
       "num_hidden_layers": 12, "num_attention_heads": 3, "intermediate_size": 768, "image_size": 224,
       "patch_size": 16, "num_channels": 3, "dtype": "float32"}


def test_a_config_without_vocab_size_is_sized_and_a_shapeless_one_refused_clearly(tmp_path: Path) -> None:
    vit = tmp_path / "vit"
    vit.mkdir()
    (vit / "config.json").write_text(json.dumps(VIT))
    size = model_size(str(vit))
    assert (size.layers, size.hidden, size.vocab, size.config_vocab, size.model_type) == (12, 192, 0, None, "vit")
    assert 4e6 < size.params < 8e6 and size.weight_bytes == 4  # ViT-tiny: 5.7M parameters, saved in fp32
    shapeless = tmp_path / "shapeless"
    shapeless.mkdir()
    (shapeless / "config.json").write_text(json.dumps({"model_type": "mystery"}))
    with pytest.raises(ValueError, match="no hidden size or layer count"):
        model_size(str(shapeless))


def test_exporting_a_vision_model_is_refused_before_anything_runs(tmp_path: Path) -> None:
    from hf_train_mcp.planning.export import Subject, plan_export
    from hf_train_mcp.contract.requests import ExportRequest

    vit = tmp_path / "vit"
    vit.mkdir()
    (vit / "config.json").write_text(json.dumps(VIT))
    subject = Subject(ref=str(vit), kind="full", base_model=None, method=None)
    with pytest.raises(TrainError, match="without a vocabulary"):
        plan_export(ExportRequest(model=str(vit), backend="local"), subject, backend="local",
                    size=model_size(str(vit)), catalog=fallback_catalog(), namespace=None, warnings=[])


# --- 24: distillation between vocabularies TRL refuses --------------------------------------------------------
def distill_plan(teacher: ModelSize | None):
    request = TrainingRequest(model="Qwen/Qwen2.5-0.5B-Instruct", teacher_model="Qwen/Qwen2.5-7B-Instruct",
                              method="distill", dataset="org/prompts", hub_model_id="me/out")
    return plan_run(request, backend="hf", size=QWEN_SMALL, catalog=fallback_catalog(), namespace="me",
                    data=DataFacts(num_rows=100), teacher=teacher)


def test_a_distillation_teacher_with_another_vocab_size_is_refused_before_launch() -> None:
    """TRL's DistillationTrainer compares config.get_text_config().vocab_size (distillation_trainer.py) and raises
    only after both models downloaded: Qwen2.5-7B (152,064) cannot teach Qwen2.5-0.5B (151,936)."""
    seven_b = ModelSize(7_615_000_000, 28, 3584, 152_064, 18944, "hub config.json", config_vocab=152_064)
    with pytest.raises(TrainError, match=r"vocab_size 152,064.*151,936.*Nothing was launched"):
        distill_plan(seven_b)
    three_b = ModelSize(3_090_000_000, 36, 2048, 151_936, 11008, "hub config.json", config_vocab=151_936)
    assert distill_plan(three_b).config["teacher_model"] == "Qwen/Qwen2.5-7B-Instruct"
    guessed = ModelSize(7_000_000_000, 32, 4096, 128_000, 14336, "model name (shape guessed)")
    distill_plan(guessed)  # a guessed shape says nothing about the vocabulary: TRL decides


# --- 19: the GGUF converter: pinned, from a private folder, never a planted file --------------------------------
def gguf_export_script(tmp_path: Path, tiny_model: Path) -> dict[str, Any]:
    from hf_train_mcp.planning.export import Subject, plan_export
    from hf_train_mcp.contract.requests import ExportRequest

    subject = Subject(ref=str(tiny_model), kind="full", base_model=None, method=None)
    plan = plan_export(ExportRequest(model=str(tiny_model), backend="local", format="gguf", quantization="q8_0"),
                       subject, backend="local", size=model_size(str(tiny_model)), catalog=fallback_catalog(),
                       namespace=None, warnings=[])
    text = plan.render().text
    assert "/tmp/llama.cpp" not in text and "git clone" not in text and "llama_cpp_repo" in text
    return script_of(tmp_path, text, "export.py")


def fake_sdist(tmp_path: Path, root: str, marker: Path) -> Path:
    """An sdist whose vendored converter only writes its output file and a marker."""
    converter = (f"import sys, pathlib\npathlib.Path({str(marker)!r}).write_text('pinned')\n"
                 "pathlib.Path(sys.argv[sys.argv.index('--outfile') + 1]).write_text('gguf')\n").encode()
    archive = tmp_path / "sdist.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in ((f"{root}/convert_hf_to_gguf.py", converter), (f"{root}/gguf-py/gguf/__init__.py", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


def test_the_gguf_converter_is_pinned_and_a_planted_one_never_runs(tmp_path: Path, monkeypatch) -> None:
    from hf_train_mcp.planning.export import LLAMA_CPP_REPO

    assert "0.3.36" in LLAMA_CPP_REPO["version"] and len(LLAMA_CPP_REPO["sha256"]) == 64
    assert LLAMA_CPP_REPO["url"].startswith("https://files.pythonhosted.org/") and "HEAD" not in str(LLAMA_CPP_REPO)
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 32, "num_hidden_layers": 2,
                                                  "vocab_size": 400}))
    monkeypatch.delenv("HFTM_LLAMA_CPP", raising=False)
    script = gguf_export_script(tmp_path, tiny)
    assert script["CONFIG"]["llama_cpp_repo"] == LLAMA_CPP_REPO

    planted_marker = tmp_path / "planted-ran"
    planted = Path("/tmp/llama.cpp/convert_hf_to_gguf.py")
    created = not planted.exists()
    if created:  # the attack: any local user can create this folder before the export runs
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(f"import pathlib\npathlib.Path({str(planted_marker)!r}).write_text('planted')\n")
    try:
        pinned_marker = tmp_path / "pinned-ran"
        archive = fake_sdist(tmp_path, LLAMA_CPP_REPO["root"], pinned_marker)
        sha = hashlib.sha256(archive.read_bytes()).hexdigest()
        script["CONFIG"].update(llama_cpp_repo={**LLAMA_CPP_REPO, "url": archive.as_uri(), "sha256": sha},
                                file_stem="tiny", quantization="q8_0", total_steps=2)
        target = script["to_gguf"](str(tiny), str(tmp_path / "gguf"))
        assert Path(target).read_text() == "gguf" and pinned_marker.exists() and not planted_marker.exists()

        script["CONFIG"]["llama_cpp_repo"]["sha256"] = "0" * 64  # a changed file at the pinned address
        with pytest.raises(SystemExit, match="does not match its pinned sha256"):
            script["llama_cpp"]()
    finally:
        if created:
            planted.unlink()
            planted.parent.rmdir()


def test_the_converter_folder_is_private(tmp_path: Path, monkeypatch) -> None:
    from hf_train_mcp.planning.export import LLAMA_CPP_REPO

    monkeypatch.delenv("HFTM_LLAMA_CPP", raising=False)
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 32, "num_hidden_layers": 2,
                                                  "vocab_size": 400}))
    script = gguf_export_script(tmp_path, tiny)
    archive = fake_sdist(tmp_path, LLAMA_CPP_REPO["root"], tmp_path / "marker")
    script["CONFIG"]["llama_cpp_repo"] = {**LLAMA_CPP_REPO, "url": archive.as_uri(),
                                          "sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}
    root = Path(script["llama_cpp"]())
    assert (root / "convert_hf_to_gguf.py").is_file() and root.stat().st_mode & 0o077 == 0  # 0700: ours alone


# --- 22: a full fine-tune exports in its base's dtype, sized as loaded ------------------------------------------
@needs_training
def test_a_full_fine_tune_is_exported_in_its_base_dtype_and_sized_so(tiny_model: Path, tmp_path: Path,
                                                                    offline) -> None:
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from hf_train_mcp.planning.export import Subject, plan_export
    from hf_train_mcp.contract.requests import ExportRequest

    base = tmp_path / "base"  # the Hub base: saved in bf16, as most are
    AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.bfloat16).save_pretrained(base)
    tuned = tmp_path / "tuned"  # what a full fine-tune saves: its fp32 master weights
    AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).save_pretrained(tuned)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tuned / name).write_bytes((tiny_model / name).read_bytes())
    training = TrainingRequest(model=str(base), dataset=str(tmp_path / "d.jsonl"), backend="local", peft="full")
    subject = Subject(ref=str(tuned), kind="full", base_model=str(base), method="sft", training=training)
    assert subject.sized_by == str(base)
    size = model_size(subject.sized_by)
    assert size.dtype == "bfloat16" and export_memory_gb(size) < export_memory_gb(model_size(str(tuned)))
    plan = plan_export(ExportRequest(model=str(tuned), backend="local"), subject, backend="local", size=size,
                       catalog=fallback_catalog(), namespace=None, warnings=[])
    assert plan.config["dtype"] == "bfloat16"
    script = script_of(tmp_path, plan.render().text, "export.py")
    out = tmp_path / "merged"
    script["merged_model"](str(out))
    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        assert {weights.get_tensor(k).dtype for k in weights.keys()} == {torch.bfloat16}


# --- 21: lm-eval runs on the model as the job loaded it ------------------------------------------------------
@needs_training
@pytest.mark.parametrize(("gpus", "bf16", "dtype", "device_map", "device"), [
    (0, False, "float32", None, "cpu"),  # a local evaluation on a CPU machine
    (1, True, "bfloat16", None, "cuda"),  # l4x1: bf16, as planned
    (1, False, "float16", None, "cuda"),  # T4: no real bf16
    (2, True, "bfloat16", "auto", None),  # a 2-GPU flavor: spread over both, as sized
])
def test_benchmarks_evaluate_the_loaded_model_in_half_precision_across_the_gpus(
        gpus: int, bf16: bool, dtype: str, device_map: str | None, device: str | None, tiny_model: Path,
        tmp_path: Path, offline, monkeypatch) -> None:
    import torch
    import transformers

    from hf_train_mcp.contract.requests import EvaluateRequest
    from hf_train_mcp.service import Core

    prepared = Core().preview(EvaluateRequest(model=str(tiny_model), tasks=["hellaswag"], num_samples=5,
                                              backend="local", dry_run=True), kind="evaluate")
    script = script_of(tmp_path, prepared.script.text, "evaluate.py")
    seen: dict[str, Any] = {}
    harness = types.SimpleNamespace(HFLM=lambda **kw: seen.setdefault("hflm", kw) and "harness")
    fake = types.ModuleType("lm_eval")
    fake.simple_evaluate = lambda **kw: seen.setdefault("run", kw) and {"results": {"hellaswag": {"acc_norm,none": .5}}}
    monkeypatch.setitem(sys.modules, "lm_eval", fake)
    monkeypatch.setitem(sys.modules, "lm_eval.models", types.ModuleType("lm_eval.models"))
    monkeypatch.setitem(sys.modules, "lm_eval.models.huggingface", harness)
    fake_cuda(monkeypatch, gpus, bf16)
    real = transformers.AutoModelForCausalLM.from_pretrained.__func__

    def from_pretrained(cls, ref, **kwargs):
        seen["load"] = dict(kwargs)
        kwargs.pop("device_map", None)  # this machine has no GPU to map onto
        return real(cls, ref, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(from_pretrained))
    moves = []
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: moves.append(a) or self)

    model, tokenizer, _ = script["load_for_eval"](script["precision"]())
    assert script["benchmarks"](model, tokenizer) == {"hellaswag": 0.5}
    assert seen["hflm"]["pretrained"] is model and seen["hflm"]["tokenizer"] is tokenizer  # no second copy
    assert seen["run"]["model"] == "harness" and seen["run"]["limit"] == 5
    assert seen["load"]["dtype"] == getattr(torch, dtype) and seen["load"].get("device_map") == device_map
    assert moves == ([(device,)] if device else [])


def test_an_evaluation_on_several_gpus_stops_when_part_of_the_model_was_offloaded() -> None:
    text = (Path(__file__).resolve().parents[1] / "templates" / "evaluate.py.j2").read_text()
    assert "refuse_offload(model)" in text
    namespace: dict[str, Any] = {}
    source = text[text.index("def refuse_offload(model):"):text.index("def eval_rows():")]
    exec(compile(source, "evaluate.py", "exec"), namespace)  # the function alone: no Jinja in it
    namespace["refuse_offload"](types.SimpleNamespace(hf_device_map={"model.layers.0": 0, "lm_head": 1}))
    with pytest.raises(SystemExit, match="does not fit"):
        namespace["refuse_offload"](types.SimpleNamespace(hf_device_map={"model.layers.0": 0, "lm_head": "cpu"}))


# --- device_map: the model fits on the GPU or the job fails at load ---------------------------------------------
@needs_training
def test_on_a_gpu_the_model_and_teacher_are_placed_whole_on_the_ranks_gpu(tmp_path: Path, monkeypatch) -> None:
    """TRL's create_model_from_path defaults to device_map="auto" on a GPU (trl/trainer/utils.py), which offloads
    what does not fit to CPU or disk and trains on there, slowly, until the timeout."""
    fake_cuda(monkeypatch, 1)
    prec = {"dtype": "bfloat16"}
    for peft in ("lora", "full"):
        assert load_rendered(tmp_path, peft=peft)["model_init_kwargs"](prec)["device_map"] == {"": 0}
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert load_rendered(tmp_path)["own_gpu"]() == {"device_map": {"": 1}}
    distill = load_rendered(tmp_path, method="distill", teacher_model="Qwen/Qwen2-1.5B")
    source = Path(tmp_path / "train.py").read_text()
    assert '"float16" if prec["fp16"] else "float32", **own_gpu()}' in source and distill["own_gpu"]


# --- 25: GRPO and distillation prompts are cut to max_length ----------------------------------------------------
LONG = " ".join(f"word{i}" for i in range(300))


@needs_training
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize("method", ["grpo", "distill"])
def test_grpo_and_distillation_prompts_are_truncated_to_max_length(method: str, tiny_model: Path, tmp_path: Path,
                                                                    offline) -> None:
    from hf_train_mcp_demo.tiny import write_jsonl

    rows = [{"prompt": LONG + f" question {i}?", "answer": "1"} for i in range(4)]
    rows += [{"prompt": [{"role": "system", "content": "Answer briefly."},
                         {"role": "user", "content": LONG}, {"role": "assistant", "content": LONG},
                         {"role": "user", "content": LONG + " last?"}], "answer": "1"} for _ in range(4)]
    data = write_jsonl(tmp_path / "prompts.jsonl", rows[:4])
    extra = {"teacher_model": str(tiny_model)} if method == "distill" else {"num_generations": 2,
                                                                          "reward_funcs": ["length"]}
    plan = local_plan(tiny_model, data, method=method, max_length=32, max_steps=1, max_completion_length=8,
                      per_device_batch_size=2, **extra)
    script = script_of(tmp_path, plan.render().text, "train.py")
    script["CONFIG"].update(trackio=False, output_dir=str(tmp_path / "out"))
    tokenizer = script["load_tokenizer"]()
    from datasets import Dataset

    for chunk in (rows[:4], rows[4:]):
        train = Dataset.from_list([{"prompt": r["prompt"]} for r in chunk])
        trainer = script["new_trainer"](script["precision"](), tokenizer, train, None)
        for prompt in trainer.train_dataset["prompt"]:
            text = prompt if isinstance(prompt, str) else tokenizer.apply_chat_template(
                prompt, tokenize=False, add_generation_prompt=True)
            assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= 32
            last = prompt if isinstance(prompt, str) else prompt[-1]["content"]
            assert last.endswith("?")  # the end of the prompt, where the question is, survives
            if not isinstance(prompt, str):
                assert prompt[0] == {"role": "system", "content": "Answer briefly."} and prompt[1]["role"] == "user"


# --- 26: a reward model's new head trains in fp32 under bf16 ---------------------------------------------------
@pytest.mark.training
@needs_training
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_reward_lora_under_bf16_trains_its_score_head_in_fp32(tiny_model: Path, tmp_path: Path, offline,
                                                              monkeypatch) -> None:
    import torch

    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "pairs.jsonl", example_rows("dpo", 16))
    plan = local_plan(tiny_model, data, method="reward", peft="lora", max_steps=3, per_device_batch_size=4,
                      learning_rate=1e-4)
    script = script_of(tmp_path, plan.render().text, "train.py")
    script["CONFIG"].update(trackio=False, output_dir=str(tmp_path / "out"), save_steps=100)
    monkeypatch.setenv("HFTM_PRECISION", "bf16")  # the branch of an L4/A10G/A100/H200 job
    prec = script["precision"]()
    assert prec["bf16"] and prec["dtype"] == "bfloat16"
    train, _ = script["load_training_data"]()
    trainer = script["new_trainer"](prec, script["load_tokenizer"](), train, None)
    score = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad and "score" in n}
    assert score and {p.dtype for p in score.values()} == {torch.float32}
    assert {p.dtype for p in trainer.model.parameters() if p.requires_grad} == {torch.float32}
    before = {n: p.detach().clone() for n, p in score.items()}
    trainer.train()
    unchanged = sum(int((p.detach() == before[n]).sum()) for n, p in score.items())
    assert unchanged == 0, f"{unchanged} of the score head's weights did not move in 3 steps"


# --- reward_code imports reach the job's environment -------------------------------------------------------------
def test_packages_reward_code_imports_are_added_to_the_header() -> None:
    from hf_train_mcp.methods.grpo import reward_code_dependencies

    code = ("import re\nimport sympy\nfrom math_verify import parse, verify\nimport numpy as np\n"
            "import sklearn.metrics\nfrom . import nothing\n\n\ndef reward(completions, **kwargs):\n"
            "    return [0.0 for _ in completions]\n")
    assert reward_code_dependencies(code) == ["sympy", "math-verify", "scikit-learn"]
    request = TrainingRequest(model="Qwen/Qwen2-0.5B", dataset="org/data", hub_model_id="me/out", method="grpo",
                              reward_code=code.replace("from . import nothing\n", ""))
    plan = plan_run(request, backend="hf", size=QWEN_SMALL, catalog=fallback_catalog(), namespace="me",
                    data=DataFacts(num_rows=100))
    header = plan.render().text.split("# ///", 2)[1]
    assert '#     "sympy",' in header and '#     "math-verify",' in header and '"re"' not in header


def test_gemma_on_a_t4_gets_a_specific_warning() -> None:
    gemma = ModelSize(8_540_000_000, 28, 3072, 256_000, 24576, "hub config.json", config_vocab=256_000,
                      model_type="gemma")
    request = TrainingRequest(model="google/gemma-7b", dataset="org/data", hub_model_id="me/out", peft="qlora",
                              flavor="t4-small")
    plan = plan_run(request, backend="hf", size=gemma, catalog=fallback_catalog(), namespace="me",
                    data=DataFacts(num_rows=100))
    assert any("Gemma models overflow fp16" in w for w in plan.warnings)


# --- 23: two ranks end in order and exit ------------------------------------------------------------------------
INSTRUMENT = '''
import os, runpy, sys, weakref
import torch.distributed as dist
import transformers

rank = os.environ["RANK"]
real_destroy = dist.destroy_process_group


def audit(event):
    # one file per rank, one write per line: the two ranks' stdout interleave byte by byte under torchrun
    fd = os.open(f"audit-{rank}.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, f"{event}\\n".encode())
    os.close(fd)


def destroy(*args, **kwargs):
    audit("destroy")
    return real_destroy(*args, **kwargs)


dist.destroy_process_group = destroy
real_init = transformers.Trainer.__init__


def init(self, *args, **kwargs):
    real_init(self, *args, **kwargs)
    weakref.finalize(self, audit, "freed")


transformers.Trainer.__init__ = init
sys.argv = ["train.py"]
runpy.run_path("train.py", run_name="__main__")
audit("returned")
'''


@needs_training
@pytest.mark.training
@pytest.mark.parametrize("method", ["grpo", "distill"])
def test_two_ranks_free_the_trainer_before_the_process_group_and_exit(method: str, tiny_model: Path,
                                                                      tmp_path: Path, offline) -> None:
    """gloo on CPU, 2 processes: the trainer (and its DDP hooks) is freed while the group exists, the group is
    destroyed once, and each rank exits at once after DONE (left to the interpreter, one in three hung)."""
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "prompts.jsonl", example_rows("grpo", 16))
    extra = {"teacher_model": str(tiny_model)} if method == "distill" else {"num_generations": 2,
                                                                          "reward_funcs": ["length"]}
    plan = local_plan(tiny_model, data, method=method, max_steps=1, max_completion_length=8,
                      per_device_batch_size=2, gradient_accumulation=1, save_steps=100, **extra)
    (tmp_path / "train.py").write_text(plan.render().text)
    (tmp_path / "instrument.py").write_text(INSTRUMENT)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRACKIO_DIR": str(tmp_path / "trackio"), "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    proc = subprocess.run(torchrun_command("--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                                           str(free_port()), script="instrument.py"), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=420)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "HFTM_DONE" in proc.stdout
    for rank in ("0", "1"):
        audit = tmp_path / f"audit-{rank}.txt"
        events = audit.read_text().split() if audit.exists() else []
        # the trainer freed before the group is destroyed (once), and no "returned": the rank exited at once
        assert events.count("destroy") == 1 and events[-2:] == ["freed", "destroy"], (rank, events, out[-3000:])
