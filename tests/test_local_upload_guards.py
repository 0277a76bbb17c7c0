"""Local files on the Jobs backend (issue 33), the guards an outside review asked for: what reaches the bucket is
exactly what was judged (no file outside the allowed folders, no credential, no bytes changed since the check),
the caps hold per call and per sweep, a sweep's runs share one copy, and an answer says where the files are when
the job could not be posted. Against the emulated Hub, with the real huggingface_hub client and hf_xet (no mock of
either)."""

import os
import shutil
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.access import Access
from hf_train_mcp.jobs.ledger import Ledger
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.sweeps import sweep as sweeps
from hf_train_mcp_demo.tiny import write_jsonl
from tests.local_files import (BUCKET, CONFIGS, ROWS, TICKETS, VIT, input_volumes, supervise_until_second_run,
                               xet_hash)
from tests.emulator import Emulator, JobPlan
from tests.helpers import call

pytestmark = pytest.mark.anyio


def placed(hub: Emulator, place: str) -> dict[str, str]:
    """name inside an upload's folder -> the xet hash the bucket holds for it."""
    prefix = place + "/"
    return {path[len(prefix):]: entry["xetHash"] for path, entry in hub.buckets.get(BUCKET, {}).get("files", {}).items()
            if path.startswith(prefix)}


def held_hashes(hub: Emulator) -> set[str]:
    return {entry["xetHash"] for entry in hub.buckets.get(BUCKET, {}).get("files", {}).values()}


def _swapped_in(path: Path, other: Path) -> None:
    """Replace `path` with `other`'s bytes of the same length, keeping path's modification time (rsync -t, cp -p,
    tar x and a determined caller all do): what _unchanged() compares is size and mtime alone."""
    info = path.stat()
    data = other.read_bytes()[: info.st_size].ljust(info.st_size, b"\n")
    path.write_bytes(data)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def _asking(action) -> object:
    """An elicitation callback that runs `action` while the user reads the question (the window between the
    plan the question is about and the upload), then accepts."""
    from mcp.types import ElicitResult

    async def callback(context, params) -> ElicitResult:
        action()
        return ElicitResult(action="accept", content={"submit": True})

    return callback


@pytest.mark.parametrize("secret", ["server-token", "other-hf-token", "aws-keys"])
async def test_data_holding_a_credential_is_not_uploaded(hub: Emulator, here: Path, secret: str) -> None:
    """A JSONL holding this server's own token (known exactly, whatever its form), another Hugging Face user token
    or an AWS access key pair is refused by its content (user_scripts/source.py marks_secret): nothing uploaded,
    nothing launched, and the refusal says what to do."""
    from tests.conftest import WRITE_TOKEN

    text = {"server-token": f"use the token {WRITE_TOKEN} to log in",
            "other-hf-token": "export HF_TOKEN=hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh",
            "aws-keys": "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = "
                        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}[secret]
    write_jsonl(here / "tickets.jsonl", [*ROWS, {"prompt": "how do I deploy?", "completion": text}])
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", TICKETS)
    assert xet_hash(here / "tickets.jsonl") not in held_hashes(hub), "a file holding a credential was uploaded"
    assert result.is_error and len(hub.posted_jobs()) == before
    message = result.content[0].text
    assert "credential" in message and "Move it out" in message and WRITE_TOKEN not in message, message


async def test_a_refused_xet_write_token_is_said_as_a_refusal_not_a_timeout(hub: Emulator, here: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A token that may not write the bucket's xet storage (GET .../xet-write-token answers 403, as for a
    fine-grained token without bucket write) is a refusal: said at once as one (what to do: a token with write
    access), never retried until the deadline and answered "the Hub did not answer in time". hf_xet's error carries
    no status huggingface_hub's way (backends/jobs_uploads.py _writing)."""
    from hf_train_mcp.backends import jobs_uploads

    monkeypatch.setattr(jobs_uploads, "LIST_DEADLINE_S", 4.0)  # production: 120 s of the same retries
    hub.fail_next("GET", rf"/api/buckets/{BUCKET}/xet-write-token", 403, count=100)
    asked = hub.count("GET", rf"/api/buckets/{BUCKET}/xet-write-token")
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", TICKETS)
    assert result.is_error
    assert "did not answer in time" not in result.content[0].text, result.content[0].text
    assert "write access" in result.content[0].text and result.meta["hf-train-mcp/error-code"] == "auth"
    assert len(hub.posted_jobs()) == before
    assert hub.count("GET", rf"/api/buckets/{BUCKET}/xet-write-token") - asked <= 3  # a refusal is not retried


async def test_a_refused_post_after_the_upload_says_the_files_are_in_the_bucket(hub: Emulator, here: Path) -> None:
    """The upload happens before the POST; a POST then refused (402: no credits) keeps its advice and says where the
    user's private data now is, how much, and how to delete it (issue 33), as an answer that launched does
    (jobs/launcher.py _left_in_bucket)."""
    hub.fail_next("POST", r"/api/jobs/[^/]+", 402, count=3)
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", TICKETS)
    text = result.content[0].text
    uploaded = [p for p in hub.buckets.get(BUCKET, {}).get("files", {}) if p.startswith("hf-train-mcp/inputs/")]
    assert result.is_error and uploaded
    place = uploaded[0].rsplit("/", 1)[0]
    assert place in text and "hf buckets rm" in text and "billing" in text, text


async def test_a_link_swapped_in_while_the_user_is_asked_is_not_uploaded_over_http(
        hub: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP: an image of an allowed folder replaced, while the user is asked about the upload, by a link out of the
    folder to a file of the same size and modification time is not uploaded: at send time each file is opened once,
    must be the file planned (device, inode, change time) with the planned sha256, and is sent through that open
    descriptor (backends/jobs_uploads.py _pinned; jobs/uploads.py UploadFile.same)."""
    from hf_train_mcp_demo.tiny import example_rows, write_images

    allowed, outside = tmp_path / "shared", tmp_path / "private-zone"
    vit = hub.serve_model(VIT)
    rows = example_rows("image-classification", 8)
    write_images(allowed, rows)
    image = allowed / rows[0]["image"]
    outside.mkdir()
    (outside / "operator-notes.txt").write_bytes(b"CANARY operator secret line\n" * 400)
    monkeypatch.setenv("HF_TRAIN_CONFIRM_UPLOAD_ABOVE_GB", "0.000001")  # 1 kB: the question is asked
    twin = outside / "twin.bin"

    def swap() -> None:  # the outside bytes, cut to the image's size, given the image's mtime; then the link
        info = image.stat()
        twin.write_bytes((outside / "operator-notes.txt").read_bytes()[: info.st_size])
        os.utime(twin, ns=(info.st_atime_ns, info.st_mtime_ns))
        image.unlink()
        image.symlink_to(twin)

    before = len(hub.posted_jobs())
    async with Client(build_server(access=Access.http(local_dirs=[str(allowed)])),
                      elicitation_callback=_asking(swap)) as client:
        result = await client.call_tool("submit_training", {
            "model": vit, "dataset": str(allowed / "images"), "method": "image-classification", "backend": "hf",
            "hub_model_id": "emu-user/colours", "max_steps": 5})
    assert image.is_symlink()
    assert xet_hash(twin) not in held_hashes(hub), "a file outside the allowed folder was uploaded"
    assert result.is_error and len(hub.posted_jobs()) == before


async def test_a_place_never_holds_other_bytes_than_its_name_says(hub: Emulator, here: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes changed after the plan without changing size or mtime are refused at send time (the sha256 sent is
    the sha256 planned), so the place named by the planned sha256 never holds other bytes: the next submission of
    the original file uploads it there and its job reads it (backends/jobs_uploads.py _pinned)."""
    original = (here / "tickets.jsonl").read_bytes()
    edited = original.replace(b"printer", b"scanner")  # same length
    assert len(edited) == len(original) and edited != original
    monkeypatch.setenv("HF_TRAIN_CONFIRM_UPLOAD_ABOVE_GB", "0.000001")

    def edit() -> None:
        other = here / "edited.jsonl"
        other.write_bytes(edited)
        _swapped_in(here / "tickets.jsonl", other)

    async with Client(build_server(), elicitation_callback=_asking(edit)) as client:
        first = await client.call_tool("submit_training", TICKETS)
    place = f"hf-train-mcp/inputs/tickets.jsonl-{__import__('hashlib').sha256(original).hexdigest()[:16]}"
    (here / "tickets.jsonl").write_bytes(original)  # the file as it was judged
    monkeypatch.setenv("HF_TRAIN_CONFIRM_UPLOAD_ABOVE_GB", "off")
    async with Client(build_server()) as client:
        again = await call(client, "submit_training", TICKETS)
    assert again["uploads"][0]["path"] == place
    assert placed(hub, place) == {"tickets.jsonl": xet_hash(here / "tickets.jsonl")}, (
        "the place named by the file's sha256 holds other bytes", first.is_error)


async def test_two_different_folders_never_share_a_place(hub: Emulator, here: Path) -> None:
    """A data folder's one file renamed (part-00000.jsonl -> part-00001.jsonl: a re-export) is another content:
    a folder's place is named by every file's name and sha256 (only a data file sent by itself is named by its own
    sha256), so the earlier place keeps its one file and the job, which reads the mounted folder whole, never sees
    each row twice (jobs/uploads.py _digest)."""
    folder = here / "export"
    write_jsonl(folder / "part-00000.jsonl", ROWS)
    arguments = {**TICKETS, "dataset": "./export"}
    async with Client(build_server()) as client:
        first = await call(client, "submit_training", arguments)
        (folder / "part-00000.jsonl").rename(folder / "part-00001.jsonl")
        second = await call(client, "submit_training", arguments)
    old, new = first["uploads"][0]["path"], second["uploads"][0]["path"]
    assert placed(hub, old) == {"part-00000.jsonl": xet_hash(folder / "part-00001.jsonl")}, placed(hub, old)
    assert old != new
    from datasets import load_dataset  # what the script does with a mounted folder (_base.py.j2 load_training_data)

    view = here / "job-view"
    for name in placed(hub, new):
        (view / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "part-00001.jsonl", view / name)  # every file the place holds has these bytes
    assert len(load_dataset(str(view), split="train")) == len(ROWS)


@pytest.mark.parametrize("cap", ["MAX_UPLOAD_FILES", "MAX_UPLOAD_BYTES"])
async def test_the_caps_hold_for_one_calls_uploads_together(hub: Emulator, here: Path, tiny_model: Path,
                                                            monkeypatch: pytest.MonkeyPatch, cap: str) -> None:
    """The upload caps hold for one call's uploads together (jobs/uploads.py check_total from
    planner.uploads_for): a model folder and a dataset, each at the cap alone, are refused together, nothing
    uploaded or launched."""
    from hf_train_mcp.jobs import uploads

    model = here / "merged"
    shutil.copytree(tiny_model, model)
    parts = [[f for f in model.rglob("*") if f.is_file()], [here / "tickets.jsonl"]]
    counted = [len(p) if cap == "MAX_UPLOAD_FILES" else sum(f.stat().st_size for f in p) for p in parts]
    monkeypatch.setattr(uploads, cap, max(counted))  # each upload alone at the cap, together over it
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {**TICKETS, "model": "./merged"})
    assert result.is_error and "over the cap" in result.content[0].text, result.structured_content["uploads"]
    assert len(hub.posted_jobs()) == before


async def test_a_sweep_over_local_datasets_is_held_to_the_caps_together(hub: Emulator, here: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep gridding over local datasets is held to the caps for all its runs' distinct uploads together
    (planner._prepare_sweep -> check_total), before any run is launched."""
    from hf_train_mcp.jobs import uploads

    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)
    second = write_jsonl(here / "more.jsonl", [{**row, "completion": row["completion"] + "!"} for row in ROWS])
    size = (here / "tickets.jsonl").stat().st_size
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", max(size, second.stat().st_size) + 10)
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        base = {k: v for k, v in TICKETS.items() if k != "dataset"}
        result = await client.call_tool("submit_sweep", {"base": base, "grid": {
            "dataset": ["./tickets.jsonl", "./more.jsonl"]}, "max_parallel": 2})
    assert result.is_error and "over the cap" in result.content[0].text, len(hub.posted_jobs()) - before
    assert len(hub.posted_jobs()) == before


async def test_an_evaluation_on_a_named_local_file_reads_that_files_bytes(hub: Emulator, here: Path) -> None:
    """evaluate_model(model=<job>, dataset=<the local path the job trained on>) after the file was rewritten (a
    held-out set exported under the training file's name) mounts the file as it is now - the bytes validation just
    judged - not the job's recorded copy, which is kept for a dataset the caller does not name
    (planner._prepare_evaluation)."""
    from tests.helpers import finished

    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", TICKETS)
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        trained = input_volumes(hub.posted_jobs()[-1])
        write_jsonl(here / "tickets.jsonl", [{"prompt": f"Held-out ticket {i}", "completion": "network"}
                                            for i in range(12)])
        before = len(hub.posted_jobs())
        await call(client, "evaluate_model", {"model": job["job_id"], "dataset": "./tickets.jsonl", "backend": "hf"})
    (volume,) = input_volumes(hub.posted_jobs()[before])
    assert volume != trained[0]
    assert placed(hub, volume["path"]) == {"tickets.jsonl": xet_hash(here / "tickets.jsonl")}


async def _sweep_with_one_queued_run(hub: Emulator, dataset: str, access: Access | None, monkeypatch) -> str:
    """A two-run sweep, one at a time: run 0 launched (and finished at once), run 1 queued for the supervisor."""
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)  # this test is the supervisor
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    server = build_server(access=access) if access else build_server()
    async with Client(server) as client:
        sweep = await call(client, "submit_sweep", {"base": {**TICKETS, "dataset": dataset},
                                                    "grid": {"learning_rate": [1e-4, 2e-4]}, "max_parallel": 1})
    assert [run["state"] for run in sweep["jobs"]] == ["launched", "queued"]
    return sweep["sweep_id"]


async def test_a_sweep_run_started_by_the_supervisor_keeps_the_http_callers_folder_rules(
        hub: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep keeps the rights of the caller who submitted it (SweepRecord.access_json): the detached supervisor,
    a stdio Core, launches an HTTP caller's queued run under the caller's folder rules (sweeps/sweep.py launch ->
    Core.for_caller), so a data file swapped for a link out of the allowed folder after submit_sweep fails that
    run, and nothing of the outside file reaches the bucket."""
    allowed, outside = tmp_path / "shared", tmp_path / "private-zone"
    write_jsonl(allowed / "tickets.jsonl", ROWS)
    secret = write_jsonl(outside / "secret.jsonl", [{"prompt": "the operator's own rows", "completion": "canary"}] * 30)
    before = len(hub.posted_jobs())
    sweep_id = await _sweep_with_one_queued_run(hub, str(allowed / "tickets.jsonl"),
                                                Access.http(local_dirs=[str(allowed)]), monkeypatch)
    (allowed / "tickets.jsonl").unlink()
    (allowed / "tickets.jsonl").symlink_to(secret)  # now a link out of the folder the caller may use
    supervise_until_second_run(sweep_id, before, hub)
    assert xet_hash(secret) not in held_hashes(hub), "a file outside the allowed folders went to the bucket"
    runs = Ledger().sweep_runs(sweep_id)
    assert runs[1].state == "failed" and len(hub.posted_jobs()) == before + 1, (runs[1].state, runs[1].note)


async def test_a_sweep_uploads_once_and_every_run_reads_the_same_bytes(hub: Emulator, here: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """"A sweep of 12 runs uploads once", "sent once ... and mounted read-only into each": a run the supervisor
    launches later mounts the copy the sweep's launched runs uploaded (planner._sweep_copies), even when the local
    file was edited since; nothing is sent again and the runs compare_runs ranks trained on the same bytes."""
    before = len(hub.posted_jobs())
    sweep_id = await _sweep_with_one_queued_run(hub, "./tickets.jsonl", None, monkeypatch)
    first = input_volumes(hub.posted_jobs()[before])
    write_jsonl(here / "tickets.jsonl", [{"prompt": "an edit while the sweep runs", "completion": "x"}] * 30)
    batches = hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
    supervise_until_second_run(sweep_id, before, hub)
    assert len(hub.posted_jobs()) == before + 2, Ledger().sweep_runs(sweep_id)[1].note
    assert input_volumes(hub.posted_jobs()[before + 1]) == first  # the same copy, as the sweep said
    assert hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches  # nothing sent again


@pytest.mark.parametrize("then", ["deleted", "edited"])
async def test_resuming_a_job_trained_on_uploaded_data(hub: Emulator, here: Path, then: str) -> None:
    """resume_from reuses the uploaded copy (issue 33): once the local file is gone the resumed run mounts the very
    copy the job trained on (planning/copies.py resumed_copies) and says so; a file edited since is uploaded as it is now and
    the answer says the data changed since the checkpoint's job (planner._resumed_on_other_data)."""
    from tests.helpers import finished

    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", TICKETS)
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        trained = hub.posted_jobs()[-1]
        if then == "deleted":
            (here / "tickets.jsonl").unlink()
        else:
            write_jsonl(here / "tickets.jsonl", [{**row, "completion": row["completion"] + "?"} for row in ROWS])
        before = len(hub.posted_jobs())
        resumed = await client.call_tool("submit_training", {**TICKETS, "resume_from": job["job_id"]})
    assert not resumed.is_error, resumed.content[0].text
    warnings = " ".join(resumed.structured_content["warnings"])
    if then == "deleted":
        assert input_volumes(hub.posted_jobs()[before]) == input_volumes(trained)
        assert "no longer on this machine" in warnings, warnings
    else:
        assert input_volumes(hub.posted_jobs()[before]) != input_volumes(trained)
        assert f"changed since job {job['job_id']}" in warnings, warnings


async def test_a_run_resumed_on_the_copy_of_image_rows_is_planned_as_its_job_was(hub: Emulator, here: Path) -> None:
    """A Qwen2-VL LoRA on local image rows, resumed once the rows are gone: the run read the job's copy but was
    planned as unvalidated data (DataFacts()): no vision, so LoRA on `all-linear` (the vision tower too, and not
    the checkpoint's adapter), no torchvision for the processor, no image-token cap. The copy's record keeps the
    facts its validation found (bucket_inputs.Upload.facts), and the resumed run is the job's plan again."""
    from hf_train_mcp_demo.tiny import example_rows, write_images
    from tests.helpers import decoded_script, finished, script_config

    qwen2_vl = hub.serve_model(CONFIGS / "Qwen--Qwen2-VL-2B-Instruct")
    rows = example_rows("sft", 6, data_format="vision_messages")
    write_images(here, rows)
    write_jsonl(here / "vl.jsonl", rows)
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    arguments = {"model": qwen2_vl, "dataset": "./vl.jsonl", "backend": "hf", "hub_model_id": "emu-user/vl",
                 "max_steps": 2}
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        trained = hub.posted_jobs()[-1]
        (here / "vl.jsonl").unlink()
        shutil.rmtree(here / "images")
        await call(client, "submit_training", {**arguments, "resume_from": job["job_id"]})
    resumed = hub.posted_jobs()[-1]
    assert input_volumes(resumed) == input_volumes(trained)
    before, after = script_config(decoded_script(trained)), script_config(decoded_script(resumed))
    for name in ("vision", "lora", "max_image_tokens", "dataset"):
        assert after[name] == before[name], (name, before[name], after[name])
    assert "torchvision" in decoded_script(resumed).split("# ///")[1]


async def test_a_run_resumed_once_its_local_base_model_folder_is_gone(hub: Emulator, here: Path,
                                                                      tiny_model: Path) -> None:
    """resume_from of a job trained on an uploaded base-model folder, the folder moved or deleted since: it was
    sized from the folder (refused: not a folder) though the bucket holds the very files the checkpoint was
    trained from. Sized by the config.json the upload recorded and mounting that copy (planning/copies.py
    resumed_copies), as the job's evaluation and export already were."""
    from tests.helpers import decoded_script, finished, script_config

    shutil.copytree(tiny_model, here / "merged")
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    arguments = {**TICKETS, "model": "./merged"}
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        trained = hub.posted_jobs()[-1]
        shutil.rmtree(here / "merged")
        batches = hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
        resumed = await call(client, "submit_training", {**arguments, "resume_from": job["job_id"]})
    assert input_volumes(hub.posted_jobs()[-1]) == input_volumes(trained)
    assert hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches
    config = script_config(decoded_script(hub.posted_jobs()[-1]))
    assert config["model"] == script_config(decoded_script(trained))["model"] and resumed["job_id"] != job["job_id"]


async def test_a_follow_up_of_a_job_on_a_local_base_model_needs_no_local_folder(hub: Emulator, here: Path,
                                                                                tiny_model: Path) -> None:
    """evaluate_model / export_model of a job trained on an uploaded base-model folder, once the folder is moved
    or deleted: sized by the config.json its upload recorded (planning/copies.py sizing_folder) and mounting the copy
    the job read, so neither is refused though the bucket holds the very files (issue 33: "follow-ups find the same
    data")."""
    from tests.helpers import finished

    shutil.copytree(tiny_model, here / "merged")
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", {**TICKETS, "model": "./merged", "eval_split": 0.2})
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        trained = input_volumes(hub.posted_jobs()[-1])
        shutil.rmtree(here / "merged")
        evaluation = await client.call_tool("evaluate_model", {"model": job["job_id"], "backend": "hf"})
        export = await client.call_tool("export_model", {"model": job["job_id"], "backend": "hf", "format": "merged",
                                                         "hub_model_id": "emu-user/tickets-merged"})
    assert not evaluation.is_error, evaluation.content[0].text
    assert not export.is_error, export.content[0].text
    (model,) = [v for v in trained if "merged" in v["path"]]
    assert all(model in input_volumes(spec) for spec in hub.posted_jobs()[-2:])


@pytest.mark.parametrize("target", ["keys", "no-such-folder"])
async def test_a_class_link_out_is_refused_whether_or_not_its_target_exists(hub: Emulator, tmp_path: Path,
                                                                            target: str) -> None:
    """An HTTP caller's image folder with a class folder linking out of the allowed folders, validation skipped:
    refused alike whether the link's target exists or not (the answer tells nothing of the server's folders),
    before anything is uploaded; the unit below it, image_folder_classes, is held to the same in
    tests/test_http_data_paths.py."""
    from hf_train_mcp_demo.tiny import example_rows, write_images

    allowed, outside = tmp_path / "shared", tmp_path / "private-zone"
    write_images(allowed, example_rows("image-classification", 8))
    (outside / "keys").mkdir(parents=True)
    (allowed / "images" / "probe").symlink_to(outside / target, target_is_directory=True)
    arguments = {"model": hub.serve_model(VIT), "dataset": str(allowed / "images"), "method": "image-classification",
                 "backend": "hf", "hub_model_id": "emu-user/colours", "max_steps": 5, "skip_validation": True,
                 "dry_run": True}
    async with Client(build_server(access=Access.http(local_dirs=[str(allowed)]))) as client:
        result = await client.call_tool("submit_training", arguments)
    text = result.content[0].text
    assert result.is_error and "'probe'" in text and "links outside" in text and "private-zone" not in text, text


async def test_a_distillation_resumed_once_its_local_teacher_folder_is_gone(hub: Emulator, here: Path,
                                                                         tiny_model: Path) -> None:
    """resume_from of a distillation whose teacher was an uploaded local folder, the folder deleted since: the
    teacher was sized from the folder (refused: not a folder) though the bucket holds the very files the job
    distilled from. Sized by the config.json its upload recorded and mounted from the bucket, as a gone base
    model is (planning/planner.py _prepare_training)."""
    from tests.helpers import finished

    shutil.copytree(tiny_model, here / "student")
    shutil.copytree(tiny_model, here / "teacher")
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    arguments = {**TICKETS, "model": "./student", "method": "distill", "teacher_model": "./teacher"}
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        trained = hub.posted_jobs()[-1]
        shutil.rmtree(here / "teacher")
        resumed = await client.call_tool("submit_training", {**arguments, "resume_from": job["job_id"]})
    assert not resumed.is_error, resumed.content[0].text
    assert input_volumes(hub.posted_jobs()[-1]) == input_volumes(trained)

