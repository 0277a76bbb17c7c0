"""A retry with the same idempotency_key held to the content of the local files it names (third hostile review):
the inputs and faults under which a legitimate retry was refused as a conflict, or an edited file still got the
old job. Against the emulated Hub, with the real huggingface_hub client and hf_xet (no mock of either)."""

import shutil
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.access import Access
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.jobs import retries, uploads
from hf_train_mcp.jobs.ledger import Ledger
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.sweeps import sweep as sweeps
from hf_train_mcp_demo.tiny import write_jsonl
from tests.local_files import BUCKET, ROWS, TICKETS, VIT, input_volumes, supervise_until_second_run
from tests.emulator import Emulator, JobPlan
from tests.helpers import call, finished

pytestmark = pytest.mark.anyio


def _image_rows(here: Path, column: str) -> None:
    from PIL import Image

    (here / "pics").mkdir(exist_ok=True)
    rows = []
    for i in range(8):
        Image.new("RGB", (16, 16), (255 if i % 2 else 0, 0, 40 * i)).save(here / "pics" / f"{i}.png")
        rows.append({column: f"pics/{i}.png", "label": ["blue", "red"][i % 2]})
    write_jsonl(here / "rows.jsonl", rows)


async def test_a_retry_of_rows_whose_image_column_validation_mapped_is_the_same_job(hub: Emulator,
                                                                                    here: Path) -> None:
    """Rows whose image column is called `photo` (an alias validation maps to `image`): the first call's content
    was hashed from its planned upload (the rows and every image the mapped column names), the retry's from the
    files planned with the caller's mapping (none: the rows alone), so the very same call, nothing edited, was
    refused as "sent with another local files content" (service.py _keyed)."""
    _image_rows(here, "photo")
    arguments = {"model": hub.serve_model(VIT), "dataset": "./rows.jsonl", "method": "image-classification",
                 "backend": "hf", "hub_model_id": "emu-user/colours", "max_steps": 5, "idempotency_key": "photos-1"}
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
        before, batches = len(hub.posted_jobs()), hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
        again = await client.call_tool("submit_training", arguments)
        assert not again.is_error, again.content[0].text
        assert again.structured_content["job_id"] == job["job_id"]
        (here / "pics" / "3.png").write_bytes((here / "pics" / "4.png").read_bytes())  # an image edited
        edited = await client.call_tool("submit_training", arguments)
    assert edited.is_error and "local files content" in edited.content[0].text, edited.content[0].text
    assert len(hub.posted_jobs()) == before and hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches


async def test_a_retry_of_an_evaluation_on_rows_whose_image_column_validation_mapped_is_the_same_job(
        hub: Emulator, here: Path) -> None:
    """evaluate_model sends no column_mapping: its held-out rows' `photo` column is mapped by validation, and the
    retry's content was planned without it (the rows alone, not the images the job mounts): refused as a
    conflict."""
    _image_rows(here, "photo")
    arguments = {"model": hub.serve_model(VIT), "dataset": "./rows.jsonl", "backend": "hf",
                 "idempotency_key": "eval-photos-1"}
    async with Client(build_server()) as client:
        job = await call(client, "evaluate_model", arguments)
        again = await client.call_tool("evaluate_model", arguments)
    assert not again.is_error, again.content[0].text
    assert again.structured_content["job_id"] == job["job_id"]


async def test_a_run_resumed_on_the_copy_with_another_image_column_is_refused(hub: Emulator, here: Path) -> None:
    """resume_from once the rows are gone reads the copy the job uploaded, which holds only the images of the
    column the job's column_mapping named (photo_a). A resumed call mapping another column (photo_b) launched on
    that copy, planned by the job's facts: the job fails on its first row, billed. Refused now, saying which
    mapping the copy holds; nothing sent, nothing launched (planning/copies.py from_copy)."""
    from PIL import Image

    rows = []
    for i in range(8):
        for column in ("a", "b"):
            (here / column).mkdir(exist_ok=True)
            Image.new("RGB", (16, 16), (40 * i, 0, 255 if column == "a" else 0)).save(here / column / f"{i}.png")
        rows.append({"photo_a": f"a/{i}.png", "photo_b": f"b/{i}.png", "label": ["blue", "red"][i % 2]})
    write_jsonl(here / "rows.jsonl", rows)
    arguments = {"model": hub.serve_model(VIT), "dataset": "./rows.jsonl", "method": "image-classification",
                 "backend": "hf", "hub_model_id": "emu-user/colours", "max_steps": 5,
                 "column_mapping": {"image": "photo_a"}}
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        (here / "rows.jsonl").unlink()
        before, batches = len(hub.posted_jobs()), hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
        same = await client.call_tool("submit_training", {**arguments, "resume_from": job["job_id"],
                                                          "dry_run": True})
        assert not same.is_error, same.content[0].text
        other = await client.call_tool("submit_training", {**arguments, "resume_from": job["job_id"],
                                                           "column_mapping": {"image": "photo_b"}})
    text = other.content[0].text
    assert other.is_error and "photo_a" in text, text
    assert len(hub.posted_jobs()) == before and hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches


@pytest.mark.parametrize("target", ["another file", "no file"])
async def test_a_sweep_retry_over_http_never_reads_a_file_outside_the_allowed_folders(
        hub: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """An HTTP caller's keyed sweep, its data file then swapped for a link out of the allowed folder: the retry
    hashed the run's data as the link resolves (plan_dataset reads a data file it is handed; the access check is
    the submission's, which a sweep's retry never made), so the answer told whether a server file outside the
    allowed folders exists and holds other bytes (a conflict) or not (the sweep). It never reads it now:
    the same answer either way (jobs/uploads.py named_uploads)."""

    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)
    allowed, outside = tmp_path / "shared", tmp_path / "private-zone"
    write_jsonl(allowed / "tickets.jsonl", ROWS)
    write_jsonl(outside / "secret.jsonl", [{"prompt": "the operator's own rows", "completion": "canary"}] * 30)
    arguments = {"base": {**TICKETS, "dataset": str(allowed / "tickets.jsonl")},
                 "grid": {"learning_rate": [1e-4, 2e-4]}, "max_parallel": 2, "idempotency_key": "http-sweep"}
    server = build_server(access=Access.http(local_dirs=[str(allowed)]))
    async with Client(server) as client:
        sweep = await call(client, "submit_sweep", arguments)
        (allowed / "tickets.jsonl").unlink()
        (allowed / "tickets.jsonl").symlink_to(outside / ("secret.jsonl" if target == "another file" else "none"))
        again = await client.call_tool("submit_sweep", arguments)
    assert not again.is_error, again.content[0].text
    assert again.structured_content["sweep_id"] == sweep["sweep_id"]
    assert not [key for key in uploads._HASHED if str(outside) in key[0]], "read a file outside the allowed folders"


async def test_a_sweep_retried_after_its_data_link_was_pointed_at_other_rows_is_a_conflict(
        hub: Emulator, here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep's dataset named through a link (latest.jsonl -> v1.jsonl, as data versioning keeps it), then the
    link pointed at v2.jsonl: a job's retry is a conflict (its content is the file the caller names, as it is
    now), but the sweep's retry hashed the path its runs were pinned to (the link resolved when the sweep was
    approved: v1, unchanged) and returned the old sweep, trained on v1, as if it read v2."""

    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)
    write_jsonl(here / "v1.jsonl", ROWS)
    write_jsonl(here / "v2.jsonl", [{**row, "completion": row["completion"] + "!"} for row in ROWS])
    (here / "latest.jsonl").symlink_to(here / "v1.jsonl")
    arguments = {"base": {**TICKETS, "dataset": "./latest.jsonl"}, "grid": {"learning_rate": [1e-4, 2e-4]},
                 "max_parallel": 2, "idempotency_key": "latest-sweep"}
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", arguments)
        before = len(hub.posted_jobs())
        assert (await call(client, "submit_sweep", arguments))["sweep_id"] == sweep["sweep_id"]
        (here / "latest.jsonl").unlink()
        (here / "latest.jsonl").symlink_to(here / "v2.jsonl")
        result = await client.call_tool("submit_sweep", arguments)
    text = result.content[0].text
    assert result.is_error and "local files content" in text and sweep["sweep_id"] in text, text
    assert len(hub.posted_jobs()) == before


async def test_a_retry_over_http_of_an_image_folder_whose_class_now_links_out_is_no_crash(
        hub: Emulator, tmp_path: Path) -> None:
    """An HTTP caller's keyed job on an image folder, one class folder then swapped for a link out of the allowed
    folder: the retry's content planning raised the image folder's ValueError (data/images.py
    image_folder_classes), which no caller of plan_dataset but the retry lets through, and the caller read an
    "unexpected" failure (a bug's answer). A refused folder cannot say what the job read: the retry is held to
    its arguments, as a file gone is."""
    from PIL import Image

    allowed, outside = tmp_path / "shared", tmp_path / "private-zone"
    for folder in (allowed / "pics", outside):
        for label, colour in (("red", (255, 0, 0)), ("blue", (0, 0, 255))):
            (folder / label).mkdir(parents=True)
            for i in range(4):
                Image.new("RGB", (16, 16), colour).save(folder / label / f"{i}.png")
    arguments = {"model": hub.serve_model(VIT), "dataset": str(allowed / "pics"), "method": "image-classification",
                 "backend": "hf", "hub_model_id": "emu-user/colours", "max_steps": 5, "idempotency_key": "folder-1"}
    async with Client(build_server(access=Access.http(local_dirs=[str(allowed)]))) as client:
        job = await call(client, "submit_training", arguments)
        shutil.rmtree(allowed / "pics" / "red")
        (allowed / "pics" / "red").symlink_to(outside / "red")
        before = len(hub.posted_jobs())
        again = await client.call_tool("submit_training", arguments)
    assert (again.meta or {}).get("hf-train-mcp/error-code") != "unexpected", again.content[0].text
    assert not again.is_error and again.structured_content["job_id"] == job["job_id"], again.content[0].text
    assert len(hub.posted_jobs()) == before


async def test_a_sweep_over_text_column_mappings_reads_one_copy(hub: Emulator, here: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid over column_mapping that names other text columns (prompt <- question, prompt <- title) uploads the
    same bytes for every run (no image column is named): the supervisor's later run read the local file as it
    was when its turn came (copies were kept apart by the whole mapping: planning/copies.py sweep_copies), so an
    edit after the sweep was approved trained run 1 on other rows than run 0, uploaded again, against "sent
    once ... mounted read-only into each"."""

    rows = [{"question": row["prompt"], "title": f"printer {i}", "completion": row["completion"]}
            for i, row in enumerate(ROWS)]
    write_jsonl(here / "qa.jsonl", rows)
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)  # this test is the supervisor
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    arguments = {"base": {**TICKETS, "dataset": "./qa.jsonl"}, "max_parallel": 1,
                 "grid": {"column_mapping": [{"prompt": "question"}, {"prompt": "title"}]}}
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", arguments)
    first = input_volumes(hub.posted_jobs()[before])
    write_jsonl(here / "qa.jsonl", [{**row, "completion": "edited"} for row in rows])
    batches = hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
    supervise_until_second_run(sweep["sweep_id"], before, hub)
    assert len(hub.posted_jobs()) == before + 2
    assert input_volumes(hub.posted_jobs()[before + 1]) == first  # the copy the sweep was approved with
    assert hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches  # nothing sent again


async def test_a_lost_ledgers_retry_on_edited_data_says_the_data_may_differ(
        hub: Emulator, here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger lost, the same call after tickets.jsonl was edited is refused by the key's Hub label, which
    holds the data's content too, but the answer said it was "sent with another arguments: a retry sends the same
    arguments", false for a caller who sent the very same ones: it names the local files' content too now."""

    arguments = {**TICKETS, "idempotency_key": "edited-lost"}
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
    write_jsonl(here / "tickets.jsonl", [{**row, "completion": row["completion"] + "!"} for row in ROWS])
    monkeypatch.setenv("HF_TRAIN_HOME", str(tmp_path / "another-home"))  # the ledger lost
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", arguments)
    text = result.content[0].text
    assert result.is_error and job["job_id"] in text and "local files content" in text, text


async def test_a_lost_ledgers_retry_of_a_job_labelled_before_content_counted_is_that_job(
        hub: Emulator, here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job a server of yesterday posted carries the label of the call without its local files' content (the
    call as sent was all a retry was held to). With the ledger lost (moved, another HF_TRAIN_HOME), the very same
    call, nothing edited, was refused by that label as "sent with another arguments", where the ledger holds it to
    its arguments alone (retries.changed_fields: content only when both calls have it)."""

    arguments = {**TICKETS, "idempotency_key": "labelled-yesterday"}
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
    yesterday = retries.asked_label(retries.asked_json(TrainingRequest.model_validate(arguments), "hf"))
    (posted,) = hub.labeled(**{"asked": hub.posted_jobs()[-1]["labels"]["asked"]})
    posted.spec["labels"]["asked"] = yesterday  # as that server labelled it
    monkeypatch.setenv("HF_TRAIN_HOME", str(tmp_path / "another-home"))  # the ledger lost
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        again = await client.call_tool("submit_training", arguments)
    assert not again.is_error, again.content[0].text
    assert again.structured_content["job_id"] == job["job_id"] and len(hub.posted_jobs()) == before


async def test_a_sweep_run_reading_its_sweeps_copy_records_its_own_data_facts(
        hub: Emulator, here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid over column_mapping of text columns, one run's prompt a conversation (prompt <- asked), the other's
    a string (prompt <- question): run 1, launched later, reads the copy run 0 uploaded, and
    its record kept run 0's facts with it (conversational), which a run resumed from run 1 once the rows are gone
    is planned by (planning/copies.py from_copy): each job records the facts its own validation found."""

    rows = [{"asked": [{"role": "user", "content": row["prompt"]}], "question": row["prompt"],
             "completion": row["completion"]} for row in ROWS]
    write_jsonl(here / "both.jsonl", rows)
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)  # this test is the supervisor
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    arguments = {"base": {**TICKETS, "model": "Qwen/Qwen2.5-0.5B-Instruct", "dataset": "./both.jsonl"},
                 "max_parallel": 1,
                 "grid": {"column_mapping": [{"prompt": "asked"}, {"prompt": "question"}]}}
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", arguments)
    supervise_until_second_run(sweep["sweep_id"], before, hub)
    ledger = Ledger()
    first, second = (ledger.get(run.job_id) for run in ledger.sweep_runs(sweep["sweep_id"]))
    assert first.uploads[0]["place"] == second.uploads[0]["place"]  # one copy
    assert first.uploads[0]["facts"]["conversational"] is True
    assert not second.uploads[0]["facts"]["conversational"], (second.request_json, second.uploads[0]["facts"])


@pytest.mark.parametrize("edit", ["a credential", "a missing image"])
async def test_a_retry_after_an_edit_its_upload_would_refuse_is_a_conflict(hub: Emulator, here: Path,
                                                                           edit: str) -> None:
    """An edit after which the data cannot be uploaded (a row holding an AWS key; a row naming an image that is
    not there) made the retry's content "cannot be told", as if the file were gone, and the old job came back as
    trained on the file: it is there, and not what the job read. A conflict now, naming the job (a new key gets
    the refusal itself); nothing sent, nothing launched."""
    arguments = {**TICKETS, "idempotency_key": f"refused-{edit[2:5]}"}
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", arguments)
        before, batches = len(hub.posted_jobs()), hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
        added = ({"prompt": "keys?", "completion": "aws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key"
                  " = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"} if edit == "a credential"
                 else {"prompt": "see", "completion": "it", "images": ["images/gone.png"]})
        write_jsonl(here / "tickets.jsonl", [*ROWS, added])
        result = await client.call_tool("submit_training", arguments)
    text = result.content[0].text
    assert result.is_error and "local files content" in text and job["job_id"] in text, text
    assert len(hub.posted_jobs()) == before and hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches


@pytest.mark.parametrize("target", ["an image there", "no file"])
async def test_a_retry_over_http_on_rows_naming_an_outside_image_tells_nothing_of_it(
        hub: Emulator, tmp_path: Path, target: str) -> None:
    """An HTTP caller's keyed job, its rows then naming an image outside the allowed folder
    ('../private-zone/x.png'): the retry's upload planning (which no validation precedes) refused a missing one
    as "not a file beside the data" before it asked whether the caller may read it, so the retry's answer
    differed by whether that server file exists. Whether it is there or not, the answer is the same now."""
    from PIL import Image

    allowed, outside = tmp_path / "shared", tmp_path / "private-zone"
    write_jsonl(allowed / "tickets.jsonl", ROWS)
    outside.mkdir()
    if target == "an image there":
        Image.new("RGB", (8, 8), (1, 2, 3)).save(outside / "x.png")
    arguments = {**TICKETS, "dataset": str(allowed / "tickets.jsonl"), "idempotency_key": "outside-image"}
    async with Client(build_server(access=Access.http(local_dirs=[str(allowed)]))) as client:
        job = await call(client, "submit_training", arguments)
        write_jsonl(allowed / "tickets.jsonl", [*ROWS, {"prompt": "see", "completion": "it",
                                                        "images": ["../private-zone/x.png"]}])
        again = await client.call_tool("submit_training", arguments)
    assert not again.is_error, again.content[0].text  # not this caller's to read: held to its arguments
    assert again.structured_content["job_id"] == job["job_id"]


async def test_a_lost_ledgers_sweep_on_edited_data_never_adopts_the_runs_trained_before(
        hub: Emulator, here: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyed sweep re-submitted once its ledger was lost finds its runs' jobs on the Hub by their keys (a sweep
    run's label is its arguments alone). With tickets.jsonl edited in between, the new sweep adopted them as its
    runs, trained on the old bytes, and recorded them as reading the edited file's copy, which was never uploaded
    (an evaluation of one then mounts a copy no job read). A job found by its key that mounts other copies than
    the call's files make is a conflict now: no run adopted, nothing uploaded or posted."""
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)
    arguments = {"base": TICKETS, "grid": {"learning_rate": [1e-4, 2e-4]}, "max_parallel": 2,
                 "idempotency_key": "lost-sweep"}
    async with Client(build_server()) as client:
        first = await call(client, "submit_sweep", arguments)
    trained = {run["job_id"] for run in first["jobs"]}
    write_jsonl(here / "tickets.jsonl", [{**row, "completion": row["completion"] + "!"} for row in ROWS])
    monkeypatch.setenv("HF_TRAIN_HOME", str(tmp_path / "another-home"))  # the ledger lost
    before, batches = len(hub.posted_jobs()), hub.count("POST", rf"/api/buckets/{BUCKET}/batch")
    async with Client(build_server()) as client:
        again = await client.call_tool("submit_sweep", arguments)
    runs = (again.structured_content or {}).get("jobs") or []
    assert not trained & {run["job_id"] for run in runs}, runs
    assert all("local files content" in (run.get("note") or "") for run in runs), runs
    assert len(hub.posted_jobs()) == before and hub.count("POST", rf"/api/buckets/{BUCKET}/batch") == batches
