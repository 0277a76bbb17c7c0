"""Embedding models (method="embedding"): pairs, triplets and scored pairs validated with their popular layouts,
bad rows refused with the fix, sized without a language-model head, trained on CPU through the tools with the
loss the data calls for, evaluated by the matching evaluator against the base, exported merged, and to GGUF when
its encoder is one llama.cpp converts (BERT-style)."""

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from mcp import Client
from pydantic import ValidationError

from hf_train_mcp import methods
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp.estimate.cost import estimate_on
from hf_train_mcp.estimate.workload import Workload
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp_demo.tiny import example_rows, write_jsonl
from tests.conftest import needs_training
from tests.helpers import QWEN_05B, call, call_once, estimated_then_trained, finished, gguf_value, read_gguf, refused

pytestmark = pytest.mark.anyio
METHOD = "embedding"
needs_sentence_transformers = pytest.mark.skipif(not importlib.util.find_spec("sentence_transformers"),
                                                 reason="sentence-transformers (the 'train' extra) is absent")

LAYOUTS = [
    # (one row, detected format, suggested mapping): sentence-transformers' own hub sets, then popular others
    ({"anchor": "q", "positive": "p", "negative": "n"}, "sentence_triplets", None),  # all-nli triplet
    ({"query": "q", "pos": "p", "neg": "n"}, "sentence_triplets", {"anchor": "query", "positive": "pos",
                                                                    "negative": "neg"}),
    ({"question": "q", "answer": "a"}, "sentence_pairs", {"anchor": "question", "positive": "answer"}),  # gooaq
    ({"query": "q", "document": "d", "id": 3}, "sentence_pairs", {"anchor": "query", "positive": "document"}),
    ({"sentence1": "a", "sentence2": "b", "score": 0.5}, "scored_pairs", None),  # stsb
    ({"text1": "a", "text2": "b", "label": 0.25}, "scored_pairs", {"sentence1": "text1", "sentence2": "text2",
                                                                  "score": "label"}),
    ({"sentence_a": "a", "sentence_b": "b", "similarity": 1}, "scored_pairs",
     {"sentence1": "sentence_a", "sentence2": "sentence_b", "score": "similarity"}),
]


@pytest.mark.parametrize(("row", "fmt", "mapping"), LAYOUTS, ids=[f for _, f, _ in LAYOUTS])
def test_pairs_triplets_and_scored_pairs_are_read_with_their_popular_layouts(row: dict, fmt: str,
                                                                              mapping: dict | None,
                                                                              tmp_path: Path) -> None:
    rows = [{k: f"{v} {i}" if isinstance(v, str) else v for k, v in row.items()} for i in range(4)]
    report = validate_dataset(str(write_jsonl(tmp_path / "data.jsonl", rows)), METHOD)
    assert report.valid, [issue.message for issue in report.issues]
    assert report.detected_format == fmt and report.suggested_column_mapping == mapping


BAD_ROWS = [
    ({"anchor": "q", "positive": ""}, "empty string in 'positive': every row needs its text (drop such rows)"),
    ({"anchor": None, "positive": "p"}, "null value in 'anchor'"),
    ({"query": "q", "pos": ["p1", "p2"]}, "'positive' holds a list: one text per row (give each positive its own row"),
    ({"sentence1": "a", "sentence2": "b", "score": "high"},
     "'score' must be a number (a similarity such as 0.8), got str: cast the column to float"),
    ({"sentence1": "a", "sentence2": "b", "score": None}, "null value in 'score'"),
]


@pytest.mark.parametrize(("row", "message"), BAD_ROWS, ids=[m.split(":")[0] for _, m in BAD_ROWS])
def test_bad_rows_are_refused_with_the_fix(row: dict, message: str, tmp_path: Path) -> None:
    report = validate_dataset(str(write_jsonl(tmp_path / "bad.jsonl", [row, row])), METHOD)
    assert not report.valid
    assert any(issue.severity == "error" and message in issue.message for issue in report.issues), report.issues


def test_data_of_another_family_is_refused_and_odd_scores_are_warned(tmp_path: Path) -> None:
    chat = validate_dataset(str(write_jsonl(tmp_path / "chat.jsonl", example_rows("sft", 4))), METHOD)
    assert not chat.valid
    assert "embedding needs 'anchor' + 'positive' (+ 'negative'), or 'sentence1' + 'sentence2' + 'score'" in \
        chat.issues[0].message
    sts = [{"sentence1": f"a {i}", "sentence2": f"b {i}", "score": i % 6} for i in range(12)]  # STS-B's 0..5
    report = validate_dataset(str(write_jsonl(tmp_path / "sts.jsonl", sts)), METHOD)
    assert report.valid and any("scores range 0..5, outside 0..1" in i.message for i in report.issues)
    same = [{"anchor": "same", "positive": "same"}, {"anchor": "q", "positive": "p"}]
    report = validate_dataset(str(write_jsonl(tmp_path / "same.jsonl", same)), METHOD)
    assert report.valid and any("anchor and positive are the same text" in i.message for i in report.issues)


async def test_bad_data_launches_nothing_and_the_cli_reads_the_same_formats(tmp_path: Path, offline) -> None:
    data = write_jsonl(tmp_path / "bad.jsonl", [{"sentence1": "a", "sentence2": "b", "score": "high"}] * 4)
    async with Client(build_server()) as client:
        message = await refused(client, "submit_training", {"model": "org/Model", "dataset": str(data),
                                                            "method": METHOD, "backend": "local"})
        assert "cast the column to float" in message
        assert (await call(client, "list_jobs", {}))["jobs"] == []
    good = write_jsonl(tmp_path / "good.jsonl", example_rows(METHOD, 8))
    shown = subprocess.run([sys.executable, "-m", "hf_train_mcp", "validate", str(good), "--method", METHOD,
                            "--json"], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert json.loads(shown.stdout)["detected_format"] == "sentence_triplets", shown.stderr


def test_what_an_embedding_run_cannot_use_is_refused_before_anything_runs() -> None:
    base = {"model": "BAAI/bge-small-en-v1.5", "dataset": "org/pairs", "hub_model_id": "me/out", "method": METHOD}
    with pytest.raises(ValidationError, match="peft='qlora' is not offered for method='embedding'"):
        TrainingRequest(**base, peft="qlora")
    with pytest.raises(ValidationError, match="use_liger_kernel does not apply to method='embedding'"):
        TrainingRequest(**base, use_liger_kernel=True)


def test_a_pair_is_two_sequences_without_a_language_model_head() -> None:
    spec = methods.get(METHOD)
    assert spec.batch_rows(8) == 16  # in-batch negatives: never a handful of rows per device
    flavor = fallback_catalog().flavors["a10g-small"]
    shape = dict(peft="lora", num_examples=10_000, tokens_per_example=64, epochs=1.0, max_length=256,
                 per_device_batch_size=16, gradient_accumulation=1, max_steps=None)
    embedding = estimate_on(QWEN_05B, Workload(method=METHOD, **shape), flavor)
    reward = estimate_on(QWEN_05B, Workload(method="reward", **shape), flavor)  # two sequences, a scalar head
    sft = estimate_on(QWEN_05B, Workload(method="sft", **shape), flavor)
    assert embedding.memory.activations_gb == pytest.approx(reward.memory.activations_gb)
    assert embedding.memory.activations_gb < sft.memory.activations_gb  # twice the texts, no vocabulary logits


@pytest.mark.detached
@needs_training
@needs_sentence_transformers
@pytest.mark.training
async def test_triplets_train_evaluate_and_merge_through_the_tools(tiny_model: Path, tmp_path: Path,
                                                                   offline) -> None:
    from sentence_transformers import SentenceTransformer

    data = write_jsonl(tmp_path / "triplets.jsonl", example_rows(METHOD, 24))
    arguments = {"model": str(tiny_model), "dataset": str(data), "method": METHOD, "backend": "local",
                 "max_steps": 3, "per_device_batch_size": 8, "gradient_accumulation": 1, "max_length": 64,
                 "eval_split": 0.25}
    async with Client(build_server()) as client:
        dry, trained, report = await estimated_then_trained(client, arguments, 24, "SentenceTransformerTrainer")
        assert "sentence-transformers>=5,<6" in dry["script"]
        assert "loss" in report["last_metrics"] and 0 <= report["last_metrics"]["eval_cosine_accuracy"] <= 1
        output = Path(trained["model_url"].removeprefix("file://"))
        assert (output / "adapter_config.json").exists() and (output / "modules.json").exists()
        card = (output / "README.md").read_text()
        assert "library_name: sentence-transformers" in card and "pipeline_tag: sentence-similarity" in card
        assert "hf-train-mcp" in card

        evaluation = await call(client, "evaluate_model", {"model": trained["job_id"], "backend": "local"})
        report = await finished(client, evaluation["job_id"])
        assert report["stage"] == "COMPLETED", report
        metrics = report["last_metrics"]
        assert metrics["eval_rows"] == 6 and {"eval_loss", "base_eval_loss", "base_cosine_accuracy"} <= set(metrics)
        assert 0 <= metrics["cosine_accuracy"] <= 1

        gguf = await refused(client, "export_model", {"model": trained["job_id"], "format": "gguf",
                                                      "backend": "local"})
        assert "BERT-style encoders" in gguf and "'qwen2' model" in gguf  # a decoder's embedding: refused
        exported = await call(client, "export_model", {"model": trained["job_id"], "format": "merged",
                                                       "backend": "local"})
        report = await finished(client, exported["job_id"])
        assert report["stage"] == "COMPLETED", report
    folder = exported["model_url"].removeprefix("file://")
    assert not os.path.exists(os.path.join(folder, "adapter_config.json"))
    merged = SentenceTransformer(folder, device="cpu")
    assert merged.encode(["a short note on the sea"]).shape == (1, 32)


@pytest.mark.detached
@needs_training
@needs_sentence_transformers
@pytest.mark.training
async def test_scored_pairs_train_fully_and_are_evaluated_by_spearman(tiny_model: Path, tmp_path: Path,
                                                                      offline) -> None:
    data = write_jsonl(tmp_path / "sts.jsonl", example_rows(METHOD, 24, data_format="scored_pairs"))
    arguments = {"model": str(tiny_model), "dataset": str(data), "method": METHOD, "backend": "local",
                 "peft": "full", "max_steps": 2, "per_device_batch_size": 8, "gradient_accumulation": 1,
                 "max_length": 64, "eval_split": 0.25}
    async with Client(build_server()) as client:
        trained = await call(client, "submit_training", arguments)
        report = await finished(client, trained["job_id"])
        assert report["stage"] == "COMPLETED", report
        assert "eval_spearman_cosine" in report["last_metrics"]
        evaluation = await call(client, "evaluate_model", {"model": trained["job_id"], "backend": "local"})
        report = await finished(client, evaluation["job_id"])
        assert report["stage"] == "COMPLETED", report
        assert -1 <= report["last_metrics"]["spearman"] <= 1 and "base_spearman" in report["last_metrics"]


def llama_cpp_knowing(llama_cpp: Path, tokenizer_folder: Path, copy: Path) -> Path:
    """A copy of llama.cpp's converter that knows the tiny tokenizer: it names a BERT vocabulary's pre-tokenizer by
    the hash of one text's tokens, which a WordPiece vocabulary trained here has no entry for (real encoders' do).
    The hash is registered as llama.cpp's convert_hf_to_gguf_update.py would add it."""
    import ast
    import hashlib
    import shutil

    from transformers import AutoTokenizer

    shutil.copytree(llama_cpp, copy)
    base = copy / "conversion" / "base.py"
    source = base.read_text()
    line = next(line for line in source.splitlines() if line.strip().startswith("chktxt = "))
    tokens = AutoTokenizer.from_pretrained(tokenizer_folder).encode(ast.literal_eval(line.split("=", 1)[1].strip()))
    marker = "        if res is None:\n"
    assert source.count(marker) == 1, "llama.cpp's get_vocab_base_pre changed: read it again"
    known = f'        if chkhsh == "{hashlib.sha256(str(tokens).encode()).hexdigest()}":\n            res = "default"\n'
    base.write_text(source.replace(marker, known + marker))
    return copy


@pytest.mark.detached
@needs_training
@needs_sentence_transformers
@pytest.mark.training
async def test_a_bert_embedding_model_exports_to_gguf_with_its_pooling(tmp_path: Path, llama_cpp: Path, offline,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from hf_train_mcp_demo.tiny import build_tiny_bert

    encoder = build_tiny_bert(tmp_path / "tiny-bert")
    monkeypatch.setenv("HFTM_LLAMA_CPP", str(llama_cpp_knowing(llama_cpp, encoder, tmp_path / "llama.cpp")))
    data = write_jsonl(tmp_path / "triplets.jsonl", example_rows(METHOD, 16))
    async with Client(build_server()) as client:
        trained = await call(client, "submit_training", {
            "model": str(encoder), "dataset": str(data), "method": METHOD, "backend": "local", "max_steps": 2,
            "per_device_batch_size": 8, "gradient_accumulation": 1, "max_length": 64})
        report = await finished(client, trained["job_id"])
        assert report["stage"] == "COMPLETED", report
        exported = await call(client, "export_model", {"model": trained["job_id"], "format": "gguf",
                                                       "backend": "local"})
        report = await finished(client, exported["job_id"])
    assert report["stage"] == "COMPLETED", report["log_tail"]
    folder = Path(exported["model_url"].removeprefix("file://")) / "gguf"
    [gguf_file] = list(folder.glob("*.gguf"))
    assert gguf_file.name.endswith("-q8_0.gguf")  # an embedding's default: 8 bits
    gguf, reader = read_gguf(llama_cpp, gguf_file)
    assert gguf_value(reader, "general.architecture") == "bert"
    assert gguf_value(reader, "bert.pooling_type") == gguf.PoolingType.MEAN  # from the model's modules.json
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0 and "blk.1.ffn_up.weight" in types


def custom_module_folder(folder: Path, marker: Path, *, router: bool) -> Path:
    """A tiny sentence-transformers folder naming a module class of its own (modeling_pool.Normalize2, whose file
    writes `marker` when imported), in modules.json or inside a Router's router_config.json."""
    from hf_train_mcp_demo.tiny import build_tiny_bert

    model = build_tiny_bert(folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    custom = "modeling_pool.Normalize2"
    if router:
        modules.append({"idx": 1, "name": "1", "path": "route", "type": "sentence_transformers.models.Router"})
        (model / "route").mkdir()
        (model / "route" / "router_config.json").write_text(json.dumps({"types": {"query_0": custom}}))
    else:
        modules.append({"idx": 1, "name": "custom", "path": "custom", "type": custom})
        (model / "custom").mkdir()
    (model / "modules.json").write_text(json.dumps(modules))
    (model / "modeling_pool.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\nimport torch\n\n\nclass Normalize2(torch.nn.Module):\n"
        "    def forward(self, features):\n        return features\n\n"
        "    @classmethod\n    def load(cls, *args, **kwargs):\n        return cls()\n")
    return model


@pytest.mark.parametrize("router", [False, True])
async def test_a_model_folder_naming_its_own_module_classes_runs_no_code_for_an_http_caller(
        router: bool, tmp_path: Path, offline, isolated_home: Path) -> None:
    """sentence-transformers imports a local folder's own module classes whatever trust_remote_code says (a local
    folder is trusted: util/misc.py import_module_class), so over HTTP such a folder is the caller's code, refused
    unless the operator allows scripts (trust review 8)."""
    from hf_train_mcp.access import Access

    shared, marker = tmp_path / "shared", tmp_path / "RAN_FROM_MODEL_FOLDER"
    model = custom_module_folder(shared / "encoder", marker, router=router)
    data = write_jsonl(shared / "pairs.jsonl", example_rows(METHOD, 16))
    train = {"model": str(model), "dataset": str(data), "method": METHOD, "backend": "local", "max_steps": 2,
             "dry_run": True}
    no_code = Access.http(local_dirs=[str(shared)], local_jobs=True)
    for tool, arguments in (("submit_training", train), ("evaluate_model", {"model": str(model), "dataset": str(data),
                                                                             "backend": "local", "dry_run": True})):
        result = await call_once(tool, arguments, no_code)
        assert result.is_error and "modeling_pool.Normalize2" in result.content[0].text, result.content[0].text
        assert "--allow-scripts" in result.content[0].text and "Nothing was launched" in result.content[0].text
    assert not marker.exists()
    allowed = await call_once("submit_training", train, Access.http(local_dirs=[str(shared)], local_jobs=True,
                                                                    scripts=True))
    assert not allowed.is_error, allowed.content[0].text
    assert "trust_remote_code=False" in allowed.structured_content["script"]
    stdio = await call_once("submit_training", train)  # the local user's own folder
    assert not stdio.is_error, stdio.content[0].text
    if not router and importlib.util.find_spec("sentence_transformers"):
        import runpy

        script = tmp_path / "train.py"
        script.write_text(allowed.structured_content["script"])
        loaded = runpy.run_path(str(script), run_name="hftm_script_under_test")
        with warnings.catch_warnings(record=True) as caught:  # the libraries' own deprecations too
            warnings.simplefilter("always")
            loaded["sentence_model"](str(model))
        assert marker.read_text() == "ran"
        assert any("without `trust_remote_code=True` is deprecated" in str(w.message) for w in caught)  # why the server refuses: trust_remote_code=False does not stop it
