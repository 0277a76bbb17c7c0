"""Local files on the Jobs backend (issue 33): the inputs and faults (a bucket batch or copy refused half-way, a
node's POST refused, a key found on the Hub, hidden files, embedded image bytes) under which a call must neither
refuse good data, nor launch a job that cannot read its files, nor say something false about the upload. Against the
emulated Hub, with the real huggingface_hub client and hf_xet (no mock of either)."""

import io
import shutil
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp_demo.tiny import write_jsonl
from tests.local_files import BUCKET, ROWS, TICKETS, VIT, input_volumes, supervise_until_second_run
from tests.emulator import Emulator, JobPlan
from tests.helpers import call, decoded_script, finished, script_config

pytestmark = pytest.mark.anyio


def _png(colour: tuple[int, int, int]) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), colour).save(out, "PNG")
    return out.getvalue()


async def test_a_parquet_with_embedded_image_bytes_is_uploaded_not_refused(hub: Emulator, here: Path) -> None:
    """A parquet whose image cells hold their bytes beside a bare file name ({"bytes": ..., "path": "0.png"}: what
    `datasets` writes, and every image parquet downloaded from the Hub holds) is read by the job from the bytes
    (the template's image_path opens a {"path"} cell only without bytes) and validation accepts it; the upload
    planner refused it: "names the image '0.png', which is not a file beside the data: the job would fail on that
    row", which is false (jobs/uploads.py _named_images)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"image": {"bytes": _png((255, 0, 0) if i % 2 else (0, 0, 255)), "path": f"{i}.png"},
             "label": ["blue", "red"][i % 2]} for i in range(8)]
    pq.write_table(pa.Table.from_pylist(rows), here / "train.parquet")
    vit = hub.serve_model(VIT)
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {
            "model": vit, "dataset": "./train.parquet", "method": "image-classification", "backend": "hf",
            "hub_model_id": "emu-user/colours", "max_steps": 5})
    assert not result.is_error, result.content[0].text
    (spec,) = hub.posted_jobs()[before:]
    (volume,) = input_volumes(spec)
    assert script_config(decoded_script(spec))["dataset"] == f"{volume['mountPath']}/train.parquet"
    assert result.structured_content["uploads"][0]["files"] == 1


QWEN_VL = Path(__file__).parent / "data" / "configs" / "Qwen--Qwen2-VL-2B-Instruct"


@pytest.mark.parametrize("spelling", ["absolute", "relative"])
async def test_a_conversation_naming_local_image_files_is_refused_for_a_hub_job(hub: Emulator, here: Path,
                                                                                spelling: str) -> None:
    """Rows whose turns name this machine's image files in a content part ({"type": "image", "path": ...}: the
    processor's chat template opens it from the job's working folder, transformers' load_image) were planned with
    the data file alone: the job on the Hub's machines cannot open those files and fails on the first row, billed.
    Refused now, saying where to name images instead; nothing uploaded or launched (jobs/uploads.py plan_dataset)."""
    from hf_train_mcp_demo.tiny import example_rows, write_images

    rows = [dict(r) for r in example_rows("sft", 6, data_format="vision_messages")]
    write_images(here, rows)
    for row in rows:
        image = row.pop("images")[0]
        named = str(here / image) if spelling == "absolute" else image
        row["messages"][0]["content"] = [{"type": "image", "path": named}, {"type": "text", "text": "What colour?"}]
    write_jsonl(here / "chat.jsonl", rows)
    model = hub.serve_model(QWEN_VL)
    before, batches = len(hub.posted_jobs()), hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {"model": model, "dataset": "./chat.jsonl", "backend": "hf",
                                                            "hub_model_id": "emu-user/vl", "max_steps": 2})
    assert len(hub.posted_jobs()) == before and hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches
    assert result.is_error, result.structured_content["uploads"]
    text = result.content[0].text
    assert "chat.jsonl row 1" in text and "images" in text and "Nothing was uploaded or launched" in text, text


def _inputs(hub: Emulator) -> list[str]:
    return sorted(p for p in hub.buckets.get(BUCKET, {}).get("files", {}) if p.startswith("hf-train-mcp/inputs/"))


async def test_an_upload_refused_half_way_says_which_files_are_already_in_the_bucket(
        hub: Emulator, here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bucket's batch call refused after three of eight batches went: the answer said only the refusal, while
    three of the user's private images now lie in the bucket. It says where, how many, and how to delete them, as
    an answer after a refused POST does (backends/jobs_uploads.py _send_files)."""
    from hf_train_mcp.backends import jobs_uploads
    from hf_train_mcp_demo.tiny import example_rows, write_images

    monkeypatch.setattr(jobs_uploads, "BATCH_FILES", 1)  # one file a batch: the fourth batch is refused
    write_images(here, example_rows("image-classification", 8))
    hub.fail_next("POST", rf"/api/buckets/{BUCKET}/batch", 400, skip=3)
    vit = hub.serve_model(VIT)
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {
            "model": vit, "dataset": "./images", "method": "image-classification", "backend": "hf",
            "hub_model_id": "emu-user/colours", "max_steps": 5})
    left = _inputs(hub)
    assert result.is_error and len(hub.posted_jobs()) == before and len(left) == 3, left
    text = result.content[0].text
    place = left[0].rsplit("/", 2)[0]
    assert f"{BUCKET}/{place}" in text and "3 file(s)" in text and "hf buckets rm" in text, text


@pytest.mark.detached  # the run's watcher
async def test_a_run_stopped_on_a_node_that_could_not_be_posted_says_where_the_files_are(hub: Emulator,
                                                                                         here: Path) -> None:
    """A run across two machines on a local dataset whose node 1 POST is refused: rank 0 is canceled and the
    answer is an error, which said nothing of the user's data now in the bucket (jobs/launcher.py launch: only a
    refused rank 0 POST said it)."""
    hub.fail_next("POST", r"/api/jobs/emu-user", 400, skip=1)
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {**TICKETS, "nodes": 2, "flavor": "a100x8",
                                                            "peft": "full", "timeout": "1h"})
    (place,) = {p.rsplit("/", 1)[0] for p in _inputs(hub)}
    text = result.content[0].text
    assert result.is_error and "node 1 of 2 could not be submitted" in text, text
    assert f"{BUCKET}/{place}" in text and "hf buckets rm" in text and ".." not in text, text


def _image_folder_call(hub: Emulator, here: Path) -> tuple[list[dict], dict]:
    """Eight labelled pictures in ./images and the call that trains a ViT on them on Jobs."""
    from hf_train_mcp_demo.tiny import example_rows, write_images

    rows = example_rows("image-classification", 8)
    write_images(here, rows)
    return rows, {"model": hub.serve_model(VIT), "dataset": "./images", "method": "image-classification",
                  "backend": "hf", "hub_model_id": "emu-user/colours", "max_steps": 5}


async def test_a_dry_run_counts_only_the_bytes_that_would_travel(hub: Emulator, here: Path) -> None:
    """An image folder with one picture changed since its upload: the launch copies the seven unchanged files inside
    the bucket by their xet hash and sends one file's bytes, but the dry run (and the upload question, which counts
    the same way: Launcher.count_uploads) said all eight would be sent: new_bytes counted every file missing from
    the new place (backends/jobs_uploads.py send, dry_run)."""
    from PIL import Image

    rows, arguments = _image_folder_call(hub, here)
    async with Client(build_server()) as client:
        await call(client, "submit_training", arguments)
        changed = here / rows[0]["image"]
        Image.new("RGB", (32, 32), (250, 10, 10)).save(changed)
        plan = await call(client, "submit_training", {**arguments, "dry_run": True})
        launched = await call(client, "submit_training", arguments)
    assert launched["uploads"][0]["new_bytes"] == changed.stat().st_size
    assert plan["uploads"][0]["new_bytes"] == changed.stat().st_size, plan["uploads"]


async def test_the_estimate_counts_the_images_a_renamed_image_column_names(hub: Emulator, here: Path) -> None:
    """Rows whose images column is called `photos` (an alias validation maps to `images`): the launch uploads the
    data file and every image it names, but estimate_cost said only the data file's bytes would be sent (its upload
    plan read the columns unmapped: planning/estimation.py _upload_time)."""
    from hf_train_mcp_demo.tiny import example_rows, write_images

    rows = [dict(r) for r in example_rows("sft", 6, data_format="vision_messages")]
    write_images(here, rows)
    write_jsonl(here / "chat.jsonl", [{"messages": r["messages"], "photos": r["images"]} for r in rows])
    model = hub.serve_model(QWEN_VL)
    async with Client(build_server()) as client:
        plan = await call(client, "submit_training", {"model": model, "dataset": "./chat.jsonl", "backend": "hf",
                                                      "hub_model_id": "emu-user/vl", "max_steps": 2, "dry_run": True})
        estimate = await call(client, "estimate_cost", {"model": model, "dataset": "./chat.jsonl", "backend": "hf"})
    from hf_train_mcp.jobs.uploads import shown_bytes

    assert plan["uploads"][0]["files"] == 7
    assert estimate["assumptions"]["upload"].startswith(shown_bytes(plan["uploads"][0]["bytes"])), estimate


async def test_a_key_found_on_the_hub_uploads_nothing_and_records_no_copy_the_job_never_read(
        hub: Emulator, here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retry with the same idempotency_key once the ledger is lost (another HF_TRAIN_HOME) adopts the job the Hub
    holds under the key's label. The launch uploaded the local file before it looked the key up: a file edited in
    between went to the bucket though nothing launched (jobs/launcher.py launch). The edited file is now a
    conflict (the key's label holds the data's content): nothing uploaded, nothing launched; the unchanged file is
    the job, adopted, recorded as reading the copy it mounts (it recorded none, so its evaluation, the local file
    gone, had nothing to read), which its evaluation mounts."""
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    first_key = {**TICKETS, "idempotency_key": "same-data", "eval_split": 0.2}
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", first_key)
    (mounted,) = input_volumes(hub.posted_jobs()[-1])
    original = (here / "tickets.jsonl").read_bytes()
    write_jsonl(here / "tickets.jsonl", [{**row, "completion": row["completion"] + "!"} for row in ROWS])
    monkeypatch.setenv("HF_TRAIN_HOME", str(tmp_path / "another-home"))  # the ledger lost
    before, batches = len(hub.posted_jobs()), hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
    async with Client(build_server()) as client:
        edited = await client.call_tool("submit_training", first_key)
        assert edited.is_error and f"job {job['job_id']}" in edited.content[0].text, edited.content[0].text
        (here / "tickets.jsonl").write_bytes(original)
        again = await call(client, "submit_training", first_key)
    assert again["job_id"] == job["job_id"] and len(hub.posted_jobs()) == before
    assert hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches, "uploaded for a job it did not launch"
    from hf_train_mcp.jobs.ledger import Ledger

    recorded = [entry["place"] for entry in Ledger().get(job["job_id"]).uploads]
    assert recorded == [mounted["path"]], (recorded, mounted["path"])
    (here / "tickets.jsonl").unlink()
    async with Client(build_server()) as client:
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        await call(client, "evaluate_model", {"model": job["job_id"], "backend": "hf"})
    assert input_volumes(hub.posted_jobs()[-1]) == [mounted]
    assert hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches


@pytest.mark.parametrize("tool", ["submit_training", "export_model"])
async def test_a_retry_after_the_local_files_were_edited_is_a_conflict_not_the_old_job(
        hub: Emulator, here: Path, tiny_model: Path, tool: str) -> None:
    """The same idempotency_key after the local dataset (or model folder) was edited returned the job trained on
    the old bytes, as if it read the new ones: the key's hash was the call's arguments, and a path is the same
    argument whatever it holds. The content of the local files a call names is part of the call now, as
    run_script's folder is (jobs/retries.py, jobs/uploads.py named_content): unchanged files are a retry (the old
    job, nothing sent), edited ones a conflict (nothing sent, nothing launched)."""
    if tool == "submit_training":
        edited, arguments = here / "tickets.jsonl", {**TICKETS, "idempotency_key": "tickets-1"}
    else:
        shutil.copytree(tiny_model, here / "merged")
        edited = here / "merged" / "config.json"
        arguments = {"model": "./merged", "backend": "hf", "format": "merged", "hub_model_id": "emu-user/merged",
                     "idempotency_key": "merged-1"}
    async with Client(build_server()) as client:
        job = await call(client, tool, arguments)
        before, batches = len(hub.posted_jobs()), hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
        again = await call(client, tool, arguments)
        assert again["job_id"] == job["job_id"]
        edited.write_bytes(edited.read_bytes().replace(b"}", b', "edited": 1}', 1) if tool != "submit_training"
                           else edited.read_bytes() + b'{"prompt": "one more", "completion": "row"}\n')
        result = await client.call_tool(tool, arguments)
    text = result.content[0].text
    assert result.is_error and "local files content" in text and job["job_id"] in text, text
    assert len(hub.posted_jobs()) == before and hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches


async def test_a_sweep_retried_after_its_data_was_edited_is_a_conflict(hub: Emulator, here: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep's key is held to the data its runs uploaded, as a job's is: the same key after tickets.jsonl was
    edited returned the old sweep, trained on the old bytes (planning/copies.py sweep_data_edited)."""
    from hf_train_mcp.sweeps import sweep as sweeps

    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)  # every run starts at once
    arguments = {"base": TICKETS, "grid": {"learning_rate": [1e-4, 2e-4]}, "max_parallel": 2,
                 "idempotency_key": "lr-sweep"}
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", arguments)
        before, batches = len(hub.posted_jobs()), hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
        assert (await call(client, "submit_sweep", arguments))["sweep_id"] == sweep["sweep_id"]
        write_jsonl(here / "tickets.jsonl", [{**row, "completion": row["completion"] + "!"} for row in ROWS])
        result = await client.call_tool("submit_sweep", arguments)
    text = result.content[0].text
    assert result.is_error and "local files content" in text and sweep["sweep_id"] in text, text
    assert len(hub.posted_jobs()) == before and hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches


async def test_a_sweep_over_image_columns_mounts_each_runs_own_images(hub: Emulator, here: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid over column_mapping that picks another image column of the same rows file: the supervisor's later
    run mounted the copy the first run uploaded (copies matched by the file's path), which holds the other
    column's images only, and the job failed on its first row, billed. Each run reads the copy of its own
    mapping (planning/copies.py sweep_copies); a retry of the sweep's key with nothing edited is no conflict."""
    from PIL import Image
    from hf_train_mcp.sweeps import sweep as sweeps

    rows = []
    for i in range(8):
        label = ["blue", "red"][i % 2]
        for column in ("a", "b"):
            (here / column).mkdir(exist_ok=True)
            Image.new("RGB", (16, 16), (40 * i, 0, 255 if column == "a" else 0)).save(here / column / f"{i}.png")
        rows.append({"photo_a": f"a/{i}.png", "photo_b": f"b/{i}.png", "label": label})
    write_jsonl(here / "rows.jsonl", rows)
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)  # this test is the supervisor
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    arguments = {"base": {"model": hub.serve_model(VIT), "dataset": "./rows.jsonl", "method": "image-classification",
                          "backend": "hf", "hub_model_id": "emu-user/colours", "max_steps": 5},
                 "grid": {"column_mapping": [{"image": "photo_a"}, {"image": "photo_b"}]}, "max_parallel": 1,
                 "idempotency_key": "two-columns"}
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", arguments)
    supervise_until_second_run(sweep["sweep_id"], before, hub)
    from hf_train_mcp.jobs.ledger import Ledger

    assert len(hub.posted_jobs()) == before + 2, Ledger().sweep_runs(sweep["sweep_id"])[1].note
    (first,), (second,) = (input_volumes(spec) for spec in hub.posted_jobs()[before:])
    files = hub.buckets[BUCKET]["files"]
    for volume, column in ((first, "a"), (second, "b")):
        held = {path.rsplit("/", 2)[-2] for path in files if path.startswith(volume["path"] + "/")
                and path.endswith(".png")}
        assert held == {column}, (volume["path"], held)
    async with Client(build_server()) as client:
        assert (await call(client, "submit_sweep", arguments))["sweep_id"] == sweep["sweep_id"]


async def test_a_refused_copy_inside_the_bucket_sends_the_files_instead(hub: Emulator, here: Path) -> None:
    """A new version of an image folder copies its unchanged files from the earlier version's place by xet hash
    (a server-side shortcut). That copy refused (the batch answered 422) failed the whole submission, though every
    file is right here to send, and said the same call would be refused again: the refused copies are uploaded
    instead (backends/jobs_uploads.py _send_batch)."""
    import hf_xet
    from PIL import Image

    rows, arguments = _image_folder_call(hub, here)
    async with Client(build_server()) as client:
        await call(client, "submit_training", arguments)
        Image.new("RGB", (32, 32), (250, 10, 10)).save(here / rows[0]["image"])
        hub.fail_next("POST", rf"/api/buckets/{BUCKET}/batch", 422)  # the copy batch (sent before the upload)
        before = len(hub.posted_jobs())
        result = await client.call_tool("submit_training", arguments)
    assert not result.is_error, result.content[0].text
    (spec,) = hub.posted_jobs()[before:]
    (volume,) = input_volumes(spec)
    local = {Path(r["image"]).relative_to("images").as_posix(): here / r["image"] for r in rows}
    held = {p[len(volume["path"]) + 1:]: e["xetHash"] for p, e in hub.buckets[BUCKET]["files"].items()
            if p.startswith(volume["path"] + "/")}
    assert held == {name: hf_xet.hash_files([str(path)])[0].hash for name, path in local.items()}
    assert result.structured_content["uploads"][0]["new_bytes"] == sum(p.stat().st_size for p in local.values())


async def test_a_measurement_on_a_local_dataset_says_where_its_files_went(hub: Emulator, here: Path) -> None:
    """estimate_cost(measure=True) launches a measurement job that reads the local dataset from the bucket: the
    file is uploaded, yet the estimate's answer said nothing of where it went, how much, or how to delete it, as
    every other launching answer does (issue 33; planning/estimation.py _measure)."""
    async with Client(build_server()) as client:
        estimate = await call(client, "estimate_cost", {"model": TICKETS["model"], "dataset": "./tickets.jsonl",
                                                        "backend": "hf", "flavor": "a10g-small", "measure": True})
    (place,) = {p.rsplit("/", 1)[0] for p in _inputs(hub)}
    said = " ".join(estimate["warnings"])
    assert estimate["measurement"]["job_id"] and f"{BUCKET}/{place}" in said and "hf buckets rm" in said, said


async def test_an_image_folder_with_hidden_macos_files_is_uploaded_without_them(hub: Emulator, here: Path) -> None:
    """A folder copied from a Mac holds AppleDouble files beside each picture (`red/._0.png`: metadata, no image).
    `datasets` never reads a hidden file of a folder (data_files.py
    _is_unrequested_hidden_file_or_is_inside_unrequested_hidden_dir), so the job reads the pictures alone, but the
    upload planner refused the folder ("cannot be read: 'red/._0.png' ... the job fails on the first"): a false
    refusal. The hidden files are left home now (jobs/uploads.py plan_dataset)."""
    from hf_train_mcp_demo.tiny import example_rows, write_images

    vit = hub.serve_model(VIT)
    rows = example_rows("image-classification", 8)
    write_images(here, rows)
    for row in rows:
        picture = here / row["image"]
        (picture.parent / f"._{picture.name}").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {
            "model": vit, "dataset": "./images", "method": "image-classification", "backend": "hf",
            "hub_model_id": "emu-user/colours", "max_steps": 5})
    assert not result.is_error, result.content[0].text
    assert len(hub.posted_jobs()) == before + 1
    assert result.structured_content["uploads"][0]["files"] == 8
    assert not any("/._" in p for p in _inputs(hub))


async def test_a_data_folders_hidden_files_are_neither_judged_nor_uploaded(hub: Emulator, here: Path) -> None:
    """A data folder edited in Jupyter holds `.ipynb_checkpoints/part-0-checkpoint.jsonl` (a stale copy) and, from a
    Mac, `._part-0.jsonl`. The job's `datasets` never reads hidden files or folders (data_files.py
    _is_unrequested_hidden_file_or_is_inside_unrequested_hidden_dir), but they were validated and uploaded with the
    data (and named the folder's content): the bucket got files the job never reads (data/local.py data_files)."""
    folder = here / "export"
    write_jsonl(folder / "part-0.jsonl", ROWS)
    write_jsonl(folder / ".ipynb_checkpoints" / "part-0-checkpoint.jsonl", ROWS[:3])
    (folder / "._part-0.jsonl").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {**TICKETS, "dataset": "./export"})
    assert not result.is_error, result.content[0].text
    (upload,) = result.structured_content["uploads"]
    assert upload["files"] == 1 and [p.rsplit("/", 1)[1] for p in _inputs(hub) if upload["path"] in p] == [
        "part-0.jsonl"], _inputs(hub)


def test_the_bucket_named_without_the_hub_client_is_the_clients() -> None:
    """The launcher names the jobs-artifacts bucket of an adopted job without importing huggingface_hub (a fast
    start); it is the client's own bucket name."""
    from huggingface_hub import constants
    from hf_train_mcp.bucket_inputs import ARTIFACTS_BUCKET

    assert ARTIFACTS_BUCKET == constants.HF_JOBS_ARTIFACTS_BUCKET_NAME
