"""Measured, not modelled: estimate_cost(measure=True) runs the preflight alone as a job, and a later estimate
with the same arguments uses its numbers; submit_training(preflight=True) times a few steps first and stops a
run that could not finish (or fails) minutes in. Everything runs on CPU with the tiny model (local backend);
the Hub backend's measurement job is checked against the emulator."""

import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp_demo.tiny import example_rows, write_jsonl
from tests.conftest import needs_training
from tests.emulator import Emulator, JobPlan, ViewerDataset
from tests.helpers import CHAT_ROWS, decoded_script

pytestmark = pytest.mark.anyio


async def wait(client: Client, job_id: str, limit: float = 300) -> dict:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        report = (await client.call_tool("job_status", {"job_id": job_id, "tail": 50})).structured_content
        if report["stage"] not in ("SCHEDULING", "RUNNING"):
            return report
        time.sleep(0.5)
    raise AssertionError(f"{job_id} still running: {report}")


@pytest.fixture
def sft_data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "sft.jsonl", example_rows("sft", 48))


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_a_measurement_job_replaces_the_model_with_measured_seconds_per_step(tiny_model: Path, sft_data: Path,
                                                                                   offline) -> None:
    args: dict[str, Any] = {"model": str(tiny_model), "dataset": str(sft_data), "max_steps": 400, "backend": "local"}
    async with Client(build_server()) as client:
        first = (await client.call_tool("estimate_cost", {**args, "measure": True})).structured_content
        probe = first["measurement"]
        assert probe["stage"] == "RUNNING" and first["assumptions"]["throughput"] == "modelled"
        again = (await client.call_tool("estimate_cost", {**args, "measure": True})).structured_content
        assert again["measurement"]["job_id"] == probe["job_id"]  # never two measurements of one setting at once
        report = await wait(client, probe["job_id"])
        assert report["stage"] == "COMPLETED", report["log_tail"]
        assert report["last_metrics"]["preflight_seconds_per_step"] > 0
        assert not any(line.startswith("HFTM_LOG") and '"step": 4' in line for line in report["log_tail"])
        measured = (await client.call_tool("estimate_cost", args)).structured_content
    assert measured["assumptions"]["throughput"] == "measured" and measured["flavor"] == "local-cpu"
    per_step = measured["measurement"]["seconds_per_step"]
    assert per_step == report["last_metrics"]["preflight_seconds_per_step"]
    assert abs(measured["hours"] * 3600 - per_step * 400) <= 18  # 400 steps at the measured pace (hours: 0.01 h)
    # what the preflight projects for a real run adds a margin and building the real trainer
    assert report["last_metrics"]["preflight_projected_train_seconds"] >= per_step * 400 * 1.1 - 1  # rounding
    assert measured["memory_gb_needed"] == measured["measurement"]["peak_memory_gb"] > 0
    assert measured["cost_usd"] == 0


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_a_preflight_stops_a_run_that_cannot_finish_inside_its_timeout(tiny_model: Path, sft_data: Path,
                                                                             offline) -> None:
    async with Client(build_server()) as client:
        sub = (await client.call_tool("submit_training", {
            "model": str(tiny_model), "dataset": str(sft_data), "backend": "local", "max_steps": 500_000,
            "timeout": "5m", "preflight": True})).structured_content
        report = await wait(client, sub["job_id"])
    assert report["stage"] == "ERROR" and "preflight" in report["error"] and "cannot finish" in report["error"]
    assert report["last_metrics"]["preflight_projected_train_seconds"] > 300
    assert not any('"step": 10' in line for line in report["log_tail"])  # the real run never started
    assert not (Path(sub["model_url"].removeprefix("file://")) / "adapter_config.json").exists()


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_a_preflight_that_passes_lets_the_run_train_and_reports_what_it_measured(tiny_model: Path,
                                                                                       sft_data: Path, offline) -> None:
    async with Client(build_server()) as client:
        sub = (await client.call_tool("submit_training", {
            "model": str(tiny_model), "dataset": str(sft_data), "backend": "local", "max_steps": 6,
            "timeout": "30m", "preflight": True})).structured_content
        report = await wait(client, sub["job_id"])
    assert report["stage"] == "COMPLETED", report["log_tail"]
    assert report["progress"]["step"] == 6 and report["last_metrics"]["preflight_seconds_per_step"] > 0
    assert (Path(sub["model_url"].removeprefix("file://")) / "adapter_config.json").exists()


@pytest.mark.detached
@needs_training
@pytest.mark.training
async def test_bad_data_fails_the_preflight_before_the_run(tiny_model: Path, tmp_path: Path, offline) -> None:
    broken = write_jsonl(tmp_path / "broken.jsonl", [{"messages": "not a list of messages"}] * 8)
    async with Client(build_server()) as client:
        sub = (await client.call_tool("submit_training", {
            "model": str(tiny_model), "dataset": str(broken), "backend": "local", "max_steps": 6,
            "timeout": "30m", "preflight": True, "skip_validation": True})).structured_content
        report = await wait(client, sub["job_id"])
    assert report["stage"] == "ERROR" and report["error"]
    assert "preflight_seconds_per_step" not in report["last_metrics"]


async def test_measure_without_a_dataset_is_refused(offline) -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("estimate_cost", {"model": "org/Model-7B", "measure": True})
    assert result.is_error and "pass dataset" in result.content[0].text


@pytest.mark.detached
@pytest.mark.usefixtures("chat")
async def test_a_measurement_on_jobs_is_a_short_job_that_pushes_nothing(hub: Emulator) -> None:
    probe = {"steps": 3, "seconds_per_step": 2.0, "tokens_per_second": 900.0, "peak_memory_gb": 3.1,
             "device": "NVIDIA A10G", "gpu_memory_gb": 23.7, "planned_steps": 300, "projected_train_seconds": 600}
    import json

    hub.plan_next(JobPlan(scheduling_s=0, running_s=0.2, log_lines=[f"HFTM_PROBE {json.dumps(probe)}",
                                                                    'HFTM_DONE {"probe": true}']))
    args = {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat", "flavor": "a10g-small", "max_steps": 300}
    async with Client(build_server()) as client:
        first = (await client.call_tool("estimate_cost", {**args, "measure": True})).structured_content
        assert first["measurement"]["stage"] is not None
        job = hub.posted_jobs()[-1]
        assert job["labels"]["kind"] == "probe" and job["flavor"] == "a10g-small"
        import re

        script = decoded_script(job)
        assert "'push_to_hub': False" in script and "'hub_model_id': None" in script and "'trackio': False" in script
        assert re.search(r"'probe': \{'steps': 3,\s+'only': True", script)
        assert "HF_TOKEN" in job["secrets"] and not any("hf_emu" in str(v) for v in job["environment"].values())
        assert job["timeoutSeconds"] <= 3600
        time.sleep(0.4)
        measured = (await client.call_tool("estimate_cost", args)).structured_content
        assert measured["assumptions"]["throughput"] == "measured"
        assert measured["measurement"]["device"] == "NVIDIA A10G"
        # hours are given to 0.01 h (18 s either way), the overhead to 0.1 min
        assert measured["hours"] * 3600 == pytest.approx(600 + measured["assumptions"]["overhead_minutes"] * 60,
                                                         abs=18 + 3)
        # the same run submitted for real takes its default timeout from the measurement
        sub = (await client.call_tool("submit_training", {**args, "hub_model_id": "emu-user/out",
                                                          "dry_run": True})).structured_content
    assert any("measured on a10g-small" in w for w in sub["warnings"])
    assert sub["estimated_hours"] == pytest.approx(measured["hours"], rel=0.02)


@pytest.mark.usefixtures("chat")
async def test_a_callers_idempotency_key_cannot_pose_as_a_measurement(hub: Emulator) -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {
            "model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat", "hub_model_id": "emu-user/out",
            "idempotency_key": "probe-0123456789abcdef-1"})
    assert result.is_error and "may not start with 'probe-'" in result.content[0].text


@pytest.mark.detached
@pytest.mark.usefixtures("chat")
async def test_a_measurement_that_ended_without_measuring_is_a_failure_measure_tries_again(hub: Emulator) -> None:
    hub.plan_next(JobPlan(scheduling_s=0, running_s=0.1, log_lines=["HFTM_START {}", "HFTM_DONE {}"]))
    args = {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat", "flavor": "a10g-small", "max_steps": 300}
    async with Client(build_server()) as client:
        first = (await client.call_tool("estimate_cost", {**args, "measure": True})).structured_content
        time.sleep(0.4)
        after = (await client.call_tool("estimate_cost", args)).structured_content
        assert after["assumptions"]["throughput"] == "modelled"
        assert after["measurement"]["error"] == "ended without measuring"
        assert any("tries again" in w for w in after["warnings"])
        again = (await client.call_tool("estimate_cost", {**args, "measure": True})).structured_content
    assert again["measurement"]["job_id"] != first["measurement"]["job_id"]


@pytest.mark.usefixtures("chat")
async def test_nothing_is_measured_when_no_flavor_fits(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    async with Client(build_server()) as client:
        result = await client.call_tool("estimate_cost", {
            "model": "someone/Giant-900B", "dataset": "org/chat", "peft": "full", "measure": True})
    assert result.is_error and "no flavor fits" in result.content[0].text
    assert len(hub.posted_jobs()) == before


async def test_estimate_cost_is_not_announced_as_read_only_since_it_can_launch_a_job() -> None:
    async with Client(build_server()) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    hints = tools["estimate_cost"].annotations
    assert hints.read_only_hint is False and hints.destructive_hint is False and hints.idempotent_hint is True


@pytest.mark.detached
async def test_a_measurement_of_another_split_is_not_reused(hub: Emulator) -> None:
    import json

    hub.datasets["org/chat"] = ViewerDataset({"default": {"train": CHAT_ROWS, "big": CHAT_ROWS * 50}})
    probe = {"seconds_per_step": 0.5, "peak_memory_gb": 2.0, "planned_steps": 2}
    hub.plan_next(JobPlan(scheduling_s=0, running_s=0.1, log_lines=[f"HFTM_PROBE {json.dumps(probe)}", "HFTM_DONE {}"]))
    args = {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat", "flavor": "a10g-small"}
    async with Client(build_server()) as client:
        await client.call_tool("estimate_cost", {**args, "measure": True})
        time.sleep(0.4)
        train = (await client.call_tool("estimate_cost", args)).structured_content
        big = (await client.call_tool("estimate_cost", {**args, "dataset_split": "big"})).structured_content
    assert train["assumptions"]["throughput"] == "measured"
    assert big["assumptions"]["throughput"] == "modelled" and big["measurement"] is None
