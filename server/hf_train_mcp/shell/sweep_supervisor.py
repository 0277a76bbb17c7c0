"""Supervises one sweep: starts its queued runs as slots free up and prunes trailing runs, until every run has
ended or the sweep is canceled, or its ledger is gone (deleted or replaced: nothing is left to supervise).

Started detached (own session) by the server as `python -m hf_train_mcp.shell.sweep_supervisor SWEEP_ID`, so the sweep goes on
after the MCP server exits. One supervisor per sweep: it holds an exclusive lock on the sweep's lock file, and a
second one started while it lives exits at once.
"""

import logging
import os
import sys
import time
from pathlib import Path
from typing import IO

from hf_train_mcp.detach import held_lock
from hf_train_mcp.paths import data_home
from hf_train_mcp.sweeps.sweep import LOCK_FD_ENV, poll_seconds, supervise_once

log = logging.getLogger("hf_train_mcp.shell.sweep_supervisor")
GIVE_UP_AFTER_S = 3600


def _lock(sweep_id: str) -> "IO[str] | None":
    """The sweep's lock, held (handed over by the server that started this process, or taken here); None when
    another supervisor has it."""
    return held_lock(data_home() / "sweeps" / f"{sweep_id}.lock", lock_env=LOCK_FD_ENV)


def run(sweep_id: str) -> int:
    from hf_train_mcp.service import Core

    lock = _lock(sweep_id)
    if lock is None:
        return 0  # another supervisor has this sweep
    with lock:
        try:  # names the one that runs
            (data_home() / "sweeps" / f"{sweep_id}.pid").write_text(str(os.getpid()))
        except FileNotFoundError:  # deleted while this process started: Core() would make an empty ledger
            _say_gone(sweep_id, data_home())
            return 0
        core = Core()
        ledger = _identity(core.ledger.path)
        failing_since = None
        while True:
            if _identity(core.ledger.path) != ledger:  # before anything that would recreate the folder
                _say_gone(sweep_id, core.ledger.path)
                return 0
            try:
                if not supervise_once(core, sweep_id):
                    return 0
                failing_since = None
            except Exception:  # a Hub hiccup must not end the sweep: look again next round
                log.exception("sweep %s: look failed", sweep_id)
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > GIVE_UP_AFTER_S:
                    log.error("sweep %s: no look has worked for %d s; the next server start or compare_runs "
                              "supervises it again", sweep_id, GIVE_UP_AFTER_S)
                    return 1
            time.sleep(poll_seconds())


def _say_gone(sweep_id: str, where: Path) -> None:
    log.warning("sweep %s: its ledger %s is gone (deleted or replaced), so nothing is left to supervise: this "
                "supervisor ends and starts no queued run; the jobs it launched run on to their own end (list_jobs, "
                "cancel_job)", sweep_id, where)


def _identity(path: Path) -> tuple[int, int] | None:
    """The file a path names now (device, inode), or None when there is none: this process's open connection
    reads a deleted or replaced ledger on, so the path is what tells."""
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sys.exit(run(sys.argv[1]))
