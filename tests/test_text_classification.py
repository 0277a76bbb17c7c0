"""Text classification (method="text-classification"): validated with its labels, estimated, trained on CPU
through the tools, evaluated by accuracy, exported merged; a classifier is never exported to GGUF."""

import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp_demo.tiny import example_rows, write_jsonl
from tests.conftest import needs_training
from tests.emulator import Emulator, ViewerDataset
from tests.helpers import call, estimated_then_trained, finished, merged_classifier

pytestmark = pytest.mark.anyio
METHOD = "text-classification"


def test_text_and_label_rows_are_read_as_classes(tmp_path: Path) -> None:
    rows = [{"sentence": r["text"], "sentiment": r["label"]} for r in example_rows(METHOD, 8)]
    report = validate_dataset(str(write_jsonl(tmp_path / "reviews.jsonl", rows)), METHOD)
    assert report.valid, report.issues
    assert report.detected_format == "text_classification" and report.labels == ["negative", "positive"]
    assert report.suggested_column_mapping == {"text": "sentence", "label": "sentiment"}


def test_bad_class_data_is_refused_or_warned_with_the_fix(tmp_path: Path) -> None:
    chat = validate_dataset(str(write_jsonl(tmp_path / "chat.jsonl", example_rows("sft", 4))), METHOD)
    assert not chat.valid and "'text' + 'label'" in chat.issues[0].message
    nulls = [{"text": "fine", "label": None}, {"text": "bad", "label": "negative"}]
    report = validate_dataset(str(write_jsonl(tmp_path / "nulls.jsonl", nulls)), METHOD)
    assert not report.valid and any("null value in 'label'" in i.message for i in report.issues)
    skewed = [{"text": f"row {i}", "label": "spam" if i else "ham"} for i in range(20)]
    report = validate_dataset(str(write_jsonl(tmp_path / "skewed.jsonl", skewed)), METHOD)
    assert report.valid and any("imbalanced classes: 95%" in i.message for i in report.issues)
    ids = [{"text": f"row {i}", "label": f"user-{i}"} for i in range(150)]
    report = validate_dataset(str(write_jsonl(tmp_path / "ids.jsonl", ids)), METHOD)
    assert any("150 distinct labels" in i.message for i in report.issues) and len(report.labels) == 150  # all named


def test_a_hub_class_label_feature_names_the_classes_without_downloading(hub: Emulator) -> None:
    rows = [{"text": f"review {i}", "label": i % 3} for i in range(9)]
    hub.datasets["org/reviews"] = ViewerDataset({"default": {"train": rows}}, features={
        "label": {"_type": "ClassLabel", "names": ["bad", "ok", "great"]}})
    report = validate_dataset("org/reviews", METHOD)
    assert report.valid and report.labels == ["bad", "ok", "great"]


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_a_text_classifier_trains_evaluates_and_merges_through_the_tools(tiny_model: Path, tmp_path: Path,
                                                                              offline) -> None:
    from transformers import AutoModelForSequenceClassification

    data = write_jsonl(tmp_path / "reviews.jsonl", example_rows(METHOD, 24))
    arguments = {"model": str(tiny_model), "dataset": str(data), "method": METHOD, "backend": "local",
                 "max_steps": 3, "per_device_batch_size": 4, "gradient_accumulation": 1, "max_length": 64,
                 "eval_split": 0.25}
    async with Client(build_server()) as client:
        _, trained, report = await estimated_then_trained(client, arguments, 24, "AutoModelForSequenceClassification")
        assert "loss" in report["last_metrics"] or "train_loss" in report["last_metrics"]
        output = Path(trained["model_url"].removeprefix("file://"))
        assert json.loads((output / "labels.json").read_text())["id2label"] == {"0": "negative", "1": "positive"}
        card = (output / "README.md").read_text()
        assert "pipeline_tag: text-classification" in card and "transformers Trainer" in card

        evaluation = await call(client, "evaluate_model", {"model": trained["job_id"], "backend": "local"})
        report = await finished(client, evaluation["job_id"])
        assert report["stage"] == "COMPLETED", report
        metrics = report["last_metrics"]
        assert metrics["eval_rows"] == 6 and 0 <= metrics["accuracy"] <= 1 and 0 <= metrics["f1"] <= 1
        folder = await merged_classifier(client, trained["job_id"])
    merged = AutoModelForSequenceClassification.from_pretrained(folder)
    assert merged.config.id2label == {0: "negative", 1: "positive"}


def test_classifier_runs_are_ranked_by_accuracy_and_language_models_by_loss() -> None:
    from hf_train_mcp.sweeps.results import default_metric, lower_is_better

    classifiers = [{"eval_loss": 0.6, "eval_accuracy": 0.7, "loss": 0.5}, {"eval_loss": 0.5, "eval_accuracy": 0.6}]
    assert default_metric(classifiers, METHOD) == "eval_accuracy" and not lower_is_better("eval_accuracy")
    evaluated = [{**c, "evaluation/accuracy": 0.8} for c in classifiers]
    assert default_metric(evaluated, METHOD) == "evaluation/accuracy"
    assert default_metric([{"eval_loss": 1.0, "loss": 1.2}], "sft") == "eval_loss"
    assert default_metric([], "grpo") == "reward"
    embedded = [{"eval_loss": 0.3, "evaluation/eval_loss": 0.3, "evaluation/spearman": 0.8}]
    assert default_metric(embedded, "embedding") == "evaluation/eval_loss"  # an evaluation's loss comes first
    assert default_metric([{"evaluation/spearman": 0.8, "loss": 1.0}], "embedding") == "evaluation/spearman"


@pytest.mark.anyio
@pytest.mark.parametrize(("labelled", "method"), [(True, "text-classification"), (False, "reward")])
async def test_a_bare_classifier_adapter_is_told_from_a_reward_model_by_its_labels(
        hub: Emulator, tmp_path: Path, labelled: bool, method: str) -> None:
    """A sequence-classification adapter is a text classifier when it names its classes (labels.json, which the
    classifiers write beside it), else a reward model: in a folder and in a Hub repo alike."""
    from hf_train_mcp.access import STDIO
    from hf_train_mcp.planning.subjects import subject_from_ref
    from hf_train_mcp.hub import adapter_config, repo_has_file

    config = json.dumps({"base_model_name_or_path": "org/encoder", "peft_type": "LORA", "task_type": "SEQ_CLS"})
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(config)
    hub.files[("someone/classifier", "adapter_config.json")] = config.encode()
    if labelled:
        (folder / "labels.json").write_text(json.dumps({"id2label": {"0": "negative", "1": "positive"}}))
        hub.files[("someone/classifier", "labels.json")] = b'{"id2label": {"0": "negative", "1": "positive"}}'
    hub.models.setdefault("someone/classifier", 1_000_000)
    readers = {"adapter_config": lambda repo: adapter_config(repo, None),
               "labelled": lambda repo: repo_has_file(repo, "labels.json", None)}
    here = subject_from_ref(str(folder), access=STDIO, backend_name="local", **readers)
    there = subject_from_ref("someone/classifier", access=STDIO, backend_name="hf", **readers)
    assert (here.kind, here.method) == ("adapter", method)
    assert (there.kind, there.method) == ("adapter", method)
