"""validate_dataset: per-method rules on local files, column-mapping suggestions, the Hub viewer API paths."""

import csv
import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp.errors import TrainError
from tests.emulator import Emulator, ViewerDataset

U, A = "user", "assistant"


def msgs(*turns: tuple[str, object]) -> list[dict]:
    return [{"role": r, "content": c} for r, c in turns]


CHAT = msgs((U, "Hi"), (A, "Hello!"))
# (case id, method, rows, expected format, expected mapping or None, expected issue substring or None, severity)
CASES = [
    ("sft messages", "sft", [{"messages": CHAT}] * 3, "messages", None, None, None),
    ("sft text", "sft", [{"text": "some text"}] * 3, "text", None, None, None),
    ("sft prompt completion", "sft", [{"prompt": "p", "completion": "c"}] * 3, "prompt_completion", None, None, None),
    ("sft conversational pc", "sft", [{"prompt": msgs((U, "q")), "completion": msgs((A, "a"))}] * 3,
     "conversational_prompt_completion", None, None, None),
    ("sft sharegpt", "sft", [{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}] * 3,
     "messages", {"messages": "conversations"}, None, None),
    ("sft instruction output", "sft", [{"instruction": "q", "output": "a"}] * 3, "prompt_completion",
     {"prompt": "instruction", "completion": "output"}, None, None),
    ("sft question answer", "sft", [{"question": "q", "answer": "a"}] * 3, "prompt_completion",
     {"prompt": "question", "completion": "answer"}, None, None),
    ("sft no assistant", "sft", [{"messages": msgs((U, "only a question"))}], "messages", None,
     "no assistant turn", "error"),
    ("sft bad role", "sft", [{"messages": [{"role": "human", "content": "x"}, {"role": A, "content": "y"}]}],
     "messages", None, "unknown role 'human'", "error"),
    ("sft empty content", "sft", [{"messages": msgs((U, ""), (A, "y"))}], "messages", None,
     "empty message content", "error"),
    ("sft content not string", "sft", [{"messages": msgs((U, 3), (A, "y"))}], "messages", None,
     "content in 'messages' must be a string", "error"),
    ("sft messages not list", "sft", [{"messages": "hello"}], "messages", None, "non-empty list", "error"),
    ("sft null text", "sft", [{"text": "ok"}, {"text": None}], "text", None, "null value in 'text'", "error"),
    ("sft empty text", "sft", [{"text": "   "}], "text", None, "empty string in 'text'", "error"),
    ("sft wrong type", "sft", [{"prompt": 5, "completion": "c"}], "prompt_completion", None,
     "'prompt' must be a string", "error"),
    ("sft long row", "sft", [{"text": "x" * 40_000}], "text", None, "very long value", "warning"),
    ("sft unknown columns", "sft", [{"foo": "a", "bar": "b"}], "unknown", None, "sft needs", "error"),
    ("dpo explicit", "dpo", [{"prompt": "p", "chosen": "good", "rejected": "bad"}] * 3, "preference", None, None, None),
    ("dpo implicit", "dpo", [{"chosen": msgs((U, "q"), (A, "good")), "rejected": msgs((U, "q"), (A, "bad"))}] * 2,
     "implicit_preference", None, None, None),
    ("dpo renamed", "dpo", [{"question": "q", "winner": "a", "loser": "b"}] * 2, "preference",
     {"chosen": "winner", "rejected": "loser", "prompt": "question"}, None, None),
    ("dpo identical", "dpo", [{"prompt": "p", "chosen": "same", "rejected": "same"}], "preference", None,
     "chosen and rejected are identical", "warning"),
    ("dpo implicit strings", "dpo", [{"chosen": "a", "rejected": "b"}], "implicit_preference", None,
     "start with the same prompt", "error"),
    ("dpo implicit shared text", "dpo", [{"chosen": "Q: hi A: yes", "rejected": "Q: hi A: no"}],
     "implicit_preference", None, None, None),
    ("dpo missing rejected", "dpo", [{"prompt": "p", "chosen": "a"}], "prompt_only", None, "dpo needs", "error"),
    ("dpo null chosen", "dpo", [{"prompt": "p", "chosen": None, "rejected": "b"}], "preference", None,
     "null value in 'chosen'", "error"),
    ("grpo prompt with answer", "grpo", [{"prompt": "2+2?", "answer": "4"}] * 2, "prompt_only", None,
     "'answer' can drive reward_funcs=['accuracy']", "warning"),
    ("grpo prompt only", "grpo", [{"prompt": "Write a poem"}] * 2, "prompt_only", None, "no reference column",
     "warning"),
    ("grpo question solution", "grpo", [{"question": "2+2?", "solution": "4"}] * 2, "prompt_only",
     {"prompt": "question"}, "'solution' can drive", "warning"),
    ("grpo conversational prompt", "grpo", [{"prompt": msgs((U, "2+2?")), "answer": "4"}], "prompt_only", None,
     None, None),
    ("grpo no prompt", "grpo", [{"text": "x"}], "text", None, "grpo needs", "error"),
    ("reward pairs", "reward", [{"chosen": "a", "rejected": "b"}] * 2, "implicit_preference", None, None, None),
    ("reward with prompt", "reward", [{"prompt": "p", "chosen": "a", "rejected": "b"}], "preference", None, None,
     None),
    ("reward renamed", "reward", [{"preferred": "a", "dispreferred": "b"}], "implicit_preference",
     {"chosen": "preferred", "rejected": "dispreferred"}, None, None),
    ("reward messages only", "reward", [{"messages": CHAT}], "messages", None, "reward needs", "error"),
]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(("case", "method", "rows", "fmt", "mapping", "issue", "severity"), CASES,
                         ids=[c[0] for c in CASES])
def test_local_dataset_rules(tmp_path: Path, case, method, rows, fmt, mapping, issue, severity) -> None:
    report = validate_dataset(str(write(tmp_path / "data.jsonl", rows)), method)
    assert report.detected_format == fmt
    assert report.num_rows == len(rows)
    if mapping is not None:
        assert report.suggested_column_mapping == mapping
    if issue is None:
        assert report.valid and not [i for i in report.issues if i.severity == "error"], report.issues
    else:
        found = [i for i in report.issues if issue in i.message]
        assert found, [i.message for i in report.issues]
        assert found[0].severity == severity
        assert report.valid == (severity != "error")


def test_row_numbers_point_at_the_bad_row(tmp_path: Path) -> None:
    rows = [{"messages": CHAT}] * 250 + [{"messages": msgs((U, "no answer"))}]
    report = validate_dataset(str(write(tmp_path / "d.jsonl", rows)), "sft")
    assert not report.valid  # files up to 20,000 rows are checked row by row
    bad = next(i for i in report.issues if "no assistant turn" in i.message)
    assert bad.row == 251  # 1-based: line 251 of the file


def test_a_user_column_mapping_is_checked_and_applied(tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", [{"q": "x", "a": "y"}] * 2)
    ok = validate_dataset(str(path), "sft", column_mapping={"prompt": "q", "completion": "a"})
    assert ok.valid and ok.detected_format == "prompt_completion"
    bad = validate_dataset(str(path), "sft", column_mapping={"prompt": "question"})
    assert not bad.valid and "do not exist" in bad.issues[0].message


def test_csv_parquet_json_and_folders_are_read(tmp_path: Path) -> None:
    with open(tmp_path / "d.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["prompt", "completion"])
        writer.writeheader()
        writer.writerows([{"prompt": "p", "completion": "c"}] * 4)
    assert validate_dataset(str(tmp_path / "d.csv"), "sft").num_rows == 4
    (tmp_path / "d.json").write_text(json.dumps([{"text": "t"}] * 3))
    assert validate_dataset(str(tmp_path / "d.json"), "sft").detected_format == "text"
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "parts"
    folder.mkdir()
    for i in range(2):
        pq.write_table(pa.Table.from_pylist([{"text": f"row {i}"}] * 5), folder / f"part-{i}.parquet")
    report = validate_dataset(str(folder), "sft")
    assert report.num_rows == 10 and report.valid


def test_broken_json_lines_are_reported_with_the_line(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"text": "ok"}\n{"text": \n')
    with pytest.raises(TrainError, match="line 2 is not valid JSON"):
        validate_dataset(str(tmp_path / "d.jsonl"), "sft")


def test_token_statistics_with_a_local_tokenizer(tmp_path: Path, tiny_model: Path) -> None:
    rows = [{"messages": msgs((U, "word " * n), (A, "ok"))} for n in (5, 10, 400)]
    report = validate_dataset(str(write(tmp_path / "d.jsonl", rows)), "sft", model=str(tiny_model), max_length=64)
    stats = report.token_stats
    assert stats is not None and stats.sampled_rows == 3 and stats.p50 < stats.max
    assert stats.share_over_max_length == pytest.approx(1 / 3, abs=0.01)
    assert stats.estimated_total_tokens == int(stats.mean * 3)


# --- Hub datasets through the emulated dataset viewer -------------------------------------------------------
@pytest.fixture
def viewer(hub: Emulator) -> Emulator:
    rows = [{"prompt": "p", "chosen": "a", "rejected": "b"}] * 12
    hub.datasets.update({
        "org/public": ViewerDataset({"default": {"train": rows}}),
        "org/private": ViewerDataset({"default": {"train": rows}}, access="private"),
        "org/gated": ViewerDataset({"default": {"train": rows}}, access="gated"),
        "org/noviewer": ViewerDataset({"default": {"train": rows}}, access="broken"),
        "org/multi": ViewerDataset({"en": {"train": rows}, "fr": {"train": rows[:3]}}),
    })
    return hub


@pytest.mark.anyio
async def test_a_public_hub_dataset_is_validated_without_downloading(viewer: Emulator) -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("validate_dataset", {"dataset": "org/public", "method": "dpo"})
    out = result.structured_content
    assert out["valid"] and out["config"] == "default" and out["num_rows"] == 12
    assert out["detected_format"] == "preference" and len(out["sample_rows"]) == 3
    paths = {r["path"] for r in viewer.requests if r["query"].get("dataset") == ["org/public"]}
    assert paths <= {"/is-valid", "/splits", "/first-rows", "/size"}


def test_a_private_dataset_is_read_with_the_users_token(viewer: Emulator, monkeypatch) -> None:
    report = validate_dataset("org/private", "dpo", token="hf_emu_write_token_0123456789")
    assert report.valid
    sent = [r for r in viewer.requests if r["query"].get("dataset") == ["org/private"]]
    assert all(r["headers"].get("authorization") == "Bearer hf_emu_write_token_0123456789" for r in sent)
    with pytest.raises(TrainError, match="log in"):
        validate_dataset("org/private", "dpo", token=None)


@pytest.mark.parametrize(("dataset", "message"), [
    ("org/gated", "accept its conditions at https://huggingface.co/datasets/org/gated"),
    ("org/missing", "was not found on the Hub"),
    ("org/noviewer", "dataset viewer is not available"),
    ("org/multi", "several configs: pass config= one of ['en', 'fr']"),
])
def test_hub_dataset_failures_each_get_their_own_message(viewer: Emulator, dataset: str, message: str) -> None:
    with pytest.raises(TrainError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        validate_dataset(dataset, "dpo", token="hf_emu_write_token_0123456789")


def test_an_explicit_config_is_used_and_an_unknown_one_is_refused(viewer: Emulator) -> None:
    report = validate_dataset("org/multi", "dpo", config="fr", token=None)
    assert report.config == "fr" and report.num_rows == 3
    with pytest.raises(TrainError, match="no config 'de'"):
        validate_dataset("org/multi", "dpo", config="de", token=None)


def test_an_unreachable_viewer_is_a_clear_network_error(offline) -> None:
    with pytest.raises(TrainError, match="dataset viewer failed: no connection"):
        validate_dataset("org/anything", "sft")


def test_a_missing_local_path_is_not_found_and_never_looked_up_on_the_hub(offline) -> None:
    import pytest as _pytest

    from hf_train_mcp.errors import TrainError

    for ref in ("data/train.jsonl", "missing.csv", "some/deep/folder"):
        with _pytest.raises(TrainError, match="file or folder not found"):
            validate_dataset(ref, "sft")
