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

import pytest
from mcp import Client

from hf_train_mcp.jobs.ledger import Ledger
from hf_train_mcp.shell.app import build_server
from hf_train_mcp_demo.tiny import example_rows, write_images, write_jsonl
from tests.emulator import Emulator
from tests.helpers import call, decoded_script, refused, script_config

pytestmark = pytest.mark.anyio
BUCKET = "emu-user/jobs-artifacts"
TICKETS = {"model": "Qwen/Qwen2.5-0.5B", "dataset": "./tickets.jsonl", "backend": "hf",
           "hub_model_id": "emu-user/tickets-sft", "max_steps": 20}
VIT = Path(__file__).parent / "data" / "configs" / "google--vit-base-patch16-224"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's working folder, holding tickets.jsonl (what `./tickets.jsonl` names)."""
    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": f"Ticket {i}: the printer on floor {i % 4} jams.", "completion": f"hardware/{i % 3}"}
            for i in range(30)]
    write_jsonl(tmp_path / "tickets.jsonl", rows)
    return tmp_path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def xet_hash(path: Path) -> str:
    import hf_xet

    return hf_xet.hash_files([str(path)])[0].hash


def traffic(hub: Emulator) -> tuple[int, int]:
    """(bucket batch POSTs, xorb uploads): what an upload costs on the wire."""
    return (hub.count("POST", rf"/api/buckets/{BUCKET}/batch"), hub.count("POST", r"/v1/xorbs/.*"))


def posted_one(hub: Emulator, before: int) -> dict:
    posted = hub.posted_jobs()[before:]
    assert len(posted) == 1, posted
    return posted[0]


def input_volumes(spec: dict) -> list[dict]:
    return [v for v in spec.get("volumes") or [] if v["mountPath"].startswith("/inputs/")]


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
    assert after_first[0] > wire[0] and after_first[1] > wire[1]
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
