"""run_script as a careless or hostile caller meets it: a fetched script's header does not pick the server's
credentials, a slow URL cannot hold the call, a project folder's history and credentials stay home, a retry
with other arguments launches nothing, and each bad value is refused with what to send. Nothing is posted in
any refusal."""

import fnmatch
import json
import shutil
import socket
import sys
from pathlib import Path, PurePosixPath

import pytest
from mcp import Client
from pydantic import ValidationError

from hf_train_mcp import credentials

from hf_train_mcp.planning import user_script_source as script_jobs

from hf_train_mcp.user_scripts import urls as script_urls

from hf_train_mcp.user_scripts import source as scripts
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.errors import TrainError
from hf_train_mcp.contract.requests import ScriptRequest
from hf_train_mcp.user_scripts.source import left_out, read_header, source_kind, sync_excludes
from tests.conftest import WRITE_TOKEN
from tests.emulator import Emulator, JobPlan
from tests.helpers import call, call_once, finished, refused

pytestmark = pytest.mark.anyio

ASKING = '''# /// script
# dependencies = ["trl>=1.0"]
#
# [tool.hf-jobs]
# flavor  = "a10g-small"
# timeout = "1h"
# secrets = ["HF_TOKEN", "WANDB_API_KEY"]
# ///
print("trainer.push_to_hub()")
'''
PLAIN = "# push_to_hub at the end\nprint('training')\n"
QUICK = dict(scheduling_s=0.0, running_s=0.2)


def refused_text(result) -> str:
    assert result.is_error, result.structured_content
    text = result.content[0].text
    assert "unexpected" not in text.lower(), text
    return text


# --- a URL's header and reading it ---------------------------------------------------------------------------------
async def test_a_urls_header_does_not_pick_the_servers_secrets(hub: Emulator, served,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wandb-canary-456")
    files, base = served
    files["/abc123/train.py"] = ASKING.encode()
    before = len(hub.posted_jobs())
    text = refused_text(await call_once("run_script", {"script": base + "/abc123/train.py"}))
    assert "WANDB_API_KEY" in text and "secrets=[" in text and "wandb-canary-456" not in text
    assert len(hub.posted_jobs()) == before
    hub.plan_next(JobPlan(**QUICK))
    job = await call_once("run_script", {"script": base + "/abc123/train.py", "secrets": []})
    assert not job.is_error, job.content[0].text
    spec = hub.posted_jobs()[before]
    assert spec["secrets"] == {"HF_TOKEN": WRITE_TOKEN} and spec["flavor"] == "a10g-small"
    said = " ".join(job.structured_content["warnings"])
    assert "from the script's [tool.hf-jobs] header" in said and "a10g-small" in said


@pytest.mark.detached
async def test_a_url_that_trickles_is_given_up_within_the_deadline(hub: Emulator, served,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(script_urls, "FETCH_TIMEOUT_S", 1.0)
    monkeypatch.setattr(script_urls, "READ_TIMEOUT_S", 0.5)
    files, base = served
    files["/slow.py"] = ("trickle", b"print(1)\n" * 40, 0.05)  # 18 s at that pace
    files["/hop.py"] = ("redirect", "/slow.py")
    before = len(hub.posted_jobs())
    for path in ("/slow.py", "/hop.py"):
        text = refused_text(await call_once("run_script", {"script": base + path, "dry_run": True}))
        assert "took over 1 s" in text and "Nothing was launched" in text
    assert len(hub.posted_jobs()) == before


@pytest.mark.parametrize("address", ["100.64.0.7", "224.0.0.251", "0.0.0.0", "10.1.2.3", "fe80::1", "::ffff:127.0.0.1",
                                     "64:ff9b::a00:5", "2002:a00:5::1"])  # NAT64 and 6to4 carry 10.0.0.5
def test_a_remote_callers_url_may_not_point_inside_any_network(address: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(family, socket.SOCK_STREAM, 6, "", (address, 443))])
    with pytest.raises(TrainError, match="server's own network"):
        script_urls.check_url("https://scripts.example.com/train.py", remote=True)
    script_urls.check_url("https://scripts.example.com/train.py", remote=False)  # the local user's own network


# --- values refused with what to send -----------------------------------------------------------------------------
@pytest.mark.parametrize(("table", "said"), [
    ('timeout = true', "timeout must be a duration"),
    ('timeout = [1]', "timeout must be a duration"),
    ('flavor = 3', "flavor must be a non-empty string"),
    ('secrets = ["wandb key"]', "list of variable names"),
    ('image = ""', "image must be a non-empty string"),
    ('image = "Bad Image; $(id) --privileged"', "is not a Docker image reference"),
])
async def test_a_header_with_values_of_the_wrong_type_is_refused(hub: Emulator, table: str, said: str) -> None:
    script = f"# /// script\n# [tool.hf-jobs]\n# {table}\n# ///\nprint(1)\n"
    with pytest.raises(ValueError, match=said):
        read_header(script)
    before = len(hub.posted_jobs())
    assert said in refused_text(await call_once("run_script", {"script": script}))
    assert len(hub.posted_jobs()) == before


@pytest.mark.parametrize(("header", "said"), [
    ('tool = "x"', "must be a table"), ("tool = 1", "must be a table"), ("requires-python = 3", "must be a string"),
])
def test_a_header_of_the_wrong_shape_is_refused(header: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        read_header(f"# /// script\n# {header}\n# ///\nprint(1)\n")


def test_env_names_are_judged_by_their_words() -> None:
    ScriptRequest(script=PLAIN, env={"TOKENIZERS_PARALLELISM": "false", "HF_HUB_ENABLE_HF_TRANSFER": "1",
                                     "TOKEN_LIMIT": "100", "AUTH_MODE": "none", "MAX_TOKENS": "512"})
    for name in ("WANDB_API_KEY", "GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "HFTOKEN", "AWS_SESSIONTOKEN",
                 "STRIPE_SECRETKEY", "hfToken", "OPENAI_KEY", "GITHUBTOKEN"):
        with pytest.raises(ValidationError, match="looks like a credential"):
            ScriptRequest(script=PLAIN, env={name: "x"})
    assert not credentials.looks_like_credential("TOKENIZERS_PARALLELISM")


@pytest.mark.parametrize(("fields", "said"), [
    ({"folder": "/tmp/p", "script": "--with=evil.py"}, "entry file"),
    ({"folder": "/tmp/p", "script": "-evil.py"}, "entry file"),
    ({"script": PLAIN, "dependencies": ["torch --index-url https://evil.example/simple"]}, "holds spaces"),
])
def test_an_argument_cannot_become_an_option(fields: dict, said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        ScriptRequest(**fields)


async def test_a_script_that_does_not_compile_launches_nothing(hub: Emulator, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scripts, "JOB_PYTHON", sys.version_info[:2])  # a server whose Python is the job's
    spaced = tmp_path / "my scripts" / "train (1).py"  # a browser's second download of train.py
    spaced.parent.mkdir()
    spaced.write_text("def main(:\n    pass\n")
    assert source_kind(str(spaced)) == source_kind("runs/lr=1e-4/train.py") == "path"
    before = len(hub.posted_jobs())
    text = refused_text(await call_once("run_script", {"script": str(spaced)}))
    assert "train (1).py does not compile: line 1" in text
    assert "does not compile" in refused_text(await call_once("run_script", {"script": "print(\n"}))
    for deep in ("y = " + "-" * 150_000 + "1\n", "x = " + "1+" * 90_000 + "1\n"):  # RecursionError, not a crash
        assert "nested too deeply" in refused_text(await call_once("run_script", {"script": deep}))
    newer = "# /// script\n# requires-python = \">=3.99\"\n# ///\nmatch(:\n"  # another Python's syntax: its job judges
    assert not (await call_once("run_script", {"script": newer, "dry_run": True})).is_error
    assert len(hub.posted_jobs()) == before


async def test_newer_syntax_than_the_servers_python_is_a_warning(hub: Emulator,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scripts, "JOB_PYTHON", (3, 99))  # the job's Python is newer than this server's
    dry = await call_once("run_script", {"script": "type Num = int\nprint(Num)\n", "dry_run": True})
    assert not dry.is_error, dry.content[0].text
    said = " ".join(dry.structured_content["warnings"])
    assert "does not compile: line 1" in said and "fine if it is newer syntax" in said


# --- retries, follow-ups, logs ------------------------------------------------------------------------------------
async def test_a_retry_with_other_arguments_is_a_conflict(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    hub.plan_next(JobPlan(**QUICK))
    async with Client(build_server()) as client:
        first = await call(client, "run_script", {"script": PLAIN, "idempotency_key": "one-script"})
        again = await call(client, "run_script", {"script": PLAIN, "idempotency_key": "one-script"})
        other = await refused(client, "run_script", {"script": PLAIN + "print(2)\n", "idempotency_key": "one-script"})
        bigger = await refused(client, "run_script", {"script": PLAIN, "flavor": "a100-large",
                                                      "idempotency_key": "one-script"})
    assert first["job_id"] == again["job_id"]
    assert "another script" in other and first["job_id"] in other and "print(2)" not in other
    assert "another flavor" in bigger
    assert len(hub.posted_jobs()) == before + 1


async def test_a_script_job_is_not_taken_for_a_training_job(chat: Emulator) -> None:
    hub = chat
    hub.plan_next(JobPlan(**QUICK))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": PLAIN})
        await finished(client, job["job_id"], 30)
        before = len(hub.posted_jobs())
        resumed = await refused(client, "submit_training", {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat",
                                                            "resume_from": job["job_id"]})
        evaluated = await refused(client, "evaluate_model", {"model": job["job_id"]})
        hub.plan_next(JobPlan(**QUICK))
        second = await call(client, "run_script", {"script": PLAIN + "print('secret sauce')\n"})
        compared = await call(client, "compare_runs", {"job_ids": [job["job_id"], second["job_id"]]})
    assert "secret sauce" not in json.dumps(compared) and len(compared["runs"]) == 2
    assert "is a script job, not a training job" in resumed and "unexpected" not in resumed.lower()
    assert "not a training job" in evaluated
    assert len(hub.posted_jobs()) == before + 1  # the second script only


async def test_a_secret_a_job_prints_is_masked_in_its_logs(hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "wandb-canary-789")
    monkeypatch.setenv("LICENSE_STRING", "license-canary-000")  # not a credential's name: masked since it was handed
    hub.plan_next(JobPlan(**QUICK, log_lines=["key is wandb-canary-789", f"token {WRITE_TOKEN}", "TOKENIZERS ok",
                                              "license license-canary-000"]))
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": PLAIN, "secrets": ["WANDB_API_KEY", "LICENSE_STRING"]})
        await finished(client, job["job_id"], 30)
        logs = await call(client, "job_logs", {"job_id": job["job_id"]})
    shown = json.dumps(logs)
    assert "wandb-canary-789" not in shown and WRITE_TOKEN not in shown and "license-canary-000" not in shown
    assert "key is ***" in shown and "TOKENIZERS ok" in shown


# --- a project folder ---------------------------------------------------------------------------------------------
def _project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(PLAIN)
    return root


@pytest.mark.parametrize(("path", "out"), [
    (".git/config", True), ("src/.git/HEAD", True), (".env", True), ("conf/.env.prod", True), (".venv/lib/x.py", True),
    ("pkg/__pycache__/m.cpython-311.pyc", True), ("train.py", False), ("configs/run.yaml", False),
    ("gitnotes/.gitkeep", False), ("venvs.md", False), ("envs/base.yaml", False),
    (".git-credentials", True), (".kube/config", True), (".config/gcloud/adc.json", True), ("a/.docker/c.json", True),
    ("keys/id_ed25519", True), ("deploy_rsa", True), ("tls/server.key", True), ("p/cert.p12", True), ("prod.env", True),
    ("infra/terraform.tfstate", True), ("infra/.terraform/providers/x", True), ("credentials.json", True),
    ("src/id_utils.py", False), ("keys.py", False), (".config/app.yaml", False), ("keys/id_ed25519.pub", False),
])
def test_what_stays_home_is_one_rule_for_the_hash_and_the_upload(path: str, out: bool) -> None:
    assert left_out(PurePosixPath(path)) is out
    assert any(fnmatch.fnmatchcase(path, pattern) for pattern in sync_excludes()) is out


async def test_a_folder_goes_to_a_place_per_version_quietly(hub: Emulator, tmp_path: Path,
                                                           capfd: pytest.CaptureFixture) -> None:
    project = _project(tmp_path / "proj")
    places = []
    for version in ("STEPS = 1\n", "STEPS = 2\n"):
        (project / "config.py").write_text(version)
        hub.plan_next(JobPlan(**QUICK))
        before = len(hub.posted_jobs())
        assert not (await call_once("run_script", {"folder": str(project), "script": "train.py"})).is_error
        places.append(hub.posted_jobs()[before]["volumes"][0]["path"])
    assert places[0] != places[1]
    assert capfd.readouterr().out == ""  # the sync prints nothing: stdout is the CLI's --json answer


async def test_a_public_bucket_or_an_oversized_folder_launches_nothing(hub: Emulator, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    project = _project(tmp_path / "proj")
    hub.buckets["emu-user/jobs-artifacts"] = {"private": False, "created": "2026-01-01T00:00:00Z", "files": {}}
    before = len(hub.posted_jobs())
    text = refused_text(await call_once("run_script", {"folder": str(project), "script": "train.py"}))
    assert "is public" in text and not hub.buckets["emu-user/jobs-artifacts"]["files"]
    monkeypatch.setattr(script_jobs, "MAX_FOLDER_FILES", 2)
    for i in range(3):
        (project / f"part{i}.py").write_text("x = 1\n")
    assert "put data and weights in a dataset" in refused_text(
        await call_once("run_script", {"folder": str(project), "script": "train.py", "dry_run": True}))
    assert len(hub.posted_jobs()) == before


async def test_a_config_outside_the_folder_is_not_read(hub: Emulator, tmp_path: Path) -> None:
    project = _project(tmp_path / "proj")
    (tmp_path / "outside.yaml").write_text("base_model: x\n")  # no hub_model_id: would be named if read
    (project / "inside.yaml").write_text("base_model: x\n")
    dry = await call_once("run_script", {"folder": str(project), "image": "axolotlai/axolotl:0.19.0",
                                         "command": ["axolotl", "train", "/code/../outside.yaml", "inside.yaml"],
                                         "dry_run": True})
    said = " ".join(dry.structured_content["warnings"])
    assert "inside.yaml sets no" in said and "outside.yaml" not in said


# --- this machine -------------------------------------------------------------------------------------------------
async def test_a_local_run_says_what_it_cannot_install_and_has_the_local_timeout(
        offline: None, monkeypatch: pytest.MonkeyPatch) -> None:
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "uv" else which(name, *a, **k))
    script = "# /// script\n# dependencies = [\"rich\"]\n# ///\nprint(1)\n"
    dry = await call_once("run_script", {"script": script, "backend": "local", "dry_run": True})
    assert not dry.is_error, dry.content[0].text
    said = " ".join(dry.structured_content["warnings"])
    assert "uv is not installed here" in said and "rich" in said
    assert dry.structured_content["timeout"] in ("6h", "6h0m", 21600, "21600")
