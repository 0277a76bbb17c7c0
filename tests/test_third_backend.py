"""A third backend, registered by a test alone, gets every job call: nothing outside backends/ names a backend.

The fake runs nothing: it records each call and keeps its jobs in memory. It is registered before the schemas
are built (the tools' `backend` parameter is a Literal of the registry's names), so the scenario runs in a
fresh interpreter. Were the core to open a backend any other way than through backends.open, the fake would
see no call (or its jobs would be asked of the Hub) and the assertions below would fail. A second fake brings its
own price list: it is estimated, planned and billed on its flavors, and both refuse in their own words.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = r'''
import json, sys
from datetime import UTC, datetime

from hf_train_mcp import backends
from hf_train_mcp.backends.base import JobRef, JobState, LogRead, Words
from hf_train_mcp.backends.catalog import GPU_FACTS, Catalog, FlavorInfo

CALLS = []
JOBS = {}


class FakeBackend:
    name = "fake"
    place = "a fake cluster"
    words = Words(job="a fake-cluster job", the_backend="the fake cluster", flavor_kind="fake flavor",
                  catalog="the fake cluster's hardware", instead="backend='priced'",
                  no_nodes="the fake cluster is one machine: send backend='priced', or drop nodes")
    reads_local_paths = True
    bills = False
    chooses_flavor = False
    pushes_to_hub = False
    has_namespace = False
    needs_local_jobs_permission = False
    labels_submissions = True
    output_dir = "output"
    default_timeout_s = 600
    logs_final_when_settled = True
    runs_images = True
    cancel_note = "stopped on the fake cluster"

    def __init__(self, token=None):
        CALLS.append(("open", None))

    @staticmethod
    def flavor(*, cuda):
        return "fake-gpu" if cuda else "fake-cpu"

    @staticmethod
    def catalog(token, *, offline):
        return Catalog({"fake-cpu": FlavorInfo("fake-cpu", None, 0, 0.0)}, "the fake cluster")

    @staticmethod
    def claims(job_id):
        return job_id.startswith("fake-")

    def command(self, spec):
        return ["fake", "run"]

    def _ref(self, job_id):
        job = JOBS[job_id]
        return JobRef(job_id, f"fake://{job_id}", job["stage"], job["created_at"], labels=dict(job["labels"]))

    def submit(self, script, spec):
        job_id = f"fake-{len(JOBS) + 1}"
        JOBS[job_id] = {"stage": "RUNNING", "labels": dict(spec.labels),
                        "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
        CALLS.append(("submit", job_id))
        return self._ref(job_id)

    def find(self, submission, namespace):
        CALLS.append(("find", submission))
        return next((self._ref(j) for j, job in JOBS.items() if job["labels"].get("submission") == submission), None)

    def find_keyed(self, key, namespace):
        CALLS.append(("find_keyed", None))
        return None

    def inspect(self, job_id, namespace):
        CALLS.append(("inspect", job_id))
        return JobState(stage=JOBS[job_id]["stage"], url=f"fake://{job_id}")

    def logs(self, job_id, namespace, *, tail, finished, upto=None):
        CALLS.append(("logs", job_id))
        return LogRead([f"fake log of {job_id}"])

    def cancel(self, job_id, namespace):
        CALLS.append(("cancel", job_id))
        JOBS[job_id]["stage"] = "CANCELED"


# A cluster with a price list of its own, none of whose flavors the Hub has
PRICES = Catalog({"small-l4": FlavorInfo("small-l4", GPU_FACTS["L4"], 1, 0.25, ram_gb=32),
                  "big-h200": FlavorInfo("big-h200", GPU_FACTS["H200"], 1, 9.0, ram_gb=256),
                  "tiny-cpu": FlavorInfo("tiny-cpu", None, 0, 0.02)}, "the priced cluster's list")


class PricedBackend(FakeBackend):
    name = "priced"
    place = "a priced cluster"
    words = Words(job="a priced-cluster job", the_backend="the priced cluster",
                  flavor_kind="priced-cluster flavor", catalog="the priced cluster's price list",
                  instead="backend='fake'")
    bills = True
    chooses_flavor = True
    runs_images = False

    @staticmethod
    def flavor(*, cuda):
        return None

    @staticmethod
    def catalog(token, *, offline):
        return PRICES

    @staticmethod
    def claims(job_id):
        return False


backends.register(FakeBackend)
backends.register(PricedBackend)

from dataclasses import replace

from hf_train_mcp.jobs.ledger import SUBMITTING, JobRecord, now_iso
from hf_train_mcp.contract.requests import EstimateRequest, ScriptRequest, TrainingRequest
from hf_train_mcp.errors import TrainError
from hf_train_mcp.service import Core

model, dataset = sys.argv[1], sys.argv[2]
core = Core()
out = {}
sub = core.submit_training(TrainingRequest(model=model, dataset=dataset, backend="fake", max_steps=2))
out["submitted"] = [sub.job_id, sub.backend, sub.flavor]
out["status"] = [core.job_status(sub.job_id).backend, core.job_status(sub.job_id).log_tail]
out["logs"] = core.job_logs(sub.job_id).lines
out["cancel"] = [core.cancel_job(sub.job_id).stage, core.cancel_job(sub.job_id).message]
# A server that died after its POST landed and before its ledger write: the job exists on the fake cluster,
# the ledger holds only the journal entry (claimed by no live process).
JOBS["fake-99"] = {"stage": "RUNNING", "labels": {"submission": "0123456789ab"}, "created_at": now_iso()}
entry = core.ledger.get(sub.job_id)
core.ledger.journal(replace(entry, job_id=SUBMITTING + "0123456789ab", stage="SCHEDULING", claim="gone",
                            idempotency_key=None, created_at=now_iso()))
core = Core()  # the next server to start looks for it at once
out["listed"] = sorted([j.job_id, j.backend, j.stage] for j in core.list_jobs().jobs)
JOBS["fake-98"] = {"stage": "RUNNING", "labels": {}, "created_at": now_iso()}
out["unrecorded"] = core.job_status("fake-98").backend  # not in the ledger: its id shape names the backend
out["calls"] = sorted({what for what, _ in CALLS})


def refusal(make):
    try:
        make()
    except (TrainError, ValueError) as exc:
        return str(exc)
    return None


shape = dict(model=model, num_examples=2000, tokens_per_example=300)
cheapest = core.estimate_cost(EstimateRequest(**shape, backend="priced"))
big = core.estimate_cost(EstimateRequest(**shape, backend="priced", flavor="big-h200"))
out["estimated"] = [cheapest.flavor, cheapest.hours, cheapest.cost_usd, sorted(a.flavor for a in cheapest.alternatives),
                    big.flavor, big.hours, big.cost_usd]
priced = core.submit_training(TrainingRequest(model=model, dataset=dataset, backend="priced", max_steps=2,
                                              hub_model_id="me/kept-here", timeout="2h"))
out["priced"] = [priced.job_id, priced.backend, priced.flavor, priced.worst_case_cost_usd, priced.warnings]
out["refused"] = {
    "flavor": refusal(lambda: core.submit_training(TrainingRequest(model=model, dataset=dataset, backend="priced",
                                                                   flavor="a10g-small", max_steps=2))),
    "nodes": refusal(lambda: core.submit_training(TrainingRequest(model=model, dataset=dataset, backend="fake",
                                                                  nodes=2, max_steps=2))),
    "qlora": refusal(lambda: core.submit_training(TrainingRequest(model=model, dataset=dataset, backend="fake",
                                                                  peft="qlora", max_steps=2))),
    "unsloth": refusal(lambda: core.submit_training(TrainingRequest(model=model, dataset=dataset, backend="fake",
                                                                    engine="unsloth", max_steps=2))),
    "image": refusal(lambda: core.run_script(ScriptRequest(command=["python", "-c", "print(1)"],
                                                           image="python:3.12", backend="priced"))),
    "ignored": core.submit_training(TrainingRequest(model=model, dataset=dataset, backend="fake", flavor="a10g-small",
                                                    max_steps=2)).warnings,
}
print("RESULT " + json.dumps(out))
'''


def test_a_registered_third_backend_gets_submit_status_logs_cancel_list_and_recovery(tiny_model: Path, tmp_path: Path,
                                                                                      offline) -> None:
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"hi {i}"},
                                                     {"role": "assistant", "content": f"hello {i}"}]}) + "\n"
                            for i in range(8)))
    import os

    proc = subprocess.run([sys.executable, "-c", SCENARIO, str(tiny_model), str(data)], env=dict(os.environ),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert out["submitted"] == ["fake-1", "fake", "fake-cpu"]
    assert out["status"] == ["fake", ["fake log of fake-1"]]
    assert out["logs"] == ["fake log of fake-1"]
    assert out["cancel"][0] == "CANCELED"
    assert out["listed"] == [["fake-1", "fake", "CANCELED"], ["fake-99", "fake", "RUNNING"]]  # recovered
    assert out["unrecorded"] == "fake"
    assert {"open", "submit", "inspect", "logs", "cancel", "find"} <= set(out["calls"])
    # the priced cluster: estimated on its own flavors, at its own prices
    flavor, hours, cost, alternatives, big, big_hours, big_cost = out["estimated"]
    assert flavor == "small-l4" and set(alternatives) <= {"big-h200", "tiny-cpu"} and "big-h200" in alternatives
    assert cost == pytest.approx(hours * 0.25, rel=0.15, abs=0.01) and cost > 0  # hours are rounded, cost is not
    assert big == "big-h200" and big_cost == pytest.approx(big_hours * 9.0, rel=0.15)
    # ...planned and billed on them: two hours at its $0.25 an hour, its model kept where it ran
    job_id, backend, flavor, worst, warnings = out["priced"]
    assert backend == "priced" and flavor == "small-l4" and worst == pytest.approx(0.5)
    assert "the priced cluster keeps the model in the job folder; hub_model_id is not pushed" in warnings
    # each refuses in its own words
    refused = out["refused"]
    assert "flavor 'a10g-small' is not in the priced cluster's price list" in refused["flavor"]
    assert refused["nodes"] == "the fake cluster is one machine: send backend='priced', or drop nodes"
    assert "and a fake cluster has none: send peft='lora', or backend='priced' with a GPU flavor" in refused["qlora"]
    assert "flavor 'a10g-small' is ignored by the fake cluster" in refused["ignored"]
    assert "Send engine='trl' (the same training), or a GPU flavor on backend='priced'." in refused["unsloth"]
    assert refused["image"] == ("backend='priced' runs scripts, not Docker images: drop image, or send backend='fake'. "
                                "Nothing was launched.")


def test_a_backend_without_its_catalog_or_words_is_refused_when_registered() -> None:
    from hf_train_mcp import backends

    class Partial:
        name = "partial"
        place = "somewhere"

    with pytest.raises(TypeError, match="lacks .*words.*chooses_flavor.*catalog"):
        backends.register(Partial)
    assert "partial" not in backends.NAMES
