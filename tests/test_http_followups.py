"""HTTP callers and what follow-up jobs read: a job's data, base model and output go through the same check as a
direct argument; its own output stays open to a caller allowed to run local jobs; answers show no server paths,
tell nothing of which names exist on the server, and compare_runs shows hyperparameters only. A tool that fails
in a way no check foresaw still answers with a clear error."""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from hf_train_mcp.access import Access
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.jobs.ledger import JobRecord, Ledger, now_iso
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.service import Core
from hf_train_mcp_demo.tiny import example_rows, write_jsonl
from tests.conftest import needs_training
from tests.emulator import ViewerDataset

pytestmark = pytest.mark.anyio


def finished_local_job(home: Path, job_id: str, *, model: str, dataset: str, peft: str, output: Path) -> str:
    """A completed local training job in the ledger, as the local backend leaves one (its output in the jobs
    folder of HF_TRAIN_HOME)."""
    request = TrainingRequest(model=model, dataset=dataset, backend="local", peft=peft, max_steps=2)
    Ledger().record(JobRecord(
        job_id=job_id, backend="local", namespace=None, method="sft", model=model, dataset=dataset,
        request_json=request.model_dump_json(), script_sha256="0" * 64, script_path=None,
        job_dir=str(output.parent), stage="COMPLETED", flavor="local-cpu", timeout="10m",
        job_url=f"file://{output.parent}", hub_model_id=None, model_url=f"file://{output}", trackio_url=None,
        output_bucket=None, estimated_hours=None, estimated_cost_usd=None, effective_batch_size=1,
        warnings_json="[]", idempotency_key=None, created_at=now_iso(), finished_at=now_iso(), output_dir=str(output)))
    return job_id


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    folder = tmp_path / "shared"
    folder.mkdir()
    return folder


@pytest.fixture
def full_job(tiny_model: Path, isolated_home: Path) -> Path:
    """The output folder of a full fine-tune, inside the server's own jobs folder."""
    output = isolated_home / "jobs" / "local-full" / "output"
    shutil.copytree(tiny_model, output)
    return output


async def call(access: Access, name: str, arguments: dict[str, Any]) -> Any:
    async with Client(build_server(access=access)) as client:
        return await client.call_tool(name, arguments)


@needs_training
async def test_a_follow_up_of_a_stdio_job_whose_data_is_outside_the_allowed_folders_is_refused(
        tiny_model: Path, tmp_path: Path, shared: Path, full_job: Path, isolated_home: Path, offline) -> None:
    private = write_jsonl(tmp_path / "private" / "secret-chat.jsonl", example_rows("sft", 8))
    job = finished_local_job(isolated_home, "local-aaaa0001", model=str(tiny_model), dataset=str(private),
                             peft="full", output=full_job)
    http = Access.http(local_dirs=[str(shared)], local_jobs=True)
    before = sorted((isolated_home / "jobs").iterdir())
    for tool, arguments in (("evaluate_model", {"model": job}), ("evaluate_model", {"model": job, "dry_run": True}),
                            ("export_model", {"model": job, "dry_run": True})):
        result = await call(http, tool, arguments)
        assert result.is_error, tool
        message = result.content[0].text
        assert "outside the folders" in message and str(tmp_path) not in message and "secret-chat" not in message
    assert sorted((isolated_home / "jobs").iterdir()) == before  # nothing launched, no card written
    assert not (full_job / "README.md").exists()
    local = await call(Access(), "evaluate_model", {"model": job, "dry_run": True})  # the local user may
    assert not local.is_error, local.content[0].text


@needs_training
async def test_an_http_caller_evaluates_and_exports_its_own_local_full_fine_tune(
        tiny_model: Path, shared: Path, full_job: Path, isolated_home: Path, offline) -> None:
    model = shared / "tiny"
    shutil.copytree(tiny_model, model)
    data = write_jsonl(shared / "chat.jsonl", example_rows("sft", 8))
    job = finished_local_job(isolated_home, "local-bbbb0002", model=str(model), dataset=str(data), peft="full",
                             output=full_job)
    http = Access.http(local_dirs=[str(shared)], local_jobs=True)
    for tool in ("evaluate_model", "export_model"):
        result = await call(http, tool, {"model": job, "dry_run": True})
        assert not result.is_error, result.content[0].text
        assert str(isolated_home) not in json.dumps(result.structured_content.get("warnings"))


@needs_training
async def test_a_refusal_never_shows_the_servers_home(isolated_home: Path, shared: Path, offline) -> None:
    output = isolated_home / "jobs" / "local-gone" / "output"  # the job's output was deleted since
    job = finished_local_job(isolated_home, "local-cccc0003", model="org/Model-1B", dataset="org/data", peft="full",
                             output=output)
    result = await call(Access.http(local_dirs=[str(shared)], local_jobs=True), "evaluate_model", {"model": job})
    assert result.is_error and "gone" in result.content[0].text
    assert str(isolated_home) not in result.content[0].text


@pytest.mark.parametrize(("tool", "field"), [("validate_dataset", "dataset"), ("submit_training", "dataset"),
                                             ("estimate_cost", "model"), ("validate_dataset", "model")])
async def test_a_name_that_exists_in_the_servers_working_folder_answers_as_one_that_does_not(
        tool: str, field: str, tmp_path: Path, shared: Path, hub, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cwd" / "org" / "data").mkdir(parents=True)
    write_jsonl(tmp_path / "cwd" / "org" / "data" / "train.jsonl", example_rows("sft", 4))
    (tmp_path / "cwd" / "org" / "data" / "config.json").write_text(json.dumps(
        {"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80, "vocab_size": 128256,
         "intermediate_size": 28672, "num_attention_heads": 64}))  # a 70B-shaped config the server holds
    monkeypatch.chdir(tmp_path / "cwd")
    hub.datasets["org/chat"] = ViewerDataset({"default": {"train": example_rows("sft", 8)}})
    http = Access.http(local_dirs=[str(shared)], local_jobs=True)
    extra = {"submit_training": {"model": "org/Model-1B", "backend": "local", "dry_run": True},
             "estimate_cost": {}, "validate_dataset": {"dataset": "org/chat"} if field == "model" else {}}[tool]
    answers = []
    for name in ("org/data", "org/nope"):
        result = await call(http, tool, {**extra, field: name})
        body = result.content[0].text if result.is_error else json.dumps(result.structured_content)
        answers.append((result.is_error, body.replace(name, "NAME")))
    assert answers[0] == answers[1]


def test_an_adapter_whose_base_lies_outside_the_allowed_folders_is_refused(tmp_path: Path, shared: Path,
                                                                             offline) -> None:
    from hf_train_mcp.contract.requests import EvaluateRequest

    adapter = shared / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"base_model_name_or_path": str(tmp_path / "private-base"), "task_type": "CAUSAL_LM"}))
    core = Core(access=Access.http(local_dirs=[str(shared)], local_jobs=True))
    with core.access.serving(), pytest.raises(Exception, match="outside the folders") as caught:
        core.evaluate_model(EvaluateRequest(model=str(adapter), backend="local", tasks=["hellaswag"], dry_run=True))
    assert "private-base" not in str(caught.value)


def _hf_record(job_id: str, **request: Any) -> JobRecord:
    req = TrainingRequest(model="Qwen/Qwen2-0.5B-Instruct", hub_model_id="emu-user/out", **request)
    return JobRecord(
        job_id=job_id, backend="hf", namespace="emu-user", method=req.method, model=req.model, dataset=req.dataset,
        request_json=req.model_dump_json(), script_sha256="0" * 64, script_path=None, job_dir=None,
        stage="COMPLETED", flavor="a10g-small", timeout="1h", job_url=None, hub_model_id=req.hub_model_id,
        model_url=None, trackio_url=None, output_bucket=None, estimated_hours=None, estimated_cost_usd=None,
        effective_batch_size=8, warnings_json="[]", idempotency_key=None, created_at=now_iso(), finished_at=now_iso())


async def test_compare_runs_shows_a_remote_caller_hyperparameters_and_never_code(hub) -> None:
    code = "def reward(completions, **kwargs):\n    return [0.0 for _ in completions]  # secret_reward\n"
    ledger = Ledger()
    ledger.record(_hf_record("aaaaaaaaaaaaaaaaaaaaaaa1", method="grpo", dataset="alice/private-prompts",
                             learning_rate=1e-5, reward_code=code))
    ledger.record(_hf_record("aaaaaaaaaaaaaaaaaaaaaaa2", method="grpo", dataset="bob/other-prompts",
                             learning_rate=2e-5))
    arguments = {"job_ids": ["aaaaaaaaaaaaaaaaaaaaaaa1", "aaaaaaaaaaaaaaaaaaaaaaa2"]}
    remote = await call(Access.http(), "compare_runs", arguments)
    assert not remote.is_error, remote.content[0].text
    shown = json.dumps(remote.structured_content)
    assert "secret_reward" not in shown and "private-prompts" not in shown
    assert {row["params"]["learning_rate"] for row in remote.structured_content["runs"]} == {1e-5, 2e-5}
    local = await call(Access(), "compare_runs", arguments)
    assert "secret_reward" not in json.dumps(local.structured_content)  # code, to nobody
    assert "alice/private-prompts" in json.dumps(local.structured_content)  # the local user's own names


async def test_an_unforeseen_failure_is_a_clear_error_naming_the_tool(monkeypatch: pytest.MonkeyPatch,
                                                                      isolated_home: Path) -> None:
    def broken(self: Core) -> Any:
        raise KeyError("vocab_size")

    monkeypatch.setattr(Core, "list_hardware", broken)
    for access in (Access(), Access.http()):
        result = await call(access, "list_hardware", {})
        assert result.is_error
        message = result.content[0].text
        assert "list_hardware" in message and "KeyError" in message and "vocab_size" in message
        assert "failed on an unexpected error" in message and "Traceback" not in message
