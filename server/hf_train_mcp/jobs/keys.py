"""The idempotency keys this server gives out, and what holds them: measurement jobs' keys (estimate.measured), and
sweeps' and their runs' (a sweep's id, and `<sweep id>-<index>` for its runs). A caller's own key may take neither
shape; a job found by a sweep run's key after its launch was given up on goes to that run."""

from hf_train_mcp.errors import TrainError
from hf_train_mcp.estimate.measured import PROBE_KEY_PREFIX, is_probe_key
from hf_train_mcp.jobs.ledger import Ledger

KEY_PREFIX = "sweep-"  # sweep ids, and the idempotency keys of their runs, start with it


def refuse_reserved_key(key: str | None, *, probe: bool = False, sweep_run: bool = False) -> None:
    """Keys shaped like the ones this server gives its measurement jobs and sweep runs belong to those: a job
    of another kind holding one would make that measurement or run fail for good."""
    if key and is_probe_key(key) and not probe:
        raise TrainError(f"idempotency_key may not start with {PROBE_KEY_PREFIX!r} (measurement jobs use those "
                         "keys); choose another key. Nothing was launched.")
    if key and key.startswith(KEY_PREFIX) and not sweep_run:
        raise TrainError(f"idempotency_key may not start with {KEY_PREFIX!r} (sweeps and their runs use those "
                         "keys); choose another key. Nothing was launched.")


def sweep_of(key: str | None) -> str | None:
    """The sweep whose run `key` is the key of, else None."""
    sweep_id, _, index = (key or "").rpartition("-")
    return sweep_id if sweep_id.startswith(KEY_PREFIX) and index.isdigit() else None


def adopted(ledger: Ledger, key: str, job_id: str) -> bool:
    """The job of `key` was found after its launch was given up on (crash recovery, a cancel): when the key
    is a sweep run's that has no job yet, the run gets it as launched. Whether the run's sweep is canceled
    (its caller then cancels the job)."""
    sweep_id = sweep_of(key)
    sweep = ledger.sweep(sweep_id) if sweep_id else None
    if sweep is None:
        return False
    index = key.rpartition("-")[2]
    run = next((r for r in ledger.sweep_runs(sweep_id) if r.idx == int(index)), None)
    if run is None or run.job_id or run.state not in ("queued", "launching", "canceled"):
        return False
    ledger.update_sweep_run(sweep_id, run.idx, only_if_state=run.state, state="launched", job_id=job_id)
    return sweep.state == "canceled"
