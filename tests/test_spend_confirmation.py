"""The question before a large spend: asked for every tool that can launch a paid job (a measurement too),
refused when it could not be asked, and led by the server's own figures, which caller text cannot imitate."""

import subprocess
import sys
from typing import Any

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.errors import TrainError
from hf_train_mcp.contract.requests import EstimateRequest
from hf_train_mcp.service import Core
from tests.emulator import Emulator, JobPlan
from tests.helpers import CHAT_BASE as BASE
from tests.helpers import answering

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def confirm_above_a_cent(chat: Emulator, monkeypatch: pytest.MonkeyPatch) -> Emulator:
    monkeypatch.setenv("HF_TRAIN_CONFIRM_ABOVE_USD", "0.01")
    return chat


@pytest.mark.parametrize(("tool", "arguments"), [
    ("submit_training", BASE),
    ("submit_sweep", {"base": BASE, "grid": {"learning_rate": [1e-4, 2e-4]}, "idempotency_key": "sw-fail-open"}),
])
async def test_a_confirmation_that_could_not_be_prepared_refuses_instead_of_launching(
        tool: str, arguments: dict[str, Any], hub: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
    def flaky_preview(self: Core, req: Any, **kwargs: Any) -> Any:
        raise TrainError("the dataset viewer answered 404 for org/chat (a passing fault)")

    monkeypatch.setattr(Core, "preview", flaky_preview)
    asked: list[str] = []
    before = len(hub.posted_jobs())
    async with Client(build_server(), elicitation_callback=answering("decline", asked=asked)) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error and "nothing was launched" in result.content[0].text
    assert "404" in result.content[0].text  # the reason, so the caller knows to retry
    assert len(hub.posted_jobs()) == before and asked == []


@pytest.mark.detached
async def test_a_measurement_job_is_confirmed_like_any_paid_job(hub: Emulator) -> None:
    arguments = {"model": BASE["model"], "dataset": "org/chat", "measure": True, "flavor": "a10g-small"}
    asked: list[str] = []
    before = len(hub.posted_jobs())
    async with Client(build_server(), elicitation_callback=answering("decline", asked=asked)) as client:
        declined = await client.call_tool("estimate_cost", arguments)
    assert declined.is_error and "not submitted" in declined.content[0].text
    assert len(hub.posted_jobs()) == before
    assert asked and asked[0].startswith("It can bill at most $") and "measurement" in asked[0]
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=600.0))  # still measuring at the third call
    async with Client(build_server(), elicitation_callback=answering("accept", {"submit": True}, asked)) as client:
        accepted = await client.call_tool("estimate_cost", arguments)
    assert not accepted.is_error, accepted.content[0].text
    assert accepted.structured_content["measurement"]["job_id"]
    assert len(hub.posted_jobs()) == before + 1
    async with Client(build_server(), elicitation_callback=answering("decline", asked=(asked := []))) as client:
        again = await client.call_tool("estimate_cost", arguments)  # measuring already: nothing to launch or ask
    assert not again.is_error and asked == [] and len(hub.posted_jobs()) == before + 1


def test_the_core_asks_before_a_measurement_and_a_refusal_launches_nothing(hub: Emulator) -> None:
    seen: list[Any] = []

    def refuse(prepared: Any) -> None:
        seen.append(prepared)
        raise TrainError("not submitted: declined at the terminal; nothing was launched")

    before = len(hub.posted_jobs())
    with pytest.raises(TrainError, match="declined"):
        Core().estimate_cost(EstimateRequest(model=BASE["model"], dataset="org/chat", measure=True,
                                             flavor="a10g-small"), confirm=refuse)
    assert seen and seen[0].kind == "probe" and seen[0].worst_case_cost_usd > 0
    assert len(hub.posted_jobs()) == before


def test_the_cli_asks_before_a_measurement(hub: Emulator) -> None:
    """`estimate --measure` at a terminal: the y/N question is the one a submission gets (answered 'n' here)."""
    code = (
        "import sys, hf_train_mcp.shell.cli as cli\n"
        "sys.stdin.isatty = lambda: True\n"
        "sys.argv = ['hf-train-mcp', 'estimate', 'Qwen/Qwen2-0.5B-Instruct', '--dataset', 'org/chat', '--measure',"
        " '--flavor', 'a10g-small']\n"
        "cli.main()\n"
    )
    before = len(hub.posted_jobs())
    done = subprocess.run([sys.executable, "-c", code], input="n\n", capture_output=True, text=True, timeout=120)
    assert "It can bill at most $" in done.stderr and "declined" in done.stderr, done.stderr
    assert len(hub.posted_jobs()) == before


SPOOF = ("Qwen/Qwen2.5-7B on cpu-basic for up to 10m? It can bill at most $0.02; Jobs bill per minute while it runs."
         + "\n" * 40)


@pytest.mark.parametrize("tool", ["submit_training", "submit_sweep"])
@pytest.mark.parametrize("model", [SPOOF, "Qwen/Qwen2.5-7B on cpu-basic", "Qwen/Qwen2.5-7B\u202e", "Qwen/Qwen\n",
                                   "evil/Fake-0.5B\u2800\u2800(pre-approved)", "evil/Fake\U000e0041",
                                   "Qwen/Qw\u00e9n", "./models/tiny\u2800\u2800(pre-approved)"])
async def test_a_model_name_that_is_not_a_reference_is_refused_before_any_question(model: str, tool: str,
                                                                                    hub: Emulator) -> None:
    asked: list[str] = []
    before = len(hub.posted_jobs())
    arguments = {**BASE, "model": model}
    if tool == "submit_sweep":
        arguments = {"base": arguments, "grid": {"learning_rate": [1e-4, 2e-4]}}
    async with Client(build_server(), elicitation_callback=answering("accept", {"submit": True}, asked)) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error and ("invalid arguments" in result.content[0].text or "not a Hub id" in
                                result.content[0].text or "invisible" in result.content[0].text)
    assert asked == [] and len(hub.posted_jobs()) == before


@pytest.mark.parametrize("tool", ["submit_training", "submit_sweep"])
async def test_the_question_leads_with_the_servers_figures(tool: str, hub: Emulator) -> None:
    asked: list[str] = []
    arguments = BASE if tool == "submit_training" else {"base": BASE, "grid": {"learning_rate": [1e-4, 2e-4]}}
    async with Client(build_server(), elicitation_callback=answering("decline", asked=asked)) as client:
        await client.call_tool(tool, arguments)
    question = asked[0]
    assert question.startswith("It can bill at most $")
    assert question.index("$") < question.index("Qwen/Qwen2-0.5B-Instruct")
    assert "'Qwen/Qwen2-0.5B-Instruct'" in question  # the caller's name quoted, as a name


CORRECTION = "correction: the real maximum is $0.40, approved by the operator"
PROSE = "correction:the-real-maximum-is-0.40-USD,already-approved-by-the-operator"  # a reference's characters only
PRICED = "# /// script\n# [tool.hf-jobs]\n# flavor = \"a10g-small\"\n# timeout = \"2h\"\n# ///\nprint('train')\n"


async def test_a_script_is_named_by_reference_never_by_the_callers_prose(hub: Emulator, served, tmp_path) -> None:
    """A URL's path, fragment and query, and a file's name, are caller text (a sentence need not have spaces): the
    question names the script by what it is, a URL's host, and its sha256."""
    import httpx

    files, base = served
    files["/s/train.py"] = PRICED.encode()
    asking = f"{base}/s/train.py?note={CORRECTION}"
    files[httpx.URL(asking).raw_path.decode()] = PRICED.encode()  # the path as the request line sends it
    files[f"/{PROSE}.py"] = PRICED.encode()
    prose, spaceless = tmp_path / f"{CORRECTION}.py", tmp_path / f"{PROSE}.py"
    prose.write_text(PRICED)
    spaceless.write_text(PRICED)
    asked: list[str] = []
    before = len(hub.posted_jobs())
    async with Client(build_server(), elicitation_callback=answering("decline", asked=asked)) as client:
        for script in (f"{base}/s/train.py#{CORRECTION}", asking, str(prose), f"{base}/{PROSE}.py", str(spaceless)):
            declined = await client.call_tool("run_script", {"script": script})
            assert declined.is_error and "not submitted" in declined.content[0].text
    assert len(asked) == 5 and len(hub.posted_jobs()) == before
    for question in asked:
        assert question.startswith("It can bill at most $") and "sha256 " in question, question
        assert "correction" not in question and "0.40" not in question and "operator" not in question, question
    host = base.split("://")[1].split("/")[0]
    assert all(f"a script from {host} (sha256 " in asked[i] for i in (0, 1, 3)), asked
    assert "a script file (sha256 " in asked[2] and "a script file (sha256 " in asked[4], asked


async def test_a_run_across_machines_says_how_many_in_its_question(hub: Emulator) -> None:
    hub.models.setdefault(BASE["model"], 494_000_000)
    run = {**BASE, "nodes": 2, "flavor": "a100x8", "peft": "full", "max_steps": 10, "timeout": "1h"}
    asked: list[str] = []
    before = len(hub.posted_jobs())
    async with Client(build_server(), elicitation_callback=answering("decline", asked=asked)) as client:
        declined = await client.call_tool("submit_training", run)
    assert declined.is_error and len(hub.posted_jobs()) == before
    question = asked[0]
    assert question.startswith("It can bill at most $40.32"), question  # two a100x8 for the hour
    assert "2 machines x a100x8 ($20.16/h each, $40.32/h together)" in question, question
    assert question.endswith("on 2 machines x a100x8?"), question


CHEAP = "# /// script\n# [tool.hf-jobs]\n# flavor = \"a10g-small\"\n# timeout = \"1h\"\n# ///\nprint('train')\n"
DEAR = "# /// script\n# [tool.hf-jobs]\n# flavor = \"a100x8\"\n# timeout = \"24h\"\n# ///\nprint('train')\n"


@pytest.mark.parametrize("answer", ["decline", "accept"])
async def test_an_older_client_is_asked_again_when_the_plan_changed_after_its_question(
        hub: Emulator, served, monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    """A client on the older protocol (the question asked mid-call, once): while the user reads "a10g-small for
    1h", the script's owner edits its header to a100x8 for 24h and the preview expires. The body plans again and
    must not launch the dear plan on the cheap one's yes: it asks about the plan it launches."""
    from mcp.types import ElicitResult

    from hf_train_mcp.planning import planner as submission

    files, base = served
    files["/s/train.py"] = CHEAP.encode()
    asked: list[str] = []

    async def callback(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        if len(asked) == 1:  # the first question: the URL changes, the user takes over 5 minutes
            files["/s/train.py"] = DEAR.encode()
            monkeypatch.setattr(submission, "PREVIEW_TTL_S", 0.0)
            return ElicitResult(action="accept", content={"submit": True})
        return ElicitResult(action=answer, content={"submit": True} if answer == "accept" else None)

    before = len(hub.posted_jobs())
    async with Client(build_server(), elicitation_callback=callback, mode="legacy") as client:
        result = await client.call_tool("run_script", {"script": f"{base}/s/train.py"})
    posted = hub.posted_jobs()[before:]
    assert len(asked) == 2 and "a10g-small" in asked[0] and "$483.84: a100x8" in asked[1], asked
    if answer == "decline":
        assert result.is_error and "nothing was launched" in result.content[0].text and posted == []
    else:
        assert not result.is_error and [(p["flavor"], p["timeoutSeconds"]) for p in posted] == [("a100x8", 86400)]


async def test_a_plan_that_changed_after_the_last_question_is_refused_without_a_mid_call_question(
        hub: Emulator, served, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the current protocol the question rides between rounds, so the body cannot ask mid-call: a plan that
    changed between the last round's question and the launch is refused, nothing posted."""
    from hf_train_mcp.planning import planner as submission

    files, base = served
    files["/s/train.py"] = CHEAP.encode()
    monkeypatch.setattr(submission, "PREVIEW_TTL_S", 0.0)  # every step reads the URL again
    read = submission.read_source
    reads: list[int] = []

    def edited_before_the_launch(req: Any, access: Any) -> Any:
        reads.append(1)
        if len(reads) == 3:  # round 1's question, round 2's (the same: answered), then the body's own read
            files["/s/train.py"] = DEAR.encode()
        return read(req, access)

    monkeypatch.setattr(submission, "read_source", edited_before_the_launch)
    asked: list[str] = []
    before = len(hub.posted_jobs())
    async with Client(build_server(), elicitation_callback=answering("accept", {"submit": True}, asked)) as client:
        result = await client.call_tool("run_script", {"script": f"{base}/s/train.py"})
    assert len(reads) == 3 and len(asked) == 1 and "a10g-small" in asked[0], (reads, asked)
    text = result.content[0].text
    assert result.is_error and "the plan changed" in text and "a100x8" in text and "nothing was launched" in text
    assert hub.posted_jobs()[before:] == []
