"""engine='unsloth': its scripts render and compile with `import unsloth` before transformers/PEFT/TRL, pass
Unsloth's loaders only keywords its 2026.10.9 signatures name, load in 4-bit only for QLoRA and through
FastVisionModel for a vision-language model, run on CPU against a stand-in `unsloth` that checks every call;
its estimate needs less memory and time than TRL's for the same LoRA/QLoRA run; what it cannot do is refused
before anything launches.

No test here imports the real Unsloth (it needs a CUDA GPU); benchmarks/gpu.py --engines trl,unsloth runs it."""

import ast
import dataclasses
import importlib.util
import json
import os
import runpy
import sys
import tomllib
from pathlib import Path

import pytest
from mcp import Client
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from hf_train_mcp import engines
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.estimate.memory import memory_need
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp_demo.tiny import example_rows, write_jsonl
from tests.conftest import needs_training
from tests.emulator import HARDWARE, Emulator, ViewerDataset
from tests.helpers import CHAT_BASE, RENDER_SIZE, call, refused, run_script

pytestmark = pytest.mark.anyio

# The named parameters of Unsloth's loaders, read from the unsloth 2026.10.9 wheel (PyPI) with ast: each entry
# names its file and class.function (FastLanguageModel.get_peft_model is functools.wraps of FastLlamaModel's;
# FastVisionModel is FastModel, whose get_peft_model calls FastBaseModel's). Each also takes **kwargs, which
# reach transformers' from_pretrained or PEFT's LoraConfig: a keyword outside these sets is a bug in the template.
RECORDED = json.loads((Path(__file__).parent / "data" / "unsloth_signatures.json").read_text())
SIGNATURES = {name: frozenset(entry["params"]) for name, entry in RECORDED["signatures"].items()}
LOADERS = {  # the class the template calls -> the signature its call lands on
    "FastLanguageModel": ("FastLanguageModel.from_pretrained", "FastLlamaModel.get_peft_model"),
    "FastVisionModel": ("FastModel.from_pretrained", "FastBaseModel.get_peft_model"),
}
# unsloth 2026.10.9's METADATA Requires-Dist (unsloth_zoo 2026.10.9 repeats trl, transformers, datasets, peft)
UNSLOTH_REQUIRES = {
    "trl": "!=0.19.0,<=1.15.0,>=0.18.2",
    "transformers": "!=4.53.0,!=4.54.0,!=4.55.0,!=4.55.1,!=4.57.0,!=4.57.4,!=4.57.5,!=5.0.0,!=5.1.0,<=5.17.0,>=4.52.4",
    "datasets": "!=4.0.*,!=4.1.0,!=4.4.*,!=4.5.0,<5.0.0,>=3.4.1",
    "peft": "!=0.11.0,>=0.18.0",
    "torch": "<2.15.0,>=2.4.0",
}
PATCHED = ("transformers", "peft", "trl")  # what `import unsloth` patches as they load: imported after it
SINGLE = "a10g-large"
VLM_SIZE = dataclasses.replace(RENDER_SIZE, image_tokens=256)

# --- rendered scripts -----------------------------------------------------------------------------------------------


def planned(method: str = "sft", peft: str = "lora", vision: bool = False, **extra) -> str:
    """The script an HF job on one A10G would get (a Qwen2-0.5B, or a VLM of its size reading images)."""
    request = TrainingRequest(model="Qwen/Qwen2-VL-2B-Instruct" if vision else "Qwen/Qwen2-0.5B", dataset="org/data",
                              hub_model_id="me/out", method=method, peft=peft, engine="unsloth", flavor=SINGLE,
                              **extra)
    plan = plan_run(request, backend="hf", size=VLM_SIZE if vision else RENDER_SIZE, catalog=fallback_catalog(),
                    namespace="me", data=DataFacts(num_rows=1000, vision=vision, images_per_row=1 if vision else 0))
    return plan.render().text


def first_imports(text: str) -> dict[str, int]:
    """The first line importing each top-level package, anywhere in the script (function bodies too)."""
    lines: dict[str, int] = {}
    for node in ast.walk(ast.parse(text)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        for name in names:
            top = name.split(".")[0]
            lines[top] = min(lines.get(top, node.lineno), node.lineno)
    return lines


def header_pins(text: str) -> dict[str, str]:
    block = text.split("# /// script\n", 1)[1].split("# ///", 1)[0]
    deps = tomllib.loads("\n".join(line[2:] for line in block.splitlines()))["dependencies"]
    return {Requirement(dep).name.lower(): dep for dep in deps}


def within(pin: str, bounds: str, versions: list[str]) -> bool:
    """Every candidate version the pin admits, Unsloth's bounds admit too (and the pin admits one)."""
    ours = Requirement(pin).specifier
    admitted = [v for v in map(Version, versions) if v in ours]
    return bool(admitted) and all(v in SpecifierSet(bounds) for v in admitted)


def candidates(major_range: range, minors: int, patches: int = 6) -> list[str]:
    return [f"{a}.{b}.{c}" for a in major_range for b in range(minors) for c in range(patches)]


RUNS = [("sft", "lora", False), ("sft", "qlora", False), ("grpo", "lora", False), ("sft", "lora", True)]


@pytest.mark.parametrize(("method", "peft", "vision"), RUNS)
def test_the_script_compiles_imports_unsloth_first_and_pins_within_its_bounds(method: str, peft: str,
                                                                              vision: bool) -> None:
    text = planned(method, peft, vision)
    compile(text, "train.py", "exec")
    lines = first_imports(text)
    assert all(lines["unsloth"] < lines[m] for m in PATCHED), {m: lines[m] for m in ("unsloth", *PATCHED)}
    pins = header_pins(text)
    assert all(pins[package] == pin for package, pin in engines.get("unsloth").pins.items())
    grid = {"trl": candidates(range(0, 2), 30), "transformers": candidates(range(4, 6), 60),
            "datasets": candidates(range(3, 5), 12), "peft": candidates(range(0, 1), 30),
            "torch": candidates(range(2, 3), 20)}
    for package, bounds in UNSLOTH_REQUIRES.items():
        assert within(pins[package], bounds, grid[package]), (pins[package], bounds)
    assert '"Unsloth + TRL' in text


# --- the calls into Unsloth, read from the script -------------------------------------------------------------------


def unsloth_calls(text: str) -> dict[str, set[str]]:
    """The keywords unsloth_model() passes to `loader.from_pretrained` and `loader.get_peft_model`; a `**name`
    is resolved to the keys of the dict(...) it was assigned (the vision towers); any other ** fails."""
    tree = ast.parse(text)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "unsloth_model")
    dicts = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            made = [c for c in ast.walk(node.value) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "dict"]
            dicts[node.targets[0].id] = {k.arg for c in made for k in c.keywords}
    calls: dict[str, set[str]] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("from_pretrained", "get_peft_model"):
            words = set()
            for keyword in node.keywords:
                if keyword.arg is None:
                    assert isinstance(keyword.value, ast.Name) and keyword.value.id in dicts, ast.unparse(keyword)
                    words |= dicts[keyword.value.id]
                else:
                    words.add(keyword.arg)
            calls[node.func.attr] = words
    assert set(calls) == {"from_pretrained", "get_peft_model"}, calls
    return calls


@pytest.mark.parametrize("vision", [False, True])
def test_every_keyword_the_script_passes_unsloth_is_in_its_recorded_signature(vision: bool) -> None:
    """The template names no keyword Unsloth 2026.10.9 lacks (a typo would reach **kwargs and fail on the GPU)."""
    calls = unsloth_calls(planned(vision=vision))
    for loader, (load, peft) in LOADERS.items():
        assert calls["from_pretrained"] <= SIGNATURES[load], (loader, calls["from_pretrained"] - SIGNATURES[load])
    language, vision_ = LOADERS["FastLanguageModel"][1], LOADERS["FastVisionModel"][1]
    towers = {"finetune_vision_layers", "finetune_language_layers", "finetune_attention_modules",
              "finetune_mlp_modules"}
    words = calls["get_peft_model"]
    assert words - towers <= SIGNATURES[language], words - towers - SIGNATURES[language]
    assert words <= SIGNATURES[vision_], words - SIGNATURES[vision_]
    assert towers <= words  # the vision encoder is frozen by name, not by default


@pytest.mark.skipif(importlib.util.find_spec("unsloth") is None, reason="unsloth is not installed here")
def test_the_recorded_signatures_match_the_installed_unsloth() -> None:
    """Where Unsloth is installed (a GPU machine), its source still has the recorded parameters (read, not
    imported: importing it needs a GPU)."""
    root = Path(importlib.util.find_spec("unsloth").origin).parents[1]
    for name, entry in RECORDED["signatures"].items():
        cls, function = name.split(".")
        tree = ast.parse((root / entry["file"]).read_text())
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
        args = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == function).args
        assert [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs] == entry["params"], name


# --- the Unsloth path, run on CPU against a stand-in ----------------------------------------------------------------
# What `import unsloth` gives the script, minus the kernels: each call is checked against SIGNATURES, recorded
# in CALLS and printed; the model is a real transformers model with a real PEFT adapter (unquantized: 4-bit
# needs CUDA, the flag is what is checked). With HFTM_FAKE_UNSLOTH_FIRST=1 (a fresh process) it also fails if
# transformers, PEFT or TRL were imported before it, as the real one would warn and patch too late.
FAKE_UNSLOTH = '''
import os, sys

SIGNATURES = {signatures!r}
CALLS = []
if os.environ.get("HFTM_FAKE_UNSLOTH_FIRST") == "1":
    early = sorted(m for m in ("transformers", "peft", "trl") if m in sys.modules)
    if early:
        raise ImportError(f"unsloth was imported after {{early}}")


def _checked(name, kwargs):
    unknown = sorted(set(kwargs) - set(SIGNATURES[name]))
    if unknown:
        raise TypeError(f"{{name}}() got unexpected keyword arguments {{unknown}}")
    CALLS.append((name, kwargs))
    print("FAKE_UNSLOTH", name, sorted(kwargs), flush=True)


class FastLanguageModel:
    LOAD, PEFT = "FastLanguageModel.from_pretrained", "FastLlamaModel.get_peft_model"

    @classmethod
    def from_pretrained(cls, **kwargs):
        _checked(cls.LOAD, kwargs)
        import transformers

        auto = transformers.AutoModelForImageTextToText if cls is FastVisionModel else transformers.AutoModelForCausalLM
        model = auto.from_pretrained(kwargs["model_name"], dtype=kwargs["dtype"])
        return model, transformers.AutoTokenizer.from_pretrained(kwargs["model_name"])

    @classmethod
    def get_peft_model(cls, model, **kwargs):
        _checked(cls.PEFT, kwargs)
        from peft import LoraConfig, get_peft_model

        if kwargs["use_gradient_checkpointing"]:
            model.gradient_checkpointing_enable()
            model.enable_input_require_grads()
        config = LoraConfig(r=kwargs["r"], lora_alpha=kwargs["lora_alpha"], lora_dropout=kwargs["lora_dropout"],
                            target_modules=kwargs["target_modules"], bias=kwargs["bias"], task_type="CAUSAL_LM")
        return get_peft_model(model, config)


class FastVisionModel(FastLanguageModel):
    LOAD, PEFT = "FastModel.from_pretrained", "FastBaseModel.get_peft_model"
'''


@pytest.fixture
def fake_unsloth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The stand-in `unsloth` on sys.path (its folder, for a subprocess's PYTHONPATH); gone after the test."""
    folder = tmp_path / "fake-unsloth"
    folder.mkdir()
    (folder / "unsloth.py").write_text(FAKE_UNSLOTH.format(signatures={k: sorted(v) for k, v in SIGNATURES.items()}))
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop("unsloth", None)
    yield folder
    sys.modules.pop("unsloth", None)


def loaded(tmp_path: Path, text: str, model: Path) -> dict:
    """The script's functions, its CONFIG pointed at a model on disk, without running main()."""
    path = tmp_path / "train.py"
    path.write_text(text)
    script = runpy.run_path(str(path), run_name="hftm_script_under_test")
    script["CONFIG"]["model"] = str(model)
    return script


@needs_training
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")  # transformers 5 / PEFT chatter
@pytest.mark.parametrize(("peft", "vision"), [("lora", False), ("qlora", False), ("lora", True)])
def test_trainer_model_goes_through_unsloths_loader_with_the_runs_settings(peft: str, vision: bool, tiny_model: Path,
                                                                          tmp_path: Path, fake_unsloth: Path) -> None:
    import torch
    from peft import PeftModel

    from hf_train_mcp_demo.tiny import build_tiny_vlm

    model = build_tiny_vlm(tmp_path / "vlm", tiny_model) if vision else tiny_model
    script = loaded(tmp_path, planned(peft=peft, vision=vision), model)
    prec = {"compute_dtype": torch.float32, "gradient_checkpointing": True}
    given = script["trainer_model"](prec, "CAUSAL_LM")
    assert set(given) == {"model"} and isinstance(given["model"], PeftModel)  # no quantization or PEFT config for TRL
    trainable = {n for n, p in given["model"].named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert not vision or all("language_model" in n for n in trainable)  # the vision tower stays frozen
    (load, load_kwargs), (lora, lora_kwargs) = sys.modules["unsloth"].CALLS
    assert (load, lora) == LOADERS["FastVisionModel" if vision else "FastLanguageModel"]
    assert load_kwargs["load_in_4bit"] is (peft == "qlora") and load_kwargs["load_in_16bit"] is (peft != "qlora")
    assert load_kwargs["use_exact_model_name"] is True and load_kwargs["model_name"] == str(model)
    lora_config = script["CONFIG"]["lora"]
    assert (lora_kwargs["r"], lora_kwargs["lora_alpha"]) == (lora_config["r"], lora_config["alpha"])
    assert lora_kwargs["use_gradient_checkpointing"] == "unsloth"


@needs_training
@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
def test_unsloths_vision_loader_adapts_the_text_tower_of_a_smolvlm_layout(tiny_model: Path, tmp_path: Path,
                                                                        fake_unsloth: Path) -> None:
    """Idefics3/SmolVLM keep their language model at model.text_model. Unsloth 2026.10.9's FastBaseModel.
    get_peft_model hands a string target to PEFT as it is (only a list goes through its get_peft_regex, whose
    finetune_* flags then scope it), so the rendered regex alone decides: it must match `text_model` too."""
    import torch

    from tests.tiny_vlms import save_idefics3

    model = save_idefics3(tmp_path / "idefics3", tiny_model)
    script = loaded(tmp_path, planned(vision=True), model)
    given = script["trainer_model"]({"compute_dtype": torch.float32, "gradient_checkpointing": False}, "CAUSAL_LM")
    trainable = {n for n, p in given["model"].named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and ".text_model." in n for n in trainable)
    assert isinstance(sys.modules["unsloth"].CALLS[1][1]["target_modules"], str)


@needs_training
@pytest.mark.training
def test_the_unsloth_script_trains_on_cpu_against_the_stand_in(tiny_model: Path, tmp_path: Path, fake_unsloth: Path,
                                                               offline) -> None:
    """The whole script, Unsloth's branch forced on CPU: a local TRL plan rendered with engine='unsloth' in its
    CONFIG (the planner itself refuses Unsloth without CUDA, rightly), run in a fresh process."""
    data = write_jsonl(tmp_path / "data.jsonl", example_rows("sft", 16))
    request = TrainingRequest(model=str(tiny_model), dataset=str(data), backend="local", max_steps=2,
                              per_device_batch_size=2, gradient_accumulation=1, max_length=64)
    plan = plan_run(request, backend="local", size=RENDER_SIZE, catalog=fallback_catalog(), namespace=None,
                    data=DataFacts())
    text = dataclasses.replace(plan, config={**plan.config, "engine": "unsloth"}).render().text
    assert "import unsloth" in text
    proc = run_script(tmp_path, text, HFTM_FAKE_UNSLOTH_FIRST="1",
                      PYTHONPATH=os.pathsep.join([str(fake_unsloth), os.environ.get("PYTHONPATH", "")]))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert all(f"FAKE_UNSLOTH {name}" in out for name in LOADERS["FastLanguageModel"]), out[-2000:]
    assert "HFTM_DONE" in out and "HFTM_LOG" in out, out[-2000:]  # trained its steps and finished


# --- the estimate ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("peft", ["qlora", "lora"])
async def test_unsloth_is_estimated_below_trls_memory_and_time_for_the_same_run(peft: str, hub: Emulator) -> None:
    run = {"model": "meta-llama/Llama-3.1-8B", "peft": peft, "num_examples": 2000, "tokens_per_example": 900,
           "max_length": 1024, "flavor": "a100-large"}
    async with Client(build_server()) as client:
        trl = await call(client, "estimate_cost", run)
        unsloth = await call(client, "estimate_cost", {**run, "engine": "unsloth"})
    assert unsloth["flavor"] == trl["flavor"] == "a100-large" and unsloth["steps"] == trl["steps"]
    assert unsloth["memory_gb_needed"] < trl["memory_gb_needed"]
    assert unsloth["hours"] < trl["hours"] and unsloth["cost_usd"] <= trl["cost_usd"]
    assert "engine" in unsloth["assumptions"] and "engine" not in trl["assumptions"]


def test_short_sequences_keep_their_checkpoints_on_the_gpu() -> None:
    """Below a max_seq_length of 512 Unsloth checkpoints the standard way (nothing offloaded): only its chunked
    loss still saves memory there, so the gap to TRL is smaller than for long sequences."""
    size = ModelSize(params=8_000_000_000, layers=32, hidden=4096, intermediate=14336, vocab=128_256, source="test")

    def need(engine: str, seq_len: int) -> float:
        return memory_need(size, method="sft", peft="qlora", batch=4, seq_len=seq_len, engine=engine).activations_gb
    short_gap = need("trl", 384) - need("unsloth", 384)
    long_gap = need("trl", 1024) - need("unsloth", 1024)
    assert 0 < short_gap and short_gap / need("trl", 384) < long_gap / need("trl", 1024)


MULTI_GPU = {name for name, _, gpus, _, _ in HARDWARE if gpus > 1}


async def test_the_flavor_chosen_for_unsloth_is_never_a_multi_gpu_one(hub: Emulator) -> None:
    """TRL's ranking holds the multi-GPU flavors (an 8B LoRA fits across A10Gs or L4s); Unsloth's, for the same
    run and its variants, holds none: neither as the choice, an alternative nor the fastest."""
    run = {"model": "meta-llama/Llama-3.1-8B", "peft": "lora", "num_examples": 20_000, "tokens_per_example": 900}
    async with Client(build_server()) as client:
        for extra in ({}, {"peft": "qlora"}, {"max_length": 4096}):
            estimate = await call(client, "estimate_cost", {**run, **extra, "engine": "unsloth"})
            offered = {estimate["flavor"], *(a["flavor"] for a in estimate["alternatives"])}
            assert not offered & MULTI_GPU, offered
            if estimate["fastest"]:
                assert estimate["fastest"]["flavor"] not in MULTI_GPU
        trl = await call(client, "estimate_cost", run)
    assert {a["flavor"] for a in trl["alternatives"]} & MULTI_GPU  # TRL's ranking does hold them


# --- refusals: nothing launched, the fix named ----------------------------------------------------------------------


@pytest.fixture
def prompts(chat: Emulator) -> Emulator:
    chat.datasets["org/prompts"] = ViewerDataset({"default": {"train": example_rows("grpo", 16)}})
    chat.datasets["org/prefs"] = ViewerDataset({"default": {"train": example_rows("dpo", 16)}})
    return chat


async def test_dry_runs_through_the_tools_render_unsloths_scripts(prompts: Emulator) -> None:
    async with Client(build_server()) as client:
        for extra in ({}, {"peft": "qlora"}, {"method": "grpo", "dataset": "org/prompts"}):
            dry = await call(client, "submit_training", {**CHAT_BASE, "engine": "unsloth", "flavor": SINGLE,
                                                         "dry_run": True, **extra})
            compile(dry["script"], "train.py", "exec")
            assert "FastLanguageModel" in dry["script"] and dry["flavor"] == SINGLE
            lines = first_imports(dry["script"])
            assert all(lines["unsloth"] < lines[m] for m in PATCHED), lines
        chosen = await call(client, "submit_training", {**CHAT_BASE, "engine": "unsloth", "dry_run": True})
    assert chosen["flavor"] not in MULTI_GPU


REFUSED = [
    ({"method": "dpo", "dataset": "org/prefs"}, ["method 'sft' and 'grpo'", "engine='trl'", "method='dpo'"]),
    ({"method": "kto", "dataset": "org/prefs"}, ["engine='trl'", "method='kto'"]),
    ({"peft": "full"}, ["peft='lora'/'qlora'", "engine='trl' for a full fine-tune"]),
    ({"flavor": "a100x8"}, ["runs on one GPU", "'a100x8' has 8", "one-GPU flavor", "engine='trl'"]),
    ({"flavor": "l4x4"}, ["'l4x4' has 4", "one-GPU flavor"]),
    ({"flavor": "cpu-basic"}, ["needs a CUDA GPU", "cpu-basic has none", "engine='trl'"]),
    ({"backend": "local"}, ["needs a CUDA GPU", "engine='trl'", "a GPU flavor on backend='hf'"]),
    ({"nodes": 2, "flavor": "a100x8"}, ["one GPU", "drop nodes", "engine='trl'"]),
]


@pytest.mark.parametrize(("extra", "says"), REFUSED)
async def test_what_unsloth_cannot_do_is_refused_before_anything_launches(extra: dict, says: list[str],
                                                                          prompts: Emulator, monkeypatch) -> None:
    from hf_train_mcp.planning import planner as submission

    monkeypatch.setattr(submission, "has_cuda", lambda: False)  # this machine's GPU, as the local backend sees it
    before = len(prompts.posted_jobs())
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**CHAT_BASE, "engine": "unsloth", **extra})
        if "backend" not in extra and extra.get("flavor") != "cpu-basic":  # estimate_cost refuses the same run
            estimate = {k: v for k, v in {**CHAT_BASE, **extra}.items() if k not in ("hub_model_id", "max_steps")}
            assert says[0] in await refused(client, "estimate_cost", {**estimate, "engine": "unsloth"})
    assert all(s in text for s in says), text
    assert len(prompts.posted_jobs()) == before


# --- benchmarks/gpu.py: Unsloth vs TRL where a GPU is at hand -------------------------------------------------------


def test_the_gpu_benchmark_compares_unsloth_with_trl_and_skips_it_without_cuda(capsys) -> None:
    path = Path(__file__).parents[1] / "benchmarks" / "gpu.py"
    spec = importlib.util.spec_from_file_location("gpu_bench_unsloth", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench._engines(["trl", "unsloth"], gpu=False) == ["trl"]
    assert "Unsloth needs a CUDA GPU" in capsys.readouterr().out
    same = {"tokens_per_s": 1000.0, "peak_gb": 20.0}
    bench.compare_engines({"sft/qlora": same, "sft/qlora [unsloth]": {"tokens_per_s": 1800.0, "peak_gb": 9.0},
                           "sft/lora": same})
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].split() == ["sft/qlora", "1.80", "0.45"] and not any(line.startswith("sft/lora") for line in lines)
