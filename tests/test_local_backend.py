"""backend='local': the same tools run the rendered script on this machine, detached, tracked in the ledger."""

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.jobs.ledger import JobRecord, Ledger, now_iso
from hf_train_mcp.service import Core
from tests.conftest import needs_training
from tests.helpers import call, submit_script, wait_for

pytestmark = pytest.mark.anyio

CRASHING = "import sys\nprint('HFTM_START {}', flush=True)\nraise ValueError('dataset column prompt missing')\n"
SLEEPING = "import time\nprint('HFTM_START {}', flush=True)\ntime.sleep(120)\n"


@pytest.mark.detached
@pytest.mark.training
@needs_training
async def test_a_local_sft_job_runs_to_completion_through_the_mcp_tools(tiny_model: Path, tmp_path: Path,
                                                                       offline, isolated_home: Path) -> None:
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "sft.jsonl", example_rows("sft", 16))
    async with Client(build_server()) as client:
        sub = await call(client, "submit_training", {"model": str(tiny_model), "dataset": str(data), "max_steps": 3,
                                                     "per_device_batch_size": 2})
        assert sub["backend"] == "local" and sub["job_id"].startswith("local-")  # no token: local by default
        assert sub["flavor"] == "local-cpu" and sub["stage"] == "RUNNING"
        job_dir = isolated_home / "jobs" / sub["job_id"]
        assert sub["model_url"] == f"{job_dir.as_uri()}/output"
        first = await call(client, "job_status", {"job_id": sub["job_id"]})
        assert first["stage"] in ("RUNNING", "COMPLETED")
        deadline = time.monotonic() + 240
        while (report := await call(client, "job_status", {"job_id": sub["job_id"]}))["stage"] == "RUNNING":
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert report["stage"] == "COMPLETED", report
        assert report["progress"]["step"] == 3 and report["progress"]["total_steps"] == 3
        assert "loss" in report["last_metrics"] or "train_loss" in report["last_metrics"]
        assert (job_dir / "output" / "adapter_model.safetensors").exists()
        assert any((job_dir / "trackio").rglob("*.db"))
        assert f"TRACKIO_DIR={job_dir}/trackio trackio show" in report["next_step"]
        logs = await call(client, "job_logs", {"job_id": sub["job_id"], "limit": 5})
        assert logs["lines"][0].startswith("HFTM_START") and logs["next_offset"] == 5
        listed = await call(client, "list_jobs", {"stage": "COMPLETED"})
        assert [j["job_id"] for j in listed["jobs"]] == [sub["job_id"]]


@pytest.mark.detached
def test_a_crashing_script_is_an_error_with_its_exception_line() -> None:
    core = Core()
    job_id = submit_script(core, CRASHING)
    report = wait_for(core, job_id, {"ERROR"}, 60)
    assert report.error == "ValueError: dataset column prompt missing"
    assert "validate_dataset" in report.next_step
    assert core.ledger.get(job_id).stage == "ERROR"


@pytest.mark.detached
def test_cancel_kills_the_whole_process_group_and_marks_it_canceled() -> None:
    core = Core()
    job_id = submit_script(core, SLEEPING)
    wait_for(core, job_id, {"RUNNING"}, 30)
    folder = core.backend("local").job_dir(job_id)
    deadline = time.monotonic() + 30
    while "HFTM_START" not in (folder / "log.txt").read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    pgid = int((folder / "pid").read_text())
    result = core.cancel_job(job_id)
    assert result.stage == "CANCELED"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.killpg(pgid, signal.SIGKILL)
        raise AssertionError("the process group survived cancel")
    assert core.job_status(job_id).stage == "CANCELED"
    assert core.cancel_job(job_id).message.startswith("already CANCELED")


@pytest.mark.detached
def test_a_process_that_died_without_an_exit_code_is_an_error_with_its_log() -> None:
    core = Core()
    job_id = submit_script(core, SLEEPING)
    folder = core.backend("local").job_dir(job_id)
    deadline = time.monotonic() + 30
    while "HFTM_START" not in (folder / "log.txt").read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(int((folder / "pid").read_text()), signal.SIGKILL)
    report = wait_for(core, job_id, {"ERROR"}, 30)
    assert "died without an exit code" in report.message and report.log_tail == ["HFTM_START {}"]


@pytest.mark.detached
def test_a_restarted_server_still_lists_and_reports_jobs() -> None:
    first = Core()
    job_id = submit_script(first, CRASHING)
    wait_for(first, job_id, {"ERROR"}, 60)
    restarted = Core()  # new server object, same HF_TRAIN_HOME
    assert [j.job_id for j in restarted.list_jobs().jobs] == [job_id]
    assert restarted.job_status(job_id).stage == "ERROR"


@pytest.mark.detached
def test_a_local_job_started_before_a_restart_is_still_followed_after_it() -> None:
    first = Core()
    job_id = submit_script(first, "import time\ntime.sleep(2)\nprint('HFTM_DONE {}')\n")
    second = Core()  # did not start the process: it follows it through the job folder alone
    assert wait_for(second, job_id, {"COMPLETED"}, 60).stage == "COMPLETED"
    assert first.job_status(job_id).stage == "COMPLETED"


def _write_rows(home: str, worker: int, count: int) -> None:
    os.environ["HF_TRAIN_HOME"] = home
    ledger = Ledger()
    for i in range(count):
        ledger.record(JobRecord(
            job_id=f"local-{worker:02d}{i:010d}", backend="local", namespace=None, method="sft", model="m",
            dataset="d", request_json=json.dumps({"i": i}), script_sha256="0" * 64, script_path=None, job_dir=None,
            stage="RUNNING", flavor="local-cpu", timeout="1h", job_url=None, hub_model_id=None, model_url=None,
            trackio_url=None, output_bucket=None, estimated_hours=None, estimated_cost_usd=None,
            effective_batch_size=1, warnings_json="[]", idempotency_key=f"k-{worker}-{i}", created_at=now_iso()))
        ledger.update_stage(f"local-{worker:02d}{i:010d}", "COMPLETED", now_iso())


def test_two_processes_writing_the_ledger_at_once_lose_nothing(isolated_home: Path) -> None:
    Ledger()  # create the schema first, as a running server would have
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_rows, args=(str(isolated_home), w, 150)) for w in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    rows = Ledger().list(limit=1000)
    assert len(rows) == 300 and {r.stage for r in rows} == {"COMPLETED"}


def test_the_backend_defaults_to_local_without_a_token_and_hf_with_one(monkeypatch) -> None:
    from hf_train_mcp.service import default_backend

    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert default_backend() == "local"
    monkeypatch.setenv("HF_TOKEN", "hf_anything")
    assert default_backend() == "hf"
    monkeypatch.setenv("HF_TRAIN_BACKEND", "local")
    assert default_backend() == "local"


def test_qlora_on_a_machine_without_cuda_is_refused(tmp_path: Path, offline) -> None:
    from hf_train_mcp.errors import TrainError
    from hf_train_mcp.contract.requests import TrainingRequest

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "hello"}) + "\n")
    with pytest.raises(TrainError, match="qlora' needs a CUDA GPU"):
        Core().submit_training(TrainingRequest(model="org/Model-1B", dataset=str(data), peft="qlora",
                                               backend="local"))


def test_the_local_backend_picks_this_python_then_uv_then_explains_the_install(monkeypatch) -> None:
    import sys as _sys

    from hf_train_mcp.backends import local
    from hf_train_mcp.errors import TrainError

    backend = local.LocalBackend()
    monkeypatch.setattr(local, "has_training_stack", lambda: True)
    assert backend.training_command() == [_sys.executable, "-u", "train.py"]
    monkeypatch.setattr(local, "has_training_stack", lambda: False)
    monkeypatch.setattr(local.shutil, "which", lambda name: "/usr/bin/uv" if name == "uv" else None)
    assert backend.training_command() == ["uv", "run", "train.py"]
    monkeypatch.setattr(local.shutil, "which", lambda name: None)
    with pytest.raises(TrainError, match=r"pip install 'hf-train-mcp\[train\]'"):
        backend.training_command()


def _claim(home: str, key: str, results) -> None:
    os.environ["HF_TRAIN_HOME"] = home
    results.put(Ledger().reserve(key, claim=f"pid-{os.getpid()}") is None)


def test_only_one_of_two_processes_can_claim_an_idempotency_key(isolated_home: Path) -> None:
    Ledger()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=_claim, args=(str(isolated_home), "same-key", results)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert sorted(results.get(timeout=5) for _ in workers) == [False, True]
    assert Ledger().list() == []  # a reservation is not a job


@pytest.mark.detached
def test_a_runner_that_writes_its_exit_code_and_exits_between_two_looks_is_not_taken_for_dead(monkeypatch) -> None:
    from hf_train_mcp.backends import local
    from hf_train_mcp.backends.local_supervisor import EXIT_FILE

    core = Core()
    job_id = submit_script(core, "print('HFTM_DONE {}')\n")
    assert wait_for(core, job_id, {"COMPLETED"}, 60).stage == "COMPLETED"
    folder = core.backend("local").job_dir(job_id)
    (folder / EXIT_FILE).unlink()

    def exits_meanwhile(pid: int) -> bool:  # the runner writes exit_code right after we looked for it
        (folder / EXIT_FILE).write_text("0")
        return False

    monkeypatch.setattr(local, "process_alive", exits_meanwhile)
    assert core.backend("local").inspect(job_id).stage == "COMPLETED"
