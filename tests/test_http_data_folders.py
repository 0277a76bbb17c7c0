"""What the job's reader makes of a local dataset, and not only what the checks read, stays inside the folders the
operator allowed an HTTP caller: every row as datasets' json builder reads it (several objects on one line, an
object file being one row, an object of columns), so that validation and the job read the same rows (trust review
4)."""

import json
from pathlib import Path

import pytest

from hf_train_mcp.access import Access
from hf_train_mcp.tiny import example_rows, write_images, write_jsonl
from tests.helpers import call_once

pytestmark = pytest.mark.anyio
CLASSIFY = "image-classification"
CANARY = "SECRET-CANARY-LINE"


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """(shared, private): a text dataset folder the caller may use, and an outside folder with rows of its own."""
    shared, private = tmp_path / "shared", tmp_path / "private-zone"
    write_jsonl(shared / "ds" / "train.jsonl", [{"text": f"inside {i}"} for i in range(8)])
    write_jsonl(private / "secret.jsonl", [{"text": CANARY}])
    (private / "notes.txt").write_text(CANARY + "\n")
    write_images(shared, example_rows(CLASSIFY, 4))
    write_images(private, [{"image": "keys/id_rsa_canary.png"}])
    return shared, private


def http(shared: Path) -> Access:
    return Access.http(local_dirs=[str(shared)], local_jobs=True)


async def refused(dataset: Path, shared: Path, method: str = "sft", *, unlisted: bool = True) -> str:
    """Validation says not valid and planning (validation skipped) refuses, both answers together; `unlisted`:
    neither names the outside folder (rows the caller wrote may be shown back)."""
    checked = await call_once("validate_dataset", {"dataset": str(dataset), "method": method}, http(shared))
    shown = checked.content[0].text if checked.is_error else json.dumps(checked.structured_content)
    assert checked.is_error or not checked.structured_content["valid"], shown
    planned = await call_once("submit_training", {"model": "org/Model-1B", "dataset": str(dataset), "method": method,
                                                  "backend": "local", "skip_validation": True, "dry_run": True},
                              http(shared))
    assert planned.is_error and "Nothing was submitted" in planned.content[0].text, planned.structured_content
    shown += "\n" + planned.content[0].text
    assert not unlisted or "private-zone" not in shown and CANARY not in shown, shown
    return shown


def image_rows(shared: Path, n: int, at: int, line: str) -> Path:
    """n lines of image rows (their images in the shared folder), line `at` replaced by `line`."""
    drawn = example_rows(CLASSIFY, 4)
    lines = [json.dumps(drawn[i % 4]) for i in range(n)]
    lines[at] = line
    (shared / "data.jsonl").write_text("\n".join(lines) + "\n")
    return shared / "data.jsonl"


@pytest.mark.parametrize("n", [8, 20_500])  # checked row by row; sampled (the line is not among the sample)
async def test_two_objects_on_one_line_are_both_checked(n: int, folders: tuple[Path, Path], offline,
                                                        isolated_home: Path) -> None:
    """pyarrow reads each of them as a row, where Python's json refuses the line: validation passed over it."""
    shared, private = folders
    drawn = example_rows(CLASSIFY, 4)
    outside = json.dumps({"image": str(private / "keys" / "id_rsa_canary.png"), "label": drawn[1]["label"]})
    data = image_rows(shared, n, n // 2 + 1, json.dumps(drawn[0]) + " " + outside)
    assert "outside the folders" in await refused(data, shared, CLASSIFY, unlisted=False)


async def test_a_json_object_file_is_one_row_as_the_job_reads_it(folders: tuple[Path, Path], offline,
                                                                 isolated_home: Path) -> None:
    """A {"rows": [...], ...} file: datasets' json builder is given no `field`, so it reads the object itself as
    the one row; validation read the list inside it (4 rows) and passed the object's own outside image."""
    from datasets import load_dataset

    shared, private = folders
    drawn = example_rows(CLASSIFY, 4)
    wrapper = {"rows": drawn, "image": str(private / "keys" / "id_rsa_canary.png"), "label": drawn[1]["label"]}
    (shared / "data.json").write_text(json.dumps(wrapper))
    assert "outside the folders" in await refused(shared / "data.json", shared, CLASSIFY, unlisted=False)
    wrapper["image"] = drawn[0]["image"]
    (shared / "data.json").write_text(json.dumps(wrapper))
    report = await call_once("validate_dataset", {"dataset": str(shared / "data.json"), "method": CLASSIFY},
                             http(shared))
    job = load_dataset("json", data_files=str(shared / "data.json"), split="train")
    assert (report.structured_content["num_rows"], report.structured_content["columns"]) == (
        job.num_rows, job.column_names), report.structured_content


LAYOUTS = {  # one file's text, as JSON texts a job's reader takes: every image it yields the check must see
    "two-on-a-line": lambda a, b: json.dumps({"image": a}) + " " + json.dumps({"image": b}) + "\n",
    "array": lambda a, b: json.dumps([{"image": a}, {"image": b}]),
    "one-object": lambda a, b: json.dumps({"rows": [{"image": a}], "image": b}),
    "pretty-object": lambda a, b: json.dumps({"image": b, "more": {"image": a}}, indent=2),
    "columns": lambda a, b: json.dumps({"image": [a, b]}, indent=2),
    "bom-lines": lambda a, b: "\ufeff" + json.dumps({"image": a}) + "\n" + json.dumps({"image": b}) + "\n",
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_image_the_jobs_reader_reads_is_one_the_check_sees(layout: str, tmp_path: Path) -> None:
    from datasets import load_dataset

    from hf_train_mcp.data.rows import every_row

    def strings(value):
        if isinstance(value, str):
            yield value
        for inner in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
            yield from strings(inner)

    data = tmp_path / "data.json"
    data.write_text(LAYOUTS[layout]("/outside/a.png", "/outside/b.png"), encoding="utf-8")
    job = load_dataset("json", data_files=str(data), split="train")
    read = set(strings(job[:]["image"])) & {"/outside/a.png", "/outside/b.png"}
    assert read, job[:]  # the job does read an outside name of this layout
    seen = {s for _, _, row in every_row([data], ("image",)) for s in strings(row["image"])}
    assert read <= seen, (read, seen)


def test_a_text_json_reads_otherwise_is_refused(tmp_path: Path) -> None:
    """What Python's json and pyarrow may read apart is refused, not guessed: a key twice, text not UTF-8."""
    from hf_train_mcp.data.rows import every_row

    (tmp_path / "twice.jsonl").write_text('{"image": "a.png", "image": "/outside/b.png"}\n')
    (tmp_path / "latin.jsonl").write_bytes('{"image": "caf\xe9.png"}\n'.encode("latin-1"))
    for name, why in (("twice.jsonl", "twice"), ("latin.jsonl", "UTF-8")):
        with pytest.raises(ValueError, match=why):
            list(every_row([tmp_path / name], ("image",)))
