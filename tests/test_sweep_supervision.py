"""A sweep's supervisor loop driven in process on a fake clock: the same loop the detached supervisor runs
(test_sweeps.py keeps the real detached process), with no wall-clock wait between its rounds."""

import time
from typing import Iterator

import pytest
from mcp import Client

from hf_train_mcp.jobs.ledger import Ledger
from hf_train_mcp.service import Core
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.sweeps import supervision
from hf_train_mcp.sweeps import sweep as sweeps
from tests.emulator import Emulator, JobPlan, ViewerDataset
from tests.helpers import CAPYBARA_BASE as BASE
from tests.helpers import CAPYBARA_ROWS, call

pytestmark = pytest.mark.anyio
HF_BASE = {**BASE, "flavor": "a10g-large", "timeout": "1h", "max_steps": 10}


class FakeClock:
    """sleep() moves the time on at once and runs what the test wants done between two rounds."""

    def __init__(self, between_rounds=lambda round_: None) -> None:
        self.now = 1000.0
        self.slept: list[float] = []
        self._between = between_rounds

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self._between(len(self.slept))


@pytest.fixture
def capybara(hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    hub.datasets["trl-lib/Capybara"] = ViewerDataset({"default": {"train": CAPYBARA_ROWS}})
    monkeypatch.setattr(sweeps, "ensure_supervised", lambda core, sweep: None)  # this test is the supervisor
    yield hub


async def test_the_supervisor_loop_starts_the_queued_run_and_ends_with_the_sweep_on_a_fake_clock(
        capybara: Emulator) -> None:
    for _ in range(2):
        capybara.plan_next(JobPlan(scheduling_s=0.1, running_s=600))  # each runs until canceled
    async with Client(build_server()) as client:
        sweep = await call(client, "submit_sweep", {"base": HF_BASE, "grid": {"learning_rate": [1e-5, 1e-4]},
                                                    "max_parallel": 1})
    sweep_id = sweep["sweep_id"]
    assert [run["state"] for run in sweep["jobs"]] == ["launched", "queued"]

    def between(round_: int) -> None:
        runs = Ledger().sweep_runs(sweep_id)
        if round_ == 1:  # the first run ends: its slot frees for the queued one
            Core().cancel_job(runs[0].job_id)
        elif round_ == 2:  # the second run started on the last round; it ends too
            assert runs[1].state == "launched" and runs[1].job_id
            Core().cancel_job(runs[1].job_id)

    clock = FakeClock(between)
    started = time.monotonic()
    assert supervision.supervise(Core(), sweep_id, sleep=clock.sleep, monotonic=clock.monotonic) == 0
    assert len(clock.slept) == 2 and clock.slept[0] == sweeps.poll_seconds()  # three looks, two polls
    assert time.monotonic() - started < 30  # no poll was waited for
    assert Ledger().sweep(sweep_id).state == "finished"
    assert [run.state for run in Ledger().sweep_runs(sweep_id)] == ["launched", "launched"]


def test_the_supervisor_gives_up_after_an_hour_of_failed_looks_on_a_fake_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    looks: list[str] = []

    def failing(core, sweep_id: str) -> bool:
        looks.append(sweep_id)
        raise OSError("the Hub is down")

    monkeypatch.setattr(supervision, "supervise_once", failing)
    monkeypatch.setenv(sweeps.POLL_ENV, "600")
    clock = FakeClock()
    assert supervision.supervise(Core(), "sweep-none", sleep=clock.sleep, monotonic=clock.monotonic) == 1
    # failing since the first look; the first look past GIVE_UP_AFTER_S (3600 s) of failures gives up
    assert len(looks) == 8 and clock.now - 1000.0 == 7 * 600
