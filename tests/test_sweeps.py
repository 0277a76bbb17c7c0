"""submit_sweep and compare_runs: a grid under one budget, at most max_parallel at a time, started by a supervisor
that outlives the server, retried without launching twice, pruned when a run trails the others."""

import contextlib
import json
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import pytest
from mcp import Client

from hf_train_mcp.sweeps import results as sweep_results
from hf_train_mcp.sweeps import sweep as sweeps
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.access import Access
from hf_train_mcp.backends.local import process_alive
from hf_train_mcp.errors import TrainError
from hf_train_mcp.jobs.ledger import Ledger, SweepRecord, SweepRunRecord
from hf_train_mcp.paths import data_home
from hf_train_mcp.service import Core
from tests.conftest import needs_training
from tests.emulator import Emulator, JobPlan, ViewerDataset
from tests.helpers import CAPYBARA_BASE as BASE
from tests.helpers import CAPYBARA_ROWS, answering, call, decoded_script, job_record, refused, script_config

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("quick_log_reads")]
HF_BASE = {**BASE, "flavor": "a10g-large", "timeout": "1h", "max_steps": 10}  # a10g-large: $1.50/h built in


@pytest.fixture(autouse=True)
def supervisors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Supervisors this test started are stopped with it (a real one would go on until its sweep ends)."""
    monkeypatch.setenv(sweeps.POLL_ENV, "0.3")
    yield
    for pid_file in (data_home() / "sweeps").glob("*.pid"):
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.fixture
def supervised(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sweeps whose supervisor would have been started (by submit_sweep, or by compare_runs): noted, not
    started (the test needs none, or makes each look itself)."""
    started: list[str] = []
    for module in (sweeps, sweep_results):
        monkeypatch.setattr(module, "ensure_supervised", lambda core, sweep: started.append(sweep.sweep_id))
    return started


@pytest.fixture
def capybara(hub: Emulator) -> Emulator:
    hub.datasets["trl-lib/Capybara"] = ViewerDataset({"default": {"train": CAPYBARA_ROWS}})
    return hub


def loss_lines(losses: list[float], total: int = 10, filler: int = 300) -> list[str]:
    """A job log whose first lines report these losses at steps 1.., then a long tail (the job keeps running)."""
    logged = [f'HFTM_LOG {{"step": {step}, "total_steps": {total}, "loss": {loss}}}'
              for step, loss in enumerate(losses, 1)]
    return ["HFTM_START {}", *logged, *(["still training"] * filler)]


def sweep_posts(hub: Emulator, sweep_id: str) -> list[dict]:
    """The jobs posted for this sweep's runs."""
    return [spec for spec in hub.posted_jobs() if "HFTM_SCRIPT_B64" in spec["environment"]
            and spec["labels"].get("kind") == "train"  # not a run_script job's own code
            and script_config(decoded_script(spec)).get("project") == sweep_id]


async def unsupervised_sweep(hub: Emulator, monkeypatch: pytest.MonkeyPatch, planned: int = 1) -> dict:
    """A two-run sweep, one run at a time, whose supervisor never comes up (the test makes each look); the first
    `planned` jobs run until canceled."""
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)
    for _ in range(planned):
        hub.plan_next(JobPlan(scheduling_s=0.1, running_s=600))
    async with Client(build_server()) as client:
        return await call(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-5, 1e-4]},
                                                   "max_parallel": 1})


# --- budgets and retries, against the emulated Hub ---------------------------------------------------------
async def test_a_sweep_over_its_budget_launches_nothing(capybara: Emulator) -> None:
    before = len(capybara.posted_jobs())
    async with Client(build_server()) as client:
        # 3 runs x 1 h x $1.50/h = $4.50 in the worst case
        text = await refused(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-5, 1e-4, 1e-3]},
                                                      "max_cost_usd": 4.0})
        assert "the sweep's worst case $4.50 (3 runs, each up to $1.50" in text and "nothing was launched" in text
        plan = await call(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-5, 1e-4, 1e-3]},
                                                   "max_cost_usd": 4.5, "dry_run": True})
    assert plan["sweep_id"] is None and plan["worst_case_cost_usd"] == 4.5 and len(plan["jobs"]) == 3
    assert len(capybara.posted_jobs()) == before


async def test_the_operators_cap_bounds_the_whole_sweep(capybara: Emulator, monkeypatch) -> None:
    monkeypatch.setenv("HF_TRAIN_MAX_COST_USD", "2")  # each run ($1.50) fits; the sweep ($3.00) does not
    before = len(capybara.posted_jobs())
    async with Client(build_server()) as client:
        text = await refused(client, "submit_sweep", {"base": HF_BASE, "grid": {"lora_r": [8, 16]}})
    assert "HF_TRAIN_MAX_COST_USD ($2.00)" in text and len(capybara.posted_jobs()) == before


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"grid": {"learning_rate": [1e-4, 2.0]}}, "the run with {'learning_rate': 2.0}: learning_rate"),
    ({"grid": {"lr": [1e-4]}}, "lr is not a parameter of submit_training"),
    ({"grid": {"idempotency_key": ["a", "b"]}}, "idempotency_key: set on submit_sweep itself"),
    ({"grid": {"lora_r": [8, 8]}}, "grid values repeat for lora_r"),
    ({"grid": {"lora_r": [4, 8, 16], "learning_rate": [1e-4, 2e-4, 3e-4]}}, "the grid makes 9 runs, over max_runs=8"),
    ({"grid": {"beta": [0.1, 0.2]}}, "beta applies to method"),
    ({"grid": {"max_steps": [5]}}, "max_steps is in both base and grid"),
    ({"grid": {"backend": ["hf", "local"]}}, "backend cannot vary within a sweep"),
    ({"grid": {"run_name": ["a", "b"]}}, "run_name cannot vary within a sweep"),
    ({"grid": {"project": ["a", "b"]}}, "project cannot vary within a sweep"),
    ({"base": {**HF_BASE, "method": "dpo"}, "grid": {"beta": [0.1, 0.5]}, "prune": True},
     "beta changes what the loss measures"),
])
async def test_a_sweep_with_a_bad_run_is_refused_whole(capybara: Emulator, arguments: dict, expected: str) -> None:
    before = len(capybara.posted_jobs())
    async with Client(build_server()) as client:
        text = await refused(client, "submit_sweep", {"base": HF_BASE, **arguments})
    assert expected in text and len(capybara.posted_jobs()) == before


async def test_a_retried_sweep_returns_the_same_jobs_and_launches_nothing_new(capybara: Emulator,
                                                                             supervised: list[str]) -> None:
    arguments = {"base": HF_BASE, "grid": {"learning_rate": [1e-4, 2e-4]}, "idempotency_key": "my-sweep-1"}
    before = len(capybara.posted_jobs())
    async with Client(build_server()) as client:
        first = await call(client, "submit_sweep", arguments)
        assert len(capybara.posted_jobs()) == before + 2
        again = await call(client, "submit_sweep", arguments)
    async with Client(build_server()) as other_server:  # a second server with the same ledger
        third = await call(other_server, "submit_sweep", arguments)
        other = await refused(other_server, "submit_sweep", {**arguments, "grid": {"learning_rate": [1e-4, 3e-4]}})
    assert "already names sweep" in other and "another grid" in other
    assert len(capybara.posted_jobs()) == before + 2
    assert again["sweep_id"] == third["sweep_id"] == first["sweep_id"]
    assert [j["job_id"] for j in again["jobs"]] == [j["job_id"] for j in first["jobs"]]
    assert "matched sweep" in again["warnings"][-1]
    assert supervised == [first["sweep_id"]] * 3  # each answer made sure the sweep is supervised
    # one Trackio project, each run its own repo and run name, the grid values in each run's config
    posted = capybara.posted_jobs()[-2:]
    configs = [script_config(decoded_script(spec)) for spec in posted]
    assert {c["project"] for c in configs} == {first["sweep_id"]}
    assert [c["learning_rate"] for c in configs] == [1e-4, 2e-4]
    assert [c["hub_model_id"] for c in configs] == ["emu-user/qwen-sft-0", "emu-user/qwen-sft-1"]
    assert len({c["run_name"] for c in configs}) == 2
    assert all(c["trackio_space_id"] == "emu-user/trackio" for c in configs)


@pytest.mark.detached
def test_two_servers_racing_with_one_key_launch_one_sweep(capybara: Emulator) -> None:
    from hf_train_mcp.contract.requests import SweepRequest

    req = SweepRequest(base=HF_BASE, grid={"learning_rate": [1e-4, 2e-4]}, idempotency_key="raced")
    before = len(capybara.posted_jobs())
    with ThreadPoolExecutor(2) as pool:  # both plan (no sweep holds the key yet); one stores it first
        results = list(pool.map(lambda core: core.submit_sweep(req), [Core(), Core()]))
    assert results[0].sweep_id == results[1].sweep_id
    deadline = time.monotonic() + 30  # the loser may have started the supervisor, which posts what is left
    while time.monotonic() < deadline and not all(r.job_id for r in Ledger().sweep_runs(results[0].sweep_id)):
        time.sleep(0.2)
    assert len(capybara.posted_jobs()) == before + 2


async def test_a_sweep_is_confirmed_once_for_its_whole_worst_case(capybara: Emulator, monkeypatch,
                                                                  supervised: list[str]) -> None:
    monkeypatch.setenv("HF_TRAIN_CONFIRM_ABOVE_USD", "2")  # one run ($1.50) would not be asked; two ($3.00) are
    asked: list[str] = []
    before = len(capybara.posted_jobs())
    arguments = {"base": HF_BASE, "grid": {"lora_r": [8, 16]}}
    async with Client(build_server(), elicitation_callback=answering("decline", asked=asked)) as client:
        declined = await client.call_tool("submit_sweep", arguments)
    assert declined.is_error and "not submitted" in declined.content[0].text
    assert len(asked) == 1 and "a sweep of 2 SFT runs" in asked[0] and "at most $3.00" in asked[0]
    assert "1h each" in asked[0] and len(capybara.posted_jobs()) == before
    async with Client(build_server(), elicitation_callback=answering("accept", {"submit": True})) as client:
        accepted = await call(client, "submit_sweep", arguments)
    assert len(capybara.posted_jobs()) == before + 2 and accepted["worst_case_cost_usd"] == 3.0
    assert supervised == [accepted["sweep_id"]]  # the declined one started nothing


async def test_a_user_key_cannot_pose_as_a_sweep_run(capybara: Emulator) -> None:
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**HF_BASE, "idempotency_key": "sweep-0123456789ab-0"})
    assert "may not start with 'sweep-'" in text


@pytest.mark.detached
async def test_queued_runs_start_only_as_slots_free(capybara: Emulator, monkeypatch) -> None:
    # this test is the supervisor (two of them, racing), so each look is seen; the detached one is tested on CPU below
    started: list[str] = []
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: started.append(sweep.sweep_id))
    for _ in range(3):
        capybara.plan_next(JobPlan(scheduling_s=0.1, running_s=600))  # runs until canceled
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-5, 1e-4, 1e-3]},
                                                    "max_parallel": 2})
    sweep_id = sweep["sweep_id"]
    assert [job["state"] for job in sweep["jobs"]] == ["launched", "launched", "queued"] and started == [sweep_id]
    assert "1 run(s) wait for a free slot" in sweep["next_step"]

    capybara.advance(0.5)  # both jobs are running
    assert sweeps.supervise_once(Core(), sweep_id)  # both slots busy: nothing starts
    assert len(sweep_posts(capybara, sweep_id)) == 2
    Core().cancel_job(sweep["jobs"][0]["job_id"])  # a slot frees: two supervisors see it at once
    with ThreadPoolExecutor(2) as pool:
        assert all(pool.map(lambda core: sweeps.supervise_once(core, sweep_id), [Core(), Core()]))
    runs = Ledger().sweep_runs(sweep_id)
    assert runs[2].state == "launched" and runs[2].job_id
    assert len(sweep_posts(capybara, sweep_id)) == 3  # run 3 once, though both launched it
    pinned = json.loads(runs[2].request_json)  # started later, within what was approved: $1.50 at most
    assert (pinned["backend"], pinned["flavor"], pinned["timeout"], pinned["max_cost_usd"]) == (
        "hf", "a10g-large", 3600, 1.5)
    # cancel the whole sweep: the running runs stop, nothing else starts
    async with Client(build_server()) as client:
        canceled = await call(client, "cancel_job", {"job_id": sweep_id})
        assert canceled["stage"] == "CANCELED" and "2 started run(s) canceled" in canceled["message"]
        table = await call(client, "compare_runs", {"sweep_id": sweep_id})
    assert table["sweep_state"] == "canceled"
    assert {row["stage"] for row in table["runs"]} == {"CANCELED"}


@pytest.mark.detached
async def test_prune_cancels_the_run_that_trails_the_others_and_reports_the_saving(capybara: Emulator,
                                                                                  supervised: list[str]) -> None:
    # this test makes each look (its supervisor is noted, not started)
    for losses in ([2.0, 1.6, 1.2, 1.0], [2.0, 2.4, 2.8, 3.0], [2.0, 1.7, 1.3, 1.1]):
        capybara.plan_next(JobPlan(scheduling_s=0.1, running_s=120, log_lines=loss_lines(losses)))
    core = Core()
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-4, 1e-2, 2e-4]},
                                                    "max_parallel": 3, "prune": True})
        sweep_id = sweep["sweep_id"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Ledger().sweep_runs(sweep_id)[1].state != "pruned":
            sweeps.supervise_once(core, sweep_id)
            capybara.advance(0.5)  # the jobs log on between two looks
        runs = Ledger().sweep_runs(sweep_id)
        assert [r.state for r in runs] == ["launched", "pruned", "launched"]
        assert re.match(r"pruned at step [234]/10: loss (2\.4|2\.8|3) vs the others' ", runs[1].note), runs[1].note
        capybara.advance(2.5)  # every loss line of the two others is out: the ranking compares their last losses
        table = await call(client, "compare_runs", {"sweep_id": sweep_id})
        await call(client, "cancel_job", {"job_id": sweep_id})
    assert table["metric"] == "loss" and table["lower_is_better"] is True
    assert [row["params"]["learning_rate"] for row in table["runs"]] == [1e-4, 2e-4, 1e-2]
    assert table["saved_usd"] > 0 and table["best_job_id"] == runs[0].job_id
    assert "no run has completed yet" in table["warnings"][0]
    canceled = [r for r in capybara.requests if r["method"] == "POST" and r["path"].endswith("/cancel")]
    assert any(runs[1].job_id in r["path"] for r in canceled)


async def test_a_worst_case_in_fractions_of_a_cent_is_approved_whole(capybara: Emulator,
                                                                    supervised: list[str]) -> None:
    # 17 min x $1.50/h = $0.425: each run's cap is $0.43, never the $0.42 its plan rounds to
    # its supervisor died, say (noted, never started; nor is compare_runs's)
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", {"base": {**HF_BASE, "timeout": "17m"},
                                                    "grid": {"learning_rate": [1e-4, 2e-4]}})
        assert [job["state"] for job in sweep["jobs"]] == ["launched", "launched"], sweep["jobs"]
        assert sweep["worst_case_cost_usd"] == 0.86
        capybara.advance(1.5)  # the emulated jobs finish
        table = await call(client, "compare_runs", {"sweep_id": sweep["sweep_id"]})
    assert table["sweep_state"] == "finished"  # seen by compare_runs, without a supervisor


@pytest.mark.detached
async def test_a_canceled_sweep_launches_nothing_more(capybara: Emulator, monkeypatch) -> None:
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)
    for _ in range(3):
        capybara.plan_next(JobPlan(scheduling_s=0.1, running_s=600))
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-5, 1e-4, 1e-3]},
                                                    "max_parallel": 1})
        stale = Ledger().sweep_runs(sweep["sweep_id"])  # what a supervisor read just before the cancel
        before = len(capybara.posted_jobs())
        await call(client, "cancel_job", {"job_id": sweep["sweep_id"]})
    sweeps.launch(Core(), stale[1])
    assert sweeps.supervise_once(Core(), sweep["sweep_id"]) is False
    assert len(capybara.posted_jobs()) == before
    assert [r.state for r in Ledger().sweep_runs(sweep["sweep_id"])] == ["launched", "canceled", "canceled"]


@pytest.mark.detached
async def test_a_sweep_whose_supervisor_died_goes_on_when_a_server_starts(capybara: Emulator, monkeypatch) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)  # the supervisor never came up
        async with Client(build_server()) as client:
            sweep = await call(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-4, 2e-4]},
                                                        "max_parallel": 1})
    assert [job["state"] for job in sweep["jobs"]] == ["launched", "queued"]
    sweeps.resume(Core())  # what a server does at start-up (HF_TRAIN_RESUME_SWEEPS, on by default)
    assert (data_home() / "sweeps" / f"{sweep['sweep_id']}.pid").exists()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and Ledger().sweep(sweep["sweep_id"]).state == "running":
        time.sleep(0.3)
    assert Ledger().sweep(sweep["sweep_id"]).state == "finished"
    assert [r.state for r in Ledger().sweep_runs(sweep["sweep_id"])] == ["launched", "launched"]


def test_an_http_caller_without_local_jobs_cannot_reach_a_local_sweep() -> None:
    ledger = Ledger()
    ledger.create_sweep(SweepRecord("sweep-0123456789ab", "nightly", "2026-12-01T00:00:00Z", "local", json.dumps(
        {"base": {}}), 1, 0, "running", None, 0.0, None), [SweepRunRecord("sweep-0123456789ab", 0, "{}", "{}", "queued")])
    http = Core(access=Access.http())
    from hf_train_mcp.contract.requests import CompareRequest, SweepRequest

    for attempt in (lambda: http.compare_runs(CompareRequest(sweep_id="sweep-0123456789ab")),
                    lambda: http.cancel_job("sweep-0123456789ab"),
                    lambda: http.submit_sweep(SweepRequest(base={"model": "m", "dataset": "org/d"},
                                                           grid={"learning_rate": [1e-4]}, idempotency_key="nightly"))):
        with pytest.raises(TrainError, match="allow-local-jobs"):
            attempt()
    assert ledger.sweep("sweep-0123456789ab").state == "running"
    assert not (data_home() / "sweeps" / "sweep-0123456789ab.pid").exists()  # no supervisor started for it


def test_an_http_caller_gets_through_a_sweep_only_what_submit_training_allows(capybara: Emulator) -> None:
    from hf_train_mcp.contract.requests import SweepRequest

    http = Core(access=Access.http())
    before = len(capybara.posted_jobs())
    reward = "def reward(completions, **kwargs):\n    return [0.0 for _ in completions]\n"
    for base, grid, flag in (
            ({**HF_BASE, "dataset": "/etc/passwd"}, {"learning_rate": [1e-4]}, "allow-local-files"),
            ({**HF_BASE, "backend": "local"}, {"learning_rate": [1e-4]}, "allow-local-jobs"),
            ({**HF_BASE, "method": "grpo"}, {"reward_code": [reward]}, "allow-reward-code")):
        with pytest.raises(TrainError, match=flag):
            http.submit_sweep(SweepRequest(base=base, grid=grid))
    assert len(capybara.posted_jobs()) == before


def test_a_run_is_pruned_only_when_it_trails_the_median_at_the_same_step() -> None:
    good = [[2, 10, 2.0], [4, 10, 1.0]]
    other = [[2, 10, 2.0], [6, 10, 1.2]]  # at step 4: 1.6 (interpolated)
    assert sweeps.loss_at(other, 4) == pytest.approx(1.6)
    assert sweeps.loss_at(other, 7) is None and sweeps.loss_at(other, 1) is None
    bad = [[2, 10, 2.0], [4, 10, 1.9]]
    assert [i for i, *_ in sweeps.trailing({0: good, 1: other, 2: bad}, {0, 1, 2})] == [2]  # 1.9 > 1.3 * 1.1
    close = [[2, 10, 2.0], [4, 10, 1.4]]  # within 10% of the median (1.3)
    assert sweeps.trailing({0: good, 1: other, 2: close}, {2}) == []
    early = [[1, 10, 9.0]]  # before 20% of its steps: never
    assert sweeps.trailing({0: good, 1: other, 2: early}, {2}) == []
    assert sweeps.trailing({0: [[4, 10, 5.0]]}, {0}) == []  # nothing to compare with
    assert sweeps.trailing({0: [[4, 10, 1.0]], 2: [[4, 10, 1.1]]}, {2}) == []  # exactly 10%: not beyond it
    diverged = [[2, 10, float("nan")]]  # a NaN loss never recovers: pruned at once, whatever the step
    assert [i for i, *_ in sweeps.trailing({0: good, 1: diverged}, {1})] == [1]
    # GRPO: the mean reward, higher is better, and a gap near 0 is judged against a floor, not relatively
    assert sweeps.watched("grpo") == ("reward", False) and sweeps.watched("dpo") == ("loss", True)
    rewards = {0: [[4, 10, 0.50]], 1: [[4, 10, 0.45]], 2: [[4, 10, 0.20]]}
    assert [i for i, *_ in sweeps.trailing(rewards, {0, 1, 2}, lower_is_better=False)] == [2]
    near_zero = {0: [[4, 10, 1e-4]], 1: [[4, 10, 2e-4]], 2: [[4, 10, 3.5e-4]]}
    assert sweeps.trailing(near_zero, {0, 1, 2}) == []


async def test_compare_runs_of_job_ids_shows_what_differs(capybara: Emulator) -> None:
    async with Client(build_server()) as client:
        first = await call(client, "submit_training", {**HF_BASE, "learning_rate": 1e-4})
        second = await call(client, "submit_training", {**HF_BASE, "learning_rate": 3e-4, "lora_r": 32})
        capybara.advance(1.5)  # both emulated jobs finish
        table = await call(client, "compare_runs", {"job_ids": [first["job_id"], second["job_id"]]})
        text = await refused(client, "compare_runs", {"job_ids": ["6650f0e1a2b3c4d5e6f7a8b9"]})
        both = await refused(client, "compare_runs", {})
    assert sorted(row["params"]["learning_rate"] for row in table["runs"]) == [1e-4, 3e-4]
    assert {tuple(sorted(row["params"])) for row in table["runs"]} == {("learning_rate", "lora_r")}
    assert "not in this server's ledger" in text and "sweep_id" in both


# --- on this machine: the whole loop, the second run started by the detached supervisor ------------------------
@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_a_two_run_local_sweep_completes_one_at_a_time_and_is_ranked(tiny_model: Path, tmp_path: Path,
                                                                           offline) -> None:
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "data.jsonl", example_rows("sft", 16))
    base: dict[str, Any] = {"model": str(tiny_model), "dataset": str(data), "backend": "local", "max_steps": 2,
                            "per_device_batch_size": 2, "gradient_accumulation": 1, "max_length": 128}
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", {"base": base, "grid": {"learning_rate": [1e-4, 5e-3]},
                                                    "max_parallel": 1, "idempotency_key": "local-sweep"})
    # the server is gone; the supervisor starts the second run when the first ends
    assert [job["state"] for job in sweep["jobs"]] == ["launched", "queued"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and Ledger().sweep(sweep["sweep_id"]).state == "running":
        time.sleep(0.5)
    assert Ledger().sweep(sweep["sweep_id"]).state == "finished"
    async with Client(build_server()) as client:
        table = await call(client, "compare_runs", {"sweep_id": sweep["sweep_id"]})
    assert [row["stage"] for row in table["runs"]] == ["COMPLETED", "COMPLETED"]
    losses = [row["metrics"]["loss"] for row in table["runs"]]
    assert losses == sorted(losses) and table["best_job_id"] == table["runs"][0]["job_id"]
    assert {row["params"]["learning_rate"] for row in table["runs"]} == {1e-4, 5e-3}
    assert "export_model" in table["next_step"]
    # max_parallel=1: the second run started after the first had ended
    folders = [Path(Ledger().get(row.job_id).job_dir) for row in Ledger().sweep_runs(sweep["sweep_id"])]
    first_end = (folders[0] / "exit_code").stat().st_mtime
    second_start = (folders[1] / "launch.json").stat().st_mtime
    assert second_start >= first_end
    configs = [script_config((folder / "train.py").read_text()) for folder in folders]
    assert {c["project"] for c in configs} == {sweep["sweep_id"]}


@pytest.mark.detached
@pytest.mark.usefixtures("quick_hub_reads")
async def test_a_hub_hiccup_at_launch_leaves_the_run_queued_for_the_next_look(capybara: Emulator, monkeypatch) -> None:
    sweep = await unsupervised_sweep(capybara, monkeypatch)
    sweep_id = sweep["sweep_id"]
    Core().cancel_job(sweep["jobs"][0]["job_id"])  # a slot frees
    capybara.fail_next("GET", r"/api/whoami-v2", 503, count=20)  # the Hub is down while the next run is planned
    sweeps.supervise_once(Core(), sweep_id)
    run = Ledger().sweep_runs(sweep_id)[1]
    assert run.state == "queued" and run.job_id is None, run.note
    with capybara.lock:
        capybara.faults.clear()
    sweeps.supervise_once(Core(), sweep_id)
    assert Ledger().sweep_runs(sweep_id)[1].state == "launched"


# --- launches whose outcome is unknown, keys, concurrency, supervisors ------------------------------------------
@pytest.mark.detached
@pytest.mark.usefixtures("quick_hub_reads")
async def test_a_run_whose_post_may_have_made_its_job_waits_for_the_hubs_word(capybara: Emulator,
                                                                               monkeypatch) -> None:
    from hf_train_mcp.jobs import ledger as ledger_module
    from hf_train_mcp.jobs import launcher as launching

    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)
    capybara.plan_next(JobPlan(scheduling_s=0.1, running_s=600))
    capybara.fail_next("POST", r"/api/jobs/emu-user", 500, count=3, after=True)  # created; the answer is lost
    capybara.fail_next("GET", r"/api/jobs/emu-user", 503, count=10_000)  # and the job list keeps failing
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-4]}})
    sweep_id = sweep["sweep_id"]
    assert sweep["jobs"][0]["state"] == "queued" and len(sweep_posts(capybara, sweep_id)) == 1
    monkeypatch.setattr(ledger_module, "STALE_RESERVATION_S", 0)  # ten minutes later, the list still failing
    monkeypatch.setattr(sweeps, "STALE_LAUNCH_S", 0)
    assert sweeps.supervise_once(Core(), sweep_id)
    assert len(sweep_posts(capybara, sweep_id)) == 1  # not posted again: the Hub never said there was no job
    assert Ledger().sweep_runs(sweep_id)[0].state == "queued"
    with capybara.lock:  # the Hub answers again: recovery finds the job and the run gets it
        capybara.faults.clear()
    monkeypatch.setattr(launching, "RECOVER_AFTER_MIN", 0)
    sweeps.supervise_once(Core(), sweep_id)
    run = Ledger().sweep_runs(sweep_id)[0]
    posted = [j.id for j in capybara.jobs.values() if script_config(decoded_script(j.spec)).get("project") == sweep_id]
    assert run.state == "launched" and [run.job_id] == posted and len(sweep_posts(capybara, sweep_id)) == 1
    Core().cancel_job(sweep_id)


SWEEP_KILLER = """
import os, signal, sys
from hf_train_mcp.sweeps import sweep as sweeps
from hf_train_mcp.backends import hf_jobs
from hf_train_mcp.jobs.ledger import Ledger
from hf_train_mcp.service import Core
post = hf_jobs.HfJobsBackend.submit

def post_then_die(self, script, spec):
    post(self, script, spec)
    os.kill(os.getpid(), signal.SIGKILL)  # the supervisor dies after the POST, before the ledger write

hf_jobs.HfJobsBackend.submit = post_then_die
sweeps.launch(Core(), Ledger().sweep_runs(sys.argv[1])[1])
"""


@pytest.mark.detached
async def test_canceling_a_sweep_cancels_the_job_of_a_launch_killed_mid_post(capybara: Emulator, monkeypatch) -> None:
    import subprocess
    import sys

    sweep = await unsupervised_sweep(capybara, monkeypatch, planned=2)
    sweep_id = sweep["sweep_id"]
    proc = subprocess.run([sys.executable, "-c", SWEEP_KILLER, sweep_id], env=dict(os.environ), timeout=180,
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    posted = sweep_posts(capybara, sweep_id)
    assert len(posted) == 2 and Ledger().sweep_runs(sweep_id)[1].state == "launching"
    orphan = next(j for j in capybara.jobs.values() if j.spec == posted[-1])
    async with Client(build_server()) as client:
        canceled = await call(client, "cancel_job", {"job_id": sweep_id})
    assert "2 started run(s) canceled" in canceled["message"], canceled["message"]
    assert orphan.stage(time.time()) == "CANCELED"
    runs = Ledger().sweep_runs(sweep_id)
    assert [(r.state, r.job_id) for r in runs] == [("launched", sweep["jobs"][0]["job_id"]), ("launched", orphan.id)]
    assert len(sweep_posts(capybara, sweep_id)) == 2


@pytest.mark.parametrize("key", ["sweep-0123456789ab-2", "probe-abc-1"])
async def test_reserved_keys_are_refused_on_every_launching_tool(capybara: Emulator, key: str) -> None:
    before = len(capybara.posted_jobs())
    async with Client(build_server()) as client:
        for tool, arguments in (("submit_training", HF_BASE), ("evaluate_model", {"model": "emu-user/out"}),
                                ("export_model", {"model": "emu-user/out", "format": "merged"}),
                                ("submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-4]}})):
            for dry_run in (False, True):
                text = await refused(client, tool, {**arguments, "idempotency_key": key, "dry_run": dry_run})
                assert f"may not start with {key.split('-')[0] + '-'!r}" in text, (tool, text)
    assert len(capybara.posted_jobs()) == before


async def test_a_run_whose_key_names_another_kind_of_job_fails_instead_of_waiting_forever(capybara: Emulator,
                                                                                         monkeypatch) -> None:
    from dataclasses import replace

    sweep = await unsupervised_sweep(capybara, monkeypatch)
    sweep_id = sweep["sweep_id"]
    # a ledger written before keys were checked: an evaluation holds run 1's key
    Ledger().record(replace(job_record("job-eval", key=sweeps.run_key(sweep_id, 1)), kind="evaluate",
                            stage="COMPLETED"))
    Core().cancel_job(sweep["jobs"][0]["job_id"])  # a slot frees
    before = len(capybara.posted_jobs())
    sweeps.supervise_once(Core(), sweep_id)
    run = Ledger().sweep_runs(sweep_id)[1]
    assert run.state == "failed" and "job-eval, a evaluate job" in run.note, (run.state, run.note)
    assert sweeps.supervise_once(Core(), sweep_id) is False  # nothing left to watch: the sweep has ended
    assert len(capybara.posted_jobs()) == before


@pytest.mark.detached
async def test_silent_running_jobs_are_read_at_once_by_compare_runs_and_the_supervisor(capybara: Emulator,
                                                                                      supervised: list[str],
                                                                                      monkeypatch) -> None:
    import threading

    from hf_train_mcp.backends import hf_jobs

    monkeypatch.setattr(hf_jobs, "LOG_DEADLINE_S", 0.5)  # each silent job's log read waits this long
    for _ in range(4):
        capybara.plan_next(JobPlan(scheduling_s=0, running_s=120, log_lines=[]))  # running, printing nothing
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", {"base": HF_BASE, "max_parallel": 4,
                                                    "grid": {"learning_rate": [1e-5, 1e-4, 2e-4, 3e-4]}})
        reading, most, lock = [0], [0], threading.Lock()
        real = hf_jobs.HfJobsBackend.logs

        def counted(self, *args, **kwargs):
            with lock:
                reading[0] += 1
                most[0] = max(most[0], reading[0])
            try:
                return real(self, *args, **kwargs)
            finally:
                with lock:
                    reading[0] -= 1

        monkeypatch.setattr(hf_jobs.HfJobsBackend, "logs", counted)
        table = await call(client, "compare_runs", {"sweep_id": sweep["sweep_id"]})
        assert [row["stage"] for row in table["runs"]] == ["RUNNING"] * 4
        assert most[0] > 1, "compare_runs read the jobs one at a time"
        most[0] = 0
        assert sweeps.supervise_once(Core(), sweep["sweep_id"])
        assert most[0] > 1, "the supervisor read the jobs one at a time"
        await call(client, "cancel_job", {"job_id": sweep["sweep_id"]})


def _supervisors_of(sweep_id: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if b"hf_train_mcp.shell.sweep_supervisor" in command and sweep_id.encode() in command and process_alive(int(entry.name)):
            pids.append(int(entry.name))
    return pids


@pytest.mark.detached
def test_a_retried_sweep_start_keeps_one_supervisor_and_its_pid_file_names_it(monkeypatch) -> None:
    from hf_train_mcp.jobs.ledger import now_iso

    started: list[list[str]] = []
    from hf_train_mcp import detach

    spawn = detach.spawn
    monkeypatch.setattr(detach, "spawn", lambda argv, **kw: started.append(argv) or spawn(argv, **kw))

    sweep_id = sweeps.KEY_PREFIX + os.urandom(6).hex()
    sweep = SweepRecord(sweep_id, None, now_iso(), "hf", json.dumps({"base": {}}), 1, 0, "running", None, 0.0, None)
    # a run being launched (by a live process, say) keeps the supervisor watching
    Ledger().create_sweep(sweep, [SweepRunRecord(sweep_id, 0, "{}", "{}", "launching", claimed_at=now_iso())])
    sweeps.ensure_supervised(Core(), sweep)
    sweeps.ensure_supervised(Core(), sweep)  # the idempotent retry, while the first supervisor still starts
    assert len(started) == 1
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (sweeps.supervisor_alive(sweep_id) and len(_supervisors_of(sweep_id)) == 1):
        time.sleep(0.2)
    time.sleep(1.0)  # a second one, had it been started, would have lost the lock and exited by now
    running = _supervisors_of(sweep_id)
    pid = int((data_home() / "sweeps" / f"{sweep_id}.pid").read_text())
    assert running == [pid] and process_alive(pid)


@pytest.mark.detached
def test_a_supervisor_whose_ledger_is_deleted_ends_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real detached supervisor (polling every 0.3 s), its Hub gone (a closed port) and a run being launched
    that would keep it watching: the ledger folder is deleted under it. Its open connection still reads the
    deleted file, which kept it going; now it ends within a few looks, and its log says why."""
    import shutil

    from hf_train_mcp.jobs.ledger import now_iso

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    sweep_id = sweeps.KEY_PREFIX + os.urandom(6).hex()
    sweep = SweepRecord(sweep_id, None, now_iso(), "hf", json.dumps({"base": {}}), 1, 0, "running", None, 0.0, None)
    Ledger().create_sweep(sweep, [SweepRunRecord(sweep_id, 0, "{}", "{}", "launching", claimed_at=now_iso())])
    sweeps.ensure_supervised(Core(), sweep)
    pid_file = data_home() / "sweeps" / f"{sweep_id}.pid"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not sweeps.supervisor_alive(sweep_id):
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    time.sleep(1.0)  # a few looks: it supervises
    assert process_alive(pid)
    home = data_home()
    with open(home / "sweeps" / f"{sweep_id}.log") as log:  # kept open: the file outlives its folder for us
        shutil.rmtree(home)
        deadline = time.monotonic() + 10
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = process_alive(pid)
        if alive:  # the fixture no longer finds its pid file
            os.killpg(pid, signal.SIGTERM)
        assert not alive, "the supervisor kept running after its ledger was deleted"
        said = log.read()
    assert f"sweep {sweep_id}: its ledger" in said and "is gone" in said and "nothing is left to supervise" in said
    assert not home.exists()  # it did not recreate the folder it was told was gone


def test_a_supervisor_whose_ledger_went_while_it_started_leaves_it_gone(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Under load a supervisor can still be importing when its folder is deleted (its lock is held from before it
    starts): its first steps (the handed lock, its pid file) must not make the folder again, as data_home() did."""
    from hf_train_mcp.shell import sweep_supervisor

    home = tmp_path / "gone"
    monkeypatch.setenv("HF_TRAIN_HOME", str(home))
    with open(tmp_path / "handed.lock", "a") as lock:  # what spawn_once hands over
        os.set_inheritable(lock.fileno(), True)
        monkeypatch.setenv(sweeps.LOCK_FD_ENV, str(os.dup(lock.fileno())))
        assert sweep_supervisor.run(sweeps.KEY_PREFIX + "0" * 12) == 0
    assert not home.exists()


@pytest.mark.detached
async def test_a_sweep_cancel_that_fails_on_one_run_cancels_the_others_and_keeps_retrying(capybara: Emulator,
                                                                                         monkeypatch) -> None:
    """Run 0's cancel gets a 500: runs 1 and 2 are canceled all the same, the answer names run 0 as still billing
    (its stage, not CANCELED), and the sweep's supervisor is started, whose next round cancels run 0 and ends."""
    started: list[str] = []
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: started.append(
        sweep.sweep_id) if sweep.state == "canceled" else None)  # the one a canceled sweep needs, noted
    for _ in range(3):
        capybara.plan_next(JobPlan(scheduling_s=0.0, running_s=600))
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-5, 1e-4, 1e-3]},
                                                    "max_parallel": 3})
        ids = [j["job_id"] for j in sweep["jobs"]]
        capybara.fail_next("POST", rf"/api/jobs/emu-user/{ids[0]}/cancel", 500, count=2)
        canceled = await call(client, "cancel_job", {"job_id": sweep["sweep_id"]})
    assert capybara.billing([capybara.jobs[i] for i in ids]) == [ids[0]]
    assert canceled["stage"] == "RUNNING" and f"run 0 (job {ids[0]}) could not be canceled" in canceled["message"]
    assert "2 started run(s) canceled" in canceled["message"] and "still bills" in canceled["message"]
    assert started == [sweep["sweep_id"]] and Ledger().sweep(sweep["sweep_id"]).state == "canceled"
    assert sweeps.supervise_once(Core(), sweep["sweep_id"])  # the supervisor's round: fails again, goes on
    assert capybara.billing([capybara.jobs[i] for i in ids]) == [ids[0]]
    assert not sweeps.supervise_once(Core(), sweep["sweep_id"])  # the next: canceled, done
    assert capybara.billing([capybara.jobs[i] for i in ids]) == []
    assert sweeps.CANCEL_FAILED not in [r.note for r in Ledger().sweep_runs(sweep["sweep_id"])]
