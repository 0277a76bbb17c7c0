"""Every tool but training over the zoo (tests/data/configs), each model's real Hub files served as the Hub serves
them, one MCP client per model: validate_dataset names the chat template exactly as the model's files say (none
for Llama-3.2-1B, a base model) and the family (its refusal of image rows says what the model is); estimate_cost
counts the Hub's parameters (the unpacked ones of a checkpoint stored quantized), the images of a vision-language
model as its preprocessor sizes them, and orders the memory of full > LoRA > QLoRA; evaluate_model and
export_model plan a Hub model by its own family (an embedding model as a SentenceTransformer, never a causal LM;
GGUF only of what llama.cpp's converter knows) or refuse it with why and what to send, as planning/support.py
says. The tables the server keeps of transformers' classes and llama.cpp's converters are held to the libraries."""

import ast
import shutil
import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.estimate.sizing import model_size
from hf_train_mcp.models.native import TABLES
from hf_train_mcp.planning.gguf_architectures import GGUF_ARCHITECTURES
from hf_train_mcp.planning.support import support_of
from hf_train_mcp.shell.app import build_server
from tests.conftest import needs_training
from tests.emulator import Emulator
from tests.helpers import ZOO_IMAGE_SIDE, script_config, zoo_dataset
from tests.hub_configs import CONFIGS, chat_template_of, config_of, parameters

FOLDERS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())
# What each zoo model is (its README.md's table), and how the family is said
FAMILIES = {
    "causal-lm": ("openai-community--gpt2", "HuggingFaceTB--SmolLM2-1.7B-Instruct", "Qwen--Qwen2.5-0.5B-Instruct",
                  "Qwen--Qwen3-0.6B", "Qwen--Qwen3-1.7B", "Qwen--Qwen3-4B-Thinking-2507", "Qwen--Qwen3-8B",
                  "allenai--OLMoE-1B-7B-0924", "deepseek-ai--DeepSeek-R1-Distill-Qwen-1.5B", "google--gemma-2-2b-it",
                  "meta-llama--Llama-3.1-8B", "meta-llama--Llama-3.2-1B", "meta-llama--Llama-3.2-1B-Instruct",
                  "microsoft--Phi-3-mini-4k-instruct", "mistralai--Mistral-7B-Instruct-v0.3", "openai--gpt-oss-20b",
                  "Qwen--Qwen3-32B-FP8", "Qwen--Qwen1.5-MoE-A2.7B", "Qwen--Qwen3-30B-A3B",
                  "mistralai--Mixtral-8x7B-v0.1", "unsloth--Qwen2.5-0.5B-Instruct-bnb-4bit"),
    "vision-language": ("HuggingFaceTB--SmolVLM-Instruct", "Qwen--Qwen2-VL-2B-Instruct", "Qwen--Qwen2.5-VL-3B-Instruct",
                        "Qwen--Qwen3-VL-2B-Instruct", "Qwen--Qwen3-VL-30B-A3B-Instruct", "Qwen--Qwen3.5-27B",
                        "google--gemma-4-26B-A4B", "llava-hf--llava-1.5-7b-hf", "google--gemma-3-4b-it",
                        "meta-llama--Llama-3.2-11B-Vision-Instruct"),
    "dual-encoder": ("google--siglip-base-patch16-224", "openai--clip-vit-base-patch32"),
    "sentence-transformers": ("BAAI--bge-small-en-v1.5", "Qwen--Qwen3-Embedding-0.6B", "intfloat--e5-base-v2",
                              "sentence-transformers--all-MiniLM-L6-v2", "sentence-transformers--all-mpnet-base-v2",
                              "thenlper--gte-base"),
    "image-encoder": ("facebook--dinov2-base", "facebook--dinov2-small"),
    "image-classifier": ("facebook--regnet-y-040", "google--efficientnet-b0", "google--vit-base-patch16-224",
                         "microsoft--resnet-50", "microsoft--swin-tiny-patch4-window7-224", "timm--resnet50.a1_in1k",
                         "facebook--convnext-base-224"),
    "remote-code": ("microsoft--Phi-3-vision-128k-instruct",),
    "encoder": ("FacebookAI--roberta-base", "FacebookAI--xlm-roberta-base", "albert--albert-base-v2",
                "answerdotai--ModernBERT-base", "distilbert--distilbert-base-uncased",
                "google-bert--bert-base-uncased", "google--electra-base-discriminator", "microsoft--deberta-v3-base"),
}
FAMILY = {folder: kind for kind, folders in FAMILIES.items() for folder in folders}
SAID = {"causal-lm": "a causal language model", "vision-language": "a vision-language model",
        "dual-encoder": "a dual encoder", "sentence-transformers": "a sentence-transformers embedding model",
        "image-encoder": "an image encoder", "image-classifier": "an image classifier",
        "remote-code": "its repository's own code", "encoder": "an encoder without a task head"}
# the method a family trains with first, its held-out rows, and the class its evaluation and export load it with
MAIN_METHOD = {"causal-lm": "sft", "vision-language": "sft", "encoder": "text-classification",
               "sentence-transformers": "embedding", "image-classifier": "image-classification",
               "image-encoder": "image-classification", "dual-encoder": "image-classification"}
LOADED_AS = {"causal-lm": "AutoModelForCausalLM", "vision-language": "AutoModelForImageTextToText",
             "image-classifier": "AutoModelForImageClassification", "sentence-transformers": "SentenceTransformer"}


def test_every_zoo_model_has_its_family_named() -> None:
    assert sorted(FAMILY) == FOLDERS


async def _tool(client: Client, name: str, arguments: dict) -> tuple[dict | None, str]:
    result = await client.call_tool(name, arguments)
    return (None, result.content[0].text) if result.is_error else (result.structured_content, "")


async def _validation(client: Client, repo: str, folder: str) -> None:
    """Chat rows: a warning exactly where the files say there is no template. Rows with images: refused with
    what the model is, but for a vision-language model."""
    report, _ = await _tool(client, "validate_dataset", {"dataset": zoo_dataset("sft"), "model": repo})
    warned = [i["message"] for i in report["issues"] if "has no chat template" in i["message"]]
    assert bool(warned) == (chat_template_of(folder) is False), (report["issues"], chat_template_of(folder))
    if warned:
        assert "chat_template='chatml'" in warned[0]
    images, _ = await _tool(client, "validate_dataset", {"dataset": zoo_dataset("sft", True), "model": repo})
    errors = [i["message"] for i in images["issues"] if i["severity"] == "error"]
    if FAMILY[folder] == "vision-language":
        assert images["valid"], errors
    else:
        assert not images["valid"] and SAID[FAMILY[folder]] in errors[0], errors


async def _estimates(client: Client, repo: str, folder: str, support) -> None:
    """Each PEFT mode the family's first method trains with: the parameters, and less memory with each step from
    a full fine-tune to LoRA to QLoRA (the same for LoRA and QLoRA of a checkpoint stored in bitsandbytes 4-bit:
    both train on its 4-bit weights); or the refusal."""
    method = MAIN_METHOD.get(FAMILY[folder], "sft")
    base = {"model": repo, "method": method, "num_examples": 1000, "tokens_per_example": 256, "flavor": "h200"}
    pefts = support.methods.get(method, ())
    if not pefts:
        _, text = await _tool(client, "estimate_cost", {**base, "peft": "lora"})
        assert "Nothing was launched" in text, text
        return
    memory = {}
    for peft in pefts:
        estimate, text = await _tool(client, "estimate_cost", {**base, "peft": peft})
        assert estimate, text
        assert estimate["assumptions"]["params_billions"] == round(parameters(repo) / 1e9, 3), estimate["assumptions"]
        memory[peft] = estimate["memory_gb_needed"]
    # equal where 4-bit weights save nothing the estimate shows (its 0.1 GB): a checkpoint already 4-bit, a model
    # under ~70M parameters (RegNet, EfficientNet, DINOv2-small: ~1.5 bytes a parameter saved, where any is)
    same = config_of(repo).get("quantization_config", {}).get("load_in_4bit") or parameters(repo) * 1.5 < 1e8
    ordered = [memory[p] for p in ("full", "lora", "qlora") if p in memory]
    assert all(a > b or (same and a == b) for a, b in zip(ordered, ordered[1:])), memory
    assert "full" not in memory or memory["full"] > memory["lora"], memory


def image_tokens(folder: str) -> int | None:
    """What one 448 x 448 image becomes, from the model's real preprocessor sizes: Qwen2-VL's by transformers' own
    image processor (its resize to patches, then 2 x 2 merged into one token); LLaVA-1.5's fixed crop in CLIP's
    patches. None where the zoo keeps no preprocessor_config.json."""
    path = CONFIGS / folder / "preprocessor_config.json"
    if not path.is_file():
        return None
    processor = json.loads(path.read_text())
    if folder == "Qwen--Qwen2-VL-2B-Instruct":
        from transformers import Qwen2VLImageProcessor

        fields = {k: v for k, v in processor.items() if k not in ("image_processor_type", "processor_class")}
        patches = Qwen2VLImageProcessor(**fields).get_number_of_image_patches(ZOO_IMAGE_SIDE, ZOO_IMAGE_SIDE, {})
        return patches // processor["merge_size"] ** 2
    side = processor["crop_size"]["height"] // config_of(folder.replace("--", "/", 1))["vision_config"]["patch_size"]
    return side * side


async def _images(client: Client, repo: str, folder: str) -> None:
    estimate, text = await _tool(client, "estimate_cost", {"model": repo, "dataset": zoo_dataset("sft", True),
                                                           "flavor": "h200"})
    assert estimate, text
    counted = estimate["assumptions"]["image_tokens_per_example"]
    assert counted > 0 and counted == (image_tokens(folder) or counted), (counted, image_tokens(folder))


async def _followups(client: Client, repo: str, folder: str, support) -> None:
    """evaluate_model and export_model of the Hub model: a plan where support says so, loading the model by its
    family, else the refusal support gives; nothing posted either way."""
    kind = FAMILY[folder]
    dataset = zoo_dataset(MAIN_METHOD[kind] if kind in ("sentence-transformers", "image-classifier") else "sft")
    plans = {"evaluation": await _tool(client, "evaluate_model", {"model": repo, "dataset": dataset, "split": "train",
                                                                  "dry_run": True})}
    for fmt in support.exports:
        plans[fmt] = await _tool(client, "export_model", {"model": repo, "format": fmt, "dry_run": True,
                                                          "hub_model_id": f"emu-user/zoo-{fmt}"})
    for what, refusal in {"evaluation": support.evaluation, **support.exports}.items():
        plan, text = plans[what]
        if refusal is not None:
            assert plan is None and refusal.removesuffix(" Nothing was launched.")[:100] in text, (what, text)
            continue
        assert plan is not None, (what, text)
        compile(plan["script"], f"{what}.py", "exec")
        config = script_config(plan["script"])
        loaded = "SentenceTransformer" if config["method"] == "embedding" else config["auto_class"]
        assert loaded == LOADED_AS[kind], (what, config["method"], config["auto_class"])
        if what != "evaluation" and config["method"] == "embedding":  # written as one, never as a causal LM
            assert config["model_library"] == "sentence-transformers", config
        if what == "gguf" and kind == "causal-lm":
            assert config_of(repo)["architectures"][0] in GGUF_ARCHITECTURES


@needs_training
@pytest.mark.zoo
@pytest.mark.anyio
@pytest.mark.parametrize("folder", FOLDERS)
async def test_each_zoo_model_through_every_tool_but_training(zoo: Emulator, folder: str) -> None:
    repo = zoo.serve_model(CONFIGS / folder)
    support = support_of(model_size(repo, None), repo)
    assert support.family == FAMILY[folder]
    posted = len(zoo.posted_jobs())
    async with Client(build_server()) as client:
        await _validation(client, repo, folder)
        await _estimates(client, repo, folder, support)
        if FAMILY[folder] == "vision-language":
            await _images(client, repo, folder)
        await _followups(client, repo, folder, support)
    assert zoo.posted_jobs()[posted:] == []


@needs_training
def test_the_copy_of_transformers_classes_is_the_installed_transformers() -> None:
    """models/transformers_classes.json, which the refusals read (the server has no transformers), as the
    installed transformers has them. After upgrading transformers, write it again with:
    python -c "from tests.test_zoo_tools import transformers_classes as t; import json, pathlib;
    pathlib.Path('server/hf_train_mcp/models/transformers_classes.json').write_text(json.dumps(t(), indent=0) + '\\n')"
    """
    assert json.loads(TABLES.read_text()) == transformers_classes()


def transformers_classes() -> dict:
    import transformers
    from transformers.models.auto import configuration_auto, modeling_auto

    return {"transformers": transformers.__version__, "model_types": sorted(configuration_auto.CONFIG_MAPPING_NAMES),
            "sequence_classification": sorted(modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES),
            "image_classification": sorted(modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES),
            "image_text_to_text": sorted(modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)}


def test_the_gguf_architectures_are_those_llama_cpps_converter_registers(llama_cpp: Path) -> None:
    """planning/gguf_architectures.py, as the pinned llama.cpp tree's conversion/__init__.py TEXT_MODEL_MAP
    (the architectures get_model_class finds a converter for) has them."""
    tree = ast.parse((llama_cpp / "conversion" / "__init__.py").read_text())
    table = next(node.value for node in tree.body if isinstance(node, ast.AnnAssign | ast.Assign)
                 and getattr(node.target if isinstance(node, ast.AnnAssign) else node.targets[0], "id", "")
                 == "TEXT_MODEL_MAP")
    assert GGUF_ARCHITECTURES == set(ast.literal_eval(table))


@pytest.mark.zoo
def test_the_readme_support_table_is_the_one_the_zoo_generates(hub: Emulator) -> None:
    """README.md's table of what trains on which model is planning/support.py's answer for every zoo model, the
    tools' own checks: never kept by hand (write it again with `python -m tests.support_table`)."""
    from tests.support_table import README, block, readme_block, render, zoo_support

    supports = zoo_support(hub)
    assert readme_block(README.read_text()) == block(render(supports)), "python -m tests.support_table"
    # every language and vision-language model exports merged, but a checkpoint stored in bitsandbytes 4-bit
    for _, support in supports:
        stored = config_of(support.model).get("quantization_config", {}).get("quant_method")
        if support.family in ("causal-lm", "vision-language") and stored != "bitsandbytes":
            assert support.exports["merged"] is None, (support.model, support.exports["merged"])
        elif stored == "bitsandbytes":  # its weights are bitsandbytes' 4-bit, which the export job cannot read
            assert all("stored quantized" in support.exports[f] for f in ("merged", "gguf")), support.exports


@pytest.mark.zoo
@pytest.mark.anyio
async def test_a_gguf_of_an_architecture_llama_cpp_cannot_convert_is_refused_and_merged_is_offered(
        hub: Emulator, tmp_path: Path) -> None:
    """BioGPT is a causal LM transformers has and llama.cpp's converter does not (get_model_class: "Architecture
    'BioGptForCausalLM' not supported!"): the GGUF export is refused before anything is posted, saying to export
    merged, and the merged export is planned."""
    folder = tmp_path / "microsoft--biogpt"
    shutil.copytree(CONFIGS / "openai-community--gpt2", folder)
    config = {**json.loads((folder / "config.json").read_text()), "architectures": ["BioGptForCausalLM"],
              "model_type": "biogpt"}
    (folder / "config.json").write_text(json.dumps(config))
    repo = hub.serve_model(folder)
    posted = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        arguments = {"model": repo, "dry_run": True, "hub_model_id": "emu-user/biogpt-out"}
        _, text = await _tool(client, "export_model", {**arguments, "format": "gguf"})
        merged, _ = await _tool(client, "export_model", {**arguments, "format": "merged"})
    assert "no converter for BioGptForCausalLM" in text and "format='merged'" in text, text
    assert merged is not None and hub.posted_jobs()[posted:] == []
