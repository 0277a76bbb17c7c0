"""Supervises one sweep: starts its queued runs as slots free up and prunes trailing runs, until every run has
ended or the sweep is canceled, or its ledger is gone (sweeps/supervision.py holds the loop).

Started detached (own session) by the server as `python -m hf_train_mcp.shell.sweep_supervisor SWEEP_ID`, so the sweep goes on
after the MCP server exits. One supervisor per sweep: it holds an exclusive lock on the sweep's lock file, and a
second one started while it lives exits at once.
"""

import logging
import os
import sys
from typing import IO

from hf_train_mcp.detach import held_lock
from hf_train_mcp.paths import data_home
from hf_train_mcp.sweeps.supervision import say_gone, supervise
from hf_train_mcp.sweeps.sweep import LOCK_FD_ENV


def _lock(sweep_id: str) -> "IO[str] | None":
    """The sweep's lock, held (handed over by the server that started this process, or taken here); None when
    another supervisor has it."""
    return held_lock(data_home(create=False) / "sweeps" / f"{sweep_id}.lock", lock_env=LOCK_FD_ENV)


def run(sweep_id: str) -> int:
    from hf_train_mcp.service import Core

    lock = _lock(sweep_id)
    if lock is None:
        return 0  # another supervisor has this sweep
    with lock:
        home = data_home(create=False)  # deleted while this process imported: it stays deleted
        try:  # names the one that runs
            (home / "sweeps" / f"{sweep_id}.pid").write_text(str(os.getpid()))
        except FileNotFoundError:  # Core() would make an empty ledger
            say_gone(sweep_id, home)
            return 0
        return supervise(Core(), sweep_id)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(run(sys.argv[1]))
