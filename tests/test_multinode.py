"""Runs across machines: nodes=N is N Jobs jobs in one network group, started by accelerate's multi-node launcher,
followed, cancelled and billed as one run; a node that fails or never starts stops the others."""

import json
import os
import time

import pytest
from mcp import Client

from hf_train_mcp.nodes import rendezvous
from hf_train_mcp.nodes import rules as multinode

from hf_train_mcp.jobs import node_ranks

from hf_train_mcp.shell import node_supervisor as node_watcher
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.planning.training import DataFacts, Hyper, estimate_node_flavor
from hf_train_mcp.contract.requests import TrainingRequest
from tests.emulator import Emulator, JobPlan
from tests.helpers import QWEN_05B, call, refused

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("quick_log_reads")]

RUN = {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat", "hub_model_id": "emu-user/qwen-2nodes",
       "nodes": 2, "flavor": "a100x8", "peft": "full", "max_steps": 10, "timeout": "1h"}


@pytest.fixture
def cluster(chat: Emulator, monkeypatch) -> Emulator:
    chat.models.setdefault(RUN["model"], 494_000_000)
    monkeypatch.setattr(node_ranks, "ensure_watched", lambda run: None)  # job_status applies the rule here
    return chat


def posted_after(hub: Emulator, before: int) -> list[dict]:
    return hub.posted_jobs()[before:]


def launch_line(spec: dict) -> str:
    return spec["command"][-1]


async def test_a_two_node_run_is_two_jobs_in_one_group_followed_as_one(cluster: Emulator) -> None:
    before = len(cluster.posted_jobs())
    cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=0.4))
    cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=0.4))
    async with Client(build_server()) as client:
        run = await call(client, "submit_training", RUN)
        specs = posted_after(cluster, before)
        assert len(specs) == 2
        groups = {s["network"]["group"] for s in specs}
        assert len(groups) == 1 and [s["network"]["aliases"] for s in specs] == [["node0"], ["node1"]]
        for rank, spec in enumerate(specs):
            line = launch_line(spec)
            assert f"--machine_rank {rank}" in line and "--num_machines 2" in line and "--num_processes 16" in line
            assert "--main_process_ip ${HF_NETWORK_GROUP_PREFIX}node0" in line and "--use_fsdp" in line
            assert set(spec["secrets"]) == {"HF_TOKEN"} and "HF_TOKEN" not in spec["environment"]
            assert spec["environment"]["HFTM_SCRIPT_B64"] == specs[0]["environment"]["HFTM_SCRIPT_B64"]
        assert run["node_job_ids"][0] == run["job_id"] and len(run["node_job_ids"]) == 2
        assert run["worst_case_cost_usd"] == 2 * 20.16  # two a100x8 for the whole hour, at the live price
        report = await call(client, "job_status", {"job_id": run["job_id"]})
        assert [n["rank"] for n in report["nodes"]] == [0, 1]
        listed = await call(client, "list_jobs", {})
        assert [j["job_id"] for j in listed["jobs"]].count(run["job_id"]) == 1
        assert run["node_job_ids"][1] not in [j["job_id"] for j in listed["jobs"]]
        cluster.advance(0.6)  # both nodes have ended
        report = await call(client, "job_status", {"job_id": run["job_id"]})
        assert report["stage"] == "COMPLETED" and {n["stage"] for n in report["nodes"]} == {"COMPLETED"}
        page = await call(client, "job_logs", {"job_id": run["node_job_ids"][1]})  # a node's own log
        assert page["job_id"] == run["node_job_ids"][1]


async def test_cancelling_the_run_cancels_every_node(cluster: Emulator) -> None:
    for _ in range(2):
        cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=60))
    async with Client(build_server()) as client:
        run = await call(client, "submit_training", RUN)
        result = await call(client, "cancel_job", {"job_id": run["job_id"]})
        assert result["stage"] == "CANCELED" and "2 of 2 nodes" in result["message"]
        assert all(cluster.jobs[j].canceled_at for j in run["node_job_ids"])
        report = await call(client, "job_status", {"job_id": run["job_id"]})
    assert report["stage"] == "CANCELED"


async def test_a_failed_node_stops_the_others_and_the_status_says_why(cluster: Emulator) -> None:
    cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=60))
    cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1, final_stage="ERROR", message="NCCL timeout"))
    async with Client(build_server()) as client:
        run = await call(client, "submit_training", RUN)
        cluster.advance(0.3)  # node 1 has failed
        report = await call(client, "job_status", {"job_id": run["job_id"]})
    assert report["stage"] == "ERROR" and "node 1" in report["error"]
    assert "node 1 is ERROR: NCCL timeout" in report["message"] and "every node canceled" in report["message"]
    assert cluster.jobs[run["job_id"]].canceled_at is not None  # rank 0 bills no more


@pytest.mark.detached
async def test_nodes_that_do_not_all_start_in_time_are_all_cancelled(cluster: Emulator, monkeypatch) -> None:
    monkeypatch.setattr(node_ranks, "START_BOUND_MIN", 0.0)
    cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=60))
    cluster.plan_next(JobPlan(scheduling_s=60, running_s=60))  # Jobs has no room for the second machine
    async with Client(build_server()) as client:
        run = await call(client, "submit_training", RUN)
        report = await call(client, "job_status", {"job_id": run["job_id"]})
    assert "did not all start" in report["message"]
    assert all(cluster.jobs[j].canceled_at for j in run["node_job_ids"])


async def test_a_node_that_cannot_be_posted_cancels_the_posted_ones(cluster: Emulator) -> None:
    before = len(cluster.posted_jobs())
    cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=60))
    cluster.fail_next("POST", r"/api/jobs/[^/]+", 400, skip=1)  # rank 0 is posted, rank 1 refused
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**RUN, "idempotency_key": "two-nodes"})
        listed = await call(client, "list_jobs", {})
    assert "node 1 of 2 could not be submitted" in text and "canceled" in text
    group = posted_after(cluster, before)[0]["network"]["group"]
    created = [j for j in cluster.jobs.values() if (j.spec.get("network") or {}).get("group") == group]
    assert [j.spec["network"]["aliases"] for j in created] == [["node0"]]  # the refused node made no job
    assert created[0].canceled_at is not None
    assert listed["jobs"][0]["stage"] == "CANCELED"


@pytest.mark.detached
@pytest.mark.usefixtures("quick_hub_reads")
async def test_a_node_whose_post_ends_unknown_stops_the_run_and_is_canceled_once_found(cluster: Emulator,
                                                                                     monkeypatch) -> None:
    """Rank 1's POST made its job but got a 500, and the job list could not be read to tell: the run is stopped
    (rank 0 canceled, the watcher started), the error names the run, and once the Hub answers again the next look
    (the watcher's) records node 1 by its label and cancels it. No internal label is ever shown as a job id."""
    from hf_train_mcp.jobs import launcher as launching
    from hf_train_mcp.jobs.ledger import Ledger

    watched = []
    monkeypatch.setattr(node_ranks, "ensure_watched", lambda run: watched.append(run.job_id))
    monkeypatch.setattr(launching, "RECOVERY_RETRY_S", 0.0)  # the watcher's rounds, without the minute between
    monkeypatch.setattr(launching, "RECOVERY_SCAN_S", 0.0)
    before = len(cluster.posted_jobs())
    for _ in range(2):
        cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=60))
    cluster.fail_next("POST", r"/api/jobs/emu-user", 500, after=True, skip=1)  # rank 1 made, its answer lost
    cluster.fail_next("GET", r"/api/jobs/emu-user", 503, count=10_000, skip=1)  # the list, after the key's look
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**RUN, "idempotency_key": "unknown-node"})
        run_id = Ledger().by_idempotency_key("unknown-node").job_id
        created = cluster.in_group(posted_after(cluster, before)[0]["network"]["group"])
        assert [j.spec["network"]["aliases"] for j in created] == [["node0"], ["node1"]]  # the Hub made both
        assert f"run {run_id} was stopped" in text and "canceled 1 of 2 nodes (node(s) 0)" in text, text
        assert "submission=" not in text and "watcher" in text
        assert cluster.billing(created) == [created[1].id] and set(watched) == {run_id}
        unknown = await call(client, "job_status", {"job_id": run_id})  # the list still cannot be read
        with cluster.lock:  # the Hub answers again
            cluster.faults.clear()
        found = await call(client, "job_status", {"job_id": run_id})  # what the watcher does every round
    assert unknown["nodes"][1] == {"rank": 1, "job_id": None, "stage": "UNKNOWN"}
    assert "submitting:" not in json.dumps(unknown) and "submitting:" not in json.dumps(found)
    assert found["nodes"][1]["job_id"] == created[1].id and found["stage"] == "CANCELED"
    assert cluster.billing(created) == []  # nothing bills
    assert {j.id for j in created} <= {r.job_id for r in Ledger().children([run_id], "node")} | {run_id}


async def test_a_node_whose_cancel_fails_is_said_and_canceled_on_the_next_look(cluster: Emulator,
                                                                              monkeypatch) -> None:
    """cancel_job of a run whose node 1 refuses the cancel: the answer says which nodes were canceled, which not
    and why, and that the run still runs; each look (the watcher's) tries again until every node is canceled."""
    watched = []
    monkeypatch.setattr(node_ranks, "ensure_watched", lambda run: watched.append(run.job_id))
    for _ in range(2):
        cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=60))
    async with Client(build_server()) as client:
        run = await call(client, "submit_training", RUN)
        rank0, node1 = run["node_job_ids"]
        watched.clear()
        cluster.fail_next("POST", rf"/api/jobs/emu-user/{node1}/cancel", 500, count=2)
        result = await call(client, "cancel_job", {"job_id": rank0})
        still = await call(client, "job_status", {"job_id": rank0})  # its cancel fails once more
        last = await call(client, "job_status", {"job_id": rank0})  # the watcher's next round
    assert result["stage"] == "RUNNING" and "canceled 1 of 2 nodes (node(s) 0)" in result["message"]
    assert "node 1 could not be canceled" in result["message"] and "500" in result["message"], result["message"]
    assert watched == [rank0]  # the run's watcher retries until node 1 is canceled
    assert still["stage"] == "RUNNING" and "every node canceled" not in still["message"]
    assert "node 1 could not be canceled" in still["message"], still["message"]
    assert last["stage"] == "CANCELED" and "every node canceled" in last["message"]
    assert cluster.billing([cluster.jobs[rank0], cluster.jobs[node1]]) == []


async def test_a_retry_with_the_same_key_launches_no_second_run(cluster: Emulator) -> None:
    before = len(cluster.posted_jobs())
    async with Client(build_server()) as client:
        first = await call(client, "submit_training", {**RUN, "idempotency_key": "run-2n"})
        again = await call(client, "submit_training", {**RUN, "idempotency_key": "run-2n"})
    assert again["job_id"] == first["job_id"] and again["node_job_ids"] == first["node_job_ids"]
    assert len(posted_after(cluster, before)) == 2


@pytest.mark.detached
async def test_a_run_whose_server_stopped_between_the_node_posts_is_stopped(cluster: Emulator, monkeypatch) -> None:
    monkeypatch.setattr(node_ranks, "post_nodes", lambda *args: [])  # the server died right after rank 0
    monkeypatch.setattr(node_ranks, "MISSING_AFTER_MIN", 0.0)
    cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=60))
    async with Client(build_server()) as client:
        run = await call(client, "submit_training", RUN)
        report = await call(client, "job_status", {"job_id": run["job_id"]})
    assert "never submitted" in report["message"] and report["nodes"][1]["job_id"] is None
    assert cluster.jobs[run["job_id"]].canceled_at is not None


async def test_the_worst_case_of_every_node_is_checked_before_the_first_post(cluster: Emulator) -> None:
    before = len(cluster.posted_jobs())
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**RUN, "max_cost_usd": 30})
    assert "$40.32" in text and "2 x a100x8" in text and "nothing was submitted" in text
    assert len(posted_after(cluster, before)) == 0


async def test_a_sweep_of_runs_across_nodes_prices_every_node_of_every_run(cluster: Emulator) -> None:
    base = dict(RUN)  # each run pushes to its own <hub_model_id>-<i>
    before = len(cluster.posted_jobs())
    async with Client(build_server()) as client:
        plan = await call(client, "submit_sweep", {"base": base, "grid": {"learning_rate": [1e-5, 2e-5]},
                                                   "dry_run": True})
        text = await refused(client, "submit_sweep", {"base": base, "grid": {"learning_rate": [1e-5, 2e-5]},
                                                      "max_cost_usd": 60})
    assert plan["worst_case_cost_usd"] == pytest.approx(2 * 40.32)  # 2 runs x 2 nodes x 1 h x a100x8
    assert "$80.64" in text and len(posted_after(cluster, before)) == 0


@pytest.mark.parametrize(("extra", "expected"), [
    ({"peft": "qlora"}, "nodes with peft='qlora' is not offered"),
    ({"backend": "local"}, "send backend='hf'"),
    ({"flavor": "a100-large"}, "a100-large has one GPU"),
    ({"flavor": "cpu-upgrade", "nodes": 3}, "cpu-upgrade has no GPU: send a multi-GPU flavor"),  # not 3 CPU jobs
    ({"method": "text-classification", "dataset": "org/chat"}, "applies to the TRL methods"),
    ({"preflight": True}, "run it without nodes"),
    ({"nodes": 1}, "nodes"),
])
async def test_what_cannot_span_nodes_is_refused_and_launches_nothing(cluster: Emulator, extra, expected) -> None:
    before = len(cluster.posted_jobs())
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**RUN, **extra})
    assert expected in text, text
    assert len(posted_after(cluster, before)) == 0


def test_two_nodes_are_never_promised_twice_one_nodes_speed() -> None:
    catalog = fallback_catalog()
    request = dict(model="m", dataset="d", peft="full", max_steps=200, max_length=2048, per_device_batch_size=1)
    one = Hyper.of(TrainingRequest(**request))
    two = Hyper.of(TrainingRequest(**request, nodes=2))
    seven_b = QWEN_05B.__class__(**{**QWEN_05B.__dict__, "params": 7_600_000_000, "layers": 28, "hidden": 3584})
    flavor = catalog.flavors["a100x8"]
    data = DataFacts(num_rows=100_000, mean_tokens=2048)
    single = estimate_node_flavor(one, seven_b, flavor, data)
    double = estimate_node_flavor(two, seven_b, flavor, data)
    assert double.train_seconds > single.train_seconds / 2  # the network between machines costs time
    assert double.memory.gb < single.memory.gb  # FSDP shards the weights and optimizer over 16 GPUs
    assert double.cost_usd > single.cost_usd * 0.9


def test_the_launcher_arguments_parse_with_accelerates_own_parser() -> None:
    pytest.importorskip("accelerate")
    from accelerate.commands.launch import launch_command_parser

    args = rendezvous.launcher_args(nodes=4, rank=3, gpus=8, full=True)
    parsed = launch_command_parser().parse_args([*args, "/tmp/train.py"])
    assert (parsed.num_machines, parsed.machine_rank, parsed.num_processes) == (4, 3, 32)
    assert parsed.use_fsdp and parsed.main_process_port == rendezvous.MASTER_PORT
    lora = launch_command_parser().parse_args([*rendezvous.launcher_args(nodes=2, rank=0, gpus=8, full=False), "x.py"])
    assert not lora.use_fsdp


def test_the_run_stage_is_decided_by_a_failed_node_then_the_slowest() -> None:
    assert multinode.run_stage(["RUNNING", "ERROR"]) == "ERROR"
    assert multinode.run_stage(["RUNNING", "CANCELED"]) == "CANCELED"
    assert multinode.run_stage(["RUNNING", "SCHEDULING"]) == "SCHEDULING"
    assert multinode.run_stage(["RUNNING", "RUNNING"]) == "RUNNING"
    assert multinode.run_stage(["COMPLETED", "RUNNING"]) == "COMPLETED"


async def test_estimate_cost_prices_every_node(cluster: Emulator) -> None:
    base = {"model": RUN["model"], "peft": "full", "num_examples": 20_000, "flavor": "a100x8"}
    async with Client(build_server()) as client:
        one = await call(client, "estimate_cost", base)
        two = await call(client, "estimate_cost", {**base, "nodes": 2})
    assert two["hours"] > one["hours"] / 2 and two["effective_batch_size"] == 2 * one["effective_batch_size"]
    assert json.dumps(two).count("a100x8") >= 1


@pytest.mark.detached
async def test_the_detached_watcher_stops_the_run_when_no_one_looks(chat: Emulator, monkeypatch) -> None:
    """The watcher is its own process (it outlives the server): a node that fails stops rank 0 without any
    job_status call, and the watcher exits once every node has ended."""
    chat.models.setdefault(RUN["model"], 494_000_000)
    monkeypatch.setenv(node_watcher.POLL_ENV, "0.3")
    chat.plan_next(JobPlan(scheduling_s=0.0, running_s=120))
    chat.plan_next(JobPlan(scheduling_s=0.0, running_s=0.2, final_stage="ERROR", message="node lost"))
    async with Client(build_server()) as client:
        run = await call(client, "submit_training", RUN)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and chat.jobs[run["job_id"]].canceled_at is None:
        time.sleep(0.3)
    assert chat.jobs[run["job_id"]].canceled_at is not None, "the watcher did not cancel rank 0"
    pid_file = node_ranks.lock_path(run["job_id"]).with_suffix(".pid")
    pid = int(pid_file.read_text())
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.3)
    else:
        raise AssertionError("the watcher did not exit after every node ended")


@pytest.fixture
def watched(cluster: Emulator, monkeypatch) -> list[str]:
    """The watchers started (noted, not started: a job_status here does what each of their rounds does), with
    crash recovery looking at once instead of every minute."""
    from hf_train_mcp.jobs import launcher as launching

    started: list[str] = []
    monkeypatch.setattr(node_ranks, "ensure_watched", lambda run: started.append(run.job_id))
    monkeypatch.setattr(launching, "RECOVERY_RETRY_S", 0.0)
    monkeypatch.setattr(launching, "RECOVERY_SCAN_S", 0.0)
    return started


@pytest.mark.detached
async def test_a_nodes_last_post_unanswered_stops_the_run_and_its_late_job_is_canceled(
        cluster: Emulator, watched: list[str], monkeypatch) -> None:
    """Node 1's POSTs: two 503s, then one that hangs past the client's timeout and makes its job after every look
    for its label. Its outcome is unknown, not a failure: the run is stopped, node 1's journal stays UNKNOWN, and
    the next look (the run's watcher) records the late job and cancels it."""
    from huggingface_hub.utils import close_session

    from hf_train_mcp import hub as hub_module
    from hf_train_mcp.backends import hf_jobs

    hub_module.install_timeouts()
    monkeypatch.setattr(hub_module, "REQUEST_TIMEOUT_S", 1.5)
    close_session()  # the next request builds the client, with the short timeout
    monkeypatch.setattr(hf_jobs, "POST_SETTLE_S", 0.5)
    monkeypatch.setattr(hf_jobs, "SETTLE_POLL_S", 0.1)
    monkeypatch.setattr(hf_jobs, "RETRY_BACKOFF_S", 0.1)
    for _ in range(2):
        cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=600))
    before = len(cluster.posted_jobs())
    cluster.fail_next("POST", r"/api/jobs/emu-user", 503, count=2, skip=1)  # rank 0 posted; node 1: two 503s
    cluster.fail_next("POST", r"/api/jobs/emu-user", None, hang=4, skip=1)  # ...then a POST that makes it late
    try:
        async with Client(build_server()) as client:
            text = await refused(client, "submit_training", RUN)
            group = posted_after(cluster, before)[0]["network"]["group"]
            run_id = cluster.in_group(group)[0].id
            assert f"run {run_id} was stopped" in text and "may or may not have been created" in text, text
            assert "retry later" not in text
            deadline = time.monotonic() + 15
            while len(cluster.in_group(group)) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            made = cluster.in_group(group)
            assert [j.spec["network"]["aliases"] for j in made] == [["node0"], ["node1"]]
            assert cluster.billing(made) == [made[1].id]  # the late node, billing alone
            report = await call(client, "job_status", {"job_id": run_id})  # what the watcher does each round
    finally:
        close_session()
    assert report["nodes"][1]["job_id"] == made[1].id and report["stage"] == "CANCELED"
    assert cluster.billing(made) == [] and run_id in watched


@pytest.mark.detached
@pytest.mark.usefixtures("quick_hub_reads")
async def test_a_rank0_whose_post_ended_unknown_is_stopped_once_found(cluster: Emulator, watched: list[str]) -> None:
    """Rank 0's POST made its job but was answered 500, and the job list could not be read: the answer names no
    internal label, a watcher looks the submission up, and once the Hub answers the job is recorded as a run
    that was stopped (its other nodes were never posted), canceled, watched, and said so on every later look."""
    from hf_train_mcp.jobs.ledger import Ledger
    from hf_train_mcp.service import Core

    for _ in range(2):
        cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=600))
    cluster.fail_next("POST", r"/api/jobs/emu-user", 500, after=True)  # rank 0 made, its answer lost
    cluster.fail_next("GET", r"/api/jobs/emu-user", 503, count=10_000)  # and the job list unreadable
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**RUN, "idempotency_key": "rank0-unknown"})
        [entry] = Ledger().submissions()
        rank0 = next(j for j in cluster.jobs.values() if j.spec["labels"].get("submission") == entry.submission)
        assert "submission=" not in text and "if it appears it is canceled" in text, text
        assert cluster.billing([rank0]) == [rank0.id] and watched == [entry.job_id]
        with cluster.lock:  # the Hub answers again
            cluster.faults.clear()
        assert not node_ranks.watch_once(Core(), entry.job_id)  # the journal's watcher: one round finds it
        assert cluster.billing([rank0]) == [] and watched[-1] == rank0.id  # canceled, and watched until it ends
        report = await call(client, "job_status", {"job_id": rank0.id})
        again = await call(client, "submit_training", {**RUN, "idempotency_key": "rank0-unknown"})
    assert report["stage"] == "CANCELED" and "its launch did not finish" in report["message"], report["message"]
    assert again["job_id"] == rank0.id and any("the run was stopped" in w for w in again["warnings"])


KILLED_AFTER_RANK0 = """
import os, signal
from hf_train_mcp.jobs import node_ranks
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.service import Core

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # rank 0 posted and recorded; the server dies before node 1

node_ranks.post_nodes = die
Core().submit_training(TrainingRequest(model="Qwen/Qwen2-0.5B-Instruct", dataset="org/chat",
    hub_model_id="emu-user/qwen-2nodes", nodes=2, flavor="a100x8", peft="full", max_steps=10, timeout="1h",
    idempotency_key="killed-run"))
"""


@pytest.mark.detached
async def test_a_run_whose_server_was_killed_before_its_nodes_is_stopped_on_the_keyed_retry(
        cluster: Emulator, watched: list[str]) -> None:
    """The server was killed after recording rank 0 and before posting node 1. Its claim on the run names a dead
    process, so nothing will post node 1: the keyed retry stops the run at once (not 3 minutes later), says so,
    and its watcher is started."""
    import signal
    import subprocess
    import sys

    cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=600))
    before = set(cluster.jobs)
    proc = subprocess.run([sys.executable, "-c", KILLED_AFTER_RANK0], env=dict(os.environ), timeout=120,
                          capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    [rank0] = [cluster.jobs[j] for j in set(cluster.jobs) - before]
    assert cluster.billing([rank0]) == [rank0.id]
    async with Client(build_server()) as client:
        again = await call(client, "submit_training", {**RUN, "idempotency_key": "killed-run"})
    assert again["job_id"] == rank0.id and cluster.billing([rank0]) == [] and watched == [rank0.id]
    assert any("the run was stopped" in w and "never submitted" in w for w in again["warnings"]), again["warnings"]


@pytest.mark.detached
@pytest.mark.parametrize("hub_holds", ["every node", "rank 0 only"])
async def test_a_run_adopted_after_its_ledger_was_lost_adopts_its_nodes(cluster: Emulator, watched: list[str],
                                                                       tmp_path, monkeypatch, hub_holds) -> None:
    """A keyed retry after the ledger was lost finds rank 0 by its key's label, and the other nodes in its network
    group: the run is adopted whole and goes on. Where the Hub holds no job for a node, the run is stopped whole,
    saying that node has no job (never "every node canceled" while one bills)."""
    for _ in range(2):
        cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=600))
    async with Client(build_server()) as client:
        first = await call(client, "submit_training", {**RUN, "idempotency_key": "lost-run"})
    jobs = [cluster.jobs[j] for j in first["node_job_ids"]]
    if hub_holds == "rank 0 only":
        with cluster.lock:
            del cluster.jobs[jobs[1].id]
        jobs = jobs[:1]
    monkeypatch.setenv("HF_TRAIN_HOME", str(tmp_path / "another-home"))  # the ledger lost
    before = len(cluster.posted_jobs())
    async with Client(build_server()) as client:
        again = await call(client, "submit_training", {**RUN, "idempotency_key": "lost-run"})
        report = await call(client, "job_status", {"job_id": again["job_id"]})
    assert len(cluster.posted_jobs()) == before and again["job_id"] == first["job_id"]
    assert watched[-1] == first["job_id"]
    if hub_holds == "every node":
        assert again["node_job_ids"] == first["node_job_ids"] and again["stage"] == "RUNNING"
        assert report["stage"] == "RUNNING" and [n["job_id"] for n in report["nodes"]] == first["node_job_ids"]
        assert sorted(cluster.billing(jobs)) == sorted(first["node_job_ids"])
        return
    assert cluster.billing(jobs) == [] and report["stage"] == "CANCELED"
    assert "node(s) 1 have no job" in report["message"] and "every node canceled" not in report["message"]


@pytest.mark.detached
async def test_a_run_stopped_by_the_server_keeps_its_reason_on_later_looks(cluster: Emulator,
                                                                         watched: list[str]) -> None:
    """Node 2 of 3 is refused (400) and rank 0's first cancel fails: the next look cancels rank 0 and still says
    node 2's refusal, not "node 1 is CANCELED" (the server canceled node 1 itself)."""
    from hf_train_mcp.jobs.ledger import Ledger

    for _ in range(3):
        cluster.plan_next(JobPlan(scheduling_s=0.0, running_s=600))
    before = set(cluster.jobs)
    cluster.fail_next("POST", r"/api/jobs/emu-user", 400, skip=2)  # ranks 0 and 1 posted, rank 2 refused
    cluster.fail_next("POST", r"/api/jobs/emu-user/[0-9a-f]{24}/cancel", 500, count=1)  # rank 0's cancel fails
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**RUN, "nodes": 3, "idempotency_key": "three"})
        made = [cluster.jobs[j] for j in set(cluster.jobs) - before]
        assert "node 2 of 3 could not be submitted" in text and "retry later" not in text, text
        assert len(cluster.billing(made)) == 1  # rank 0, whose cancel failed
        run_id = next(j.id for j in made if j.spec["network"]["aliases"] == ["node0"])
        status = await call(client, "job_status", {"job_id": run_id})
        recorded = Ledger().get(run_id).message  # what every later look starts from
        later = await call(client, "job_status", {"job_id": run_id})
    assert cluster.billing(made) == [] and recorded.startswith("node 2 of 3 could not be submitted"), recorded
    for report in (status, later):
        assert report["message"].startswith("node 2 of 3 could not be submitted"), report["message"]
        assert "node 1 is CANCELED" not in report["message"] and report["stage"] == "CANCELED"
