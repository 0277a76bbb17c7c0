"""A third backend, registered by a test alone, gets every job call: nothing outside backends/ names a backend.

The fake runs nothing: it records each call and keeps its jobs in memory. It is registered before the schemas
are built (the tools' `backend` parameter is a Literal of the registry's names), so the scenario runs in a
fresh interpreter. Were the core to open a backend any other way than through backends.open, the fake would
see no call (or its jobs would be asked of the Hub) and the assertions below would fail.
"""

import json
import subprocess
import sys
from pathlib import Path

SCENARIO = r'''
import json, sys
from datetime import UTC, datetime

from hf_train_mcp import backends
from hf_train_mcp.backends.base import JobRef, JobState, LogRead

CALLS = []
JOBS = {}


class FakeBackend:
    name = "fake"
    place = "a fake cluster"
    reads_local_paths = True
    bills = False
    catalog_from_hub = False
    pushes_to_hub = False
    has_namespace = False
    needs_local_jobs_permission = False
    labels_submissions = True
    output_dir = "output"
    default_timeout_s = 600
    logs_final_when_settled = True
    cancel_note = "stopped on the fake cluster"

    def __init__(self, token=None):
        CALLS.append(("open", None))

    @staticmethod
    def flavor(*, cuda):
        return "fake-gpu" if cuda else "fake-cpu"

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


backends.register(FakeBackend)

from dataclasses import replace

from hf_train_mcp.jobs.ledger import SUBMITTING, JobRecord, now_iso
from hf_train_mcp.contract.requests import TrainingRequest
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
