"""A model's family decided from its own Hub files (tests/data/configs: real files as the Hub serves them), in one
place every tool uses: flat and nested vision-language models are read as such by validate_dataset, estimate_cost,
submit_training and export_model alike; dual encoders (CLIP, SigLIP) are refused for vision training with what to
pick instead; a Hub embedding model is exported as one, and an encoder without a task head is refused."""

import hashlib
import json

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.methods.sft import MAX_IMAGE_TOKENS
from hf_train_mcp.estimate.images import ImageGrid
from hf_train_mcp.estimate.sizing import param_counts
from hf_train_mcp.models.family import CAUSAL_LM, NO_ACTIVATION_CHECKPOINTING, Family, decide
from hf_train_mcp.models.refusals import training_refusal
from hf_train_mcp.models.files import TEXT_DEFAULTS, VISION_DEFAULTS, model_files, one_read_each, text_config
from tests.hub_configs import CONFIGS, config_of, folder, hub_total
from tests.emulator import Emulator, ViewerDataset
from tests.helpers import call, call_once, refused, script_config

pytestmark = pytest.mark.anyio
QWEN2_VL, QWEN25_VL, LLAVA = "Qwen/Qwen2-VL-2B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct", "llava-hf/llava-1.5-7b-hf"
SMOLVLM, CLIP, SIGLIP = "HuggingFaceTB/SmolVLM-Instruct", "openai/clip-vit-base-patch32", "google/siglip-base-patch16-224"
MINILM, DISTILBERT, BERT = ("sentence-transformers/all-MiniLM-L6-v2", "distilbert/distilbert-base-uncased",
                            "google-bert/bert-base-uncased")
ALL = (QWEN2_VL, QWEN25_VL, LLAVA, SMOLVLM, CLIP, SIGLIP, MINILM, DISTILBERT, BERT)


@pytest.fixture
def models(hub: Emulator) -> Emulator:
    """Every model of tests/data/configs on the emulated Hub, and vision rows (1080p screenshots) beside them."""
    for repo in ALL:
        hub.serve_model(folder(repo))
    rows = [{"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "A chart."}]}],
             "images": [{"src": f"{hub.url}/assets/shot{i}.png", "height": 1080, "width": 1920}]} for i in range(6)]
    hub.datasets["org/screens"] = ViewerDataset({"default": {"train": rows}})
    hub.datasets["org/reviews"] = ViewerDataset({"default": {"test": [
        {"text": f"review {i}", "label": i % 2} for i in range(12)]}})
    return hub


# --- the test data itself ----------------------------------------------------------------------------------------
def test_every_folder_names_a_source_for_each_file() -> None:
    for path in sorted(p for p in CONFIGS.iterdir() if p.is_dir()):
        provenance = (path / "PROVENANCE.md").read_text()
        for name in (p.name for p in path.iterdir() if p.suffix == ".json"):
            assert f"`{name}`" in provenance, (path.name, name)


def test_the_minilm_files_hash_to_the_lfs_objects_of_their_public_copy() -> None:
    """sagargowda88/allMini stores both files in Git LFS with CRLF line ends: ours are those objects."""
    def crlf_oid(name: str) -> str:
        text = (folder(MINILM) / name).read_bytes().replace(b"\n", b"\r\n")
        return hashlib.sha256(text).hexdigest()

    assert crlf_oid("config.json") == "ef452925dcbfc9fe7f919188fd2a664439a7d37653c544bcbfd955db8b3043f4"
    assert crlf_oid("sentence_bert_config.json") == "01d1055f90dbf0425135dbb95d2ef43f77c49802faec5a20fea87637dda4ea51"


def test_the_configs_have_the_parameter_counts_the_hub_reports() -> None:
    """transformers builds each model from its config (meta device: no weights) with exactly the Hub's total."""
    import torch
    import transformers

    classes = {QWEN2_VL: "AutoModelForImageTextToText", QWEN25_VL: "AutoModelForImageTextToText",
               LLAVA: "AutoModelForImageTextToText", SMOLVLM: "AutoModelForImageTextToText", CLIP: "AutoModel",
               SIGLIP: "AutoModel", MINILM: "AutoModel", DISTILBERT: "AutoModelForMaskedLM", BERT: "BertForPreTraining"}
    for repo, name in classes.items():
        config = transformers.AutoConfig.for_model(**config_of(repo))
        with torch.device("meta"):
            model = getattr(transformers, name).from_config(config) if name.startswith("Auto") else \
                getattr(transformers, name)(config)
        assert sum(p.numel() for p in model.parameters()) == hub_total(repo), repo


def test_the_text_defaults_table_is_transformers_own() -> None:
    """The server fills nested configs without importing transformers: its table must be the config classes'."""
    from transformers import AutoConfig

    for table in (TEXT_DEFAULTS, VISION_DEFAULTS):
        for model_type, defaults in table.items():
            config = AutoConfig.for_model(model_type)
            for key, value in defaults.items():
                expected = getattr(config, key)
                if value is None:  # derived: num_key_value_heads follows num_attention_heads
                    assert expected in (None, config.num_attention_heads), (model_type, key)
                else:
                    assert expected == value, (model_type, key, expected, value)


def test_the_models_that_cannot_checkpoint_are_transformers_own() -> None:
    """Every model type whose sequence/image classifier or causal LM class cannot checkpoint activations, and no
    other: the estimate keeps their activations whole and the plan says so."""
    import transformers
    from transformers.models.auto import modeling_auto

    found = set()
    for mapping in ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
                    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"):
        for model_type, name in getattr(modeling_auto, mapping).items():
            try:  # a class whose extra (torchaudio, timm, ...) is missing here cannot be asked
                supported = getattr(getattr(transformers, name if isinstance(name, str) else name[0]),
                                    "supports_gradient_checkpointing", False)
            except (ImportError, AttributeError):
                continue
            if not supported:
                found.add(model_type)
    assert found == NO_ACTIVATION_CHECKPOINTING


def test_a_model_that_cannot_checkpoint_is_sized_and_said_so() -> None:
    from hf_train_mcp.estimate.memory import memory_need
    from hf_train_mcp.estimate.sizing import ModelSize
    from hf_train_mcp.estimate.hardware import fallback_catalog
    from hf_train_mcp.planning.training import DataFacts, plan_run
    from hf_train_mcp.contract.requests import TrainingRequest

    shape = dict(params=109_000_000, layers=12, hidden=768, vocab=30_527, intermediate=3072, source="config.json")
    mpnet, bert = ModelSize(**shape, model_type="mpnet"), ModelSize(**shape, model_type="bert")
    need = {s.model_type: memory_need(s, method="text-classification", peft="full", batch=32, seq_len=512)
            for s in (mpnet, bert)}
    assert need["mpnet"].activations_gb > 5 * need["bert"].activations_gb
    request = TrainingRequest(model="microsoft/mpnet-base", dataset="org/reviews", hub_model_id="me/out",
                              method="text-classification")
    plan = plan_run(request, backend="hf", size=mpnet, catalog=fallback_catalog(), namespace="me",
                    data=DataFacts(num_rows=1000))
    assert any("cannot checkpoint activations" in w for w in plan.warnings)


# --- the family, from the files ----------------------------------------------------------------------------------
def test_each_model_is_read_as_the_family_its_files_say() -> None:
    def family(repo: str, **tags: object) -> str:
        info = json.loads((folder(repo) / "model_info.json").read_text())
        return decide(config_of(repo), pipeline_tag=info["pipeline_tag"], library_name=info["library_name"],
                      **tags).kind

    assert [family(r) for r in (QWEN2_VL, QWEN25_VL, LLAVA, SMOLVLM)] == ["vision-language"] * 4
    assert family(CLIP) == family(SIGLIP) == "dual-encoder"
    assert family(MINILM) == "sentence-transformers"
    assert family(DISTILBERT) == family(BERT) == "encoder"
    # the flat config alone, without any tag: its vision tower and generating head decide
    assert decide(config_of(QWEN2_VL)).kind == "vision-language"
    assert "text_config" not in config_of(QWEN2_VL) and config_of(QWEN2_VL)["hidden_size"] == 1536


def test_a_nested_text_config_is_filled_with_its_model_types_defaults() -> None:
    text = text_config(config_of(LLAVA))  # LLaVA-1.5 writes model_type llama and a vocabulary, no sizes
    assert (text["hidden_size"], text["num_hidden_layers"], text["intermediate_size"]) == (4096, 32, 11008)
    assert text["num_key_value_heads"] == 32 and text["vocab_size"] == 32064


@pytest.mark.parametrize("repo", [QWEN2_VL, QWEN25_VL, LLAVA, SMOLVLM, CLIP])
def test_sizes_from_the_config_alone_match_the_published_counts_within_one_percent(repo: str) -> None:
    """The text tower (filled as transformers fills it), the vision tower and the projector between them."""
    total, _ = param_counts(config_of(repo))
    assert abs(total / hub_total(repo) - 1) < 0.01, (repo, total, hub_total(repo))


def test_a_refusal_never_recommends_the_model_it_refuses() -> None:
    text = training_refusal(Family(CAUSAL_LM), QWEN2_VL, method="sft", generative=True, vision=True)
    assert QWEN2_VL not in text.split("e.g.")[1] and "SmolVLM" in text.split("e.g.")[1]


async def test_a_models_files_are_read_once_per_call(models: Emulator) -> None:
    def counts() -> tuple[int, int, int]:  # the emulator serves the whole session: this test's requests are the rise
        # (a file an earlier test downloaded is in the shared cache: one HEAD a download, a GET only when not cached)
        return (sum(1 for r in models.requests if r["path"].endswith("/Qwen2-VL-2B-Instruct/resolve/main/config.json")),
                models.count("GET", r"/api/models/Qwen/Qwen2-VL-2B-Instruct"),
                sum(1 for r in models.requests if r["path"].endswith("preprocessor_config.json")
                    and "Qwen2-VL-2B" in r["path"] and r["method"] == "HEAD"))

    before = counts()
    with one_read_each():
        first = model_files(QWEN2_VL, None)
        assert model_files(QWEN2_VL, None) is first and first.json("preprocessor_config.json")["merge_size"] == 2
        first.json("preprocessor_config.json")
    config, info, processor = (after - was for after, was in zip(counts(), before))
    assert config <= 2 and info == 1 and processor == 1


# --- the tools agree -----------------------------------------------------------------------------------------------
async def test_validate_dataset_reads_images_for_flat_and_nested_vlms_and_refuses_dual_encoders(
        models: Emulator) -> None:
    for repo in (QWEN2_VL, QWEN25_VL, LLAVA, SMOLVLM):
        report = (await call_once("validate_dataset", {"dataset": "org/screens", "model": repo})).structured_content
        assert report["valid"] and report["detected_format"] == "vision_messages", (repo, report["issues"])
    for repo in (CLIP, SIGLIP):
        report = (await call_once("validate_dataset", {"dataset": "org/screens", "model": repo})).structured_content
        errors = [i["message"] for i in report["issues"] if i["severity"] == "error"]
        assert not report["valid"] and "dual encoder" in errors[0] and "Qwen/Qwen2-VL-2B-Instruct" in errors[0]


async def test_estimate_cost_counts_the_image_tokens_of_flat_and_nested_vlms(models: Emulator) -> None:
    # its processor's own grid, capped as the training script caps it (MAX_IMAGE_TOKENS per image)
    expected = {QWEN2_VL: ImageGrid(14, 2, 3136, MAX_IMAGE_TOKENS * 28 * 28).tokens(1080, 1920),
                QWEN25_VL: 256,  # no processor file: the 448 px assumption
                LLAVA: (336 // 14) ** 2, SMOLVLM: (384 // 14) ** 2 // 9}  # fixed grids (pixel shuffle 3x3)
    assert ImageGrid(14, 2, 3136, 12845056).tokens(1080, 1920) == 39 * 69  # uncapped: the Hub's max_pixels
    assert expected[QWEN2_VL] == 26 * 47
    async with Client(build_server()) as client:
        for repo, tokens in expected.items():
            estimate = await call(client, "estimate_cost", {"model": repo, "dataset": "org/screens",
                                                            "flavor": "h200"})
            assert estimate["assumptions"]["image_tokens_per_example"] == tokens, repo
            assert estimate["assumptions"]["params_billions"] == round(hub_total(repo) / 1e9, 3), repo


async def test_vision_sft_is_planned_for_vlms_and_dual_encoders_are_refused_before_anything_is_posted(
        models: Emulator) -> None:
    posted = len(models.posted_jobs())  # the emulator serves the whole session: count this test's
    base = {"dataset": "org/screens", "hub_model_id": "emu-user/vlm-out", "max_steps": 5, "dry_run": True}
    async with Client(build_server()) as client:
        for repo in (QWEN2_VL, LLAVA):
            plan = await call(client, "submit_training", {**base, "model": repo})
            config = script_config(plan["script"])
            assert config["vision"] is True and "AutoProcessor" in plan["script"], repo
        for repo in (CLIP, SIGLIP):
            text = await refused(client, "submit_training", {**base, "model": repo, "dry_run": False})
            assert "dual encoder" in text and "nothing was launched" in text.lower() and "image-text-to-text" in text
            assert repo not in text.split("e.g.")[1]
    assert models.posted_jobs()[posted:] == []


async def test_export_of_a_flat_vlm_is_refused_as_gguf_and_merged_as_image_text_to_text(models: Emulator) -> None:
    posted = len(models.posted_jobs())  # the emulator serves the whole session: count this test's
    async with Client(build_server()) as client:
        text = await refused(client, "export_model", {"model": QWEN2_VL, "format": "gguf",
                                                      "hub_model_id": "emu-user/qwen2vl-gguf"})
        assert "vision projector" in text and "mmproj" in text
        plan = await call(client, "export_model", {"model": QWEN2_VL, "format": "merged", "dry_run": True,
                                                   "hub_model_id": "emu-user/qwen2vl-merged"})
    config = script_config(plan["script"])
    assert (config["auto_class"], config["processor"], config["vision"]) == ("AutoModelForImageTextToText",
                                                                             "AutoProcessor", True)
    assert models.posted_jobs()[posted:] == []


async def test_a_hub_embedding_model_is_exported_as_one_from_its_modules_json(models: Emulator) -> None:
    """all-MiniLM-L6-v2 by its library on the Hub, and a copy without one by its modules.json."""
    copy = models.serve_model(folder(MINILM), repo="emu-org/minilm-copy", library_name=None, pipeline_tag=None)
    async with Client(build_server()) as client:
        for repo in (MINILM, copy):
            plan = await call(client, "export_model", {"model": repo, "format": "gguf", "dry_run": True,
                                                       "hub_model_id": "emu-user/minilm-gguf"})
            config = script_config(plan["script"])
            assert (config["quantization"], config["model_library"], config["method"]) == (
                "q8_0", "sentence-transformers", "embedding"), repo
            assert "sentence-transformers>=5,<6" in plan["script"]
    assert models.count("GET", r"/emu-org/minilm-copy/resolve/.*/modules.json") >= 1


async def test_an_encoder_without_a_head_is_refused_for_gguf_and_evaluation_with_what_to_send(
        models: Emulator) -> None:
    posted = len(models.posted_jobs())  # the emulator serves the whole session: count this test's
    async with Client(build_server()) as client:
        text = await refused(client, "export_model", {"model": DISTILBERT, "format": "gguf",
                                                      "hub_model_id": "emu-user/distil-gguf"})
        assert "DistilBertForMaskedLM" in text and "modules.json" in text and "method='embedding'" in text
        text = await refused(client, "evaluate_model", {"model": DISTILBERT, "dataset": "org/reviews"})
        assert "no trained task head" in text and "method='text-classification'" in text
        assert "Nothing was launched" in text
    assert models.posted_jobs()[posted:] == []
