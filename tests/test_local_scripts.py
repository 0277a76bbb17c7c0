"""A caller's own code on this machine (run_script with backend='local'): its environment holds what it needs to
run and nothing that points at the server user's secrets (no HF_HOME or token file, no config folders, HOME a
folder of its own), and the operator is told at start-up that code and local jobs together amount to a shell."""

import argparse
import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.shell.serving import http_warnings
from tests.helpers import call, finished

pytestmark = pytest.mark.anyio

SHOWS_ITS_ENVIRONMENT = """import json, os
from pathlib import Path
stored = Path('~/.cache/huggingface/token').expanduser()
print('ENV ' + json.dumps({'keys': sorted(os.environ), 'home': os.environ.get('HOME'),
                           'token_path': os.environ.get('HF_TOKEN_PATH'), 'stored': stored.exists()}), flush=True)
"""


def servers_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server user's stored token (in HF_HOME and at the default place under HOME) and settings that name
    where more of them live, or hold one under a name that is no credential's."""
    hf_home = tmp_path / "hf-home"
    hf_home.mkdir(exist_ok=True)
    (hf_home / "token").write_text("hf_stored_canary_0123456789\n")
    user = tmp_path / "user"
    (user / ".cache" / "huggingface").mkdir(parents=True)
    (user / ".cache" / "huggingface" / "token").write_text("hf_stored_canary_0123456789\n")
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_CACHE", str(hf_home / "hub"))
    monkeypatch.setenv("HF_TOKEN_PATH", str(hf_home / "token"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(user / ".config"))
    monkeypatch.setenv("TRANSFORMERS_CACHE", str(hf_home / "transformers"))
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:s3cr3t@db/prod")
    monkeypatch.setenv("HF_TRAIN_AUTH_TOKEN", "bearer-canary-0123")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")


@pytest.mark.detached
async def test_a_local_scripts_environment_points_at_none_of_the_servers_secrets(
        offline, tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    servers_secrets(tmp_path, monkeypatch)
    async with Client(build_server()) as client:
        job = await call(client, "run_script", {"script": SHOWS_ITS_ENVIRONMENT, "backend": "local"})
        report = await finished(client, job["job_id"], 120)
    assert report["stage"] == "COMPLETED", report
    seen = json.loads(next(line for line in report["log_tail"] if line.startswith("ENV "))[4:])
    leaked = {"HF_HOME", "HF_HUB_CACHE", "XDG_CONFIG_HOME", "TRANSFORMERS_CACHE", "DATABASE_URL",
              "HF_TRAIN_AUTH_TOKEN", "HF_TOKEN"} & set(seen["keys"])
    assert not leaked, seen["keys"]
    assert Path(seen["home"]).is_relative_to(isolated_home / "jobs" / job["job_id"]), seen["home"]
    assert seen["token_path"] == "/dev/null" and not seen["stored"], seen
    assert {"PATH", "OMP_NUM_THREADS", "HF_ENDPOINT"} <= set(seen["keys"]), seen["keys"]  # what it needs to run


def serving(**flags: bool) -> argparse.Namespace:
    return argparse.Namespace(**{"host": "127.0.0.1", "allow_scripts": False, "allow_reward_code": False,
                                 "allow_local_jobs": False, **flags})


@pytest.mark.parametrize("code", ["allow_scripts", "allow_reward_code"])
def test_the_operator_is_told_that_code_and_local_jobs_together_are_a_shell(code: str) -> None:
    said = " ".join(http_warnings(serving(**{code: True, "allow_local_jobs": True}), authenticated=True))
    assert "amounts to a shell" in said and "--allow-local-jobs" in said, said
    alone = http_warnings(serving(**{code: True}), authenticated=True)
    assert alone == [], alone  # code on Hub jobs only: the token beside it is what the flag says
