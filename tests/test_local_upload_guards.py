"""Local files on the Jobs backend (issue 33), the guards an outside review asked for: what reaches the bucket is
exactly what was judged (no file outside the allowed folders, no credential, no bytes changed since the check),
the caps hold per call and per sweep, a sweep's runs share one copy, and an answer says where the files are when
the job could not be posted. Against the emulated Hub, with the real huggingface_hub client and hf_xet (no mock of
either)."""

import json
import os
import shutil
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.access import Access
from hf_train_mcp.jobs.ledger import Ledger
from hf_train_mcp.service import Core
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.sweeps import sweep as sweeps
from hf_train_mcp_demo.tiny import write_jsonl
from tests.emulator import Emulator, JobPlan
from tests.helpers import call, decoded_script, script_config

pytestmark = pytest.mark.anyio
BUCKET = "emu-user/jobs-artifacts"
VIT = Path(__file__).parent / "data" / "configs" / "google--vit-base-patch16-224"
TICKETS = {"model": "Qwen/Qwen2.5-0.5B", "dataset": "./tickets.jsonl", "backend": "hf",
           "hub_model_id": "emu-user/tickets-sft", "max_steps": 20}
ROWS = [{"prompt": f"Ticket {i}: the printer on floor {i % 4} jams.", "completion": f"hardware/{i % 3}"}
        for i in range(30)]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "tickets.jsonl", ROWS)
    return tmp_path


def xet_hash(path: Path) -> str:
    import hf_xet

    return hf_xet.hash_files([str(path)])[0].hash


def input_volumes(spec: dict) -> list[dict]:
    return [v for v in spec.get("volumes") or [] if v["mountPath"].startswith("/inputs/")]


def placed(hub: Emulator, place: str) -> dict[str, str]:
    """name inside an upload's folder -> the xet hash the bucket holds for it."""
    prefix = place + "/"
    return {path[len(prefix):]: entry["xetHash"] for path, entry in hub.buckets.get(BUCKET, {}).get("files", {}).items()
            if path.startswith(prefix)}


def held_hashes(hub: Emulator) -> set[str]:
    return {entry["xetHash"] for entry in hub.buckets.get(BUCKET, {}).get("files", {}).values()}


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
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", TICKETS)
    assert result.is_error
    assert "did not answer in time" not in result.content[0].text, result.content[0].text
    assert "write access" in result.content[0].text and result.meta["hf-train-mcp/error-code"] == "auth"
    assert len(hub.posted_jobs()) == 0
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
