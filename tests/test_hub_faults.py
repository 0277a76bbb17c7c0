"""The Hub as it really behaves: intermittent 5xx and 429s, hangs, dropped log streams, 402, scarce hardware,
and a server killed mid-submission. Each test injects the fault into the emulator and checks the tool's answer
and how many requests it took."""

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from mcp import Client

from hf_train_mcp.hub import READ_DEADLINE_S as PRODUCTION_READ_DEADLINE_S  # before a fixture shortens it
from hf_train_mcp.shell.app import build_server
from tests.emulator import Emulator, JobPlan
from tests.helpers import CHAT_BASE as BASE
from tests.helpers import call_once as call
from tests.helpers import job_record

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("chat", "quick_log_reads")]

INSPECT = r"/api/jobs/emu-user/[0-9a-f]{24}"


async def submitted(hub: Emulator, plan: JobPlan | None = None) -> str:
    if plan:
        hub.plan_next(plan)
    result = await call("submit_training", BASE)
    assert not result.is_error, result.content[0].text
    return result.structured_content["job_id"]


@pytest.mark.parametrize(("status", "times", "headers"), [(503, 1, {}), (502, 2, {}), (429, 1, {"Retry-After": "1"})])
async def test_job_status_rides_out_transient_hub_errors(status: int, times: int, headers: dict, hub: Emulator) -> None:
    job_id = await submitted(hub, JobPlan(scheduling_s=0, running_s=0.1))
    hub.advance(0.3)  # the job has ended
    before = hub.count("GET", INSPECT)
    hub.fail_next("GET", INSPECT, status, count=times, headers=headers)
    started = time.monotonic()
    result = await call("job_status", {"job_id": job_id})
    took = time.monotonic() - started
    assert not result.is_error, result.content[0].text
    assert result.structured_content["stage"] == "COMPLETED" and not result.structured_content["stale"]
    assert hub.count("GET", INSPECT) - before == times + 1
    if headers:
        assert took >= 1.0  # it waited as the Hub asked


@pytest.mark.detached
@pytest.mark.usefixtures("quick_hub_reads")
async def test_a_hanging_hub_gets_the_last_known_state_within_ten_seconds(hub: Emulator) -> None:
    job_id = await submitted(hub, JobPlan(scheduling_s=0, running_s=60))
    hub.fail_next("GET", INSPECT, None, hang=12, count=3)
    hub.fail_next("GET", r"/api/jobs/emu-user/[0-9a-f]{24}", None, hang=12, count=3)
    started = time.monotonic()
    status = await call("job_status", {"job_id": job_id})
    listed = await call("list_jobs", {})
    assert time.monotonic() - started < 16  # two tools, each under ten seconds
    report = status.structured_content
    assert report["stale"], json.dumps(report)[:1500]
    assert report["stale"] and report["stage"] in ("SCHEDULING", "RUNNING") and "did not answer" in report["next_step"]
    assert [j["stale"] for j in listed.structured_content["jobs"]] == [True]
    assert PRODUCTION_READ_DEADLINE_S < 8  # production's bound (quick_hub_reads shortens it): two tools under 16 s


async def test_no_credits_is_a_billing_answer_and_is_not_retried(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    hub.fail_next("POST", r"/api/jobs/emu-user", 402)
    result = await call("submit_training", BASE)
    assert result.is_error and "settings/billing" in result.content[0].text
    assert "or send backend='local'; nothing was launched" in result.content[0].text  # the backend's own words
    assert len(hub.posted_jobs()) == before + 1  # one POST: a 402 will not change by retrying


async def test_a_token_without_the_scope_gets_a_scope_answer(hub: Emulator) -> None:
    hub.fail_next("POST", r"/api/jobs/emu-user", 403)
    result = await call("submit_training", BASE)
    assert result.is_error and "'jobs' and 'repo write' permissions" in result.content[0].text


async def test_a_job_the_hub_no_longer_has_is_reported_gone(hub: Emulator) -> None:
    job_id = await submitted(hub)
    hub.jobs.pop(job_id)
    report = (await call("job_status", {"job_id": job_id})).structured_content
    assert report["stage"] == "DELETED" and "no longer exists" in report["next_step"], report


async def test_a_dropped_log_stream_returns_what_was_read_and_says_so(hub: Emulator) -> None:
    lines = [f"HFTM_LOG {{\"step\": {i}, \"total_steps\": 10, \"loss\": 1.0}}" for i in range(1, 6)]
    job_id = await submitted(hub, JobPlan(scheduling_s=0, running_s=0.1, log_lines=lines, drop_logs_after=2))
    hub.advance(0.3)  # the job has ended
    report = (await call("job_status", {"job_id": job_id})).structured_content
    assert report["log_tail"] == lines[:2] and report["progress"]["step"] == 2
    assert "broke off" in report["next_step"]
    page = (await call("job_logs", {"job_id": job_id})).structured_content
    assert page["lines"] == lines[:2] and not page["finished"] and "broke off" in page["note"]


async def test_a_finished_job_is_answered_from_the_ledger_without_asking_the_hub_again(hub: Emulator) -> None:
    lines = [f"HFTM_LOG {{\"step\": {i}, \"total_steps\": 3, \"loss\": {1 - i / 10}}}" for i in range(1, 4)]
    lines.append("HFTM_DONE {}")  # the log is known to be whole
    job_id = await submitted(hub, JobPlan(scheduling_s=0, running_s=0.1, log_lines=lines))
    hub.advance(0.3)  # the job has ended
    logs = rf"{INSPECT}/logs"
    async with Client(build_server()) as client:  # one server: its first look settles the job
        first = (await client.call_tool("job_status", {"job_id": job_id})).structured_content
        inspects, reads = hub.count("GET", INSPECT), hub.count("GET", logs)
        hub.fail_next("GET", INSPECT, None, hang=12, count=5)  # a Hub that would now stall every call
        hub.fail_next("GET", logs, None, hang=12, count=5)
        started = time.monotonic()
        again = (await client.call_tool("job_status", {"job_id": job_id})).structured_content
        assert time.monotonic() - started < 1
    assert first["stage"] == again["stage"] == "COMPLETED" and not again["stale"]
    assert again["progress"]["step"] == 3 and again["last_metrics"]["loss"] == pytest.approx(0.7)
    assert again["started_at"] == first["started_at"] and again["finished_at"] == first["finished_at"]
    assert (hub.count("GET", INSPECT), hub.count("GET", logs)) == (inspects, reads)
    with hub.lock:
        hub.faults.clear()


async def test_a_finished_jobs_log_is_read_again_until_it_holds_its_last_line(hub: Emulator) -> None:
    lines = ['HFTM_LOG {"step": 1, "total_steps": 3, "loss": 1.0}']  # the Hub's log can lag the job's stage
    job_id = await submitted(hub, JobPlan(scheduling_s=0, running_s=0.1, log_lines=lines))
    hub.advance(0.3)  # the job has ended
    logs = rf"{INSPECT}/logs"
    async with Client(build_server()) as client:
        await client.call_tool("job_status", {"job_id": job_id})
        reads = hub.count("GET", logs)
        await client.call_tool("job_status", {"job_id": job_id})
    assert hub.count("GET", logs) == reads + 1


async def test_a_recovered_job_that_already_ended_is_inspected_once_for_its_times_and_message(hub: Emulator) -> None:
    from hf_train_mcp.jobs.ledger import Ledger

    job_id = await submitted(hub, JobPlan(scheduling_s=0, running_s=0.1, final_stage="ERROR",
                                          message="CUDA out of memory"))
    hub.advance(0.3)  # the job has ended
    ledger = Ledger()
    ledger.update_stage(job_id, "ERROR")  # as crash recovery records it: the stage, no times or message
    before = hub.count("GET", INSPECT)
    report = (await call("job_status", {"job_id": job_id})).structured_content
    assert report["finished_at"] and report["started_at"] and "out of memory" in report["error"]
    assert hub.count("GET", INSPECT) == before + 1
    assert ledger.get(job_id).finished_at and ledger.get(job_id).message == "CUDA out of memory"
    await call("job_status", {"job_id": job_id})
    assert hub.count("GET", INSPECT) == before + 1  # settled now: the ledger answers


async def test_a_long_scheduling_wait_names_other_flavors(hub: Emulator, monkeypatch) -> None:
    from hf_train_mcp.jobs import following

    job_id = await submitted(hub, JobPlan(scheduling_s=3600))
    monkeypatch.setattr(following, "SCHEDULING_ALERT_MIN", 0)
    report = (await call("job_status", {"job_id": job_id})).structured_content
    assert report["stage"] == "SCHEDULING" and "may be scarce" in report["next_step"]
    assert "flavor that fits, e.g." in report["next_step"]


async def test_validation_rides_out_a_viewer_503(hub: Emulator) -> None:
    before = hub.count("GET", "/first-rows")
    hub.fail_next("GET", "/first-rows", 503)
    report = (await call("validate_dataset", {"dataset": "org/chat"})).structured_content
    assert report["valid"] and hub.count("GET", "/first-rows") - before == 2


async def test_offline_validation_and_estimates_fail_fast_and_say_what_they_assumed(offline) -> None:
    started = time.monotonic()
    rows = "\n".join('{"text": "hello world"}' for _ in range(5))
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.write(rows + "\n")
    report = (await call("validate_dataset", {"dataset": f.name, "model": "Qwen/Qwen2.5-0.5B"})).structured_content
    estimate = (await call("estimate_cost", {"model": "Qwen/Qwen2.5-0.5B", "num_examples": 100})).structured_content
    assert time.monotonic() - started < 10
    assert report["token_stats"] is None
    assert any("no token statistics" in i["message"] and "no connection" in i["message"] for i in report["issues"])
    assert any("model size taken from its model name" in w for w in estimate["warnings"])
    assert any("built-in table" in w for w in estimate["warnings"])


KILLER = """
import os, signal, sys
from hf_train_mcp.backends import hf_jobs
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.service import Core
post = hf_jobs.HfJobsBackend.submit

def post_then_die(self, script, spec):
    post(self, script, spec)
    os.kill(os.getpid(), signal.SIGKILL)  # after the POST, before the ledger write

hf_jobs.HfJobsBackend.submit = post_then_die
Core().submit_training(TrainingRequest(model=sys.argv[1], dataset="org/chat", hub_model_id="emu-user/out",
                                       max_steps=5, idempotency_key="killed"))
"""


async def test_a_server_killed_between_post_and_ledger_write_finds_its_job_on_the_next_call(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    proc = subprocess.run([sys.executable, "-c", KILLER, BASE["model"]], env=dict(os.environ), timeout=120,
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert len(hub.posted_jobs()) == before + 1
    posted = next(j for j in hub.jobs.values() if j.spec == hub.posted_jobs()[-1])
    again = await call("submit_training", {**BASE, "idempotency_key": "killed"})  # the agent retries at once
    assert again.structured_content["job_id"] == posted.id and len(hub.posted_jobs()) == before + 1
    listed = (await call("list_jobs", {})).structured_content["jobs"]
    assert [j["job_id"] for j in listed] == [posted.id]


@pytest.mark.detached
@pytest.mark.usefixtures("quick_hub_reads")
async def test_a_submission_of_unknown_outcome_keeps_its_key_so_a_retry_cannot_launch_twice(hub: Emulator) -> None:
    before = len(hub.posted_jobs())
    hub.fail_next("POST", r"/api/jobs/emu-user", 500, count=3, after=True)  # created, but the answer is lost
    hub.fail_next("GET", r"/api/jobs/emu-user", 503, count=50)  # and the job list cannot be read
    first = await call("submit_training", {**BASE, "idempotency_key": "unsure"})
    assert first.is_error and "keeps looking for it" in first.content[0].text
    assert "submission=" not in first.content[0].text  # no internal label passes for something to look up
    retry = await call("submit_training", {**BASE, "idempotency_key": "unsure"})
    assert retry.is_error and "in progress" in retry.content[0].text
    assert len(hub.posted_jobs()) == before + 1


def test_two_recoveries_of_one_job_record_it_once(isolated_home) -> None:
    from dataclasses import replace

    from hf_train_mcp.jobs.ledger import SUBMITTING, Ledger

    ledger = Ledger()
    entry = job_record(SUBMITTING + "abc")
    ledger.journal(entry)
    job = replace(entry, job_id="job-1")
    assert ledger.record(job, journal=entry.job_id)
    assert ledger.record(job, journal=entry.job_id)  # the second finder: no UNIQUE error, nothing doubled
    assert [r.job_id for r in ledger.list()] == ["job-1"] and ledger.submissions() == []


@pytest.fixture
def short_client_timeout() -> Any:
    """huggingface_hub's client times out after 1.5 s instead of 30 s (the shared client is rebuilt with it)."""
    from huggingface_hub.utils import close_session

    from hf_train_mcp import hub as hub_module

    hub_module.install_timeouts()
    original = hub_module.REQUEST_TIMEOUT_S
    hub_module.REQUEST_TIMEOUT_S = 1.5
    close_session()  # the next request builds the client, with the short timeout
    yield
    hub_module.REQUEST_TIMEOUT_S = original
    close_session()


async def test_a_post_slower_than_the_client_timeout_is_found_not_posted_twice(hub: Emulator, short_client_timeout,
                                                                              monkeypatch) -> None:
    from hf_train_mcp.backends import hf_jobs

    monkeypatch.setattr(hf_jobs, "POST_SETTLE_S", 10.0)  # 60 s in production: a 34 s POST was seen
    monkeypatch.setattr(hf_jobs, "SETTLE_POLL_S", 0.2)
    before = len(hub.posted_jobs())
    hub.fail_next("POST", r"/api/jobs/emu-user", None, hang=3)  # created 3 s in, after the client gave up
    result = await call("submit_training", BASE)
    assert not result.is_error, result.content[0].text
    assert len(hub.posted_jobs()) == before + 1  # looked for its label until the Hub had it, never posted again
    job_id = result.structured_content["job_id"]
    label = hub.jobs[job_id].spec["labels"]["submission"]
    assert [j.id for j in hub.jobs.values() if j.spec["labels"].get("submission") == label] == [job_id]
    listed = (await call("list_jobs", {})).structured_content["jobs"]
    assert [j["job_id"] for j in listed] == [job_id]


@pytest.fixture
def late_posts(hub: Emulator, short_client_timeout, monkeypatch) -> list[str]:
    """A POST is watched for 0.5 s after the client's 1.5 s timeout (30 s and 60 s in production), then posted
    again; the watcher a doubted job gets is noted, not started (a look here does what its rounds do)."""
    from hf_train_mcp.jobs import node_ranks
    from hf_train_mcp.backends import hf_jobs

    monkeypatch.setattr(hf_jobs, "POST_SETTLE_S", 0.5)
    monkeypatch.setattr(hf_jobs, "SETTLE_POLL_S", 0.1)
    monkeypatch.setattr(hf_jobs, "RETRY_BACKOFF_S", 0.1)
    watched: list[str] = []
    monkeypatch.setattr(node_ranks, "ensure_watched", lambda job: watched.append(job.job_id))
    return watched


def made(hub: Emulator, count: int, **labels: str) -> list:
    """The jobs with these labels, once the Hub has made `count` of them (a hung POST makes its job late)."""
    deadline = time.monotonic() + 15
    while len(hub.labeled(**labels)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return hub.labeled(**labels)


@pytest.mark.detached
@pytest.mark.parametrize("then", ["job_status", "cancel_job", "watcher"])
async def test_a_post_answered_after_the_second_post_leaves_one_job_billing(hub: Emulator, late_posts: list[str],
                                                                          then: str, monkeypatch) -> None:
    """The first POST makes its job 4 s in: after the client's timeout, the watch for its label and the second
    POST. The Hub then holds two jobs of one submission; the next look (job_status, what the job's watcher does)
    or cancel_job finds the late one by the label, records it as a copy and cancels it."""
    from hf_train_mcp.jobs.ledger import Ledger

    for _ in range(2):
        hub.plan_next(JobPlan(scheduling_s=0, running_s=600))
    before = len(hub.posted_jobs())
    hub.fail_next("POST", r"/api/jobs/emu-user", None, hang=4)
    result = await call("submit_training", BASE)
    assert not result.is_error, result.content[0].text
    job_id = result.structured_content["job_id"]
    assert len(hub.posted_jobs()) == before + 2  # the first POST had no answer, nor its job after the watch
    copies = made(hub, 2, submission=hub.jobs[job_id].spec["labels"]["submission"])
    late = [j.id for j in copies if j.id != job_id]
    assert len(late) == 1 and late_posts == [job_id]  # two jobs, and the one kept is watched for copies
    if then == "watcher":  # one round of the detached watcher (node_watcher.py), in this process
        from hf_train_mcp.jobs import duplicates
        from hf_train_mcp.jobs import node_ranks
        from hf_train_mcp.service import Core

        assert node_ranks.watch_once(Core(), job_id)  # a copy may appear for LATE_JOB_MIN: it watches on
        monkeypatch.setattr(duplicates, "LATE_JOB_MIN", 0.0)
        assert not node_ranks.watch_once(Core(), job_id)  # then it ends
    else:
        answer = await call(then, {"job_id": job_id})
        assert not answer.is_error, answer.content[0].text
        assert then == "job_status" or late[0] in answer.structured_content["message"]
    assert hub.billing(copies) == ([] if then == "cancel_job" else [job_id])
    copy = Ledger().get(late[0])  # recorded, under the job it copies, and never listed as a job of its own
    assert (copy.kind, copy.parent_job_id, copy.stage) == ("copy", job_id, "CANCELED")
    assert [j["job_id"] for j in (await call("list_jobs", {})).structured_content["jobs"]] == [job_id]


@pytest.mark.detached
async def test_a_nodes_post_answered_late_leaves_one_job_per_node(hub: Emulator, late_posts: list[str]) -> None:
    """Rank 1's first POST makes its job after the second POST made another: two rank-1 jobs under alias node1.
    A look at the run cancels the copy; cancel_job then stops every job of the run."""
    hub.models.setdefault("Qwen/Qwen2-0.5B-Instruct", 494_000_000)
    for _ in range(3):
        hub.plan_next(JobPlan(scheduling_s=0, running_s=600))
    before = len(hub.posted_jobs())
    hub.fail_next("POST", r"/api/jobs/emu-user", None, hang=10, skip=1)  # rank 0 posted, rank 1's first POST hangs
    run = await call("submit_training", {**BASE, "nodes": 2, "flavor": "a100x8", "peft": "full", "timeout": "1h"})
    assert not run.is_error, run.content[0].text
    run_id, node1 = run.structured_content["node_job_ids"]
    assert len(hub.posted_jobs()) == before + 3
    group = hub.jobs[run_id].spec["network"]["group"]
    made(hub, 2, submission=hub.jobs[node1].spec["labels"]["submission"])
    jobs = hub.in_group(group)
    assert sorted(j.spec["network"]["aliases"][0] for j in jobs) == ["node0", "node1", "node1"]
    assert late_posts == [run_id]  # the run's watcher
    report = (await call("job_status", {"job_id": run_id})).structured_content
    assert sorted(hub.billing(jobs)) == sorted([run_id, node1]) and [n["job_id"] for n in report["nodes"]] == [
        run_id, node1]
    canceled = (await call("cancel_job", {"job_id": run_id})).structured_content
    assert hub.billing(jobs) == [] and canceled["stage"] == "CANCELED"


@pytest.mark.detached
async def test_the_last_post_unanswered_keeps_its_journal_and_key_until_its_job_is_found(
        hub: Emulator, late_posts: list[str], monkeypatch) -> None:
    """Two POSTs answered 503 (no job), then a third that hangs past the client's timeout and makes its job 4 s
    in, after every look for its label. Whether a job exists cannot be told: the answer says so (never "retry
    later"), its journal stays UNKNOWN, the key stays held and a watcher looks it up; once the Hub shows the job,
    the watcher's round records it, and a retry with the key returns it without a second POST."""
    from hf_train_mcp.jobs import launcher as launching
    from hf_train_mcp.jobs import node_ranks
    from hf_train_mcp.jobs.ledger import PENDING, UNKNOWN, Ledger
    from hf_train_mcp.service import Core

    monkeypatch.setattr(launching, "RECOVERY_RETRY_S", 0.0)  # the watcher's rounds, without the minute between
    hub.plan_next(JobPlan(scheduling_s=0, running_s=600))
    before = len(hub.posted_jobs())
    hub.fail_next("POST", r"/api/jobs/emu-user", 503, count=2)
    hub.fail_next("POST", r"/api/jobs/emu-user", None, hang=4)
    first = await call("submit_training", {**BASE, "idempotency_key": "last-hangs"})
    text = first.content[0].text
    assert first.is_error and "retry later" not in text and "keeps looking for it" in text, text
    [entry] = Ledger().submissions()
    assert entry.stage == UNKNOWN and late_posts == [entry.job_id]  # looked up after this server too
    assert Ledger().by_idempotency_key("last-hangs").job_id == PENDING + "last-hangs"  # the key stays held
    [job] = made(hub, 1, submission=entry.submission)
    assert not node_ranks.watch_once(Core(), entry.job_id)  # one round: found, recorded, the watch over
    assert Ledger().get(job.id).stage == "RUNNING" and Ledger().submissions() == []
    retry = await call("submit_training", {**BASE, "idempotency_key": "last-hangs"})
    assert retry.structured_content["job_id"] == job.id and len(hub.posted_jobs()) == before + 3
    assert [j["job_id"] for j in (await call("list_jobs", {})).structured_content["jobs"]] == [job.id]


@pytest.mark.detached
@pytest.mark.usefixtures("quick_hub_reads")
@pytest.mark.parametrize("job_list", ["readable", "unreadable"])
async def test_a_post_answered_2xx_with_a_body_that_is_no_job_is_looked_up_not_forgotten(
        hub: Emulator, late_posts: list[str], job_list: str) -> None:
    """The Hub made the job but its answer cannot be read (huggingface_hub's JobInfo(**response.json()) fails):
    the job is looked up by its label and recorded; when the list cannot be read either, the outcome is unknown
    (journal and key kept), and nothing is posted twice."""
    from hf_train_mcp.jobs.ledger import UNKNOWN, Ledger

    hub.plan_next(JobPlan(scheduling_s=0, running_s=600))
    before, posts = set(hub.jobs), len(hub.posted_jobs())
    hub.fail_next("POST", r"/api/jobs/emu-user", 200, after=True)  # made; the answer is no job
    if job_list == "unreadable":
        hub.fail_next("GET", r"/api/jobs/emu-user", 503, count=10_000, skip=1)  # after the key's own look
    result = await call("submit_training", {**BASE, "idempotency_key": "k-200"})
    [job] = [hub.jobs[j] for j in set(hub.jobs) - before]
    assert len(hub.posted_jobs()) == posts + 1
    if job_list == "readable":
        assert not result.is_error, result.content[0].text
        assert result.structured_content["job_id"] == job.id and Ledger().get(job.id) is not None
        return
    text = result.content[0].text
    assert result.is_error and "retry later" not in text and "keeps looking for it" in text, text
    [entry] = Ledger().submissions()
    assert entry.stage == UNKNOWN and entry.submission == job.spec["labels"]["submission"]
    assert late_posts == [entry.job_id]


async def test_a_refused_post_says_no_job_was_made_and_frees_the_key(hub: Emulator) -> None:
    """A 400 is the Hub's definite refusal: no job exists, so the journal and the key are let go, and the answer
    says what to do (fix the request), not "retry later"."""
    from hf_train_mcp.jobs.ledger import Ledger

    hub.fail_next("POST", r"/api/jobs/emu-user", 400)
    result = await call("submit_training", {**BASE, "idempotency_key": "refused"})
    text = result.content[0].text
    assert result.is_error and "refused it as sent" in text and "made no job" in text, text
    assert "retry later" not in text
    assert Ledger().submissions() == [] and Ledger().by_idempotency_key("refused") is None
