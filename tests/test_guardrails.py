"""Guardrails: what an HTTP caller may touch, budgets on the worst case, idempotency under races, one mapping,
and no token anywhere. Each test here fails when the protection it names is taken out."""

import json
import os
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hf_train_mcp.access import Access
from hf_train_mcp.jobs.ledger import PENDING, Ledger
from hf_train_mcp.service import Core
from tests.conftest import WRITE_TOKEN, needs_training
from tests.emulator import Emulator, JobPlan, ViewerDataset
from tests.helpers import CHAT_ROWS, decoded_script, job_record, script_config, submit_script, wait_for
from tests.helpers import call_once as call

pytestmark = pytest.mark.anyio

SECRET_ROWS = [{"text": "aws_secret_access_key=AKIA-CANARY-0001"}]
BASE = {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat", "hub_model_id": "emu-user/out"}


def text(result: Any) -> str:
    return result.content[0].text


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "private" / "credentials.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in SECRET_ROWS))
    return path


@pytest.fixture
def allowed_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "shared-data"
    folder.mkdir()
    (folder / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CHAT_ROWS))
    return folder


# --- HTTP callers: no server files, no code run here ---------------------------------------------------------
HTTP = Access.http()


@pytest.mark.parametrize("dataset", ["{secret}", "/", "{secret_dir}", "../private/credentials.jsonl", "~"])
async def test_http_callers_cannot_read_server_files_as_datasets(dataset: str, secret_file: Path, offline,
                                                                 monkeypatch) -> None:
    monkeypatch.chdir(secret_file.parent.parent / "private")
    dataset = dataset.format(secret=secret_file, secret_dir=secret_file.parent)
    result = await call("validate_dataset", {"dataset": dataset}, HTTP)
    assert result.is_error
    assert "--allow-local-files" in text(result) and "CANARY" not in text(result)
    stdio = await call("validate_dataset", {"dataset": str(secret_file)})  # the local user keeps their powers
    assert not stdio.is_error and "CANARY" in json.dumps(stdio.structured_content)


async def test_http_callers_read_local_data_only_inside_the_allowed_folders(allowed_dir: Path, secret_file: Path,
                                                                           offline) -> None:
    access = Access.http(local_dirs=[str(allowed_dir)])
    inside = await call("validate_dataset", {"dataset": str(allowed_dir / "chat.jsonl")}, access)
    assert not inside.is_error and inside.structured_content["valid"]
    (allowed_dir / "0-link.jsonl").symlink_to(secret_file)  # a link inside may not lead outside; sorts first
    linked = await call("validate_dataset", {"dataset": str(allowed_dir / "0-link.jsonl")}, access)
    assert linked.is_error and "CANARY" not in text(linked)
    folder = await call("validate_dataset", {"dataset": str(allowed_dir)}, access)  # the job would read it too
    assert folder.is_error and "'0-link.jsonl'" in text(folder) and "CANARY" not in text(folder)
    escape = await call("validate_dataset", {"dataset": f"{allowed_dir}/../private/credentials.jsonl"}, access)
    assert escape.is_error and "CANARY" not in text(escape)


async def test_http_callers_cannot_name_a_local_model(secret_file: Path, offline) -> None:
    (secret_file.parent / "config.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2,
                                                                "vocab_size": 100}))
    result = await call("estimate_cost", {"model": str(secret_file.parent), "num_examples": 10}, HTTP)
    assert result.is_error and "model" in text(result) and "--allow-local-files" in text(result)
    result = await call("validate_dataset", {"dataset": "org/chat", "model": str(secret_file.parent)}, HTTP)
    assert result.is_error and "--allow-local-files" in text(result)


async def test_http_callers_cannot_run_local_jobs_unless_the_operator_allows_it(allowed_dir: Path, secret_file: Path,
                                                                             offline) -> None:
    request = {"model": "org/Model-1B", "dataset": str(allowed_dir / "chat.jsonl"), "backend": "local",
               "dry_run": True}
    files_only = Access.http(local_dirs=[str(allowed_dir)])
    refused = await call("submit_training", request, files_only)
    assert refused.is_error and "--allow-local-jobs" in text(refused)
    default_backend = await call("submit_training", {k: v for k, v in request.items() if k != "backend"}, files_only)
    assert default_backend.is_error and "--allow-local-jobs" in text(default_backend)  # no token: local by default
    allowed = await call("submit_training", request, Access.http(local_dirs=[str(allowed_dir)], local_jobs=True))
    assert not allowed.is_error, text(allowed)
    outside = await call("submit_training", {**request, "dataset": str(secret_file), "skip_validation": True},
                         Access.http(local_dirs=[str(allowed_dir)], local_jobs=True))
    assert outside.is_error and "--allow-local-files" in text(outside)


async def test_http_callers_send_reward_code_only_when_the_operator_allows_it(chat) -> None:
    request = {**BASE, "method": "grpo", "dataset": "org/prompts", "dry_run": True, "max_steps": 4,
               "reward_code": "def reward(completions, **kw):\n    return [0.0 for _ in completions]\n"}
    chat.datasets["org/prompts"] = ViewerDataset({"default": {"train": [{"prompt": f"Q{i}"} for i in range(8)]}})
    refused = await call("submit_training", request, HTTP)
    assert refused.is_error and "--allow-reward-code" in text(refused)
    allowed = await call("submit_training", request, Access.http(reward_code=True))
    assert not allowed.is_error, text(allowed)


async def test_http_callers_reach_only_jobs_this_server_launched(chat) -> None:
    result = await call("job_status", {"job_id": "emu-user/0123456789abcdef01234567"}, HTTP)
    assert result.is_error and "launched through this server" in text(result)


@pytest.mark.parametrize("probe", ["owner/../../../../etc/passwd", "owner/../../../../etc/no-such-file"])
async def test_a_remote_caller_cannot_tell_which_server_paths_exist(probe: str, offline) -> None:
    result = await call("validate_dataset", {"dataset": probe}, HTTP)
    assert result.is_error and "is a path on the server" in text(result)


def test_a_local_job_gets_absolute_paths_whatever_the_servers_working_folder(allowed_dir: Path, offline,
                                                                            monkeypatch) -> None:
    from hf_train_mcp.contract.requests import TrainingRequest

    monkeypatch.chdir(allowed_dir)
    out = Core().submit_training(TrainingRequest(model="org/Model-1B", dataset="chat.jsonl", backend="local",
                                                 dry_run=True))
    assert script_config(out.script)["dataset"] == str(allowed_dir / "chat.jsonl")


@pytest.mark.detached
async def test_http_callers_do_not_see_or_touch_local_jobs(offline) -> None:
    core = Core()
    job_id = submit_script(core, "print('HFTM_DONE {}')\n")
    wait_for(core, job_id, {"COMPLETED"}, 60)
    for name, args in (("job_status", {"job_id": job_id}), ("job_logs", {"job_id": job_id}),
                       ("cancel_job", {"job_id": job_id})):
        result = await call(name, args, HTTP)
        assert result.is_error and "--allow-local-jobs" in text(result), name
    listed = await call("list_jobs", {}, HTTP)
    assert listed.structured_content["jobs"] == []
    assert [j["job_id"] for j in (await call("list_jobs", {})).structured_content["jobs"]] == [job_id]


def test_a_folder_walk_is_bounded(tmp_path: Path, monkeypatch) -> None:
    from hf_train_mcp.data import local
    from hf_train_mcp.errors import TrainError

    monkeypatch.setattr(local, "MAX_WALK_ENTRIES", 50)
    for i in range(60):
        (tmp_path / f"f{i}.txt").write_text("x")
    with pytest.raises(TrainError, match="over 50 files and folders"):
        local.data_files(str(tmp_path))
    with pytest.raises(TrainError, match="file or folder not found"):
        local.data_files(str(tmp_path / "missing.jsonl"))


# --- local jobs get a minimal environment -----------------------------------------------------------------------
ENV_DUMP = "import json, os\nprint('ENV ' + json.dumps(dict(os.environ)), flush=True)\nprint('HFTM_DONE {}')\n"


def job_env(core: Core, job_id: str) -> dict[str, str]:
    wait_for(core, job_id, {"COMPLETED"}, 60)
    line = next(l for l in core.job_logs(job_id, 0, 100).lines if l.startswith("ENV "))
    return json.loads(line[4:])


@pytest.mark.detached
@pytest.mark.parametrize("read_token", [False, True])
def test_a_local_job_gets_a_minimal_environment_and_the_token_only_when_it_reads_private_data(
        read_token: bool, monkeypatch, isolated_home: Path) -> None:
    from hf_train_mcp.backends.base import JobSpec
    from hf_train_mcp.rendering.script import Script

    monkeypatch.setenv("HF_TOKEN", "hf_server_token_canary")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-canary")
    monkeypatch.setenv("HF_TRAIN_AUTH_TOKEN", "bearer-canary")
    monkeypatch.setenv("DATABASE_URL", "postgres://canary")
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:canary@pypi.example/simple")
    core = Core()
    ref = core.backend("local").submit(Script(ENV_DUMP, "0" * 64),
                                       JobSpec("sft", "local-cpu", 1, 600, {}, [], read_token=read_token))
    env = job_env(core, ref.job_id)
    assert "canary" not in json.dumps({k: v for k, v in env.items() if k != "HF_TOKEN"})
    assert env["PATH"] == os.environ["PATH"] and env["HF_HOME"] == os.environ["HF_HOME"]
    if read_token:
        assert env["HF_TOKEN"] == "hf_***"  # there, and masked in the logs we hand back
    else:
        assert "HF_TOKEN" not in env and env["HF_TOKEN_PATH"] == os.devnull
    assert "canary" not in "".join(p.read_text() for p in Path(ref.job_dir).glob("*.json"))  # nothing on disk


class Launched(Exception):
    """Raised instead of starting the process: the test only needs what the core asked the backend for."""


def test_a_local_job_is_given_the_token_only_for_gated_or_private_hub_repos(hub: Emulator, tmp_path: Path,
                                                                           monkeypatch) -> None:
    from hf_train_mcp.backends.local import LocalBackend
    from hf_train_mcp.contract.requests import TrainingRequest

    hub.models["org/open-model-1B"] = 1_000_000_000
    hub.models["org/gated-model-1B"] = 1_000_000_000
    hub.gated_models.add("org/gated-model-1B")
    hub.datasets["org/private-data"] = ViewerDataset({"default": {"train": CHAT_ROWS}}, access="private")
    local_data = tmp_path / "d.jsonl"
    local_data.write_text("".join(json.dumps(r) + "\n" for r in CHAT_ROWS))
    specs = []

    def capture(self, script, spec):
        specs.append(spec)
        raise Launched

    monkeypatch.setattr(LocalBackend, "submit", capture)

    def read_token(model: str, dataset: str) -> bool:
        with pytest.raises(Launched):
            Core().submit_training(TrainingRequest(model=model, dataset=dataset, backend="local", max_steps=1))
        return specs[-1].read_token

    assert not read_token("org/open-model-1B", str(local_data))
    assert read_token("org/gated-model-1B", str(local_data))
    assert read_token("org/open-model-1B", "org/private-data")


# --- the budget is the worst case -----------------------------------------------------------------------------------
async def test_a_timeout_whose_worst_case_is_over_max_cost_is_refused_with_the_timeout_that_fits(chat) -> None:
    before = len(chat.posted_jobs())
    result = await call("submit_training", {**BASE, "flavor": "a10g-small", "timeout": "168h", "max_cost_usd": 1,
                                            "max_steps": 5})
    assert result.is_error
    # a10g-small bills $0.017/min in the emulator: 168 h is $171.36; one dollar buys 58 minutes
    assert "$171.36" in text(result) and "largest timeout that fits is 58m" in text(result)
    assert len(chat.posted_jobs()) == before
    dry = await call("submit_training", {**BASE, "flavor": "a10g-small", "timeout": "168h", "max_cost_usd": 1,
                                         "max_steps": 5, "dry_run": True})
    assert dry.is_error  # a dry run shows the same verdict


async def test_a_cpu_flavor_is_held_to_the_budget_too(chat) -> None:
    before = len(chat.posted_jobs())
    result = await call("submit_training", {**BASE, "flavor": "cpu-basic", "timeout": "168h", "max_cost_usd": 1,
                                            "max_steps": 5})
    assert result.is_error and "cpu-basic" in text(result) and len(chat.posted_jobs()) == before
    ok = await call("submit_training", {**BASE, "flavor": "cpu-basic", "timeout": "2h", "max_cost_usd": 1,
                                        "max_steps": 5})
    assert not ok.is_error and ok.structured_content["worst_case_cost_usd"] == 0.02


async def test_the_operator_cap_applies_and_a_caller_cannot_raise_it(chat, monkeypatch) -> None:
    monkeypatch.setenv("HF_TRAIN_MAX_COST_USD", "0.5")
    before = len(chat.posted_jobs())
    result = await call("submit_training", {**BASE, "flavor": "a10g-small", "timeout": "2h", "max_cost_usd": 1000,
                                            "max_steps": 5})
    assert result.is_error and "HF_TRAIN_MAX_COST_USD" in text(result) and "29m" in text(result)
    monkeypatch.setenv("HF_TRAIN_MAX_COST_USD", "lots")
    result = await call("submit_training", {**BASE, "flavor": "a10g-small", "timeout": "20m", "max_steps": 5})
    assert result.is_error and "not an amount of dollars" in text(result)
    assert len(chat.posted_jobs()) == before


async def test_the_submission_reports_the_worst_case_beside_the_estimate(chat) -> None:
    out = (await call("submit_training", {**BASE, "flavor": "a10g-large", "timeout": "90m", "max_steps": 5,
                                          "max_cost_usd": 3})).structured_content
    assert out["worst_case_cost_usd"] == 2.25 and out["estimated_cost_usd"] < out["worst_case_cost_usd"]
    assert chat.posted_jobs()[-1]["timeoutSeconds"] == 5400


async def test_without_a_timeout_the_default_shrinks_to_the_budget_when_the_run_still_fits(chat) -> None:
    free = (await call("submit_training", {**BASE, "flavor": "a10g-large", "max_steps": 3000,
                                           "dry_run": True})).structured_content
    budget = round(free["estimated_hours"] * 1.1 * 1.5, 2)  # $1.50/h: above the estimate, below the default
    assert budget < free["worst_case_cost_usd"]
    result = await call("submit_training", {**BASE, "flavor": "a10g-large", "max_steps": 3000, "dry_run": True,
                                            "max_cost_usd": budget})
    assert not result.is_error, (text(result), free)
    out = result.structured_content
    assert out["worst_case_cost_usd"] <= budget and any("timeout shortened" in w for w in out["warnings"])


async def test_jobs_bill_started_minutes_and_a_flavor_without_a_price_is_refused_under_a_budget(chat) -> None:
    out = (await call("submit_training", {**BASE, "flavor": "h200", "timeout": 121, "max_steps": 5,
                                          "dry_run": True})).structured_content
    assert out["worst_case_cost_usd"] == 0.25  # 3 started minutes at $0.084, not 121 s worth ($0.17)
    unpriced = await call("submit_training", {**BASE, "flavor": "cpu-xl", "timeout": "1h", "max_steps": 5,
                                              "max_cost_usd": 100})  # cpu-xl is not in the emulated catalog
    assert unpriced.is_error and "price of cpu-xl is unknown" in text(unpriced)


def test_the_largest_timeout_that_fits_really_fits() -> None:
    from hf_train_mcp.estimate.hardware import fallback_catalog
    from hf_train_mcp.planning.budget import _fits, largest_timeout, worst_case_usd

    for flavor in fallback_catalog().flavors.values():
        for cents in range(1, 5001, 7):
            budget = cents / 100
            fits = largest_timeout(budget, flavor.usd_per_hour)
            assert _fits(worst_case_usd(fits, flavor.usd_per_hour), budget), (flavor.name, budget)
            assert not _fits(worst_case_usd(fits + 60, flavor.usd_per_hour), budget), (flavor.name, budget)


async def test_local_runs_cost_nothing_whatever_the_budget(allowed_dir: Path, offline) -> None:
    out = (await call("submit_training", {"model": "org/Model-1B", "dataset": str(allowed_dir / "chat.jsonl"),
                                          "backend": "local", "dry_run": True, "max_cost_usd": 0.01})
           ).structured_content
    assert out["worst_case_cost_usd"] == 0


# --- idempotency holds under races ------------------------------------------------------------------------------
CLAIMER = """
import os, pathlib, sys, time
from hf_train_mcp.jobs import ledger
gate, name = pathlib.Path(sys.argv[1]), sys.argv[2]
read = ledger.Ledger.by_idempotency_key

def paused(self, key):
    holder = read(self, key)
    (gate / f"{name}.read").touch()
    while not (gate / f"{name}.go").exists():
        time.sleep(0.01)
    return holder

ledger.Ledger.by_idempotency_key = paused
print("claimed" if ledger.Ledger().reserve("key-1", claim=name) is None else "refused", flush=True)
"""


def test_two_servers_taking_over_one_stale_reservation_cannot_both_win(isolated_home: Path, tmp_path: Path) -> None:
    """Both see the stale claim; B takes it over first; A, resuming, must not take B's fresh claim."""
    Ledger()
    old = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds").replace("+00:00", "Z")
    with sqlite3.connect(isolated_home / "ledger.sqlite3") as db:
        db.execute("INSERT INTO jobs (job_id, backend, request_json, script_sha256, stage, idempotency_key, "
                   "created_at, claim) VALUES (?, 'pending', '{}', '', 'SCHEDULING', 'key-1', ?, 'dead-server')",
                   (PENDING + "key-1", old))
    env = {**os.environ, "HF_TRAIN_HOME": str(isolated_home)}
    procs = {name: subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path), name], env=env,
                                    stdout=subprocess.PIPE, text=True) for name in ("A", "B")}
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"{n}.read").exists() for n in procs) and time.monotonic() < deadline:
            time.sleep(0.02)
        (tmp_path / "B.go").touch()
        b_out, _ = procs["B"].communicate(timeout=60)
        (tmp_path / "A.go").touch()
        a_out, _ = procs["A"].communicate(timeout=60)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    assert (b_out.strip(), a_out.strip()) == ("claimed", "refused")
    assert Ledger().by_idempotency_key("key-1").claim == "B"


def test_a_slow_server_cannot_release_or_overwrite_a_claim_it_lost(isolated_home: Path) -> None:
    ledger = Ledger()
    assert ledger.reserve("k", claim="A") is None
    with sqlite3.connect(isolated_home / "ledger.sqlite3") as db:  # A's claim goes stale; B takes it over
        db.execute("UPDATE jobs SET created_at = '2000-01-01T00:00:00Z' WHERE job_id = ?", (PENDING + "k",))
    assert ledger.reserve("k", claim="B") is None
    ledger.release("k", claim="A")  # A gives up late
    assert ledger.by_idempotency_key("k").claim == "B"
    assert ledger.reserve("k", claim="C") is not None  # still held


def test_a_job_recorded_after_its_key_was_taken_over_is_kept_without_the_key(isolated_home: Path) -> None:
    ledger = Ledger()
    assert ledger.reserve("k", claim="A") is None
    with sqlite3.connect(isolated_home / "ledger.sqlite3") as db:
        db.execute("UPDATE jobs SET created_at = '2000-01-01T00:00:00Z' WHERE job_id = ?", (PENDING + "k",))
    assert ledger.reserve("k", claim="B") is None
    assert ledger.record(job_record("job-b", "k"), claim="B")
    assert not ledger.renew("k", "A")
    assert not ledger.record(job_record("job-a", "k"), claim="A")  # launched late: kept, but the key stays B's
    assert ledger.get("job-a").idempotency_key is None and ledger.by_idempotency_key("k").job_id == "job-b"


def test_a_key_released_while_another_server_looks_is_claimed_not_lost(isolated_home: Path, monkeypatch) -> None:
    ledger = Ledger()
    assert ledger.reserve("k", claim="A") is None
    look = Ledger.by_idempotency_key

    def released_meanwhile(self, key):
        ledger.release("k", "A")  # A's submission failed just as B looked
        return look(self, key)

    monkeypatch.setattr(Ledger, "by_idempotency_key", released_meanwhile)
    assert ledger.reserve("k", claim="B") is None
    monkeypatch.setattr(Ledger, "by_idempotency_key", look)
    assert ledger.by_idempotency_key("k").claim == "B"
    assert ledger.reserve("k", claim="C") is not None


async def test_a_submission_whose_key_was_taken_over_launches_nothing(chat, monkeypatch) -> None:
    monkeypatch.setattr(Ledger, "renew", lambda self, key, claim: False)
    before = len(chat.posted_jobs())
    result = await call("submit_training", {**BASE, "max_steps": 5, "idempotency_key": "slow"})
    assert result.is_error and "took over idempotency_key" in text(result)
    assert len(chat.posted_jobs()) == before


async def test_a_remote_caller_cannot_replay_a_local_jobs_key(offline, allowed_dir: Path) -> None:
    Core().ledger.record(job_record("local-aaaaaaaaaaaa", "shared-key", backend="local"))
    result = await call("submit_training", {"model": "org/Model-1B", "dataset": "org/chat", "backend": "hf",
                                            "idempotency_key": "shared-key"}, HTTP)
    assert result.is_error and "--allow-local-jobs" in text(result) and "file://" not in text(result)


# --- one mapping ------------------------------------------------------------------------------------------------
PAIRS = [{"question": f"Say something about {t}.", "winner": f"{t} is lovely.", "loser": f"I hate {t}."}
         for t in ("rain", "bread", "the sea", "music", "trains", "the moon", "a robot", "a library")]


async def test_a_partial_mapping_is_completed_and_the_job_gets_what_validation_approved(hub: Emulator) -> None:
    hub.datasets["org/pairs"] = ViewerDataset({"default": {"train": PAIRS}})
    mapping = {"prompt": "question"}
    report = (await call("validate_dataset", {"dataset": "org/pairs", "method": "dpo", "column_mapping": mapping})
              ).structured_content
    assert report["valid"]
    approved = report["suggested_column_mapping"]
    assert approved == {"prompt": "question", "chosen": "winner", "rejected": "loser"}
    await call("submit_training", {**BASE, "dataset": "org/pairs", "method": "dpo", "column_mapping": mapping,
                                   "max_steps": 5})
    assert script_config(decoded_script(hub.posted_jobs()[-1]))["column_mapping"] == approved


@pytest.mark.detached
@needs_training
@pytest.mark.training
def test_a_partial_mapping_trains_on_cpu_through_the_core(tiny_model: Path, tmp_path: Path, offline) -> None:
    from hf_train_mcp.contract.requests import TrainingRequest
    from hf_train_mcp_demo.tiny import write_jsonl

    data = write_jsonl(tmp_path / "pairs.jsonl", PAIRS)
    core = Core()
    sub = core.submit_training(TrainingRequest(model=str(tiny_model), dataset=str(data), method="dpo",
                                               column_mapping={"prompt": "question"}, max_steps=2,
                                               per_device_batch_size=2, max_length=64, backend="local"))
    report = wait_for(core, sub.job_id, {"COMPLETED", "ERROR"}, 300)
    assert report.stage == "COMPLETED", (report.error, report.log_tail)
    assert report.progress.step == 2


# --- no token in what we say ----------------------------------------------------------------------------------------
async def test_a_hub_error_that_echoes_the_token_is_scrubbed(chat) -> None:
    chat.fail_next("POST", r"/api/jobs/emu-user", 400, echo_auth=True)
    result = await call("submit_training", {**BASE, "max_steps": 5})
    assert result.is_error and "injected failure" in text(result)
    assert WRITE_TOKEN not in text(result) and "hf_***" in text(result)


@pytest.mark.detached
async def test_a_job_that_prints_the_token_has_it_masked_in_status_and_logs(chat) -> None:
    chat.plan_next(JobPlan(scheduling_s=0, running_s=0.2, log_lines=[f"debug HF_TOKEN={WRITE_TOKEN}", "HFTM_DONE {}"]))
    job_id = (await call("submit_training", {**BASE, "max_steps": 5})).structured_content["job_id"]
    time.sleep(0.5)
    status = await call("job_status", {"job_id": job_id})
    logs = await call("job_logs", {"job_id": job_id})
    for result in (status, logs):
        dumped = json.dumps(result.structured_content)
        assert WRITE_TOKEN not in dumped and "HF_TOKEN=hf_***" in dumped


def test_a_dry_run_renders_without_the_training_stack(tmp_path, offline, monkeypatch) -> None:
    """What the Docker image without the training extra does: plan and render, no torch, no launch."""
    import sys as _sys

    from hf_train_mcp.backends import local
    from hf_train_mcp.contract.requests import TrainingRequest
    from hf_train_mcp.service import Core
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    monkeypatch.setattr(local, "has_training_stack", lambda: False)
    monkeypatch.setattr(local.shutil, "which", lambda name: None)
    for heavy in ("torch", "transformers", "trl"):
        monkeypatch.setitem(_sys.modules, heavy, None)  # importing one now fails loudly
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], '
                                       '"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}')
    (model / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    data = write_jsonl(tmp_path / "sft.jsonl", example_rows("sft", 8))
    sub = Core().submit_training(TrainingRequest(model=str(model), dataset=str(data), backend="local", dry_run=True,
                                                 max_steps=3))
    assert sub.job_id is None and "CONFIG = {" in sub.script and sub.command == ["uv", "run", "train.py"]
    import pytest as _pytest

    from hf_train_mcp.errors import TrainError

    with _pytest.raises(TrainError, match="EXTRAS=train"):
        Core().submit_training(TrainingRequest(model=str(model), dataset=str(data), backend="local", max_steps=3))
