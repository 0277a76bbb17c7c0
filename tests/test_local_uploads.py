"""Local files on the Jobs backend (issue 33): a local dataset, image folder or model folder sent with backend="hf"
goes to the caller's private jobs-artifacts bucket once (content-addressed), is mounted read-only into the one job
posted, and the rendered script reads the mounted copy. Against the emulated Hub, with the real huggingface_hub
client and hf_xet uploading through the emulator's bucket and CAS endpoints."""

import hashlib
import json
import os
import runpy
import shutil
from pathlib import Path

import anyio
import pytest
from mcp import Client

from hf_train_mcp.jobs.ledger import Ledger
from hf_train_mcp.shell.app import build_server
from hf_train_mcp_demo.tiny import example_rows, write_images, write_jsonl
from tests.local_files import BUCKET, TICKETS, VIT, input_volumes, xet_hash
from tests.emulator import Emulator
from tests.helpers import call, decoded_script, refused, script_config

pytestmark = pytest.mark.anyio


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def traffic(hub: Emulator) -> tuple[int, int]:
    """(bucket batch POSTs, xorb uploads): what an upload costs on the wire."""
    return (hub.count("POST", rf"/api/buckets/{BUCKET}/batch"), hub.count("POST", r"/v1/xorbs/.*"))


def posted_one(hub: Emulator, before: int) -> dict:
    posted = hub.posted_jobs()[before:]
    assert len(posted) == 1, posted
    return posted[0]


def placed(hub: Emulator, volume: dict) -> dict[str, str]:
    """name inside the upload's folder -> xet hash, as the bucket holds it."""
    prefix = volume["path"] + "/"
    return {path[len(prefix):]: entry["xetHash"] for path, entry in hub.buckets[BUCKET]["files"].items()
            if path.startswith(prefix)}


def bucket_copy(hub: Emulator, volume: dict, local: Path, dest: Path) -> Path:
    """The mounted folder as the job sees it, rebuilt here from the bucket: each file it lists is the local file
    whose xet hash (the bytes hf_xet sent) it holds, so a file the bucket lacks, or holds other bytes of, is
    missing here too."""
    by_hash = {xet_hash(f): f for f in local.rglob("*") if f.is_file()}
    for name, held in placed(hub, volume).items():
        assert held in by_hash, f"the bucket's {name} holds bytes of no local file"
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(by_hash[held], dest / name)
    return dest


def loaded_as_the_job_loads(script: str, tmp_path: Path, mounts: dict[str, Path]) -> dict:
    """The rendered script's own data loading (load_training_data, then as_images for image rows) run here with
    every mount path read from its rebuilt copy."""
    config = script_config(script)
    for key in ("dataset", "model"):
        for mount, copy in mounts.items():
            if isinstance(config.get(key), str) and config[key].startswith(mount):
                config[key] = str(copy) + config[key][len(mount):]
    path = tmp_path / "train.py"
    path.write_text(script)
    namespace = runpy.run_path(str(path), run_name="hftm_script_under_test")
    namespace["CONFIG"].update(config)
    return namespace


# --- the Done-when cases ---------------------------------------------------------------------------------------
async def test_a_local_jsonl_is_uploaded_once_mounted_read_only_and_read_by_the_script(hub: Emulator,
                                                                                      here: Path) -> None:
    before, wire = len(hub.posted_jobs()), traffic(hub)
    async with Client(build_server()) as client:
        first = await call(client, "submit_training", TICKETS)
        spec = posted_one(hub, before)
        after_first = traffic(hub)
        again = await call(client, "submit_training", TICKETS)
    second = posted_one(hub, before + 1)
    (volume,) = input_volumes(spec)
    assert volume["source"] == BUCKET and volume["readOnly"] is True
    assert volume["path"].startswith("hf-train-mcp/inputs/tickets.jsonl-") and volume["mountPath"].startswith("/inputs/")
    assert hub.buckets[BUCKET]["private"]
    assert placed(hub, volume) == {"tickets.jsonl": xet_hash(here / "tickets.jsonl")}  # the bytes sent are the file's
    assert script_config(decoded_script(spec))["dataset"] == f"{volume['mountPath']}/tickets.jsonl"
    size = (here / "tickets.jsonl").stat().st_size
    assert first["uploads"] == [{"bucket": BUCKET, "path": volume["path"], "files": 1, "bytes": size, "new_bytes": size,
                                 "delete": f"hf buckets rm {BUCKET}/{volume['path']}/ --recursive (a follow-up of the "
                                           "job needs it)"}]
    assert after_first[0] > wire[0]  # (xorbs too, unless hf_xet's own cache had the bytes: it dedups by chunk)
    # the same call again: the same copy mounted, nothing sent
    assert traffic(hub) == after_first and again["uploads"][0]["new_bytes"] == 0
    assert input_volumes(second) == [volume]
    # the bytes the script reads are the ones validation judged: their sha256 in the ledger and the card
    digest = sha256(here / "tickets.jsonl")
    assert Ledger().get(first["job_id"]).uploads[0]["digest"] == digest
    card = script_config(decoded_script(spec))["card"]
    assert card["settings"]["dataset"] == f"tickets.jsonl (uploaded, sha256 {digest})"
    assert str(here) not in json.dumps(card)  # the card names the file, never this machine's folders


async def test_the_rendered_loader_reads_the_bucket_copy_of_the_jsonl(hub: Emulator, here: Path) -> None:
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        await call(client, "submit_training", TICKETS)
    spec = posted_one(hub, before)
    (volume,) = input_volumes(spec)
    copy = bucket_copy(hub, volume, here, here / "job-view")
    script = loaded_as_the_job_loads(decoded_script(spec), here, {volume["mountPath"]: copy})
    train, _ = script["load_training_data"]()
    assert len(train) == 30 and train[0]["completion"] == "hardware/0"


async def test_an_image_folder_keeps_its_labels_in_the_job(hub: Emulator, here: Path) -> None:
    vit = hub.serve_model(VIT)
    rows = example_rows("image-classification", 8)
    write_images(here, rows)
    arguments = {"model": vit, "dataset": "./images", "method": "image-classification", "backend": "hf",
                 "hub_model_id": "emu-user/colours", "max_steps": 5}
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
    spec = posted_one(hub, before)
    (volume,) = input_volumes(spec)
    local = {Path(r["image"]).relative_to("images").as_posix(): xet_hash(here / r["image"]) for r in rows}
    assert placed(hub, volume) == local  # <label>/<file>: the class names are the folder names, as here
    assert script_config(decoded_script(spec))["dataset"] == volume["mountPath"]
    assert job["uploads"][0]["files"] == 8
    copy = bucket_copy(hub, volume, here / "images", here / "job-view")
    train, _ = loaded_as_the_job_loads(decoded_script(spec), here, {volume["mountPath"]: copy})["load_training_data"]()
    assert len(train) == 8 and train.features["label"].names == ["blue", "red"]


async def test_a_jsonl_naming_images_takes_them_along_at_the_same_relative_paths(hub: Emulator, here: Path) -> None:
    vit = hub.serve_model(VIT)
    rows = example_rows("image-classification", 6)
    write_images(here / "photos", rows)  # photos/images/<label>/<n>.png
    data = write_jsonl(here / "labels" / "train.jsonl",
                       [{"image": f"../photos/{r['image']}", "label": r["label"]} for r in rows])
    arguments = {"model": vit, "dataset": str(data), "method": "image-classification", "backend": "hf",
                 "hub_model_id": "emu-user/colours", "max_steps": 5}
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        await call(client, "submit_training", arguments)
    spec = posted_one(hub, before)
    (volume,) = input_volumes(spec)
    assert set(placed(hub, volume)) == {"labels/train.jsonl", *(f"photos/{r['image']}" for r in rows)}
    assert script_config(decoded_script(spec))["dataset"] == f"{volume['mountPath']}/labels/train.jsonl"
    copy = bucket_copy(hub, volume, here, here / "job-view")
    script = loaded_as_the_job_loads(decoded_script(spec), here, {volume["mountPath"]: copy})
    train, _ = script["load_training_data"]()
    images = script["as_images"](train)
    assert images[0]["image"].size == (32, 32)  # each row's image opened from the copy, by the row's own path


async def test_a_local_base_model_folder_is_uploaded_without_its_credentials_or_checkpoints(
        hub: Emulator, here: Path, tiny_model: Path) -> None:
    model = here / "merged"
    shutil.copytree(tiny_model, model)
    (model / ".env").write_text("WANDB_API_KEY=abc123\n")
    (model / "checkpoint-5").mkdir()
    (model / "checkpoint-5" / "optimizer.pt").write_bytes(b"\0" * 1024)
    arguments = {**TICKETS, "model": "./merged"}
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
    spec = posted_one(hub, before)
    volumes = {v["mountPath"]: v for v in input_volumes(spec)}
    config = script_config(decoded_script(spec))
    model_volume = volumes[config["model"]]
    assert config["dataset"].startswith(tuple(volumes)) and config["dataset"] != config["model"]
    expected = {f.relative_to(tiny_model).as_posix(): xet_hash(f) for f in tiny_model.rglob("*") if f.is_file()}
    assert placed(hub, model_volume) == expected
    assert any(".env" in w and "left out" in w for w in job["warnings"])
    assert {u["path"] for u in job["uploads"]} == {v["path"] for v in volumes.values()}
    card = config["card"]
    assert card["base_model"] is None and "merged (uploaded, sha256" in card["settings"]["base model"]


async def test_a_dry_run_says_what_it_would_upload_and_uploads_nothing(hub: Emulator, here: Path) -> None:
    before, wire = len(hub.posted_jobs()), traffic(hub)
    async with Client(build_server()) as client:
        plan = await call(client, "submit_training", {**TICKETS, "dry_run": True})
    assert len(hub.posted_jobs()) == before and traffic(hub) == wire and BUCKET not in hub.buckets
    size = (here / "tickets.jsonl").stat().st_size
    (upload,) = plan["uploads"]
    assert (upload["bucket"], upload["files"], upload["bytes"], upload["new_bytes"]) == (BUCKET, 1, size, size)
    assert script_config(plan["script"])["dataset"] == f"/inputs/{upload['path'].rsplit('/', 1)[1]}/tickets.jsonl"


# --- refusals: nothing uploaded, nothing launched ------------------------------------------------------------
def untouched(hub: Emulator, before: int, wire: tuple[int, int]) -> None:
    assert len(hub.posted_jobs()) == before and traffic(hub) == wire
    assert not any(p.startswith("hf-train-mcp/inputs/") for p in hub.buckets.get(BUCKET, {}).get("files", {}))


async def refusal(hub: Emulator, arguments: dict, access=None) -> str:
    before, wire = len(hub.posted_jobs()), traffic(hub)
    async with Client(build_server(access=access) if access else build_server()) as client:
        text = await refused(client, "submit_training", arguments)
    untouched(hub, before, wire)
    return text


async def test_data_that_looks_like_credentials_is_refused(hub: Emulator, here: Path) -> None:
    folder = here / "export"
    write_jsonl(folder / "part-0.jsonl", [{"prompt": "a", "completion": "b"}] * 4)
    write_jsonl(folder / "credentials.json", [{"prompt": "key", "completion": "AKIA..."}])
    text = await refusal(hub, {**TICKETS, "dataset": "./export"})
    assert "'credentials.json'" in text and "named like a credentials file" in text and "Nothing was uploaded" in text
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
    write_jsonl(here / "keys.jsonl", [{"prompt": "deploy with", "completion": key}] * 3)
    text = await refusal(hub, {**TICKETS, "dataset": "./keys.jsonl"})
    assert "'keys.jsonl'" in text and "private key" in text


async def test_unreadable_missing_or_absolute_images_are_refused(hub: Emulator, here: Path) -> None:
    vit = hub.serve_model(VIT)
    rows = example_rows("image-classification", 6)
    write_images(here, rows)
    base = {"model": vit, "method": "image-classification", "backend": "hf", "hub_model_id": "emu-user/c"}
    (here / "images" / "red" / "broken.png").write_bytes(b"not a png at all")
    text = await refusal(hub, {**base, "dataset": "./images"})
    assert "cannot be read: 'red/broken.png'" in text
    (here / "images" / "red" / "broken.png").unlink()
    named = [{"image": r["image"], "label": r["label"]} for r in rows]
    write_jsonl(here / "absolute.jsonl", [{**named[0], "image": str(here / named[0]["image"])}, *named[1:]])
    assert "by an absolute path" in await refusal(hub, {**base, "dataset": "./absolute.jsonl"})


async def test_an_image_named_inside_a_conversations_part_is_refused_with_the_layout_the_job_reads(
        hub: Emulator, here: Path) -> None:
    """A part's file ({"type": "image", "image": "shot.png"}) is opened by the job's processor from its working
    folder, where no upload is: the job would fail at its first row. Refused before anything goes up, saying to
    list the images in an `images` column."""
    qwen2_vl = hub.serve_model(VIT.parent / "Qwen--Qwen2-VL-2B-Instruct")
    write_images(here, example_rows("image-classification", 1))
    (shot,) = (p.relative_to(here).as_posix() for p in (here / "images").rglob("*.png"))
    turn = [{"role": "user", "content": [{"type": "image", "image": shot}, {"type": "text", "text": "Colour?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Red."}]}]
    write_jsonl(here / "shots.jsonl", [{"messages": turn}] * 4)
    text = await refusal(hub, {"model": qwen2_vl, "dataset": "./shots.jsonl", "backend": "hf",
                               "hub_model_id": "emu-user/shots", "max_steps": 2})
    assert "in a turn's content" in text and "`images` column" in text, text


@pytest.mark.parametrize(("cap", "value", "said"), [("MAX_UPLOAD_FILES", 5, "over the cap of 5 files"),
                                                     ("MAX_UPLOAD_BYTES", 100, "over the cap of 100 bytes")])
async def test_more_than_a_cap_is_refused_naming_the_cap(hub: Emulator, here: Path, monkeypatch, cap: str,
                                                         value: int, said: str) -> None:
    from hf_train_mcp.jobs import uploads

    monkeypatch.setattr(uploads, cap, value)
    vit = hub.serve_model(VIT)
    write_images(here, example_rows("image-classification", 8))
    text = await refusal(hub, {"model": vit, "dataset": "./images", "method": "image-classification",
                               "backend": "hf", "hub_model_id": "emu-user/c"})
    assert said in text and "push it to the Hub" in text


async def test_a_public_bucket_is_refused(hub: Emulator, here: Path) -> None:
    hub.buckets[BUCKET] = {"private": False, "created": "2026-01-01T00:00:00.000Z", "files": {}}
    text = await refusal(hub, TICKETS)
    assert f"your bucket {BUCKET} is public" in text and "Make it private" in text


async def test_over_http_the_allowed_folder_rules_hold_for_uploads(hub: Emulator, tmp_path: Path) -> None:
    from hf_train_mcp.access import Access

    allowed, outside = tmp_path / "shared", tmp_path / "private"
    rows = [{"prompt": "p", "completion": "c"}] * 4
    write_jsonl(outside / "secret.jsonl", rows)
    allowed.mkdir()
    (allowed / "linked.jsonl").symlink_to(outside / "secret.jsonl")
    os.link(outside / "secret.jsonl", allowed / "hard.jsonl")
    model = allowed / "model"
    model.mkdir()
    (model / "config.json").symlink_to(outside / "secret.jsonl")
    access = Access.http(local_dirs=[str(allowed)])
    base = {**TICKETS, "dataset": str(allowed / "ok.jsonl")}
    write_jsonl(allowed / "ok.jsonl", rows)
    for arguments in ({**base, "dataset": str(allowed / "linked.jsonl")}, {**base, "dataset": str(allowed / "hard.jsonl")},
                      {**base, "model": str(model)}):
        text = await refusal(hub, arguments, access)
        assert "may not read" in text or "outside the folders" in text, text


# --- follow-ups, sweeps ---------------------------------------------------------------------------------------
async def test_an_evaluation_of_the_job_mounts_the_copy_it_trained_on_and_uploads_nothing(hub: Emulator,
                                                                                        here: Path) -> None:
    from tests.emulator import JobPlan
    from tests.helpers import finished

    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", {**TICKETS, "eval_split": 0.2})
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        trained = hub.posted_jobs()[-1]
        (here / "tickets.jsonl").unlink()  # the copy the job read is what its evaluation reads
        before, wire = len(hub.posted_jobs()), traffic(hub)
        evaluation = await call(client, "evaluate_model", {"model": job["job_id"], "backend": "hf"})
    spec = posted_one(hub, before)
    assert traffic(hub) == wire and input_volumes(spec) == input_volumes(trained)
    config = script_config(decoded_script(spec))
    assert config["dataset"] == script_config(decoded_script(trained))["dataset"] and config["eval_split"] == 0.2
    assert evaluation["uploads"][0]["new_bytes"] == 0


async def test_a_sweep_uploads_its_data_once_for_all_its_runs(hub: Emulator, here: Path, monkeypatch) -> None:
    from hf_train_mcp.sweeps import sweep as sweeps

    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)  # every run starts at once
    before, wire = len(hub.posted_jobs()), traffic(hub)
    async with Client(build_server()) as client:
        await call(client, "submit_sweep", {"base": TICKETS, "grid": {"learning_rate": [1e-4, 2e-4, 3e-4]},
                                            "max_parallel": 3})
    posted = hub.posted_jobs()[before:]
    assert len(posted) == 3 and len({json.dumps(input_volumes(spec)) for spec in posted}) == 1
    sent = traffic(hub)
    assert sent[0] == wire[0] + 1 and sent[1] <= wire[1] + 1  # one batch, at most one xorb: the file went once
    async with Client(build_server()) as client:
        plan = await call(client, "submit_sweep", {"base": TICKETS, "grid": {"learning_rate": [1e-4, 2e-4]},
                                                   "dry_run": True})
    place = input_volumes(posted[0])[0]["path"]
    assert any("1 local file(s)" in w and place in w and "sent once" in w for w in plan["warnings"])


# --- a large upload is the user's decision; a long one says how far along it is -----------------------------
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_upload_over_the_threshold_is_asked_and_sent_only_on_accept(hub: Emulator, here: Path, monkeypatch,
                                                                            mode: str) -> None:
    from tests.helpers import answering

    monkeypatch.setenv("HF_TRAIN_CONFIRM_UPLOAD_ABOVE_GB", "0.000001")  # 1 kB: tickets.jsonl is over it
    asked: list[str] = []
    before, wire = len(hub.posted_jobs()), traffic(hub)
    async with Client(build_server(), mode=mode, elicitation_callback=answering("decline", asked=asked)) as client:
        declined = await client.call_tool("submit_training", TICKETS)
    assert declined.is_error and "not submitted" in declined.content[0].text
    untouched(hub, before, wire)
    size = (here / "tickets.jsonl").stat().st_size
    assert asked[0].startswith(f"It first uploads {size / 1e3:.1f} kB of your local files to your private "
                               "jobs-artifacts bucket.")
    async with Client(build_server(), mode=mode, elicitation_callback=answering("accept", {"submit": True},
                                                                                asked)) as client:
        accepted = await client.call_tool("submit_training", TICKETS)
        assert not accepted.is_error, accepted.content[0].text
        again = await client.call_tool("submit_training", TICKETS)  # in the bucket now: nothing to ask about
    assert len(asked) == 2 and not again.is_error and len(hub.posted_jobs()) == before + 2


async def test_a_long_upload_reports_its_bytes_as_progress(hub: Emulator, here: Path, monkeypatch) -> None:
    from hf_train_mcp.backends import jobs_uploads

    monkeypatch.setattr(jobs_uploads, "BATCH_FILES", 2)  # 8 images: four batches, progress after each
    vit = hub.serve_model(VIT)
    write_images(here, example_rows("image-classification", 8))
    seen: list[tuple[float, float | None, str]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message or ""))

    async with Client(build_server(), mode="legacy") as client:
        result = await client.call_tool("submit_training", {"model": vit, "dataset": "./images", "backend": "hf",
                                                            "method": "image-classification",
                                                            "hub_model_id": "emu-user/c"}, progress_callback=on_progress)
        assert not result.is_error, result.content[0].text
        uploading = lambda: [(p, t) for p, t, m in seen if m.startswith("uploading local files")]  # noqa: E731
        with anyio.fail_after(10):  # notifications may trail the result
            while len(uploading()) < 5 or not any(m.startswith("submitting") for _, _, m in seen):
                await anyio.sleep(0.05)
    assert len(uploading()) == 5 and uploading()[-1][0] == uploading()[-1][1]  # 0, 2, 4, 6 and 8 images' bytes
    values = [p for p, _, _ in seen]
    assert values == sorted(values)  # MCP progress only grows


def test_the_cli_draws_an_upload_as_a_bar(capsys) -> None:
    import io

    from hf_train_mcp.jobs.prepared import Share
    from hf_train_mcp.shell.cli import _progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    show = _progress(screen)
    show("validating ./images")
    for done in (0, 50, 100):
        show(Share(f"uploading local files: {done} of 100 bytes", done, 100))
    lines = screen.getvalue().split("\r")
    assert lines[0] == "... validating ./images\n" and lines[-1] == f"... [{'#' * 30}] uploading local files: 100 of 100 bytes\n"
    assert lines[2].startswith("... [" + "#" * 15 + "." * 15 + "]")


# --- the estimate, and the measurement it may launch --------------------------------------------------------
async def test_the_estimate_counts_the_upload_at_its_stated_bandwidth(hub: Emulator, here: Path,
                                                                      monkeypatch) -> None:
    from hf_train_mcp.planning import estimation

    arguments = {"model": TICKETS["model"], "dataset": "./tickets.jsonl", "backend": "hf", "flavor": "a10g-small"}
    async with Client(build_server()) as client:
        fast = await call(client, "estimate_cost", arguments)
        monkeypatch.setattr(estimation, "UPLOAD_BYTES_PER_S", 1.0)  # a byte a second: an hour per 3.6 kB
        slow = await call(client, "estimate_cost", arguments)
    size = (here / "tickets.jsonl").stat().st_size
    assert "at 20.0 MB/s" in fast["assumptions"]["upload"] and "not billed" in fast["assumptions"]["upload"]
    assert slow["hours"] == pytest.approx(fast["hours"] + size / 3600, abs=0.01)
    assert slow["cost_usd"] == fast["cost_usd"]  # the upload happens before the job bills


async def test_a_measurement_reads_the_uploaded_copy(hub: Emulator, here: Path) -> None:
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        estimate = await call(client, "estimate_cost", {"model": TICKETS["model"], "dataset": "./tickets.jsonl",
                                                        "backend": "hf", "flavor": "a10g-small", "measure": True})
    spec = posted_one(hub, before)
    (volume,) = input_volumes(spec)
    assert estimate["measurement"]["job_id"] and placed(hub, volume) == {"tickets.jsonl": xet_hash(here / "tickets.jsonl")}
    assert script_config(decoded_script(spec))["dataset"] == f"{volume['mountPath']}/tickets.jsonl"


async def test_an_export_of_a_job_on_a_local_base_model_mounts_that_models_copy(hub: Emulator, here: Path,
                                                                                tiny_model: Path) -> None:
    from tests.emulator import JobPlan
    from tests.helpers import finished

    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", {**TICKETS, "model": str(tiny_model)})
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        trained = hub.posted_jobs()[-1]
        before, wire = len(hub.posted_jobs()), traffic(hub)
        await call(client, "export_model", {"model": job["job_id"], "format": "merged", "backend": "hf",
                                            "hub_model_id": "emu-user/tickets-merged"})
    spec = posted_one(hub, before)
    base = script_config(decoded_script(spec))["base_model"]
    assert traffic(hub) == wire and base == script_config(decoded_script(trained))["model"]
    assert base in {v["mountPath"] for v in input_volumes(spec)}


async def test_resuming_a_job_trained_on_uploaded_data_reuses_its_copy(hub: Emulator, here: Path) -> None:
    from tests.emulator import JobPlan
    from tests.helpers import finished

    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", TICKETS)
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        trained = hub.posted_jobs()[-1]
        before, wire = len(hub.posted_jobs()), traffic(hub)
        resumed = await call(client, "submit_training", {**TICKETS, "resume_from": job["job_id"]})
    spec = posted_one(hub, before)
    assert traffic(hub) == wire and input_volumes(spec) == input_volumes(trained)
    assert resumed["uploads"][0]["new_bytes"] == 0
    assert script_config(decoded_script(spec))["resume_from_repo"] == TICKETS["hub_model_id"]


def test_a_file_changed_after_it_was_judged_is_not_sent(hub: Emulator, here: Path) -> None:
    """The job reads the bytes validation judged: a file edited between the plan (a confirmation question may
    sit in between) and the upload is refused, and nothing is launched."""
    from hf_train_mcp.contract.requests import TrainingRequest
    from hf_train_mcp.errors import TrainError
    from hf_train_mcp.service import Core

    core = Core()
    req = TrainingRequest(**TICKETS)
    core.preview(req)  # kept for the submission that follows, as a confirmation keeps it
    with open(here / "tickets.jsonl", "a") as f:
        f.write(json.dumps({"prompt": "Ticket 30: an edit after the check", "completion": "other"}) + "\n")
    before, wire = len(hub.posted_jobs()), traffic(hub)
    with pytest.raises(TrainError, match="changed .* after it was checked"):
        core.submit_training(req)
    untouched(hub, before, wire)


async def test_a_changed_image_folder_gets_a_new_place_and_sends_only_the_changed_file(hub: Emulator,
                                                                                     here: Path) -> None:
    """Two versions never share a folder (a running job's files never change under it), and the unchanged files
    of the new version are copied inside the bucket by their xet hash, never sent again."""
    from PIL import Image

    vit = hub.serve_model(VIT)
    rows = example_rows("image-classification", 8)
    write_images(here, rows)
    arguments = {"model": vit, "dataset": "./images", "method": "image-classification", "backend": "hf",
                 "hub_model_id": "emu-user/colours"}
    async with Client(build_server()) as client:
        first = await call(client, "submit_training", arguments)
        changed = here / rows[0]["image"]
        Image.new("RGB", (32, 32), (250, 10, 10)).save(changed)  # a new picture under the same name
        second = await call(client, "submit_training", arguments)
    old, new = first["uploads"][0]["path"], second["uploads"][0]["path"]
    assert old != new and second["uploads"][0]["new_bytes"] == changed.stat().st_size
    files = hub.buckets[BUCKET]["files"]
    fresh = {path[len(new) + 1:]: entry["via"] for path, entry in files.items() if path.startswith(new + "/")}
    name = Path(rows[0]["image"]).relative_to("images").as_posix()
    assert fresh.pop(name) == "addFile" and set(fresh.values()) == {"copyFile"} and len(fresh) == 7
    assert sum(path.startswith(old + "/") for path in files) == 8  # the first version is left as it was


def test_the_command_line_sends_a_local_file_and_says_where_it_went(hub: Emulator, here: Path) -> None:
    import subprocess
    import sys

    before = len(hub.posted_jobs())
    done = subprocess.run([sys.executable, "-m", "hf_train_mcp", "submit", TICKETS["model"], "./tickets.jsonl",
                           "--backend", "hf", "--hub-model-id", TICKETS["hub_model_id"], "--max-steps", "20"],
                          capture_output=True, text=True, timeout=120, cwd=here, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    (volume,) = input_volumes(posted_one(hub, before))
    size = (here / "tickets.jsonl").stat().st_size
    assert f"... uploading local files: {size / 1e3:.1f} kB of {size / 1e3:.1f} kB" in done.stderr.splitlines()
    assert "uploads:" in done.stdout and volume["path"] in done.stdout
