"""The GPU replay matrix over the zoo: every family x PEFT on real-shaped tiny models (tests/zoo_models.py: each zoo
folder's real config.json at tiny sizes, its class and module names), planned as the server plans it (the size
read from the model's folder, the chat template the server asks for where the model has none), its script loaded
without main() and its trainer built the way a GPU job builds it (tests/replay.py): bf16 or fp16 autocast with
activation checkpointing on (off for the model types of family.NO_ACTIVATION_CHECKPOINTING), QLoRA in real 4-bit on
bitsandbytes' CPU backend; one optimizer step. Multi-GPU flavors run on 2 gloo ranks (torchrun), and a multi-node
full fine-tune loads its model as FSDP's ranks do.

After the step: the loss finite, every trainable weight in fp32, the adapters moved (LoRA), the head trained whole
(classifiers), 4-bit layers under QLoRA. A combination the tools refuse is planned too, and its refusal must say
why and what to send instead. And first of all, each tiny model is the real one's shape: the same class, the
same module names (indices collapsed), the same config layout."""

import json
import math
import re
from pathlib import Path

import pytest

from hf_train_mcp.errors import TrainError
from hf_train_mcp.models.family import NO_ACTIVATION_CHECKPOINTING
from hf_train_mcp.models.refusals import FUSED_EXPERT_LORA
from hf_train_mcp_demo.tiny import example_rows, format_rows, write_images, write_jsonl
from tests.conftest import needs_training
from tests.hub_configs import CONFIGS
from tests.replay import checkpointing_on, gpu_trainer, planned_script, two_ranks
from tests.zoo_models import FOLDERS, UNBUILT, built, model_class, named_ids, zoo_model

pytestmark = [needs_training, pytest.mark.replay, pytest.mark.training,
              # PEFT reads transformers 5's renamed checkpointing flag; bitsandbytes' CPU path warns of its speed
              pytest.mark.filterwarnings("ignore::FutureWarning"), pytest.mark.filterwarnings("ignore::UserWarning"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Importing from 'sentence_transformers:DeprecationWarning")]


@pytest.fixture(scope="session")
def zoo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's tiny models are built: the folder the xdist workers share (each worker's own temp
    folder sits in it), so that each model is built once."""
    import os

    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "zoo-tiny"


# --- the tiny models are the real ones' shape --------------------------------------------------------------------
def _collapsed(model) -> set[str]:
    return {re.sub(r"\.\d+(?=\.|$)", ".N", name) for name, _ in model.named_modules()}


def _meta(folder: Path, name: str):
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    if hasattr(config, "quantization_config"):  # the layout, not the stored format, decides the names
        del config.quantization_config
    with torch.device("meta"):
        return built(model_class(name, config), config)


def _layout(config: dict, top: bool = True) -> dict:
    """Which keys hold sub-configs, at every depth, and which text fields sit at the top (a flat config has them)."""
    return {k: _layout(v, False) if isinstance(v, dict) else None for k, v in config.items()
            if isinstance(v, dict) or top and k in ("hidden_size", "num_hidden_layers", "vocab_size")}


@pytest.mark.parametrize("name", [f for f in FOLDERS if f not in UNBUILT])
def test_each_tiny_model_is_the_real_ones_shape(name: str, zoo_root: Path, offline) -> None:
    """Same class as a job loads from the real config, same module names with layer and expert indices
    collapsed (the real model built on the meta device), same config layout (flat stays flat); and the folder
    loads offline: weights, tokenizer (its ids the config's), processor files."""
    import transformers

    folder = zoo_model(name, zoo_root)
    real, tiny = _meta(CONFIGS / name, name), _meta(folder, name)
    assert type(tiny) is type(real)
    assert _collapsed(tiny) == _collapsed(real), sorted(_collapsed(tiny) ^ _collapsed(real))[:8]
    real_json = json.loads((CONFIGS / name / "config.json").read_text())
    tiny_json = json.loads((folder / "config.json").read_text())
    assert _layout(tiny_json) == _layout(real_json) and set(tiny_json) == set(real_json)
    config = transformers.AutoConfig.from_pretrained(folder)
    loaded = model_class(name, config).from_pretrained(folder, device_map={"": "cpu"})
    assert type(loaded) is type(real)
    if (folder / "tokenizer_config.json").is_file():  # every token id the config names is the tokenizer's
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        for token_id in named_ids(tiny_json):
            assert tokenizer.convert_ids_to_tokens(token_id) is not None, token_id
        rows = config.get_text_config().vocab_size + (8 if config.model_type == "mllama" else 0)  # its embedding
        assert max(tokenizer.get_vocab().values()) < rows, (len(tokenizer), rows)


# --- the matrix ------------------------------------------------------------------------------------------------
def _rows(tmp_path: Path, rows: str) -> tuple[Path, bool]:
    """The dataset of a row kind, written under tmp_path: (its path, whether it holds images for a VLM)."""
    if rows == "chat":
        return write_jsonl(tmp_path / "chat.jsonl", example_rows("sft", 16)), False
    if rows == "images":  # conversations about a picture
        data = format_rows("vision_messages", 8)
        write_images(tmp_path, data)
        return write_jsonl(tmp_path / "vqa.jsonl", data), True
    if rows == "labels":
        return write_jsonl(tmp_path / "reviews.jsonl", example_rows("text-classification", 16)), False
    if rows == "pictures":
        write_images(tmp_path / "data", example_rows("image-classification", 16))
        return tmp_path / "data" / "images", False
    return write_jsonl(tmp_path / "triplets.jsonl", example_rows("embedding", 16)), False


METHOD = {"chat": "sft", "images": "sft", "labels": "text-classification", "pictures": "image-classification",
          "pairs": "embedding"}
CHAT_LLMS = {  # folder: (peft, precision) runs
    "meta-llama--Llama-3.2-1B-Instruct": [("lora", "fp16"), ("qlora", "bf16"), ("full", "bf16")],
    "meta-llama--Llama-3.1-8B": [("qlora", "bf16")],
    "HuggingFaceTB--SmolLM2-1.7B-Instruct": [("lora", "bf16")],
    "Qwen--Qwen2.5-0.5B-Instruct": [("lora", "bf16"), ("qlora", "fp16"), ("full", "fp16")],
    "deepseek-ai--DeepSeek-R1-Distill-Qwen-1.5B": [("lora", "bf16")],
    "Qwen--Qwen3-0.6B": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")],
    "Qwen--Qwen3-4B-Thinking-2507": [("lora", "fp16")],
    "google--gemma-2-2b-it": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")],
    "mistralai--Mistral-7B-Instruct-v0.3": [("lora", "fp16"), ("qlora", "bf16")],
    "microsoft--Phi-3-mini-4k-instruct": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")],
    "openai-community--gpt2": [("lora", "fp16"), ("qlora", "bf16"), ("full", "bf16")],
    "Qwen--Qwen3-30B-A3B": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")],
    "allenai--OLMoE-1B-7B-0924": [("lora", "bf16"), ("qlora", "fp16")],
    "mistralai--Mixtral-8x7B-v0.1": [("lora", "fp16"), ("qlora", "bf16"), ("full", "bf16")],
    "Qwen--Qwen1.5-MoE-A2.7B": [("lora", "bf16"), ("qlora", "bf16")],
    "openai--gpt-oss-20b": [("lora", "bf16")],
    "unsloth--Qwen2.5-0.5B-Instruct-bnb-4bit": [("lora", "bf16")],
}
VLMS = {  # image rows: the processor is built here (no torchvision needed)
    "llava-hf--llava-1.5-7b-hf": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")],
    "HuggingFaceTB--SmolVLM-Instruct": [("lora", "fp16"), ("qlora", "bf16"), ("full", "bf16")],
    "google--gemma-3-4b-it": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")],
    "meta-llama--Llama-3.2-11B-Vision-Instruct": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")],
}
VLMS_ON_TEXT = {  # their processors need a video processor, so torchvision: conversations without images
    "Qwen--Qwen2-VL-2B-Instruct": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")],
    "Qwen--Qwen2.5-VL-3B-Instruct": [("lora", "fp16"), ("qlora", "bf16")],
    "Qwen--Qwen3-VL-2B-Instruct": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")],
    "Qwen--Qwen3-VL-30B-A3B-Instruct": [("lora", "bf16")],
    "Qwen--Qwen3.5-27B": [("lora", "bf16")],
    "google--gemma-4-26B-A4B": [("lora", "bf16")],
}
ALL_THREE = [("lora", "fp16"), ("qlora", "bf16"), ("full", "bf16")]
TEXT_CLASSIFIERS = {name: ALL_THREE for name in (
    "google-bert--bert-base-uncased", "distilbert--distilbert-base-uncased", "FacebookAI--roberta-base",
    "FacebookAI--xlm-roberta-base", "answerdotai--ModernBERT-base", "albert--albert-base-v2",
    "google--electra-base-discriminator")} | {"microsoft--deberta-v3-base": [("lora", "bf16"), ("full", "fp16")]}
# bf16 for EfficientNet's LoRA and RegNet's runs: under fp16 the grad scaler's first step overflows and is skipped, as it
# may on a GPU, and one step would move nothing
IMAGE_CLASSIFIERS = {name: ALL_THREE for name in (
    "google--vit-base-patch16-224", "facebook--convnext-base-224", "microsoft--resnet-50",
    "microsoft--swin-tiny-patch4-window7-224", "facebook--dinov2-small")} | {
    "facebook--dinov2-base": [("lora", "bf16")],
    "google--efficientnet-b0": [("lora", "bf16"), ("qlora", "bf16"), ("full", "fp16")],
    "facebook--regnet-y-040": [("lora", "bf16"), ("qlora", "bf16"), ("full", "bf16")]}
EMBEDDERS = {name: [("lora", "bf16"), ("full", "fp16")] for name in (
    "sentence-transformers--all-MiniLM-L6-v2", "sentence-transformers--all-mpnet-base-v2",
    "Qwen--Qwen3-Embedding-0.6B")} | {name: [("lora", "fp16")] for name in (
        "BAAI--bge-small-en-v1.5", "intfloat--e5-base-v2", "thenlper--gte-base")}
RUNS = [(name, rows, peft, precision) for table, rows in ((CHAT_LLMS, "chat"), (VLMS, "images"),
                                                          (VLMS_ON_TEXT, "chat"), (TEXT_CLASSIFIERS, "labels"),
                                                          (IMAGE_CLASSIFIERS, "pictures"), (EMBEDDERS, "pairs"))
        for name, runs in table.items() for peft, precision in runs]


def _heads(trainer, rows: str) -> list[str]:
    """The task head a classifier trains whole: the modules outside its base model."""
    if rows not in ("labels", "pictures"):
        return []
    model = trainer.model
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    children = dict(inner.named_children())
    return [n for n, c in children.items() if n != inner.base_model_prefix and any(True for _ in c.parameters())]


def _inner(trainer, rows: str, script: dict):
    model = script["transformer_module"](trainer.model).model if rows == "pairs" else trainer.model
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@pytest.mark.parametrize(("name", "rows", "peft", "precision"), RUNS, ids=["-".join(r) for r in RUNS])
def test_each_family_trains_a_step_on_the_gpu_branches(name: str, rows: str, peft: str, precision: str,
                                                        zoo_root: Path, tmp_path: Path, offline,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import bitsandbytes as bnb
    import torch

    model = zoo_model(name, zoo_root)
    data, images = _rows(tmp_path, rows)
    script = planned_script(tmp_path, model, data, images=images, method=METHOD[rows], peft=peft)
    trainer = gpu_trainer(script, monkeypatch, precision)
    trainer.args.warmup_steps = 0  # one step: a warm-up would give it a learning rate of 0
    inner = _inner(trainer, rows, script)
    model_type = json.loads((model / "config.json").read_text())["model_type"]
    if rows != "pairs":
        assert checkpointing_on(trainer) == (model_type not in NO_ACTIVATION_CHECKPOINTING)
    quantized = any(isinstance(m, bnb.nn.Linear4bit) for m in inner.modules())
    heads = _heads(trainer, rows)
    linear = any(isinstance(m, torch.nn.Linear) for n, m in inner.named_modules()  # ResNet's only one is its head
                 if not any(n == h or n.startswith(f"{h}.") for h in heads))
    assert quantized == ((peft == "qlora" and linear) or "bnb-4bit" in name), name
    trainable = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and {p.dtype for p in trainable.values()} == {torch.float32}
    for head in heads:  # trained whole, out of 4-bit and of LoRA
        module = inner.get_submodule(head)
        assert any(p.requires_grad for p in module.parameters()), head
        assert not any(isinstance(m, bnb.nn.Linear4bit) for m in module.modules()), head
    if peft != "full" and model_type in FUSED_EXPERT_LORA:  # its experts adapted, not its attention alone
        from peft.tuners.lora.layer import ParamWrapper

        assert any(isinstance(m, ParamWrapper) for m in inner.modules()), f"{name}: no expert adapted"
    in_head = [n for n in trainable if any(f".{h}." in f".{n}" for h in heads)]
    watched = {n: p.detach().clone() for n, p in trainable.items()
               if ("lora_B" in n or n in in_head or (peft == "full" and ".pooler." not in n)) and "lora_A" not in n}
    assert watched or peft == "full", "no adapter to train"
    loss = trainer.train().training_loss
    assert math.isfinite(loss), loss
    after = dict(trainer.model.named_parameters())
    moved = [n for n, p in watched.items() if not torch.equal(after[n].detach(), p)]
    assert moved, "no trained weight moved in the step"
    if peft != "full":
        assert any("lora_B" in n for n in moved)
    for head in heads:
        assert any(f".{head}." in f".{n}" for n in moved), f"the head {head} did not train"


# what the tools refuse, and the reason and the alternative their refusal must give
REFUSALS = [
    ("Qwen--Qwen3-32B-FP8", "chat", "lora", r"stored quantized \(.*fp8.*Pick the unquantized original"),
    ("Qwen--Qwen3-32B-FP8", "chat", "qlora", r"stored quantized \(.*fp8.*Pick the unquantized original"),
    ("Qwen--Qwen3-32B-FP8", "chat", "full", r"stored quantized \(.*fp8.*Pick the unquantized original"),
    ("openai--gpt-oss-20b", "chat", "qlora", r"already stored in MXFP4.*Send peft='lora'"),
    ("openai--gpt-oss-20b", "chat", "full", r"fine-tunes no quantized model in full.*Send peft='lora'"),
    ("unsloth--Qwen2.5-0.5B-Instruct-bnb-4bit", "chat", "full", r"in full.*Send peft='lora'"),
    ("microsoft--deberta-v3-base", "labels", "qlora", r"Send peft='lora'"),
    ("sentence-transformers--all-MiniLM-L6-v2", "pairs", "qlora", r"not offered for method='embedding'.*peft='lora'"),
    ("openai--clip-vit-base-patch32", "images", "lora", r"dual encoder.*pick an image-text-to-text model"),
    ("google--siglip-base-patch16-224", "images", "lora", r"dual encoder.*pick an image-text-to-text model"),
    ("google--vit-base-patch16-224", "labels", "lora", r"no AutoModelForSequenceClassification.*"
                                                       r"method='image-classification' fits"),
    ("llava-hf--llava-1.5-7b-hf", "labels", "lora", r"no AutoModelForSequenceClassification.*method='sft'"),
    ("google-bert--bert-base-uncased", "chat", "lora", r"writes text.*pick a causal language model"),
]


@pytest.mark.parametrize(("name", "rows", "peft", "why"), REFUSALS, ids=["-".join(r[:3]) for r in REFUSALS])
def test_what_the_tools_refuse_they_refuse_with_why_and_what_instead(name: str, rows: str, peft: str, why: str,
                                                                     zoo_root: Path, tmp_path: Path,
                                                                     offline) -> None:
    from hf_train_mcp.errors import DatasetError

    model = zoo_model(name, zoo_root)
    data, images = _rows(tmp_path, rows)
    with pytest.raises((TrainError, DatasetError, ValueError)) as refused:
        planned_script(tmp_path, model, data, images=images, method=METHOD[rows], peft=peft)
    assert re.search(why, str(refused.value), re.S), str(refused.value)
    assert not (tmp_path / "train.py").exists()


# --- multi-GPU flavors: 2 gloo ranks ---------------------------------------------------------------------------
DDP_RUNS = [("Qwen--Qwen3-30B-A3B", "chat", "lora"), ("answerdotai--ModernBERT-base", "labels", "full")]


@pytest.mark.parametrize(("name", "rows", "peft"), DDP_RUNS, ids=["-".join(r) for r in DDP_RUNS])
def test_a_multi_gpu_flavor_trains_on_two_gloo_ranks(name: str, rows: str, peft: str, zoo_root: Path,
                                                    tmp_path: Path) -> None:
    """torchrun, one process a GPU, bf16 autocast with checkpointing: a mixture of experts' LoRA on its fused
    experts (each rank routes its own tokens) and an encoder's full fine-tune with its new head."""
    model = zoo_model(name, zoo_root)
    data, _ = _rows(tmp_path, rows)
    fields = {"chat_template": "chatml"} if rows == "chat" else {}
    proc = two_ranks(tmp_path, model, data, method=METHOD[rows], peft=peft, sized=True, **fields)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "HFTM_DONE" in proc.stdout


# --- multi-node full fine-tunes: every rank loads as FSDP's ranks do ---------------------------------------------
FSDP_LOADS = ["meta-llama--Llama-3.1-8B", "allenai--OLMoE-1B-7B-0924"]  # a dense model, a MoE (fused experts)


@pytest.mark.parametrize("name", FSDP_LOADS)
def test_a_multi_node_full_fine_tune_loads_on_each_rank_as_fsdp_wants(name: str, zoo_root: Path,
                                                                      tmp_path: Path) -> None:
    """The real model planned on 2 nodes of a10g-largex2, full (FSDP over 4 GPUs), sized from its real config; 2
    gloo ranks under the environment accelerate launch gives a node's ranks load its tiny twin with the script's
    kwargs through TRL's loader: the class a job loads, no GPU device_map (a rank's GPU would get all the fp32
    weights before FSDP shards them), the weights on the CPU."""
    from hf_train_mcp.contract.requests import TrainingRequest
    from hf_train_mcp.estimate.hardware import fallback_catalog
    from hf_train_mcp.estimate.sizing import model_size
    from hf_train_mcp.nodes import rendezvous
    from hf_train_mcp.planning.training import DataFacts, plan_run
    from tests.replay import accelerate_env, fsdp_ranks_load

    request = TrainingRequest(model=name.replace("--", "/", 1), dataset="org/chat", hub_model_id="me/out",
                              peft="full", nodes=2, flavor="a10g-largex2", max_steps=2, timeout="1h")
    run = plan_run(request, backend="hf", size=model_size(str(CONFIGS / name), offline=True),
                   catalog=fallback_catalog(), namespace="me", data=DataFacts(num_rows=1000, mean_tokens=300))
    assert run.nodes == 2 and run.config["peft"] == "full"
    (tmp_path / "train.py").write_text(run.render().text)
    env = accelerate_env(rendezvous.launcher_args(nodes=2, rank=1, gpus=2, full=True))
    assert env["ACCELERATE_USE_FSDP"] == "true"
    reports = fsdp_ranks_load(tmp_path, zoo_model(name, zoo_root), env=env)
    real = json.loads((CONFIGS / name / "config.json").read_text())["architectures"][0]
    assert [(r["kwargs"], r["class"], r["devices"]) for r in reports] == [({"device_map": None}, real, ["cpu"])] * 2
