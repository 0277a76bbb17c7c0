"""Where an HTTP caller may have a job write with the server's token, and send it: the Trackio Space (trackio
hands the token to the Space's own app) only in the token's namespace or its organizations, and a push (training,
export, an evaluated model's card) only to a new repo or one a job of this server pushed to. Over stdio the token's
owner decides, and a warning says what it means. A refusal launches nothing."""

import pytest
from mcp import Client

from hf_train_mcp.access import Access
from hf_train_mcp.shell.app import build_server
from tests.emulator import Emulator, JobPlan
from tests.helpers import CHAT_BASE, call, call_once, finished, script_config

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("dry_run", [True, False])
async def test_an_http_caller_cannot_name_a_trackio_space_outside_the_tokens_namespaces(chat: Emulator,
                                                                                        dry_run: bool) -> None:
    before = len(chat.posted_jobs())
    result = await call_once("submit_training", {**CHAT_BASE, "trackio_space_id": "attacker/space",
                                                 "dry_run": dry_run}, Access.http())
    assert result.is_error and "not in the token's namespace (emu-user)" in result.content[0].text, result.content
    assert "Leave trackio_space_id out" in result.content[0].text and len(chat.posted_jobs()) == before


@pytest.mark.parametrize("space", [None, "emu-user/board", "emu-org/board"])
async def test_the_tokens_own_spaces_and_its_organizations_are_fine(chat: Emulator, space: str | None) -> None:
    result = await call_once("submit_training", {**CHAT_BASE, "dry_run": True,
                                                 **({"trackio_space_id": space} if space else {})}, Access.http())
    assert not result.is_error, result.content[0].text
    assert script_config(result.structured_content["script"])["trackio_space_id"] == (space or "emu-user/trackio")


async def test_over_stdio_a_foreign_space_is_a_warning(chat: Emulator) -> None:
    result = await call_once("submit_training", {**CHAT_BASE, "trackio_space_id": "attacker/space", "dry_run": True})
    assert not result.is_error, result.content[0].text
    assert any("make sure you trust its owner" in w for w in result.structured_content["warnings"])


async def test_an_http_caller_cannot_push_over_an_existing_repo_this_server_never_pushed(chat: Emulator) -> None:
    chat.models["emu-user/prod-model"] = 7_000_000_000  # the operator's own published model
    before = len(chat.posted_jobs())
    over = {**CHAT_BASE, "hub_model_id": "emu-user/prod-model", "private": False}
    for dry_run in (True, False):
        refused = await call_once("submit_training", {**over, "dry_run": dry_run}, Access.http())
        assert refused.is_error and "already exists and no job of this server pushed to it" in refused.content[0].text
        assert "Send another hub_model_id" in refused.content[0].text
    assert len(chat.posted_jobs()) == before
    stdio = await call_once("submit_training", {**over, "dry_run": True})
    assert not stdio.is_error and any("emu-user/prod-model already exists" in w
                                      for w in stdio.structured_content["warnings"])


async def test_a_repo_a_job_of_this_server_pushed_to_may_be_pushed_again(chat: Emulator) -> None:
    http = Access.http()
    chat.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    first = await call_once("submit_training", {**CHAT_BASE, "hub_model_id": "emu-user/mine"}, http)
    assert not first.is_error, first.content[0].text
    chat.models["emu-user/mine"] = 494_000_000  # what the job pushed
    again = await call_once("submit_training", {**CHAT_BASE, "hub_model_id": "emu-user/mine", "dry_run": True}, http)
    assert not again.is_error, again.content[0].text


async def test_a_push_target_that_cannot_be_looked_up_is_refused_over_http(chat: Emulator) -> None:
    before = len(chat.posted_jobs())
    chat.fail_next("GET", r"/api/models/emu-user/out$", 503, count=20)
    result = await call_once("submit_training", CHAT_BASE, Access.http())
    assert result.is_error and "could not check whether emu-user/out exists" in result.content[0].text
    assert len(chat.posted_jobs()) == before


async def test_an_http_export_or_evaluation_does_not_write_to_a_repo_this_server_never_pushed(chat: Emulator
                                                                                             ) -> None:
    chat.models["emu-user/prod-model"] = 494_000_000
    chat.models["emu-user/published"] = 494_000_000
    http = Access.http()
    async with Client(build_server(access=http)) as client:
        chat.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
        job = await call(client, "submit_training", {**CHAT_BASE, "hub_model_id": "emu-user/trained"})
        assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
        chat.models["emu-user/trained"] = 494_000_000
        export = await client.call_tool("export_model", {"model": job["job_id"], "hub_model_id": "emu-user/prod-model",
                                                         "dry_run": True})
        assert export.is_error and "no job of this server pushed to it" in export.content[0].text
        own = await client.call_tool("evaluate_model", {"model": "emu-user/trained", "dataset": "org/chat",
                                                        "split": "train", "dry_run": True})
        other = await client.call_tool("evaluate_model", {"model": "emu-user/published", "dataset": "org/chat",
                                                          "split": "train", "dry_run": True})
    assert not own.is_error and not other.is_error, (own.content, other.content)
    assert script_config(own.structured_content["script"])["card_repo"] == "emu-user/trained"
    assert script_config(other.structured_content["script"])["card_repo"] is None
    assert any("not written to emu-user/published's card" in w for w in other.structured_content["warnings"])
