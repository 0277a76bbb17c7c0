"""An idempotency key is a promise about one call: its retry (the same arguments, however planning filled them
in) returns the job it launched; the key with other arguments is a conflict that launches nothing, whether the
ledger remembers the key or only the Hub's labels do."""

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from tests.emulator import Emulator, JobPlan, ViewerDataset
from tests.helpers import CHAT_BASE, CHAT_ROWS, call, refused

pytestmark = pytest.mark.anyio

QUICK = dict(scheduling_s=0.0, running_s=30.0)


async def _first_then(hub: Emulator, first: dict, *retries: dict, tool: str = "submit_training") -> tuple[dict, list]:
    """The first call's job, then each retry's answer (its job, or the refusal's text); and how many were posted."""
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK))
    async with Client(build_server()) as client:
        job = await call(client, tool, first)
        answers = []
        for retry in retries:
            result = await client.call_tool(tool, retry)
            answers.append(result.content[0].text if result.is_error else result.structured_content)
    assert len(hub.posted_jobs()) == before + 1
    return job, answers


@pytest.mark.parametrize("dataset", ["conversations", "one-config"])
async def test_a_retry_matches_though_planning_filled_the_request_in(hub: Emulator, dataset: str) -> None:
    """The ledger keeps the request as planned (a column mapping found, a dataset's one config named); the retry
    is the call as sent, and is the same call."""
    rows = [{"conversations": row["messages"]} for row in CHAT_ROWS] if dataset == "conversations" else CHAT_ROWS
    hub.datasets["org/retry"] = ViewerDataset({"default" if dataset == "conversations" else "en": {"train": rows}})
    call_args = {**CHAT_BASE, "dataset": "org/retry", "max_steps": 5, "idempotency_key": f"retry-{dataset}"}
    job, [again, spelled_out] = await _first_then(hub, call_args, call_args,
                                                  {**call_args, "engine": "trl", "backend": "hf"})
    assert again["job_id"] == spelled_out["job_id"] == job["job_id"]


async def test_the_key_with_other_arguments_launches_nothing(chat: Emulator) -> None:
    call_args = {**CHAT_BASE, "max_steps": 5, "idempotency_key": "retry-other"}
    job, [bigger, dry] = await _first_then(chat, call_args, {**call_args, "max_steps": 500},
                                           {**call_args, "dry_run": True})
    assert f"already names job {job['job_id']}" in bigger and "another max_steps" in bigger
    assert dry["job_id"] is None and dry["script"]  # a dry run is no retry: it shows the plan, launches nothing


async def test_a_lost_ledger_s_key_is_checked_against_the_hub_s_label(hub: Emulator, tmp_path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    hub.plan_next(JobPlan(**QUICK))
    script = {"script": "print('push_to_hub')\n", "idempotency_key": "adopted"}
    async with Client(build_server()) as client:
        first = await call(client, "run_script", script)
    monkeypatch.setenv("HF_TRAIN_HOME", str(tmp_path / "another-home"))  # the ledger lost (or another machine's)
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        other = await refused(client, "run_script", {**script, "script": "print('other code')\n",
                                                     "flavor": "a100-large"})
        same = await call(client, "run_script", script)
    assert "found on the Hub by its label" in other and first["job_id"] in other
    assert same["job_id"] == first["job_id"] and "found on the Hub" in " ".join(same["warnings"])
    assert len(hub.posted_jobs()) == before


@pytest.mark.parametrize("form", ["folder", "file"])
async def test_the_key_with_an_edited_folder_or_file_launches_nothing(hub: Emulator, tmp_path, form: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """run_script's folder (or local file) is sent by name: its content is what the job runs, so a retry is
    held to the content too, in the ledger and, once the ledger is lost, on the Hub's label."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('push_to_hub')\n")
    (project / "helpers.py").write_text("STEPS = 10\n")
    edited = project / ("helpers.py" if form == "folder" else "train.py")
    call_args = ({"folder": str(project), "script": "train.py"} if form == "folder"
                 else {"script": str(project / "train.py")})
    call_args["idempotency_key"] = f"edited-{form}"
    job, [same] = await _first_then(hub, call_args, call_args, tool="run_script")
    assert same["job_id"] == job["job_id"]  # unedited: the retry gets its job
    edited.write_text(edited.read_text() + "STEPS = 20  # edited\n")
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        text = await refused(client, "run_script", call_args)
    assert f"already names job {job['job_id']}" in text and f"another {form} content" in text, text
    monkeypatch.setenv("HF_TRAIN_HOME", str(tmp_path / "another-home"))  # the ledger lost: the Hub's label holds it
    async with Client(build_server()) as client:
        lost = await refused(client, "run_script", call_args)
    assert "found on the Hub by its label" in lost and job["job_id"] in lost, lost
    assert len(hub.posted_jobs()) == before  # nothing launched for the edited call
