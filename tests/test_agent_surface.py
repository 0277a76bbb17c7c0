"""What an agent's client sees beyond the tools: job resources it can subscribe to (legacy resources/subscribe and
2026-07-28 subscriptions/listen), progress while a long call runs, a question before a large spend, the finetune
prompt, and argument errors in plain words. All through the SDK's in-memory Client, in both protocol modes."""

import json
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated
from mcp.types import EmptyResult, ResourceUpdatedNotification, SubscribeRequest, SubscribeRequestParams

from hf_train_mcp import methods
from hf_train_mcp.shell.app import build_server
from tests.emulator import Emulator, JobPlan
from tests.helpers import CHAT_BASE as BASE
from tests.helpers import answering

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("chat")]
MODES = ["legacy", "auto"]


class Inbox:
    """A Client message handler that keeps the resource-updated notifications it is sent."""

    def __init__(self) -> None:
        self.uris: list[str] = []

    async def __call__(self, message: object) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.uris.append(message.params.uri)


async def until(predicate, *, poll=None, limit: float = 10) -> None:
    with anyio.fail_after(limit):
        while not predicate():
            if poll is not None:
                await poll()
            await anyio.sleep(0.1)


async def hears_the_update(client: Client, mcp: Any, job_id: str) -> None:
    """Listening to the job's resource: the poll after the baseline (SCHEDULING) sees it change, and the listener
    gets the event."""
    uri = f"hf-train://jobs/{job_id}"
    async with client.listen(resource_subscriptions=[uri]) as events:
        await mcp.watcher.poll_once()  # the baseline: SCHEDULING (or RUNNING, on a loaded machine)
        changed: list[str] = []
        with anyio.fail_after(45):  # the next change: RUNNING, or at the latest COMPLETED
            while not changed:
                await anyio.sleep(0.2)
                changed = await mcp.watcher.poll_once()
        assert changed == [job_id]
        with anyio.fail_after(5):
            async for event in events:
                assert event == ResourceUpdated(uri=uri)
                break


@pytest.mark.detached
async def test_a_legacy_client_subscribed_to_a_job_is_told_when_its_stage_changes(hub: Emulator) -> None:
    mcp = build_server(watch_interval_s=3600)  # polls are driven by the test
    inbox = Inbox()
    # the job's clock is driven by the test (hub.advance): however slow the machine, it is SCHEDULING when
    # subscribed, RUNNING after the first move and COMPLETED after the second, each seen by one poll
    hub.plan_next(JobPlan(scheduling_s=600, running_s=600))
    async with Client(mcp, mode="legacy", message_handler=inbox) as client:
        assert client.session.server_capabilities.resources.subscribe is True
        job_id = (await client.call_tool("submit_training", BASE)).structured_content["job_id"]
        uri = f"hf-train://jobs/{job_id}"
        await client.session.send_request(SubscribeRequest(params=SubscribeRequestParams(uri=uri)), EmptyResult)
        hub.advance(600)
        await until(lambda: uri in inbox.uris, poll=mcp.watcher.poll_once)
        report = json.loads((await client.read_resource(uri)).contents[0].text)
        assert report["job_id"] == job_id and report["stage"] == "RUNNING"
        hub.advance(600)
        await until(lambda: inbox.uris.count(uri) >= 2, poll=mcp.watcher.poll_once)  # then COMPLETED


@pytest.mark.detached
async def test_a_listening_client_gets_the_update_event_of_its_job(hub: Emulator) -> None:
    mcp = build_server(watch_interval_s=3600)
    hub.plan_next(JobPlan(scheduling_s=0.5, running_s=30))
    async with Client(mcp) as client:
        job_id = (await client.call_tool("submit_training", BASE)).structured_content["job_id"]
        await mcp.watcher.poll_once()  # no listener yet: nothing is watched
        await hears_the_update(client, mcp, job_id)


async def test_subscribing_to_a_job_this_server_does_not_know_over_http_is_refused(hub: Emulator) -> None:
    from mcp.shared.exceptions import MCPError

    from hf_train_mcp.access import Access

    async with Client(build_server(access=Access.http()), mode="legacy") as client:
        with pytest.raises(MCPError, match="cannot subscribe"):
            await client.session.send_request(SubscribeRequest(params=SubscribeRequestParams(
                uri="hf-train://jobs/someone-elses-job")), EmptyResult)


@pytest.mark.parametrize("mode", MODES)
async def test_a_submission_reports_progress_when_the_client_asks(mode: str, hub: Emulator) -> None:
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with Client(build_server(), mode=mode) as client:
        result = await client.call_tool("submit_training", {**BASE, "dry_run": True}, progress_callback=on_progress)
        await until(lambda: len(messages) >= 3)  # legacy callbacks may trail the result
    assert not result.is_error
    assert any("validating" in m for m in messages) and any("sizing" in m for m in messages)


@pytest.mark.parametrize("mode", MODES)
async def test_a_large_spend_is_asked_and_launched_only_on_accept(mode: str, hub: Emulator, monkeypatch) -> None:
    monkeypatch.setenv("HF_TRAIN_CONFIRM_ABOVE_USD", "0.01")
    asked: list[str] = []
    before = len(hub.posted_jobs())
    async with Client(build_server(), mode=mode, elicitation_callback=answering("decline", asked=asked)) as client:
        declined = await client.call_tool("submit_training", BASE)
    assert declined.is_error and "not submitted" in declined.content[0].text
    assert len(hub.posted_jobs()) == before
    assert "can bill at most $" in asked[0] and " on " in asked[0] and "Qwen/Qwen2-0.5B-Instruct" in asked[0]
    async with Client(build_server(), mode=mode, elicitation_callback=answering("accept", {"submit": False})) as client:
        no = await client.call_tool("submit_training", BASE)
    assert no.is_error and len(hub.posted_jobs()) == before
    async with Client(build_server(), mode=mode, elicitation_callback=answering("accept", {"submit": True})) as client:
        yes = await client.call_tool("submit_training", BASE)
    assert not yes.is_error and len(hub.posted_jobs()) == before + 1
    assert yes.structured_content["job_id"]


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_ask_is_governed_by_the_budget_caps_alone(mode: str, hub: Emulator,
                                                                             monkeypatch) -> None:
    monkeypatch.setenv("HF_TRAIN_CONFIRM_ABOVE_USD", "0.01")
    before = len(hub.posted_jobs())
    async with Client(build_server(), mode=mode) as client:  # no elicitation_callback: no capability
        result = await client.call_tool("submit_training", BASE)
    assert not result.is_error and len(hub.posted_jobs()) == before + 1


async def test_a_small_spend_is_not_asked(hub: Emulator, monkeypatch) -> None:
    monkeypatch.setenv("HF_TRAIN_CONFIRM_ABOVE_USD", "1000")
    asked: list[str] = []
    async with Client(build_server(), elicitation_callback=answering("decline", asked=asked)) as client:
        result = await client.call_tool("submit_training", BASE)
    assert not result.is_error and asked == []


async def test_the_finetune_prompt_walks_the_whole_loop() -> None:
    async with Client(build_server()) as client:
        prompt = {p.name: p for p in (await client.list_prompts()).prompts}["finetune"]
        assert [a.name for a in prompt.arguments] == ["model", "dataset", "goal"]
        result = await client.get_prompt("finetune", {"model": "Qwen/Qwen2-0.5B", "dataset": "org/chat",
                                                      "goal": "answer in French"})
    text = result.messages[0].content.text
    for step in ("validate_dataset", "estimate_cost", "submit_training", "hf-train://jobs/", "evaluate", "export"):
        assert step in text
    assert "answer in French" in text


@pytest.mark.parametrize(("arguments", "expected"), [
    ({"hub_model_id": "not a repo"}, "hub_model_id has the wrong shape: send a Hub repo id 'owner/name'"),
    ({"epochs": 0}, "epochs should be greater than 0"),
    ({"max_steps": "many"}, "max_steps should be a whole number"),
    ({"method": "ppo"}, "method should be " + ", ".join(repr(n) for n in methods.NAMES[:-1])
     + f" or {methods.NAMES[-1]!r}"),  # every method of the registry, in words
    ({"lora_r": 8, "peft": "full"}, "lora_* options need peft='lora' or 'qlora'"),
    ({"dataset_split": "train; rm -rf"}, "dataset_split has the wrong shape: send a split name"),
    ({"unknown_option": 1}, "unknown_option is not a parameter"),
])
async def test_argument_errors_say_what_to_send_without_pydantic_text(arguments: dict[str, Any], expected: str) -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("submit_training", {"model": "m", "dataset": "d", **arguments})
    text = result.content[0].text
    assert result.is_error and expected in text, text
    for leak in ("validation error", "pydantic", "For further information", "^[", "\\w", "type=", "input_value"):
        assert leak not in text, text


async def test_a_listener_hears_of_a_job_older_than_the_newest_hundred(hub: Emulator) -> None:
    from dataclasses import replace

    from hf_train_mcp.jobs.ledger import Ledger

    mcp = build_server(watch_interval_s=3600)
    hub.plan_next(JobPlan(scheduling_s=0.5, running_s=30))
    async with Client(mcp) as client:
        job_id = (await client.call_tool("submit_training", BASE)).structured_content["job_id"]
        ledger = Ledger()
        mine = ledger.get(job_id)
        for i in range(120):  # newer jobs, all finished: the listened one is far below the newest hundred
            ledger.record(replace(mine, job_id=f"newer-{i}", created_at=f"2999-01-01T00:00:{i % 60:02d}Z",
                                  idempotency_key=None, stage="COMPLETED", finished_at="2999-01-02T00:00:00Z"))
        await hears_the_update(client, mcp, job_id)
        await until(lambda: not mcp.watcher._watched(), limit=5)  # the stream closed: nothing is watched any more
