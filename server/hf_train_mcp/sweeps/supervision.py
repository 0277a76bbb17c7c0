"""A sweep's supervisor loop: one look at the sweep (sweep.supervise_once) every poll, until every run has ended
or the sweep is canceled, or its ledger is gone (deleted or replaced: nothing is left to supervise).

The clock is passed in (sleep, monotonic): the detached supervisor (shell/sweep_supervisor.py) runs on the real
one, a test drives the same loop in process on its own, without waiting.
"""

import logging
import time
from collections.abc import Callable
from pathlib import Path

from hf_train_mcp.sweeps.job_control import JobControl
from hf_train_mcp.sweeps.sweep import poll_seconds, supervise_once

log = logging.getLogger("hf_train_mcp.shell.sweep_supervisor")
GIVE_UP_AFTER_S = 3600


def supervise(core: JobControl, sweep_id: str, *, sleep: Callable[[float], None] = time.sleep,
              monotonic: Callable[[], float] = time.monotonic) -> int:
    """Look at the sweep every poll_seconds() until nothing is left to supervise (0), or no look has worked for
    GIVE_UP_AFTER_S (1: the next server start or compare_runs supervises it again)."""
    ledger = _identity(core.ledger.path)
    failing_since = None
    while True:
        if _identity(core.ledger.path) != ledger:  # before anything that would recreate the folder
            say_gone(sweep_id, core.ledger.path)
            return 0
        try:
            if not supervise_once(core, sweep_id):
                return 0
            failing_since = None
        except Exception:  # a Hub hiccup must not end the sweep: look again next round
            log.exception("sweep %s: look failed", sweep_id)
            failing_since = failing_since or monotonic()
            if monotonic() - failing_since > GIVE_UP_AFTER_S:
                log.error("sweep %s: no look has worked for %d s; the next server start or compare_runs "
                          "supervises it again", sweep_id, GIVE_UP_AFTER_S)
                return 1
        sleep(poll_seconds())


def say_gone(sweep_id: str, where: Path) -> None:
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
