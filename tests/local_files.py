"""What the tests of local files on Jobs share (tests/test_local_upload*.py): the rows of tickets.jsonl (which
conftest.py's `here` fixture writes into the user's working folder), the call that trains on it, and how a posted
job's input mounts read."""

from pathlib import Path

BUCKET = "emu-user/jobs-artifacts"
CONFIGS = Path(__file__).parent / "data" / "configs"
VIT = CONFIGS / "google--vit-base-patch16-224"
TICKETS = {"model": "Qwen/Qwen2.5-0.5B", "dataset": "./tickets.jsonl", "backend": "hf",
           "hub_model_id": "emu-user/tickets-sft", "max_steps": 20}
ROWS = [{"prompt": f"Ticket {i}: the printer on floor {i % 4} jams.", "completion": f"hardware/{i % 3}"}
        for i in range(30)]


def input_volumes(spec: dict) -> list[dict]:
    return [v for v in spec.get("volumes") or [] if v["mountPath"].startswith("/inputs/")]


def xet_hash(path: Path) -> str:
    import hf_xet

    return hf_xet.hash_files([str(path)])[0].hash


def supervise_until_second_run(sweep_id: str, before: int, hub) -> None:
    """What the detached supervisor does (shell/sweep_supervisor.run: supervise(Core(), sweep_id)), one look
    at a time, in process, until run 1 is posted or has failed."""
    import time

    from hf_train_mcp.jobs.ledger import Ledger
    from hf_train_mcp.service import Core
    from hf_train_mcp.sweeps import sweep as sweeps

    deadline = time.monotonic() + 30
    while len(hub.posted_jobs()) < before + 2 and time.monotonic() < deadline:
        sweeps.supervise_once(Core(), sweep_id)
        if Ledger().sweep_runs(sweep_id)[1].state == "failed":
            return
        time.sleep(0.2)
