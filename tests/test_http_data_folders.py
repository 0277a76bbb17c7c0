"""What the job's reader makes of a local dataset, and not only what the checks read, stays inside the folders the
operator allowed an HTTP caller: a data folder's own declarations (README.md's configs, .huggingface.yaml,
dataset_infos.json), files of any format datasets reads (.txt, .tsv, .ndjson, ...) linked in from outside at any
depth, an image folder's nested links and metadata; and every row as datasets' json builder reads it (several
objects on one line, an object file being one row, an object of columns), so that validation and the job read the
same rows (trust review 3, 4)."""

import json
import os
from pathlib import Path

import pytest

from hf_train_mcp.access import Access
from hf_train_mcp_demo.tiny import example_rows, write_images, write_jsonl
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


def card(data_files: str) -> str:
    return f"---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: {data_files}\n---\n"


DECLARATIONS = {
    "readme-absolute": lambda private: ("README.md", card(f"{private}/secret.jsonl")),
    "readme-relative": lambda private: ("README.md", card("../../private-zone/secret.jsonl")),
    "huggingface-yaml": lambda private: (".huggingface.yaml", "configs:\n- config_name: default\n  data_files:\n"
                                                              f"  - split: train\n    path: {private}/secret.jsonl\n"),
}


@pytest.mark.parametrize("declaration", sorted(DECLARATIONS))
async def test_a_data_folder_that_names_its_own_data_files_is_refused(declaration: str, folders: tuple[Path, Path],
                                                                      offline, isolated_home: Path) -> None:
    """datasets obeys a local folder's configs wherever they point (load.py LocalDatasetModuleFactory: the card's
    data_files become the patterns); shown here on the installed datasets, then refused over HTTP."""
    from datasets import load_dataset

    shared, private = folders
    name, text = DECLARATIONS[declaration](private)
    (shared / "ds" / name).write_text(text)
    assert load_dataset(str(shared / "ds"), split="train")["text"] == [CANARY]  # the job's reader follows it
    assert "declares what datasets reads" in await refused(shared / "ds", shared)
    stdio = await call_once("validate_dataset", {"dataset": str(shared / "ds"), "method": "sft"})
    assert not stdio.is_error and stdio.structured_content["valid"]  # the local user may
    (shared / "ds" / name).write_text("---\nlicense: mit\n---\n# My data\n" if name == "README.md" else "{}\n")
    plain = await call_once("validate_dataset", {"dataset": str(shared / "ds"), "method": "sft"}, http(shared))
    assert plain.structured_content["valid"] == (name == "README.md"), plain.structured_content


LINKS = {  # every format datasets picks a builder for, at any depth, linked or hard-linked from outside
    "txt-symlinks": lambda ds, private: [(ds / f"train-more{i}.txt").symlink_to(private / "notes.txt")
                                         for i in range(2)],
    "txt-hard-links": lambda ds, private: [os.link(private / "notes.txt", ds / f"train-more{i}.txt") for i in range(2)],
    "nested-ndjson": lambda ds, private: [(ds / "more").mkdir(),
                                          (ds / "more" / "x.ndjson").symlink_to(private / "secret.jsonl")],
    "linked-subfolder": lambda ds, private: [(ds / "more").symlink_to(private, target_is_directory=True)],
}


@pytest.mark.parametrize("layout", sorted(LINKS))
async def test_a_data_folder_reading_files_from_outside_is_refused(layout: str, folders: tuple[Path, Path],
                                                                   offline, isolated_home: Path) -> None:
    shared, private = folders
    LINKS[layout](shared / "ds", private)
    shown = await refused(shared / "ds", shared)
    assert "links outside the folders" in shown and ("more" in shown), shown


async def test_a_data_folder_holding_a_rows_format_the_checks_do_not_read_is_refused(folders: tuple[Path, Path],
                                                                                    offline) -> None:
    """Its own .tsv, inside: datasets counts every file's extensions and reads the most common format (load.py
    infer_module_for_data_files_list), so the rows the checks read may not be what the job reads."""
    shared, _ = folders
    (shared / "ds" / "extra.tsv").write_text("text\thello\n")
    assert "'extra.tsv'" in await refused(shared / "ds", shared)


def test_the_rows_extensions_are_those_datasets_reads() -> None:
    """layout.ROWS_EXTENSIONS is datasets' table of extensions with a rows builder (every one but the media
    folders'), and .zip."""
    from datasets.packaged_modules import _EXTENSION_TO_MODULE

    from hf_train_mcp.data.layout import ROWS_EXTENSIONS

    media = {"imagefolder", "audiofolder", "videofolder", "meshfolder", "pdffolder", "niftifolder"}
    rows = {ext.lower() for ext, (module, _) in _EXTENSION_TO_MODULE.items() if module not in media}
    assert ROWS_EXTENSIONS == rows | {".zip"}


@pytest.mark.parametrize("layout", ["nested-link", "metadata-names-a-link"])
async def test_an_image_folder_reading_images_from_outside_is_refused(layout: str, folders: tuple[Path, Path],
                                                                      offline, isolated_home: Path) -> None:
    """Not only a class folder's own files: a subfolder of it (datasets walks the tree), a top-level link that
    metadata.jsonl names."""
    shared, private = folders
    folder, secret = shared / "images", private / "keys" / "id_rsa_canary.png"
    if layout == "nested-link":
        (folder / "blue" / "more").mkdir()
        (folder / "blue" / "more" / "x.png").symlink_to(secret)
    else:
        (folder / "extra.png").symlink_to(secret)
        rows = [{"file_name": f"{c}/{f.name}", "label": c} for c in ("blue", "red")
                for f in sorted((folder / c).iterdir())] + [{"file_name": "extra.png", "label": "red"}]
        write_jsonl(folder / "metadata.jsonl", rows)
    shown = await refused(folder, shared, CLASSIFY)
    assert ("blue/more/x.png" if layout == "nested-link" else "'extra.png'") in shown, shown
    if layout != "nested-link":
        (folder / "extra.png").unlink()  # metadata itself: datasets reads its rows, which the checks do not
        assert "image folder holds images only" in await refused(folder, shared, CLASSIFY)


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
