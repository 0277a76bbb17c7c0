"""job_status.gpu: per-GPU utilisation and memory of a running job, from the Jobs metrics stream (read through
huggingface_hub's fetch_job_metrics against the emulator) or this machine's nvidia-smi; null when unknown; a
hung or failing stream costs job_status at most a couple of seconds and never an error; readings are cached
per job; the near-OOM and idle hints in next_step."""

import json
import logging
import os
import shutil
import stat
import threading
import time
from pathlib import Path

import pytest
import anyio
from mcp import Client

from hf_train_mcp.jobs import telemetry
from hf_train_mcp.backends import hf_jobs
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.backends.local import LocalBackend, parse_nvidia_smi, this_machines_gpus
from hf_train_mcp.jobs.telemetry import memory_advice
from hf_train_mcp.hub import hub_api
from hf_train_mcp.service import Core
from tests.conftest import WRITE_TOKEN
from tests.emulator import Emulator, JobPlan, ViewerDataset
from tests.helpers import CAPYBARA_BASE, CAPYBARA_ROWS, call, finished, submit_script, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("quick_log_reads")]
LONG = dict(scheduling_s=0.0, running_s=3600.0)  # RUNNING for the whole test (cancelled at its end)
METRICS = r"/api/jobs/[^/]+/{job_id}/metrics"


@pytest.fixture(autouse=True)
def capybara(hub: Emulator) -> Emulator:
    hub.datasets["trl-lib/Capybara"] = ViewerDataset({"default": {"train": CAPYBARA_ROWS}})
    return hub


async def running(client: Client, hub: Emulator, flavor: str, **plan) -> str:
    """A training job the emulator keeps RUNNING on `flavor`; its job id."""
    hub.plan_next(JobPlan(**{**LONG, **plan}))
    job = await call(client, "submit_training", {**CAPYBARA_BASE, "max_steps": 50, "flavor": flavor})
    return job["job_id"]


def metrics_requests(hub: Emulator, job_id: str) -> int:
    return hub.count("GET", METRICS.format(job_id=job_id))


@pytest.mark.detached
async def test_a_running_job_shows_each_gpu_and_a_finished_one_none(hub: Emulator) -> None:
    async with Client(build_server()) as client:
        job_id = await running(client, hub, "a10g-largex2", gpus=[(83, 14.2), (79, 13.9)])
        report = await call(client, "job_status", {"job_id": job_id})
        assert report["stage"] == "RUNNING"
        assert report["gpu"] == [
            {"index": 0, "utilization_pct": 83.0, "memory_used_gb": 14.2, "memory_total_gb": 24.0},
            {"index": 1, "utilization_pct": 79.0, "memory_used_gb": 13.9, "memory_total_gb": 24.0}]
        assert "near OOM" not in report["next_step"] and "idle" not in report["next_step"]
        asked = [r for r in hub.requests if r["path"].endswith(f"/{job_id}/metrics")]
        assert len(asked) == 1 and {k.lower(): v for k, v in asked[0]["headers"].items()}["authorization"] == f"Bearer {WRITE_TOKEN}"
        await call(client, "cancel_job", {"job_id": job_id})
        done = await call(client, "job_status", {"job_id": job_id})
        assert done["stage"] == "CANCELED" and done["gpu"] is None
        assert metrics_requests(hub, job_id) == 1  # an ended job is not asked


def test_the_emulated_stream_answers_as_the_jobs_api_does(hub: Emulator) -> None:
    """fetch_job_metrics(follow=False) against the emulator: one sample with the flavor's GPUs while running,
    an empty map on a CPU flavor, nothing (the tolerated 406) once the job has ended."""
    api = hub_api(WRITE_TOKEN)
    hub.plan_next(JobPlan(**LONG))
    gpu_job = api.run_job(image="python:3.12", command=["true"], flavor="l4x4")
    hub.plan_next(JobPlan(**LONG))
    cpu_job = api.run_job(image="python:3.12", command=["true"], flavor="cpu-basic")
    [sample] = list(api.fetch_job_metrics(job_id=gpu_job.id))
    assert len(sample["gpus"]) == 4 and {g["memory_total_bytes"] for g in sample["gpus"].values()} == {24_000_000_000}
    assert list(api.fetch_job_metrics(job_id=cpu_job.id))[0]["gpus"] == {}
    api.cancel_job(job_id=gpu_job.id)
    api.cancel_job(job_id=cpu_job.id)
    assert list(api.fetch_job_metrics(job_id=gpu_job.id)) == []


@pytest.mark.detached
async def test_scheduling_and_cpu_jobs_show_no_gpu(hub: Emulator) -> None:
    async with Client(build_server()) as client:
        waiting = await running(client, hub, "a10g-large", scheduling_s=600.0)
        report = await call(client, "job_status", {"job_id": waiting})
        assert report["stage"] == "SCHEDULING" and report["gpu"] is None
        assert metrics_requests(hub, waiting) == 0
        hub.plan_next(JobPlan(**LONG))
        cpu = await call(client, "run_script", {"script": "print('hi')\n", "flavor": "cpu-basic"})
        report = await call(client, "job_status", {"job_id": cpu["job_id"]})
        assert report["stage"] == "RUNNING" and report["gpu"] is None
        assert metrics_requests(hub, cpu["job_id"]) == 0  # the ledger knows its flavor has no GPU
        # a job this server did not launch: its flavor is unknown, so the stream is asked; its GPU map is empty
        hub.plan_next(JobPlan(**LONG))
        foreign = hub_api(WRITE_TOKEN).run_job(image="python:3.12", command=["true"], flavor="cpu-basic")
        report = await call(client, "job_status", {"job_id": f"emu-user/{foreign.id}"})
        assert report["stage"] == "RUNNING" and report["gpu"] is None and metrics_requests(hub, foreign.id) == 1
        for job_id in (waiting, cpu["job_id"], f"emu-user/{foreign.id}"):
            await call(client, "cancel_job", {"job_id": job_id})


@pytest.mark.detached
@pytest.mark.parametrize("hang", ["silent stream", "no answer"])
async def test_a_hung_metrics_stream_does_not_hold_up_job_status(hub: Emulator, hang: str) -> None:
    """The client waits 10 s on a silent stream; job_status answers well before that, with no figures."""
    async with Client(build_server()) as client:
        job_id = await running(client, hub, "a10g-large", metrics_hang=hang == "silent stream")
        if hang == "no answer":  # not even the headers
            hub.fail_next("GET", METRICS.format(job_id=job_id), None, hang=20.0)
        started = time.monotonic()
        report = await call(client, "job_status", {"job_id": job_id})
        assert time.monotonic() - started < 5.0
        assert report["stage"] == "RUNNING" and report["gpu"] is None
        started = time.monotonic()  # polled again at once: the failed reading is cached too, nothing waits
        assert (await call(client, "job_status", {"job_id": job_id}))["gpu"] is None
        assert time.monotonic() - started < 5.0 and metrics_requests(hub, job_id) == 1
        await call(client, "cancel_job", {"job_id": job_id})


@pytest.mark.detached
async def test_a_stream_of_keep_alives_holds_one_reader_per_job_and_it_ends_at_its_deadline(
        hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each keep-alive resets the client's read timeout, so a reading of a stream that sends nothing else never
    ended by itself: one thread per job_status piled up. Now one reader per job, ended by its deadline."""
    monkeypatch.setattr(telemetry, "CACHE_S", 0.0)  # every status would take a fresh reading
    monkeypatch.setattr(hf_jobs, "METRICS_DEADLINE_S", 1.0)
    before = set(threading.enumerate())

    def readers(job_id: str) -> list[threading.Thread]:  # the reading threads this test started, still alive
        return [t for t in threading.enumerate()
                if t not in before and t.name in (f"gpus-{job_id}", "hub-read") and t.is_alive()]

    async with Client(build_server()) as client:
        job_id = await running(client, hub, "a10g-large", metrics_hang=True, metrics_keepalive_s=0.1)
        async with anyio.create_task_group() as group:  # polled at once by several clients
            for _ in range(4):
                group.start_soon(call, client, "job_status", {"job_id": job_id})
        for _ in range(3):  # and in turn
            assert (await call(client, "job_status", {"job_id": job_id}))["gpu"] is None
        assert len(readers(job_id)) <= 1
        ended = time.monotonic() + 1.0 + 2.0  # its deadline, and a keep-alive or two to notice it
        while readers(job_id) and time.monotonic() < ended:
            await anyio.sleep(0.1)
        assert readers(job_id) == []
        assert metrics_requests(hub, job_id) <= 4  # one at a time, each cut at 1 s: not one per job_status
        await call(client, "cancel_job", {"job_id": job_id})


@pytest.mark.detached
async def test_a_log_stream_of_keep_alives_leaves_no_reader_behind(hub: Emulator,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The log stream of a running job sends keep-alives (the Hub's every 30 s), each resetting the client's
    read timeout: its reader outlived every job_status that started it, one more thread per call."""
    monkeypatch.setattr(hf_jobs, "LOG_DEADLINE_S", 0.5)
    monkeypatch.setattr(hf_jobs, "LOG_READER_GRACE_S", 0.5)

    async with Client(build_server()) as client:
        job_id = await running(client, hub, "a10g-large", logs_keepalive_s=0.1)
        for _ in range(4):
            assert (await call(client, "job_status", {"job_id": job_id}))["stage"] == "RUNNING"
        ended = time.monotonic() + 0.5 + 0.5 + 2.0  # its wait, its grace, and a keep-alive or two to notice
        while [t for t in threading.enumerate() if t.name == f"logs-{job_id}"] and time.monotonic() < ended:
            await anyio.sleep(0.1)
        assert [t.name for t in threading.enumerate() if t.name == f"logs-{job_id}"] == []
        await call(client, "cancel_job", {"job_id": job_id})


@pytest.mark.detached
async def test_readings_are_cached_per_job(hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Client(build_server()) as client:
        job_id = await running(client, hub, "a10g-large", gpus=[(60, 10.0)])
        first = await call(client, "job_status", {"job_id": job_id})
        hub.jobs[job_id].plan.gpus = [(70, 11.0)]
        second = await call(client, "job_status", {"job_id": job_id})
        assert metrics_requests(hub, job_id) == 1 and second["gpu"] == first["gpu"]
        monkeypatch.setattr(telemetry, "CACHE_S", 0.0)  # the window has passed
        third = await call(client, "job_status", {"job_id": job_id})
        assert metrics_requests(hub, job_id) == 2 and third["gpu"][0]["utilization_pct"] == 70.0
        await call(client, "cancel_job", {"job_id": job_id})


STEPPING = ['HFTM_LOG {"step": 3, "total_steps": 50, "epoch": 0.1, "loss": 1.9}'] + ["training"] * 99


@pytest.mark.detached
async def test_memory_at_its_limit_is_read_as_pytorchs_cache_and_the_advice_fits_the_job(hub: Emulator) -> None:
    """NVML's memory.used holds PyTorch's cached blocks: a healthy job sits near 100 %, so the hint says what to do
    if it fails, not that it is failing; and what to do fits the job (no QLoRA for a QLoRA job)."""
    async with Client(build_server()) as client:
        lora = await running(client, hub, "a10g-large", gpus=[(92, 23.3)])  # 97 % of 24 GB
        report = await call(client, "job_status", {"job_id": lora})
        assert report["gpu"][0]["memory_used_gb"] == 23.3
        step = report["next_step"]
        assert "GPU 0 memory is at 97% (23.3 of 24 GB), PyTorch's cache included" in step and "near OOM" not in step
        assert "if it fails out of memory, resubmit with a smaller per_device_batch_size" in step
        assert "peft='qlora'" in step and "idle" not in step
        hub.plan_next(JobPlan(**LONG, gpus=[(92, 23.3)]))
        qlora = (await call(client, "submit_training", {**CAPYBARA_BASE, "max_steps": 50, "flavor": "a10g-large",
                                                        "peft": "qlora", "hub_model_id": "emu-user/qwen-qlora"}))["job_id"]
        step = (await call(client, "job_status", {"job_id": qlora}))["next_step"]
        assert "if it fails out of memory" in step and "qlora" not in step.lower() and "per_device_batch_size" in step
        for job_id in (lora, qlora):
            await call(client, "cancel_job", {"job_id": job_id})


def test_out_of_memory_advice_offers_only_what_the_job_can_take() -> None:
    """The ledger's request decides: QLoRA only where the same run would be accepted with it (not embedding, not a
    QLoRA job), LoRA for a full fine-tune, no max_length for images, and a run_script job's own code."""
    def advice(method: str, peft: str | None, kind: str = "train") -> str:
        return memory_advice(method=method, request={"model": "Qwen/Qwen2-0.5B-Instruct", "method": method,
                                                     "dataset": "org/data", "peft": peft}, kind=kind)

    assert "peft='qlora'" in advice("sft", "lora") and "max_length" in advice("sft", "lora")
    assert "qlora" not in advice("sft", "qlora") and "per_device_batch_size" in advice("sft", "qlora")
    assert "qlora" not in advice("embedding", "lora")  # refused for embedding models
    assert "peft='lora'" in advice("sft", "full") and "qlora" not in advice("sft", "full")
    assert "max_length" not in advice("image-classification", "lora")
    script = advice("script", None)
    assert "per_device_batch_size" not in script and "qlora" not in script and "batch size" in script


@pytest.mark.detached
async def test_low_utilisation_says_idle_only_past_start_up_and_while_it_stays_low(
        hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "CACHE_S", 0.0)  # every status takes a fresh reading
    async with Client(build_server()) as client:
        job_id = await running(client, hub, "a10g-large", gpus=[(4, 6.0)], log_lines=STEPPING)
        report = await call(client, "job_status", {"job_id": job_id})
        assert report["gpu"][0]["utilization_pct"] == 4.0 and "idle" not in report["next_step"]  # just started
        hub.jobs[job_id].created -= 60  # its log now shows training steps, and the GPU still barely works
        report = await call(client, "job_status", {"job_id": job_id})
        assert report["progress"]["step"] == 3
        assert "GPU mostly idle" in report["next_step"] and "data loading bound?" in report["next_step"]
        hub.jobs[job_id].plan.gpus = [(88, 6.0)]  # busy again: a busy reading in the window clears it
        report = await call(client, "job_status", {"job_id": job_id})
        assert "idle" not in report["next_step"]
        await call(client, "cancel_job", {"job_id": job_id})


@pytest.mark.detached
async def test_a_multi_gpu_install_is_not_called_idle_until_it_outlasts_the_longer_grace(
        hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A multi-GPU job installs its venv before accelerate launch, then loads: minutes of idle GPUs with no step
    in the log. Ten minutes in (past the old 5-minute grace) that is start-up; past IDLE_AFTER_MIN it is not."""
    monkeypatch.setattr(telemetry, "CACHE_S", 0.0)
    async with Client(build_server()) as client:
        job_id = await running(client, hub, "a10g-largex2", gpus=[(0, 0.4), (0, 0.4)])
        hub.jobs[job_id].created -= 600
        report = await call(client, "job_status", {"job_id": job_id})
        assert report["progress"]["step"] is None and "idle" not in report["next_step"]
        hub.jobs[job_id].created -= 60 * telemetry.IDLE_AFTER_MIN
        report = await call(client, "job_status", {"job_id": job_id})
        assert "all 2 GPUs mostly idle" in report["next_step"]
        await call(client, "cancel_job", {"job_id": job_id})


@pytest.mark.detached
async def test_idle_gpus_beside_a_busy_one_are_named(hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    """l4x4 with only GPU 0 working: the mean (24 %) is over the idle line, yet three GPUs do nothing."""
    monkeypatch.setattr(telemetry, "CACHE_S", 0.0)
    async with Client(build_server()) as client:
        job_id = await running(client, hub, "l4x4", gpus=[(90, 20.0), (2, 0.5), (3, 0.5), (1, 0.5)],
                               log_lines=STEPPING)
        hub.jobs[job_id].created -= 60
        step = (await call(client, "job_status", {"job_id": job_id}))["next_step"]
        assert "GPUs 1, 2, 3 of 4 idle (under 20% busy" in step and "while GPU 0 works" in step
        assert "accelerate launch or torchrun" in step and "mostly idle" not in step
        await call(client, "cancel_job", {"job_id": job_id})


@pytest.mark.detached
async def test_impossible_gpu_figures_are_null_and_a_huge_list_is_cut(hub: Emulator) -> None:
    """-500 % utilisation, negative memory, more used than the card holds, NaN: null, not passed on; 3,000 GPUs
    (no node has more than 16): the first 16 and a note, so job_status stays small."""
    broken = [(-500, 5.0), (50, -3.0), (float("nan"), 30.0), (180, 10.0)] + [(50, 5.0)] * 2996
    async with Client(build_server()) as client:
        job_id = await running(client, hub, "a10g-large", gpus=broken)
        report = await call(client, "job_status", {"job_id": job_id})
        gpus = report["gpu"]
        assert len(gpus) == telemetry.MAX_GPUS == 16 and len(json.dumps(report)) < 6000
        assert gpus[0] == {"index": 0, "utilization_pct": None, "memory_used_gb": 5.0, "memory_total_gb": 24.0}
        assert gpus[1]["utilization_pct"] == 50.0 and gpus[1]["memory_used_gb"] is None
        assert gpus[2]["utilization_pct"] is None and gpus[2]["memory_used_gb"] is None  # NaN; 30 of 24 GB
        assert gpus[3]["utilization_pct"] is None
        assert gpus[4] == {"index": 4, "utilization_pct": 50.0, "memory_used_gb": 5.0, "memory_total_gb": 24.0}
        assert "reported 3000 GPUs" in report["next_step"] and "first 16" in report["next_step"]
        await call(client, "cancel_job", {"job_id": job_id})


@pytest.mark.detached
@pytest.mark.parametrize("status", [500, 404, 429])
async def test_metrics_errors_leave_the_status_whole_and_the_token_unsaid(
        hub: Emulator, status: int, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="hf_train_mcp")
    async with Client(build_server()) as client:
        job_id = await running(client, hub, "a10g-large", gpus=[(50, 5.0)])
        hub.fail_next("GET", METRICS.format(job_id=job_id), status, echo_auth=True)  # the error quotes the token
        report = await call(client, "job_status", {"job_id": job_id})
        assert report["stage"] == "RUNNING" and report["gpu"] is None and report["next_step"].startswith("Training")
        assert metrics_requests(hub, job_id) == 1
        assert WRITE_TOKEN not in json.dumps(report) and WRITE_TOKEN not in caplog.text
        await call(client, "cancel_job", {"job_id": job_id})


# --- the local backend: this machine's GPUs -------------------------------------------------------------------
SMI = "0, 87, 20480, 24564\n1, 3, 1024, 24564\n2, [N/A], [N/A], [N/A]\n"


def test_nvidia_smi_output_becomes_figures_for_the_gpus_a_local_job_sees() -> None:
    both = parse_nvidia_smi(SMI)
    assert [(g.index, g.utilization_pct, g.memory_used_gb, g.memory_total_gb) for g in both] == [
        (0, 87.0, 21.47, 25.76), (1, 3.0, 1.07, 25.76)]  # MiB to decimal GB; the unreadable GPU is left out
    assert [g.index for g in parse_nvidia_smi(SMI, visible="1")] == [1]
    assert parse_nvidia_smi(SMI, visible="") is None  # CUDA_VISIBLE_DEVICES="" hides every GPU
    assert parse_nvidia_smi("") is None and parse_nvidia_smi("garbage\n") is None


def fake_nvidia_smi(folder: Path, body: str) -> None:
    folder.mkdir(exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_a_local_reading_runs_nvidia_smi_with_a_time_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake_nvidia_smi(bin_dir, f"printf '{SMI}'")
    assert [g.index for g in this_machines_gpus()] == [0, 1]
    fake_nvidia_smi(bin_dir, "sleep 30")  # a wedged driver
    started = time.monotonic()
    assert this_machines_gpus() is None and time.monotonic() - started < 10


@pytest.mark.detached
def test_a_local_job_reports_this_machines_gpus_or_none_on_cpu() -> None:
    """For real: a local-cpu job shows none; the backend's own reading is null on a machine without nvidia-smi
    (CI) and the machine's GPUs where there are some."""
    core = Core()
    job_id = submit_script(core, "import time\nprint('HFTM_START {}', flush=True)\ntime.sleep(60)\n")
    try:
        assert wait_for(core, job_id, {"RUNNING"}, 30).gpu is None
        reading = LocalBackend().gpus(job_id)
        if shutil.which("nvidia-smi") is None:
            assert reading is None
        else:
            assert reading and all(g.memory_total_gb > 0 and 0 <= g.utilization_pct <= 100 for g in reading)
    finally:
        core.cancel_job(job_id)


@pytest.mark.detached
def test_a_3000_row_nvidia_smi_is_cut_to_16_gpus_with_impossible_figures_null(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local backend's reading (this machine's nvidia-smi, here a wedged one printing 3,000 rows, the first
    with -500 % and negative MiB) gets the same checks as a Jobs one."""
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rows = tmp_path / "smi.csv"
    rows.write_text("0, -500, -1024, 24564\n" + "".join(f"{i}, 87, 20480, 24564\n" for i in range(1, 3000)))
    fake_nvidia_smi(bin_dir, f"cat {rows}")
    core = Core()
    job_id = submit_script(core, "import time\nprint('HFTM_START {}', flush=True)\ntime.sleep(60)\n")
    try:
        gpus = telemetry.GpuTelemetry()
        figures = gpus.start(core.backend("local"), job_id, None, stage="RUNNING", flavor=None)()
        assert len(figures) == 16 and [f.index for f in figures] == list(range(16))
        assert figures[0].utilization_pct is None and figures[0].memory_used_gb is None
        assert (figures[1].utilization_pct, figures[1].memory_used_gb, figures[1].memory_total_gb) == (87.0, 21.5, 25.8)
        hint = gpus.hint(core.backend("local"), job_id, figures, started_at=None)
        assert "reported 3000 GPUs" in hint and "first 16" in hint
    finally:
        core.cancel_job(job_id)


@pytest.mark.parametrize(("peft", "offered"), [("lora", True), ("qlora", False)])
async def test_a_job_that_ran_out_of_memory_hears_advice_that_fits_it(peft: str, offered: bool,
                                                                      hub: Emulator) -> None:
    """The error hint said "peft='lora' or 'qlora'" to every job, a QLoRA job and an embedding model included."""
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1, final_stage="ERROR", log_lines=[
        "HFTM_START {}", 'HFTM_ERROR {"type": "OutOfMemoryError", "message": "CUDA out of memory"}']))
    async with Client(build_server()) as client:
        job = await call(client, "submit_training", {**CAPYBARA_BASE, "max_steps": 5, "peft": peft,
                                                     "flavor": "a10g-large"})
        report = await finished(client, job["job_id"], 30)
    step = report["next_step"]
    assert report["stage"] == "ERROR" and step.startswith("The GPU ran out of memory: resubmit with"), step
    assert ("peft='qlora'" in step) is offered and "per_device_batch_size" in step
