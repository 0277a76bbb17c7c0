"""Image classification (method="image-classification"): image folders, files named by a JSONL and the viewer's
image cells judged without downloading an image; trained on CPU through the tools, evaluated by accuracy,
exported merged; GGUF refused."""

import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.access import Access
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp_demo.tiny import build_tiny_vit, example_rows, write_images, write_jsonl
from tests.conftest import needs_training
from tests.emulator import Emulator, ViewerDataset
from tests.helpers import call, finished, merged_classifier

pytestmark = pytest.mark.anyio
METHOD = "image-classification"


def image_rows(folder: Path, n: int = 8) -> list[dict]:
    rows = example_rows(METHOD, n)
    write_images(folder, rows)
    return rows


def test_an_image_folder_is_read_as_its_classes(tmp_path: Path) -> None:
    image_rows(tmp_path, 10)
    report = validate_dataset(str(tmp_path / "images"), METHOD)
    assert report.valid, report.issues
    assert report.detected_format == "image_classification" and report.labels == ["blue", "red"]
    assert report.num_rows == 10 and {r["label"] for r in report.sample_rows} == {"blue", "red"}


def test_images_named_by_a_jsonl_are_checked_by_their_files(tmp_path: Path) -> None:
    rows = [{"img": r["image"], "fine_label": r["label"]} for r in image_rows(tmp_path)]
    rows[1]["img"] = "images/red/missing.png"
    (tmp_path / "images" / "blue" / "broken.png").write_bytes(b"not a png")
    rows[3]["img"] = "images/blue/broken.png"
    report = validate_dataset(str(write_jsonl(tmp_path / "data.jsonl", rows)), METHOD)
    assert report.suggested_column_mapping == {"image": "img", "label": "fine_label"}
    messages = [i.message for i in report.issues]
    assert any("missing image file 'images/red/missing.png'" in m for m in messages)
    assert any("unreadable image 'images/blue/broken.png'" in m for m in messages)
    text = validate_dataset(str(write_jsonl(tmp_path / "text.jsonl", example_rows("text-classification", 4))),
                            METHOD)
    assert not text.valid and "'image' + 'label'" in text.issues[0].message


def test_an_http_caller_cannot_make_the_server_read_images_outside_its_folders(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    outside = tmp_path / "private"
    image_rows(outside, 2)
    rows = [{"image": str(outside / r["image"]), "label": r["label"]} for r in example_rows(METHOD, 2)]
    data = write_jsonl(shared / "data.jsonl", rows)
    report = validate_dataset(str(data), METHOD, access=Access.http(local_dirs=[str(shared)]))
    assert not report.valid and any("outside the folders" in i.message for i in report.issues)


def test_viewer_image_cells_are_judged_without_a_download(hub: Emulator) -> None:
    rows = [{"image": {"src": f"{hub.url}/assets/img{i}.jpg", "height": 512, "width": 384}, "label": i % 2}
            for i in range(6)]
    hub.datasets["org/food"] = ViewerDataset({"default": {"train": rows}}, features={
        "image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": ["pizza", "sushi"]}})
    before = len(hub.requests)
    report = validate_dataset("org/food", METHOD)
    assert report.valid and report.labels == ["pizza", "sushi"]
    assert not any("/assets/" in r["path"] for r in hub.requests[before:])


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_an_image_classifier_trains_evaluates_and_merges_through_the_tools(tmp_path: Path, offline) -> None:
    from transformers import AutoModelForImageClassification

    model = build_tiny_vit(tmp_path / "vit")
    image_rows(tmp_path / "data", 16)
    arguments = {"model": str(model), "dataset": str(tmp_path / "data" / "images"), "method": METHOD,
                 "backend": "local", "max_steps": 3, "per_device_batch_size": 4, "gradient_accumulation": 1,
                 "eval_split": 0.25}
    async with Client(build_server()) as client:
        estimate = await call(client, "estimate_cost", {"model": str(model), "method": METHOD, "num_examples": 16,
                                                        "max_steps": 3})
        assert estimate["hours"] > 0
        trained = await call(client, "submit_training", arguments)
        report = await finished(client, trained["job_id"])
        assert report["stage"] == "COMPLETED", report
        output = Path(trained["model_url"].removeprefix("file://"))
        assert json.loads((output / "labels.json").read_text())["id2label"] == {"0": "blue", "1": "red"}
        assert "pipeline_tag: image-classification" in (output / "README.md").read_text()

        evaluation = await call(client, "evaluate_model", {"model": trained["job_id"], "backend": "local"})
        report = await finished(client, evaluation["job_id"])
        assert report["stage"] == "COMPLETED", report
        assert report["last_metrics"]["eval_rows"] == 4 and 0 <= report["last_metrics"]["accuracy"] <= 1
        folder = await merged_classifier(client, trained["job_id"])
    merged = AutoModelForImageClassification.from_pretrained(folder)
    assert merged.config.id2label == {0: "blue", 1: "red"}


VIT_BASE = {"architectures": ["ViTForImageClassification"], "model_type": "vit", "hidden_size": 768,
            "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072, "image_size": 224,
            "patch_size": 16, "num_channels": 3}


@pytest.mark.anyio
async def test_the_estimate_of_the_hubs_vit_on_food101_run_is_near_its_published_hour(tmp_path: Path,
                                                                                    offline) -> None:
    """The Hub's "Train models on Jobs" page: ViT-base, 75,750 Food-101 images, 3 epochs ~ 1 h on a10g-small. The
    model counts 86M parameters (an encoder's MLP is two matrices) and 197 tokens an image, unpadded."""
    (tmp_path / "vit-base").mkdir()
    (tmp_path / "vit-base" / "config.json").write_text(json.dumps(VIT_BASE))
    async with Client(build_server()) as client:
        estimate = await call(client, "estimate_cost", {
            "model": str(tmp_path / "vit-base"), "method": METHOD, "peft": "full", "num_examples": 75_750,
            "epochs": 3, "flavor": "a10g-small", "per_device_batch_size": 16, "gradient_accumulation": 1})
    assert 0.08 <= estimate["assumptions"]["params_billions"] <= 0.09
    assert abs(estimate["assumptions"]["tokens_total"] - 75_750 * 3 * 197) <= 3 * 16 * 197  # whole batches
    assert 0.65 <= estimate["hours"] <= 1.35, estimate["hours"]
    assert estimate["fits"]


def test_every_class_name_is_listed_and_a_longer_list_says_how_many_it_leaves_out(hub: Emulator) -> None:
    """Food-101 has 101 classes: all of them are named (item 11); past LISTED_LABELS, a warning gives the count."""
    rows = [{"image": {"src": f"{hub.url}/assets/img{i}.jpg", "height": 512, "width": 384}, "label": i % 101}
            for i in range(6)]
    food = [f"dish_{i:03d}" for i in range(101)]
    hub.datasets["org/food101"] = ViewerDataset({"default": {"train": rows}}, features={
        "image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": food}})
    report = validate_dataset("org/food101", METHOD)
    assert report.valid and report.labels == food
    assert not any("classes" in i.message for i in report.issues)
    many = [f"species_{i:05d}" for i in range(1500)]
    hub.datasets["org/inat"] = ViewerDataset({"default": {"train": rows}}, features={
        "image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": many}})
    report = validate_dataset("org/inat", METHOD)
    assert report.valid and report.labels == many[:1000]
    assert any(i.severity == "warning" and "1500 classes" in i.message and "first 1000" in i.message
               for i in report.issues)
