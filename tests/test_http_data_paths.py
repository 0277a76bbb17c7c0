"""Every local file a job would open for an HTTP caller lies inside the folders the operator allowed, however its
name is spelled: an image path as a string or a {"path"} cell, in a list, relative with '..', absolute, through a
symlinked class folder or image, as a hard link, in any row (not only the sampled ones). Validation and planning
share the one check (skip_validation does not skip it); no answer names a file outside."""

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hf_train_mcp.access import Access
from hf_train_mcp_demo.tiny import example_rows, write_images, write_jsonl
from tests.helpers import call_once

pytestmark = pytest.mark.anyio
CLASSIFY = "image-classification"


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """(shared, private): images the caller may use, and an outside folder whose names must never show."""
    shared, private = tmp_path / "shared", tmp_path / "private-zone"
    rows = example_rows(CLASSIFY, 4)
    write_images(shared, rows)
    write_images(private, [{"image": "keys/id_rsa_canary.png"}])
    return shared, private


def http(shared: Path) -> Access:
    return Access.http(local_dirs=[str(shared)], local_jobs=True)


def outside_said(result: Any, *, unlisted: bool = False) -> str:
    """The answer refuses (an error, or a report that is not valid); `unlisted`: it names nothing of the outside
    folder (the rows themselves, the caller's own text, may be shown back)."""
    shown = result.content[0].text if result.is_error else json.dumps(result.structured_content)
    assert result.is_error or not result.structured_content["valid"], shown
    assert not unlisted or ("private-zone" not in shown and "id_rsa_canary" not in shown), shown
    return shown


def classify_rows(shared: Path, cell: Any, at: int = 1, n: int = 4) -> list[dict]:
    """n rows naming the images the fixture drew (relative to the data file), row `at` naming `cell` instead."""
    drawn = example_rows(CLASSIFY, 4)
    rows = [dict(drawn[i % 4]) for i in range(n)]
    rows[at]["image"] = cell
    return rows


@pytest.mark.parametrize("spelling", ["dict-absolute", "dict-relative", "dict-beside-bytes", "string-relative"])
async def test_an_image_cell_naming_a_file_outside_is_refused_however_spelled(folders: tuple[Path, Path],
                                                                             spelling: str, offline) -> None:
    shared, private = folders
    secret = private / "keys" / "id_rsa_canary.png"
    relative = os.path.relpath(secret, shared)  # '../private-zone/keys/...'
    cell = {"dict-absolute": {"path": str(secret)}, "dict-relative": {"path": relative, "bytes": None},
            "dict-beside-bytes": {"bytes": "aGk=", "path": str(secret)}, "string-relative": relative}[spelling]
    data = write_jsonl(shared / "data.jsonl", classify_rows(shared, cell))
    result = await call_once("validate_dataset", {"dataset": str(data), "method": CLASSIFY}, http(shared))
    assert "outside the folders" in outside_said(result)
    inside = write_jsonl(shared / "fine.jsonl", classify_rows(shared, {"path": "images/blue/1.png"}))
    ok = await call_once("validate_dataset", {"dataset": str(inside), "method": CLASSIFY}, http(shared))
    assert not ok.is_error and ok.structured_content["valid"], ok.structured_content["issues"]


async def test_a_vision_rows_list_of_path_cells_is_checked_each(folders: tuple[Path, Path], offline) -> None:
    shared, private = folders
    rows = example_rows("sft", 4, data_format="vision_messages")
    write_images(shared, rows)
    rows[2]["images"] = [rows[2]["images"][0], {"path": str(private / "keys" / "id_rsa_canary.png")}]
    data = write_jsonl(shared / "vlm.jsonl", rows)
    result = await call_once("validate_dataset", {"dataset": str(data), "method": "sft"}, http(shared))
    assert "outside the folders" in outside_said(result)


async def test_a_hard_link_inside_to_a_file_outside_is_refused(folders: tuple[Path, Path], offline) -> None:
    shared, private = folders
    os.link(private / "keys" / "id_rsa_canary.png", shared / "images" / "blue" / "linked.png")
    data = write_jsonl(shared / "data.jsonl", classify_rows(shared, "images/blue/linked.png"))
    result = await call_once("validate_dataset", {"dataset": str(data), "method": CLASSIFY}, http(shared))
    assert "hard link" in outside_said(result)
    os.link(data, private / "copy.jsonl")  # the data file itself, hard-linked from outside
    again = await call_once("validate_dataset", {"dataset": str(data), "method": CLASSIFY}, http(shared))
    assert "hard link" in outside_said(again)
    stdio = await call_once("validate_dataset", {"dataset": str(data), "method": CLASSIFY})  # the local user may
    assert not stdio.is_error and stdio.structured_content["valid"], stdio.structured_content


async def test_every_row_is_checked_not_only_the_sample(folders: tuple[Path, Path], offline) -> None:
    shared, private = folders
    rows = classify_rows(shared, {"path": str(private / "keys" / "id_rsa_canary.png")}, at=240, n=250)
    (shared / "late.json").write_text(json.dumps(rows))  # a JSON array is sampled by its first 200 rows
    result = await call_once("validate_dataset", {"dataset": str(shared / "late.json"), "method": CLASSIFY},
                             http(shared))
    shown = outside_said(result)
    assert "row 241" in shown and "outside the folders" in shown


async def test_planning_checks_the_paths_even_when_validation_is_skipped(folders: tuple[Path, Path], offline,
                                                                         isolated_home: Path) -> None:
    shared, private = folders
    data = write_jsonl(shared / "data.jsonl", classify_rows(shared, {"path": str(private / "keys" /
                                                                               "id_rsa_canary.png")}))
    request = {"model": "org/Model-1B", "dataset": str(data), "method": CLASSIFY, "backend": "local",
               "skip_validation": True, "dry_run": True}
    result = await call_once("submit_training", request, http(shared))
    assert "outside the folders" in outside_said(result) and "Nothing was submitted" in result.content[0].text
    assert not (isolated_home / "jobs").exists() or not any((isolated_home / "jobs").iterdir())


async def test_an_image_folder_class_that_links_out_is_refused_unlisted(folders: tuple[Path, Path], offline) -> None:
    shared, private = folders
    (shared / "images" / "stolen").symlink_to(private / "keys", target_is_directory=True)
    result = await call_once("validate_dataset", {"dataset": str(shared / "images"), "method": CLASSIFY},
                             http(shared))
    shown = outside_said(result, unlisted=True)
    assert "'stolen'" in shown and "links outside the folders" in shown
    (shared / "images" / "stolen").unlink()
    (shared / "images" / "blue" / "sneaky.png").symlink_to(private / "keys" / "id_rsa_canary.png")
    linked = await call_once("validate_dataset", {"dataset": str(shared / "images"), "method": CLASSIFY},
                             http(shared))
    assert "class 'blue' holds 1 image(s) that link outside" in outside_said(linked, unlisted=True)
    skipped = await call_once("submit_training", {"model": "org/Model-1B", "dataset": str(shared / "images"),
                                                   "method": CLASSIFY, "backend": "local", "skip_validation": True,
                                                   "dry_run": True}, http(shared))
    assert "link outside" in outside_said(skipped, unlisted=True)
    stdio = await call_once("validate_dataset", {"dataset": str(shared / "images"), "method": CLASSIFY})
    assert not stdio.is_error and stdio.structured_content["valid"]


@pytest.mark.parametrize("target", ["keys", "no-such-folder"])
def test_image_folder_classes_refuses_a_link_out_whether_its_target_exists(folders: tuple[Path, Path],
                                                                           target: str) -> None:
    """image_folder_classes followed a class link (is_dir()) before asking whether the caller may read it: a link
    to a server folder that exists was refused, one to a folder that does not was skipped, an answer that told
    the caller which exist wherever this function alone decides (a keyed retry's content planning)."""
    from hf_train_mcp.data.images import image_folder_classes

    shared, private = folders
    (shared / "images" / "probe").symlink_to(private / target, target_is_directory=True)
    with pytest.raises(ValueError, match="'probe' in the dataset folder links outside"):
        image_folder_classes(shared / "images", http(shared).allows_path)


async def test_a_data_folder_with_a_file_linked_from_outside_is_refused(folders: tuple[Path, Path], offline) -> None:
    shared, private = folders
    (private / "rows.jsonl").write_text(json.dumps({"text": "id_rsa_canary", "label": "x"}) + "\n")
    data = shared / "texts"
    write_jsonl(data / "train.jsonl", example_rows("text-classification", 4))
    (data / "more.jsonl").symlink_to(private / "rows.jsonl")  # the job's reader would read it with the rest
    result = await call_once("validate_dataset", {"dataset": str(data), "method": "text-classification"},
                             http(shared))
    assert "'more.jsonl'" in outside_said(result, unlisted=True)


def test_the_job_reads_an_image_from_where_validation_checked_it(tmp_path: Path) -> None:
    """The rendered script's image_path and validation's data_folder agree for every spelling: a {"path"} cell
    (without bytes) is read from the data's folder as a plain path is, and a folder of data files is the base of
    its relative names (the job's working folder never is)."""
    from hf_train_mcp.data.validate import data_folder
    from tests.helpers import load_rendered

    folder = tmp_path / "data"
    write_jsonl(folder / "rows.jsonl", [{"text": "x"}])
    script = load_rendered(tmp_path, dataset=str(folder / "rows.jsonl"))
    image_path, config = script["image_path"], script["CONFIG"]
    inside = str(folder / "images" / "a.png")
    assert image_path("images/a.png") == inside and data_folder(str(folder / "rows.jsonl")) == folder
    assert image_path({"path": "images/a.png", "bytes": None}) == {"path": inside, "bytes": None}
    assert image_path({"path": "images/a.png", "bytes": b"png"}) == {"path": "images/a.png", "bytes": b"png"}
    assert image_path(["https://example.com/a.png"]) == ["https://example.com/a.png"]
    config["dataset"] = str(folder)  # the folder itself: its relative names are read from it
    assert image_path("images/a.png") == inside and data_folder(str(folder)) == folder


async def test_a_follow_up_of_a_job_whose_rows_name_images_outside_is_refused(folders: tuple[Path, Path], offline,
                                                                              isolated_home: Path) -> None:
    """A job the local user ran on data whose rows name files outside the allowed folders: an HTTP caller's
    evaluation of it would open them again."""
    from hf_train_mcp.jobs.ledger import JobRecord, Ledger, now_iso
    from hf_train_mcp.contract.requests import TrainingRequest

    shared, private = folders
    data = write_jsonl(shared / "data.jsonl", classify_rows(shared, {"path": str(private / "keys" /
                                                                               "id_rsa_canary.png")}))
    output = isolated_home / "jobs" / "local-aaaa0019" / "output"
    output.mkdir(parents=True)
    request = TrainingRequest(model="org/Model-1B", dataset=str(data), method=CLASSIFY, backend="local", max_steps=2)
    Ledger().record(JobRecord(
        job_id="local-aaaa0019", backend="local", namespace=None, method=CLASSIFY, model="org/Model-1B",
        dataset=str(data), request_json=request.model_dump_json(), script_sha256="0" * 64, script_path=None,
        job_dir=str(output.parent), stage="COMPLETED", flavor="local-cpu", timeout="10m",
        job_url=f"file://{output.parent}", hub_model_id=None, model_url=f"file://{output}", trackio_url=None,
        output_bucket=None, estimated_hours=None, estimated_cost_usd=None, effective_batch_size=1,
        warnings_json="[]", idempotency_key=None, created_at=now_iso(), finished_at=now_iso(), output_dir=str(output)))
    result = await call_once("evaluate_model", {"model": "local-aaaa0019", "dry_run": True}, http(shared))
    assert result.is_error and "reads local files outside" in result.content[0].text, result.content[0].text
    assert "id_rsa_canary" not in result.content[0].text


@pytest.mark.parametrize("tool", ["estimate_cost", "submit_training", "export_model"])
async def test_a_model_folder_whose_files_link_out_is_refused(tool: str, folders: tuple[Path, Path], offline
                                                              ) -> None:
    """A Hub-cache snapshot inside the allowed folder, its weights linked to blobs outside: the folder itself
    passed the check and the job loaded the outside file."""
    shared, private = folders
    (private / "blobs").mkdir()
    (private / "blobs" / "weights").write_bytes(b"\0" * 64)
    model = shared / "snapshot"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
                                                   "hidden_size": 64, "num_hidden_layers": 2,
                                                   "intermediate_size": 128, "vocab_size": 100,
                                                   "num_attention_heads": 4}))
    (model / "model.safetensors").symlink_to(private / "blobs" / "weights")
    data = write_jsonl(shared / "chat.jsonl", example_rows("sft", 8))
    arguments = {"estimate_cost": {"model": str(model), "method": "sft", "num_examples": 8},
                 "submit_training": {"model": str(model), "dataset": str(data), "backend": "local", "dry_run": True},
                 "export_model": {"model": str(model), "format": "merged", "backend": "local", "dry_run": True}}[tool]
    result = await call_once(tool, arguments, access=http(shared))
    assert result.is_error and "every file of a model folder" in result.content[0].text, result.content[0].text
    assert "private-zone" not in result.content[0].text
    (model / "model.safetensors").unlink()
    (model / "model.safetensors").write_bytes(b"\0" * 64)  # the same folder holding its own file is fine
    assert not (await call_once("estimate_cost", arguments if tool == "estimate_cost" else
                                {"model": str(model), "method": "sft", "num_examples": 8},
                                access=http(shared))).is_error


@pytest.mark.parametrize("key", ["image", "path", "url"])
async def test_an_image_part_of_a_conversation_naming_a_file_outside_is_refused(key: str, folders: tuple[Path, Path],
                                                                              offline) -> None:
    """A turn's content part {"type": "image", "image": path}: a processor's chat template loads it
    (transformers' load_image opens a local path), so it is checked like an images column."""
    shared, private = folders
    rows = [dict(r) for r in example_rows("sft", 4, data_format="vision_messages")]
    rows[2]["messages"] = [{"role": "user", "content": [
        {"type": "image", key: str(private / "keys" / "id_rsa_canary.png")}, {"type": "text", "text": "What?"}]},
        {"role": "assistant", "content": "Blue."}]
    write_images(shared, rows[:2] + rows[3:])
    data = write_jsonl(shared / "parts.jsonl", rows)
    result = await call_once("validate_dataset", {"dataset": str(data), "method": "sft"}, http(shared))
    assert "outside the folders" in outside_said(result)


SPELLINGS = {  # every key a processor's chat template loads a part from (transformers' processing_utils.py)
    "image/base64": lambda p: {"type": "image", "base64": p},
    "image_url": lambda p: {"type": "image_url", "image_url": {"url": p}},
    "image_url/string": lambda p: {"type": "image_url", "image_url": p},
    "image/image-dict": lambda p: {"type": "image", "image": {"path": p}},
    "image+base64": lambda p: {"type": "image", "image": "images/blue/1.png", "base64": p},
    "video/path": lambda p: {"type": "video", "path": p},
    "video/video": lambda p: {"type": "video", "video": p},
    "audio/path": lambda p: {"type": "audio", "path": p},
    "audio/url": lambda p: {"type": "audio", "url": p},
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
async def test_every_part_spelling_a_processor_loads_is_checked(spelling: str, folders: tuple[Path, Path], offline
                                                                ) -> None:
    shared, private = folders
    rows = [dict(r) for r in example_rows("sft", 4, data_format="vision_messages")]
    rows[2]["messages"] = [{"role": "user", "content": [SPELLINGS[spelling](str(private / "keys" / "id_rsa_canary.png")),
                                                        {"type": "text", "text": "What?"}]},
                           {"role": "assistant", "content": "Blue."}]
    write_images(shared, rows[:2] + rows[3:])
    data = write_jsonl(shared / "parts.jsonl", rows)
    result = await call_once("validate_dataset", {"dataset": str(data), "method": "sft"}, http(shared))
    assert "outside the folders" in outside_said(result)
    skipped = await call_once("submit_training", {"model": "org/Model-1B", "dataset": str(data), "backend": "local",
                                                   "skip_validation": True, "dry_run": True}, http(shared))
    assert skipped.is_error and "outside the folders" in skipped.content[0].text


async def test_a_relative_part_name_may_not_climb_out_of_the_jobs_folder(folders: tuple[Path, Path], offline
                                                                         ) -> None:
    """A processor opens a part's relative name from the job's working folder, not the data's: '..' there leads
    into other jobs' folders, however harmless it is from the data's (here, an image beside the data)."""
    shared, _ = folders
    rows = [dict(r) for r in example_rows("sft", 4, data_format="vision_messages")]
    rows[1]["messages"] = [{"role": "user", "content": [{"type": "image", "path": "../images/blue/1.png"},
                                                        {"type": "text", "text": "What?"}]},
                           {"role": "assistant", "content": "Blue."}]
    write_images(shared / "sub", rows[:1] + rows[2:])
    data = write_jsonl(shared / "sub" / "climbs.jsonl", rows)
    result = await call_once("validate_dataset", {"dataset": str(data), "method": "sft"}, http(shared))
    assert "outside the folders" in outside_said(result)


@pytest.mark.parametrize("spelling", ["image/path", "image/url", "image/image", "image/base64", "image_url",
                                      "image+base64"])
def test_the_checked_keys_are_those_a_processor_opens(spelling: str, tmp_path: Path, tiny_model: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A tiny Idefics3 processor's apply_chat_template(tokenize=True), as TRL's vision collator ends up calling it:
    the file each spelling makes transformers open is one part_paths names."""
    import PIL.Image
    from transformers import AutoProcessor

    from hf_train_mcp.data.images import part_paths
    from tests.tiny_vlms import save_idefics3

    write_images(tmp_path, [{"image": "ok.png"}, {"image": "private/secret.png"}])
    secret, ok = str(tmp_path / "private" / "secret.png"), str(tmp_path / "ok.png")
    part = {"image/path": {"type": "image", "path": secret}, "image/url": {"type": "image", "url": secret},
            "image/image": {"type": "image", "image": secret}, "image/base64": {"type": "image", "base64": secret},
            "image_url": {"type": "image_url", "image_url": {"url": secret}},
            "image+base64": {"type": "image", "image": ok, "base64": secret}}[spelling]
    messages = [{"role": "user", "content": [part, {"type": "text", "text": "What?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Blue."}]}]
    processor = AutoProcessor.from_pretrained(save_idefics3(tmp_path / "vlm", tiny_model))
    opened, real = [], PIL.Image.open
    monkeypatch.setattr(PIL.Image, "open", lambda fp, *a, **k: (opened.append(str(fp)), real(fp, *a, **k))[1])
    try:
        processor.apply_chat_template([messages], tokenize=True, return_dict=True, return_tensors="pt")
    except ValueError:  # two images in one part, one <image> token: opened before the count is checked
        pass
    assert secret in opened, opened  # the library does open it
    assert secret in part_paths(messages)
