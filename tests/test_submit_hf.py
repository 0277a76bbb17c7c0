"""submit_training and job_status on HF Jobs, through the MCP tools, against the emulated Jobs API."""

import ast
import json
import re
import shlex
import time

import pytest

from tests.conftest import READ_TOKEN, WRITE_TOKEN
from tests.emulator import Emulator, JobPlan, ViewerDataset
from tests.helpers import CAPYBARA_BASE as BASE
from tests.helpers import CAPYBARA_ROWS, decoded_script, script_config
from tests.helpers import call_once as call

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def capybara(hub: Emulator) -> Emulator:
    hub.datasets["trl-lib/Capybara"] = ViewerDataset({"default": {"train": CAPYBARA_ROWS, "test": CAPYBARA_ROWS[:5]}})
    return hub


def assert_no_token(text: str) -> None:
    assert WRITE_TOKEN not in text and READ_TOKEN not in text


async def test_submit_training_posts_an_inline_job_with_secret_labels_and_a_derived_timeout(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    result = await call("submit_training", {**BASE, "max_steps": 12000})
    assert not result.is_error, result.content[0].text
    out = result.structured_content
    spec = hub.posted_jobs()[before]

    assert spec["dockerImage"] == "ghcr.io/astral-sh/uv:python3.12-bookworm"
    assert spec["command"][:2] == ["/bin/sh", "-c"] and "uv run /tmp/train.py" in spec["command"][2]
    assert spec["secrets"] == {"HF_TOKEN": WRITE_TOKEN}
    assert spec["labels"]["hf-train-mcp"] == "1" and spec["labels"]["method"] == "sft"
    assert len(spec["labels"]["request"]) == 12
    assert spec["flavor"] == out["flavor"]
    # derived from the estimate with a margin, never the bare 30-minute default
    estimate = (await call("estimate_cost", {"model": BASE["model"], "max_steps": 12000, "flavor": out["flavor"],
                                             "dataset": BASE["dataset"]})).structured_content
    assert spec["timeoutSeconds"] >= out["estimated_hours"] * 3600 * 1.5 and spec["timeoutSeconds"] != 1800
    assert out["timeout"] == estimate["recommended_timeout"]
    assert_no_token(json.dumps(spec["environment"]) + json.dumps(spec["command"]))

    script = decoded_script(spec)
    tree = ast.parse(script)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
    for value in ("Qwen/Qwen2-0.5B-Instruct", "trl-lib/Capybara", "emu-user/qwen-sft", "emu-user/trackio"):
        assert repr(value) in script
    assert "'push_to_hub': True" in script and 'hub_strategy="checkpoint"' in script
    assert f'# flavor = "{out["flavor"]}"' in script and '# secrets = ["HF_TOKEN"]' in script
    assert_no_token(script)

    assert out["job_id"] and out["stage"] in ("SCHEDULING", "RUNNING")
    assert out["job_url"] == f"{hub.url}/jobs/emu-user/{out['job_id']}"
    assert out["model_url"] == f"{hub.url}/emu-user/qwen-sft"
    assert out["trackio_url"] == f"{hub.url}/spaces/emu-user/trackio"
    assert out["estimated_cost_usd"] > 0 and out["script_sha256"]
    assert_no_token(json.dumps(out))


async def test_dry_run_returns_the_script_and_command_and_submits_nothing(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    result = await call("submit_training", {**BASE, "max_steps": 50, "dry_run": True, "flavor": "a10g-large"})
    assert not result.is_error, result.content[0].text
    out = result.structured_content
    assert len(hub.posted_jobs()) == before
    assert out["job_id"] is None and out["flavor"] == "a10g-large"
    ast.parse(out["script"])
    assert out["command"][0] == "/bin/sh" and "base64 -d > /tmp/train.py" in out["command"][2]


async def test_a_multi_gpu_flavor_launches_one_process_per_gpu_with_the_scripts_own_pins(hub: Emulator) -> None:
    result = await call("submit_training", {**BASE, "max_steps": 50, "flavor": "a10g-largex2"})
    assert not result.is_error, result.content[0].text
    spec = hub.posted_jobs()[-1]
    assert spec["dockerImage"] == "ghcr.io/astral-sh/uv:python3.12-bookworm"
    command = spec["command"][2]
    assert "/tmp/venv/bin/accelerate launch --num_processes 2 /tmp/train.py" in command
    header = decoded_script(spec).split("# ]")[0]
    pins = re.findall(r'^#     "(.+)",$', header, re.MULTILINE)
    assert any(p.startswith("torch") for p in pins) and any(p.startswith("trl") for p in pins)
    installed = shlex.split(command.split("uv pip install -q --python /tmp/venv/bin/python ")[1].split(" && ")[0])
    assert installed == pins  # every pin of the header, trl/transformers/torch included
    assert result.structured_content["effective_batch_size"] >= 16


async def test_an_output_bucket_is_mounted_as_the_output_dir(hub: Emulator) -> None:
    result = await call("submit_training", {**BASE, "max_steps": 50, "output_bucket": "emu-user/ckpts"})
    assert not result.is_error, result.content[0].text
    spec = hub.posted_jobs()[-1]
    assert spec["volumes"] == [{"type": "bucket", "source": "emu-user/ckpts", "mountPath": "/outputs",
                                "readOnly": False}]
    config = script_config(decoded_script(spec))
    assert config["output_dir"].startswith("/outputs/sft-Qwen2-0.5B-Instruct-") and config["resume_from_dir"] is None
    again = await call("submit_training", {**BASE, "max_steps": 50, "output_bucket": "emu-user/ckpts"})
    assert not again.is_error
    other = script_config(decoded_script(hub.posted_jobs()[-1]))
    assert other["output_dir"] != config["output_dir"] and other["run_name"] != config["run_name"]  # own folder, run


async def test_resume_from_a_previous_job_reads_that_jobs_hub_checkpoint(hub: Emulator) -> None:
    first = (await call("submit_training", {**BASE, "max_steps": 50})).structured_content
    result = await call("submit_training", {**BASE, "max_steps": 100, "resume_from": first["job_id"]})
    assert not result.is_error, result.content[0].text
    assert "'resume_from_repo': 'emu-user/qwen-sft'" in decoded_script(hub.posted_jobs()[-1])


async def test_a_short_timeout_gets_a_warning(hub: Emulator) -> None:
    result = await call("submit_training", {**BASE, "timeout": "1m", "epochs": 3, "flavor": "t4-small"})
    assert not result.is_error, result.content[0].text
    warnings = " ".join(result.structured_content["warnings"])
    assert "timeout 1m is below the estimated" in warnings
    assert "T4 has no bf16" in warnings
    assert hub.posted_jobs()[-1]["timeoutSeconds"] == 60


@pytest.mark.detached
async def test_job_status_parses_progress_and_loss_while_running(hub: Emulator) -> None:
    lines = ["HFTM_START {}"] + [
        f'HFTM_LOG {{"step": {s}, "total_steps": 100, "epoch": {s / 50}, "loss": {2.0 - s / 100}, '
        f'"learning_rate": 0.0002}}' for s in range(10, 101, 10)
    ]
    hub.plan_next(JobPlan(scheduling_s=0.1, running_s=4.0, log_lines=lines))
    job = (await call("submit_training", {**BASE, "max_steps": 100})).structured_content
    time.sleep(2.3)
    result = await call("job_status", {"job_id": job["job_id"], "tail": 3})
    assert not result.is_error, result.content[0].text
    report = result.structured_content
    assert report["stage"] == "RUNNING"
    assert 10 <= report["progress"]["step"] < 100 and report["progress"]["total_steps"] == 100
    assert report["progress"]["percent"] == report["progress"]["step"]
    assert report["last_metrics"]["loss"] == pytest.approx(2.0 - report["progress"]["step"] / 100)
    assert report["last_metrics"]["learning_rate"] == 0.0002
    assert len(report["log_tail"]) == 3
    assert report["trackio_url"].endswith("/spaces/emu-user/trackio")
    assert "check again" in report["next_step"]


async def test_job_status_on_a_completed_job_points_at_the_model(hub: Emulator) -> None:
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.2, log_lines=[
        'HFTM_LOG {"step": 5, "total_steps": 5, "epoch": 1.0, "loss": 0.5}', 'HFTM_DONE {}']))
    job = (await call("submit_training", {**BASE, "max_steps": 5})).structured_content
    time.sleep(0.4)
    report = (await call("job_status", {"job_id": job["job_id"]})).structured_content
    assert report["stage"] == "COMPLETED" and report["error"] is None
    assert report["progress"]["percent"] == 100.0 and report["last_metrics"]["loss"] == 0.5
    assert report["finished_at"].endswith("Z")
    assert "emu-user/qwen-sft" in report["next_step"]


async def test_job_status_on_a_failed_job_extracts_the_error_and_says_what_to_do(hub: Emulator) -> None:
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.2, final_stage="ERROR", message="exit code 1", log_lines=[
        "Traceback (most recent call last):",
        '  File "/tmp/train.py", line 200, in main',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]))
    job = (await call("submit_training", {**BASE, "max_steps": 5})).structured_content
    time.sleep(0.4)
    report = (await call("job_status", {"job_id": job["job_id"]})).structured_content
    assert report["stage"] == "ERROR"
    assert report["error"].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert "qlora" in report["next_step"] and "per_device_batch_size" in report["next_step"]


@pytest.mark.detached
async def test_job_status_returns_promptly_while_a_running_job_prints_nothing(hub: Emulator) -> None:
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=60.0, log_lines=["late line"]))
    job = (await call("submit_training", {**BASE, "max_steps": 5})).structured_content
    started = time.monotonic()
    report = (await call("job_status", {"job_id": job["job_id"]})).structured_content
    assert report["stage"] == "RUNNING" and report["log_tail"] == []
    assert time.monotonic() - started < 8  # bounded log read: the call must not hang on a silent stream
    await call("cancel_job", {"job_id": job["job_id"]})


async def test_an_unknown_job_id_is_a_tool_error(hub: Emulator) -> None:
    result = await call("job_status", {"job_id": "0123456789abcdef01234567"})
    assert result.is_error and "no job '0123456789abcdef01234567'" in result.content[0].text


async def test_a_read_only_token_is_refused_and_nothing_is_launched(hub: Emulator, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", READ_TOKEN)
    before = len(hub.posted_jobs())
    result = await call("submit_training", BASE)
    assert result.is_error and "read-only" in result.content[0].text
    assert len(hub.posted_jobs()) == before
    assert_no_token(result.content[0].text)


async def test_no_token_with_backend_hf_says_how_to_log_in(hub: Emulator, monkeypatch) -> None:
    monkeypatch.delenv("HF_TOKEN")
    result = await call("submit_training", {**BASE, "backend": "hf"})
    assert result.is_error and "hf auth login" in result.content[0].text
    assert "or submit with backend='local' to run without an account" in result.content[0].text  # hf's own words


async def test_an_invalid_token_is_reported_without_echoing_it(hub: Emulator, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token_42")
    result = await call("submit_training", BASE)
    assert result.is_error and "token was rejected" in result.content[0].text
    assert "hf_not_a_real_token_42" not in result.content[0].text


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"flavor": "a10g-huge"}, "unknown flavor 'a10g-huge'"),
        ({"timeout": "soon"}, "cannot read timeout 'soon'"),
        ({"hub_model_id": "not a repo"}, "hub_model_id"),
        ({"hub_model_id": None}, "hub_model_id is required"),
        ({"epochs": 0}, "epochs"),
        ({"method": "orpo"}, "method"),
        ({"beta": 0.2}, "beta applies to method 'dpo' or 'kto' or 'distill' only, not 'sft'"),
        ({"max_cost_usd": 0.001, "epochs": 3}, "over max_cost_usd"),
    ],
)
async def test_bad_arguments_are_tool_errors_and_launch_nothing(hub: Emulator, arguments, expected) -> None:
    before = len(hub.posted_jobs())
    result = await call("submit_training", {k: v for k, v in {**BASE, **arguments}.items() if v is not None})
    assert result.is_error and expected in result.content[0].text, result.content[0].text
    assert len(hub.posted_jobs()) == before


async def test_the_same_idempotency_key_returns_the_first_job_instead_of_a_second(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    first = (await call("submit_training", {**BASE, "max_steps": 5, "idempotency_key": "run-1"})).structured_content
    again = (await call("submit_training", {**BASE, "max_steps": 5, "idempotency_key": "run-1"})).structured_content
    assert again["job_id"] == first["job_id"]
    assert len(hub.posted_jobs()) == before + 1
    assert "idempotency_key matched" in again["warnings"][0]


async def test_a_dataset_with_the_wrong_columns_is_refused_with_the_report(hub: Emulator) -> None:
    hub.datasets["emu-user/bad"] = ViewerDataset({"default": {"train": [{"foo": "x", "bar": "y"}] * 5}})
    before = len(hub.posted_jobs())
    result = await call("submit_training", {**BASE, "dataset": "emu-user/bad"})
    assert result.is_error and "will not train with sft" in result.content[0].text
    assert len(hub.posted_jobs()) == before


async def test_cancel_and_list_jobs_work_on_hf_jobs(hub: Emulator) -> None:
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=60.0))
    job = (await call("submit_training", {**BASE, "max_steps": 5})).structured_content
    canceled = (await call("cancel_job", {"job_id": job["job_id"]})).structured_content
    assert canceled["stage"] == "CANCELED"
    listed = (await call("list_jobs", {"stage": "CANCELED"})).structured_content["jobs"]
    assert [j["job_id"] for j in listed] == [job["job_id"]]


async def test_resume_from_a_bucket_job_mounts_the_same_bucket(hub: Emulator) -> None:
    first = (await call("submit_training", {**BASE, "max_steps": 50, "output_bucket": "emu-user/ckpts"}))
    result = await call("submit_training", {**BASE, "max_steps": 100, "resume_from": first.structured_content["job_id"]})
    assert not result.is_error, result.content[0].text
    spec = hub.posted_jobs()[-1]
    assert spec["volumes"][0]["source"] == "emu-user/ckpts"
    first_dir = script_config(decoded_script(hub.posted_jobs()[-2]))["output_dir"]
    config = script_config(decoded_script(spec))
    assert config["resume_from_repo"] is None and config["resume_from_dir"] == first_dir
    assert config["output_dir"] != first_dir


def test_a_script_too_large_for_the_job_env_is_refused() -> None:
    from hf_train_mcp.backends.hf_jobs import HfJobsBackend
    from hf_train_mcp.errors import TrainError
    from hf_train_mcp.rendering.script import Script

    with pytest.raises(TrainError, match="fit inline"):
        HfJobsBackend("hf_x").environment(Script("#" * 100_000, "0" * 64))


async def test_a_transient_500_is_retried_and_launches_exactly_one_job(hub: Emulator) -> None:
    before = len(hub.jobs)
    hub.fail_next("POST", r"/api/jobs/emu-user", 503)
    result = await call("submit_training", {**BASE, "max_steps": 5})
    assert not result.is_error, result.content[0].text
    assert len(hub.jobs) == before + 1


async def test_a_500_after_the_job_was_created_finds_that_job_instead_of_launching_another(hub: Emulator) -> None:
    before = len(hub.jobs)
    hub.fail_next("POST", r"/api/jobs/emu-user", 500, after=True)
    result = await call("submit_training", {**BASE, "max_steps": 5})
    assert not result.is_error, result.content[0].text
    assert len(hub.jobs) == before + 1
    assert result.structured_content["job_id"] in hub.jobs


async def test_a_persistent_500_is_an_error_after_a_few_attempts(hub: Emulator) -> None:
    before = len(hub.jobs)
    hub.fail_next("POST", r"/api/jobs/emu-user", 500, count=3)
    result = await call("submit_training", {**BASE, "max_steps": 5, "idempotency_key": "flaky"})
    assert result.is_error and "3 attempts" in result.content[0].text
    assert len(hub.jobs) == before
    retry = await call("submit_training", {**BASE, "max_steps": 5, "idempotency_key": "flaky"})
    assert not retry.is_error  # a failed submission releases its idempotency key
    assert len(hub.jobs) == before + 1
