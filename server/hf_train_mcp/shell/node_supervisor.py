"""Watches one run across nodes until every node has ended: the rule of jobs/node_ranks.py (a failed, missing or
unstarted node stops the others) applied by job_status every few seconds, with nobody asking. It watches a job
whose POST went unanswered the same way, while a copy of it may still appear (duplicates.py cancels it).

Started detached by the server as `python -m hf_train_mcp.shell.node_supervisor JOB_ID`, so it outlives the server; one per
run or job (it holds its lock, handed over by the server that started it). The loop is node_ranks.watch.
"""

import logging
import sys

from hf_train_mcp.detach import held_lock
from hf_train_mcp.durations import seconds_from_env
from hf_train_mcp.jobs.node_ranks import LOCK_ENV, lock_path, watch

POLL_ENV = "HF_TRAIN_NODES_POLL_S"  # how often the watcher looks (tests look faster)
WATCH_POLL_S = 20.0


def _poll_seconds() -> float:
    return seconds_from_env(POLL_ENV, WATCH_POLL_S)


def run(run_id: str) -> int:
    from hf_train_mcp.service import Core

    lock = held_lock(lock_path(run_id), lock_env=LOCK_ENV)
    if lock is None:
        return 0  # another watcher has this run
    with lock:
        return watch(Core(), run_id, poll=_poll_seconds)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(run(sys.argv[1]))
