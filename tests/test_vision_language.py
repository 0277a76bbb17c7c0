"""Vision-language SFT: messages + images (TRL's vision format) on an image-text-to-text model: validated without
downloading an image, image tokens counted in the estimate, trained on CPU through the tools with the model's
processor, evaluated by held-out loss, exported merged; images for a text-only model are refused."""

import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp.estimate.images import ImageGrid, image_grid
from hf_train_mcp.planning.training import DataFacts, Hyper
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp_demo.tiny import build_tiny_vlm, example_rows, write_images, write_jsonl
from tests.conftest import needs_training
from tests.emulator import Emulator, ViewerDataset
from tests.helpers import RENDER_SIZE, call, call_once, finished, script_config

pytestmark = pytest.mark.anyio


def vision_rows(folder: Path, n: int = 8, data_format: str = "vision_messages") -> list[dict]:
    """Tiny rows of a vision format, their PNGs drawn under `folder`."""
    from hf_train_mcp_demo.tiny import format_rows

    rows = format_rows(data_format, n)  # a vision row is drawn from its index alone
    write_images(folder, rows)
    return rows


def test_messages_with_images_are_read_as_vision_rows(tmp_path: Path) -> None:
    rows = vision_rows(tmp_path)
    report = validate_dataset(str(write_jsonl(tmp_path / "data.jsonl", rows)), "sft")
    assert report.valid and report.detected_format == "vision_messages", report.issues
    text = validate_dataset(str(write_jsonl(tmp_path / "text.jsonl", example_rows("sft", 4))), "sft")
    assert text.detected_format == "messages"  # no images: the text path, unchanged


def test_llava_style_conversations_are_mapped_and_missing_images_warned(tmp_path: Path) -> None:
    rows = [{"conversations": [{"from": "human", "value": "<image>\nWhat colour?"}, {"from": "gpt", "value": "red"}],
             "image": r["images"][0]} for r in vision_rows(tmp_path, 4)]
    rows[2]["image"] = "images/red/gone.png"
    report = validate_dataset(str(write_jsonl(tmp_path / "llava.jsonl", rows)), "sft")
    assert report.detected_format == "vision_messages"
    assert report.suggested_column_mapping == {"messages": "conversations", "images": "image"}
    assert any("missing image file 'images/red/gone.png'" in i.message for i in report.issues)


def test_the_estimate_counts_each_images_tokens() -> None:
    vlm = RENDER_SIZE.__class__(**{**RENDER_SIZE.__dict__, "image_tokens": 256})
    hyper = Hyper.of(TrainingRequest(model="m", dataset="d", max_length=2048))
    text = hyper.workload(vlm, 1, DataFacts(num_rows=100, mean_tokens=200)).tokens_per_example
    seen = hyper.workload(vlm, 1, DataFacts(num_rows=100, mean_tokens=200, vision=True, images_per_row=2))
    assert text == 200 and seen.tokens_per_example == 200 + 2 * 256


QWEN2_VL = {"model_type": "qwen2_vl", "architectures": ["Qwen2VLForConditionalGeneration"], "text_config": {"hidden_size": 1536, "num_hidden_layers": 28,
                                                       "intermediate_size": 8960, "vocab_size": 151936,
                                                       "num_attention_heads": 12, "num_key_value_heads": 2},
            "vision_config": {"patch_size": 14, "spatial_merge_size": 2, "depth": 32}}
QWEN2_VL_PROCESSOR = {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2,
                      "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 1280}


def test_a_dynamic_resolution_processor_counts_tokens_by_image_size() -> None:
    grid = image_grid(QWEN2_VL_PROCESSOR)
    # as transformers' qwen2_vl smart_resize: 1080p is scaled into max_pixels (728 x 1316), a tiny one up to min_pixels
    assert grid.tokens(448, 448) == 256 and grid.tokens(1080, 1920) == 1222 and grid.tokens(20, 20) == 4
    assert image_grid({"size": {"shortest_edge": 3136, "longest_edge": 1003520}, "patch_size": 14,
                       "merge_size": 2}) == ImageGrid(14, 2, 3136, 1003520)  # transformers 5's spelling
    assert image_grid({"size": {"height": 224, "width": 224}, "patch_size": 16}) is None  # a fixed-size one


async def test_the_estimate_reads_the_processors_resolution_and_the_rows_image_sizes(hub: Emulator) -> None:
    """Qwen2-VL's tokens follow the image's size within its processor's pixel bounds: the processor's
    preprocessor_config.json and the viewer's image cells ({src, height, width}) say both, no image downloaded."""
    hub.models["org/Qwen2-VL-2B"] = 2_200_000_000
    hub.files[("org/Qwen2-VL-2B", "config.json")] = json.dumps(QWEN2_VL).encode()
    hub.files[("org/Qwen2-VL-2B", "preprocessor_config.json")] = json.dumps(QWEN2_VL_PROCESSOR).encode()
    rows = [{"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "A chart."}]}],
             "images": [{"src": f"{hub.url}/assets/shot{i}.png", "height": 1080, "width": 1920}]} for i in range(6)]
    hub.datasets["org/screens"] = ViewerDataset({"default": {"train": rows}})
    before = len(hub.requests)
    estimate = await call_once("estimate_cost", {"model": "org/Qwen2-VL-2B", "dataset": "org/screens",
                                                 "flavor": "a10g-large"})
    assert not estimate.is_error, estimate.content[0].text
    assert estimate.structured_content["assumptions"]["image_tokens_per_example"] == 1222  # a 1080p screenshot
    assert not any("/assets/" in r["path"] for r in hub.requests[before:])


@needs_training
@pytest.mark.training
async def test_images_for_a_text_only_model_are_refused_before_anything_runs(tiny_model: Path, tmp_path: Path,
                                                                           offline) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", vision_rows(tmp_path))
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {"model": str(tiny_model), "dataset": str(data),
                                                            "backend": "local", "max_steps": 1})
    assert result.is_error and "reads no images" in result.content[0].text
    assert result.meta["hf-train-mcp/error-code"] == "dataset"


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_a_vision_language_model_trains_evaluates_and_merges_through_the_tools(tiny_model: Path,
                                                                                   tmp_path: Path, offline) -> None:
    from transformers import AutoModelForImageTextToText

    model = build_tiny_vlm(tmp_path / "vlm", tiny_model)
    data = write_jsonl(tmp_path / "data.jsonl", vision_rows(tmp_path, 12))
    async with Client(build_server()) as client:
        dry = await call(client, "submit_training", {"model": str(model), "dataset": str(data), "backend": "local",
                                                     "max_steps": 2, "dry_run": True})
        assert "AutoProcessor" in dry["script"] and "language_model" in dry["script"]
        assert '"torchvision>=0.21,<0.26"' in dry["script"]  # the processors of real VLMs need it
        trained = await call(client, "submit_training", {"model": str(model), "dataset": str(data), "backend": "local",
                                                         "max_steps": 2, "per_device_batch_size": 2,
                                                         "gradient_accumulation": 1, "eval_split": 0.25})
        report = await finished(client, trained["job_id"])
        assert report["stage"] == "COMPLETED", report
        assert "loss" in report["last_metrics"] or "train_loss" in report["last_metrics"]
        evaluation = await call(client, "evaluate_model", {"model": trained["job_id"], "backend": "local"})
        report = await finished(client, evaluation["job_id"])
        assert report["stage"] == "COMPLETED", report
        assert report["last_metrics"]["eval_rows"] == 3 and report["last_metrics"]["eval_loss"] > 0
        refused = await client.call_tool("export_model", {"model": trained["job_id"], "format": "gguf",
                                                          "backend": "local"})
        assert refused.is_error and "vision projector" in refused.content[0].text
        exported = await call(client, "export_model", {"model": trained["job_id"], "format": "merged",
                                                       "backend": "local"})
        report = await finished(client, exported["job_id"])
        assert report["stage"] == "COMPLETED", report
    merged = Path(exported["model_url"].removeprefix("file://"))
    assert AutoModelForImageTextToText.from_pretrained(merged).config.model_type == "llava"
    assert (merged / "processor_config.json").exists()


def vision_pairs(folder: Path, n: int = 8) -> list[dict]:
    return vision_rows(folder, n, "vision_preference")


def test_preference_pairs_with_images_are_read_as_vision_preference(tmp_path: Path) -> None:
    rows = vision_pairs(tmp_path)
    report = validate_dataset(str(write_jsonl(tmp_path / "pairs.jsonl", rows)), "dpo")
    assert report.valid and report.detected_format == "vision_preference", report.issues
    # RLAIF-V's layout: one `image` and text prompt/answers
    flat = [{"image": r["images"][0], "question": "What colour?", "chosen": r["chosen"][0]["content"],
             "rejected": r["rejected"][0]["content"]} for r in rows]
    flat[1]["image"] = "images/red/gone.png"
    report = validate_dataset(str(write_jsonl(tmp_path / "flat.jsonl", flat)), "dpo")
    assert report.detected_format == "vision_preference"
    assert report.suggested_column_mapping == {"prompt": "question", "images": "image"}
    assert any("missing image file 'images/red/gone.png'" in i.message for i in report.issues)
    text = validate_dataset(str(write_jsonl(tmp_path / "text.jsonl", example_rows("dpo", 4))), "dpo")
    assert text.detected_format == "preference"  # no images: the text path, unchanged


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_a_vision_language_model_trains_with_dpo_and_is_evaluated_through_the_tools(
        tiny_model: Path, tmp_path: Path, offline) -> None:
    model = build_tiny_vlm(tmp_path / "vlm", tiny_model)
    data = write_jsonl(tmp_path / "pairs.jsonl", vision_pairs(tmp_path, 12))
    request = {"model": str(model), "dataset": str(data), "method": "dpo", "backend": "local", "max_steps": 2}
    async with Client(build_server()) as client:
        estimate = await call(client, "estimate_cost", {"model": str(model), "dataset": str(data), "method": "dpo"})
        dry = await call(client, "submit_training", {**request, "dry_run": True})
        assert "vision_processor()" in dry["script"] and "language_model" in dry["script"]
        assert script_config(dry["script"])["vision"] is True
        trained = await call(client, "submit_training", {**request, "per_device_batch_size": 2,
                                                         "gradient_accumulation": 1, "eval_split": 0.25})
        report = await finished(client, trained["job_id"])
        assert report["stage"] == "COMPLETED", report
        assert "loss" in report["last_metrics"] or "train_loss" in report["last_metrics"]
        evaluation = await call(client, "evaluate_model", {"model": trained["job_id"], "backend": "local"})
        report = await finished(client, evaluation["job_id"])
    assert report["stage"] == "COMPLETED", report
    assert report["last_metrics"]["eval_rows"] == 3 and 0 <= report["last_metrics"]["preference_accuracy"] <= 1
    assert estimate["assumptions"]["image_tokens_per_example"] == 16  # the tiny tower's 4x4 patch grid, one image


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_a_vision_language_model_trains_with_grpo_on_prompts_with_images(tiny_model: Path, tmp_path: Path,
                                                                             offline) -> None:
    model = build_tiny_vlm(tmp_path / "vlm", tiny_model)
    rows = vision_rows(tmp_path, 8, "vision_prompt_only")
    layout = [{"prompt": r["prompt"], "answer": r["answer"], "image": r["images"][0]} for r in rows]  # one `image`
    data = write_jsonl(tmp_path / "prompts.jsonl", layout)
    report = validate_dataset(str(data), "grpo")
    assert report.detected_format == "vision_prompt_only" and report.suggested_column_mapping == {"images": "image"}
    request = {"model": str(model), "dataset": str(data), "method": "grpo", "backend": "local", "max_steps": 1,
               "per_device_batch_size": 2, "gradient_accumulation": 1,
               "options": {"num_generations": 2, "max_completion_length": 8, "reward_funcs": ["accuracy", "length"]}}
    async with Client(build_server()) as client:
        dry = await call(client, "submit_training", {**request, "dry_run": True})
        assert script_config(dry["script"])["vision"] is True
        trained = await call(client, "submit_training", request)
        report = await finished(client, trained["job_id"])
        assert report["stage"] == "COMPLETED", report
        evaluation = await call(client, "evaluate_model", {"model": trained["job_id"], "backend": "local",
                                                            "dataset": str(data), "num_samples": 2})
        report = await finished(client, evaluation["job_id"])
    assert report["stage"] == "COMPLETED", report
    assert report["last_metrics"]["eval_rows"] == 2 and "mean_reward" in report["last_metrics"]
