"""Runs across machines: nodes=N is N Jobs jobs in one network group, started by accelerate's multi-node launcher,
followed, cancelled and billed as one run; a node that fails or never starts stops the others."""

import json
import os
import time

import pytest
from mcp import Client

from hf_train_mcp import multinode, node_runs, node_watcher
from hf_train_mcp.app import build_server
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.planning import DataFacts, Hyper, estimate_node_flavor
from hf_train_mcp.request import TrainingRequest
from tests.emulator import Emulator, JobPlan
from tests.helpers import QWEN_05B, call, refused

pytestmark = pytest.mark.anyio

RUN = {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat", "hub_model_id": "emu-user/qwen-2nodes",
       "nodes": 2, "flavor": "a100x8", "peft": "full", "max_steps": 10, "timeout": "1h"}


@pytest.fixture
def cluster(chat: Emulator, monkeypatch) -> Emulator:
    chat.models.setdefault(RUN["model"], 494_000_000)
    monkeypatch.setattr(node_runs, "ensure_watched", lambda run: None)  # job_status applies the rule here
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
        time.sleep(0.6)
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
        time.sleep(0.3)
        report = await call(client, "job_status", {"job_id": run["job_id"]})
    assert report["stage"] == "ERROR" and "node 1" in report["error"]
    assert "node 1 is ERROR: NCCL timeout" in report["message"] and "every node canceled" in report["message"]
    assert cluster.jobs[run["job_id"]].canceled_at is not None  # rank 0 bills no more


async def test_nodes_that_do_not_all_start_in_time_are_all_cancelled(cluster: Emulator, monkeypatch) -> None:
    monkeypatch.setattr(node_runs, "START_BOUND_MIN", 0.0)
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


async def test_a_node_whose_post_ends_unknown_stops_the_run_and_is_canceled_once_found(cluster: Emulator,
                                                                                     monkeypatch) -> None:
    """Rank 1's POST made its job but got a 500, and the job list could not be read to tell: the run is stopped
    (rank 0 canceled, the watcher started), the error names the run, and once the Hub answers again the next look
    (the watcher's) records node 1 by its label and cancels it. No internal label is ever shown as a job id."""
    from hf_train_mcp import launching
    from hf_train_mcp.ledger import Ledger

    watched = []
    monkeypatch.setattr(node_runs, "ensure_watched", lambda run: watched.append(run.job_id))
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
    monkeypatch.setattr(node_runs, "ensure_watched", lambda run: watched.append(run.job_id))
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


async def test_a_run_whose_server_stopped_between_the_node_posts_is_stopped(cluster: Emulator, monkeypatch) -> None:
    monkeypatch.setattr(node_runs, "post_nodes", lambda *args: [])  # the server died right after rank 0
    monkeypatch.setattr(node_runs, "MISSING_AFTER_MIN", 0.0)
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

    args = multinode.launcher_args(nodes=4, rank=3, gpus=8, full=True)
    parsed = launch_command_parser().parse_args([*args, "/tmp/train.py"])
    assert (parsed.num_machines, parsed.machine_rank, parsed.num_processes) == (4, 3, 32)
    assert parsed.use_fsdp and parsed.main_process_port == multinode.MASTER_PORT
    lora = launch_command_parser().parse_args([*multinode.launcher_args(nodes=2, rank=0, gpus=8, full=False), "x.py"])
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
    pid_file = node_runs.lock_path(run["job_id"]).with_suffix(".pid")
    pid = int(pid_file.read_text())
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.3)
    else:
        raise AssertionError("the watcher did not exit after every node ended")
