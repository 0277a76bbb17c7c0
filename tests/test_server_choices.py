"""What the server decides by itself obeys the rules a caller's choice does: a timeout within the 7-day bound, a
price that is known (never a zero that turns the caps off), an export target that does not land on its own
source, and the CLI reads the timeout forms the docs give."""

import json
import subprocess
import sys

import pytest
from mcp import Client

import tests.emulator as emulator_module
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.estimate.hardware import reset_cache
from tests.emulator import Emulator, JobPlan, ViewerDataset
from tests.helpers import CAPYBARA_BASE, CHAT_ROWS, completed_training
from tests.helpers import call_once as call

pytestmark = pytest.mark.anyio
BASE = {"model": "meta-llama/Llama-3.1-8B", "dataset": "org/chat", "hub_model_id": "emu-user/out"}


@pytest.fixture(autouse=True)
def capybara_too(chat: Emulator) -> Emulator:
    """org/chat, and trl-lib/Capybara (with its model) for completed_training."""
    chat.datasets["trl-lib/Capybara"] = ViewerDataset({"default": {"train": CHAT_ROWS, "test": CHAT_ROWS[:5]}})
    chat.models.setdefault(CAPYBARA_BASE["model"], 494_000_000)
    return chat


@pytest.mark.parametrize("tool", ["submit_training", "estimate_cost"])
async def test_a_server_chosen_timeout_over_seven_days_is_refused_before_posting(tool: str, hub: Emulator) -> None:
    arguments = {**BASE, "max_steps": 1_000_000, "chat_template": "chatml"}
    if tool == "estimate_cost":
        arguments = {"model": BASE["model"], "max_steps": 1_000_000}
    before = len(hub.posted_jobs())
    result = await call(tool, arguments)
    if tool == "estimate_cost":  # an estimate may say it: its recommended timeout is what a submission would use
        assert not result.is_error and any("7-day" in w for w in result.structured_content["warnings"])
        return
    assert result.is_error, result.structured_content
    message = result.content[0].text
    assert "7-day limit" in message and "max_steps" in message and "resume_from" in message
    assert len(hub.posted_jobs()) == before


@pytest.mark.parametrize("tool", ["submit_training", "submit_sweep"])
async def test_a_flavor_the_hardware_list_does_not_price_is_refused_even_without_a_budget(tool: str,
                                                                                          hub: Emulator) -> None:
    run = {**BASE, "model": CAPYBARA_BASE["model"], "flavor": "cpu-xl", "max_steps": 5, "chat_template": "chatml"}
    arguments = run if tool == "submit_training" else {"base": run, "grid": {"learning_rate": [1e-4, 2e-4]}}
    before = len(hub.posted_jobs())
    result = await call(tool, arguments)  # cpu-xl is missing from the emulated live list
    assert result.is_error and "price of cpu-xl is unknown" in result.content[0].text
    assert len(hub.posted_jobs()) == before


async def test_a_zero_or_missing_live_price_never_turns_the_caps_off(hub: Emulator,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    free = [(name, model, count, vram, 0.0 if name in ("a10g-small", "l4x1") else price)
            for name, model, count, vram, price in emulator_module.HARDWARE]
    free.append(("mystery-gpu", "A10G", 1, "24 GB", 0.0))  # unpriced and unknown to the built-in table
    monkeypatch.setattr(emulator_module, "HARDWARE", tuple(free))
    reset_cache()
    hardware = (await call("list_hardware", {})).structured_content
    prices = {row["flavor"]: row["usd_per_hour"] for row in hardware["flavors"]}
    assert prices["a10g-small"] > 0 and prices["l4x1"] > 0 and "mystery-gpu" not in prices
    out = await call("submit_training", {**BASE, "model": CAPYBARA_BASE["model"], "flavor": "a10g-small",
                                         "max_steps": 5, "chat_template": "chatml", "dry_run": True,
                                         "max_cost_usd": 50})
    assert not out.is_error, out.content[0].text
    assert out.structured_content["worst_case_cost_usd"] > 0
    estimate = (await call("estimate_cost", {"model": CAPYBARA_BASE["model"], "flavor": "a10g-small"})).structured_content
    assert estimate["cost_usd"] > 0 and any("no price" in w for w in estimate["warnings"])


async def test_an_export_never_lands_on_its_own_source_or_into_an_adapter_repo(hub: Emulator) -> None:
    hub.files[("emu-user/someone-adapter", "adapter_config.json")] = json.dumps(
        {"base_model_name_or_path": CAPYBARA_BASE["model"], "peft_type": "LORA", "task_type": "CAUSAL_LM"}).encode()
    hub.models["emu-user/someone-adapter"] = 1_000_000
    hub.models["emu-user/existing-model"] = 494_000_000
    async with Client(build_server()) as client:
        job = await completed_training(client, hub)
        before = len(hub.posted_jobs())
        own = await client.call_tool("export_model", {"model": job["job_id"], "hub_model_id": job["hub_model_id"]})
        assert own.is_error and "is the repo being exported" in own.content[0].text
        assert f"{job['hub_model_id']}-merged" in own.content[0].text
        shouted = await client.call_tool("export_model", {"model": job["job_id"],
                                                          "hub_model_id": job["hub_model_id"].upper()})
        assert shouted.is_error and "is the repo being exported" in shouted.content[0].text  # ids ignore case
        into_adapter = await client.call_tool("export_model", {"model": job["job_id"],
                                                               "hub_model_id": "emu-user/someone-adapter"})
        assert into_adapter.is_error and "already holds a LoRA adapter" in into_adapter.content[0].text
        assert len(hub.posted_jobs()) == before
        hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
        existing = await client.call_tool("export_model", {"model": job["job_id"],
                                                           "hub_model_id": "emu-user/existing-model"})
        assert not existing.is_error, existing.content[0].text
        assert any("already exists" in w for w in existing.structured_content["warnings"])
        fresh = await client.call_tool("export_model", {"model": job["job_id"], "dry_run": True})
        assert not any("already exists" in w for w in fresh.structured_content["warnings"])
        posted = len(hub.posted_jobs())
        hub.fail_next("GET", r"/api/models/emu-user/[^/]+-merged", 503, count=20)  # the target cannot be checked
        unchecked = await client.call_tool("export_model", {"model": job["job_id"]})
        assert unchecked.is_error and "could not check whether" in unchecked.content[0].text
        assert len(hub.posted_jobs()) == posted


@pytest.mark.parametrize(("given", "shown"), [("2h", "2h"), ("90m", "1h30m"), ("5400", "1h30m")])
def test_the_cli_takes_the_documented_timeout_forms(given: str, shown: str, offline, tmp_path) -> None:
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "chat.jsonl", example_rows("sft", 4))
    done = subprocess.run([sys.executable, "-m", "hf_train_mcp", "submit", "org/Model-1B", str(data), "--backend",
                           "local", "--timeout", given, "--dry-run", "--skip-validation", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["timeout"] == shown
    bad = subprocess.run([sys.executable, "-m", "hf_train_mcp", "submit", "org/Model-1B", str(data), "--backend",
                          "local", "--timeout", "soon", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "'90m', '2h'" in bad.stderr and "Traceback" not in bad.stderr
