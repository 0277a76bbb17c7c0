"""The ledger's SQLite file: readable by its owner only, and a damaged one reported in words on every tool."""

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from hf_train_mcp import backends
from hf_train_mcp.errors import EnvironmentMissing

_CORRUPT = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


class LedgerUnreadable(EnvironmentMissing):
    """The ledger file is damaged: every tool says so (and what to do) instead of failing bare."""


def unreadable(exc: sqlite3.DatabaseError) -> LedgerUnreadable:
    # the server's path is not shown: HTTP callers must not learn it, and the operator knows HF_TRAIN_HOME
    return LedgerUnreadable(
        f"the job ledger (ledger.sqlite3 in HF_TRAIN_HOME) is unreadable ({exc}): move it aside (rename "
        "ledger.sqlite3, with its -wal and -shm files, to keep it for inspection) and call again, which starts a new "
        f"ledger. Jobs already launched keep running; {backends.lost_ledger_note()}.")


class Connection(sqlite3.Connection):
    """A connection whose corrupt-file errors (by SQLite's error code) become LedgerUnreadable."""

    def execute(self, *args: Any) -> sqlite3.Cursor:
        return _worded(super().execute, args)

    def executemany(self, *args: Any) -> sqlite3.Cursor:
        return _worded(super().executemany, args)


def _worded(run: Any, args: tuple) -> sqlite3.Cursor:
    try:
        return run(*args)
    except sqlite3.DatabaseError as exc:
        if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _CORRUPT:
            raise unreadable(exc) from None
        raise


def wal_mode(db: sqlite3.Connection, attempts: int = 50) -> None:
    """Switch to WAL. Two servers opening a new ledger at once race for the switch, and SQLite answers the loser
    "database is locked" at once, without waiting out the busy timeout: it waits and tries again."""
    for attempt in range(attempts):
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def make_private(path: Path, *, home: Path | None) -> None:
    """The ledger holds reward code, paths and requests: readable by its owner only (best effort: a file
    system without modes keeps its own)."""
    try:
        if home is not None:
            os.chmod(home, 0o700)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))  # created private, never world-readable first
        for suffix in ("", "-wal", "-shm"):  # SQLite gives its side files the main file's mode
            if Path(f"{path}{suffix}").exists():
                os.chmod(f"{path}{suffix}", 0o600)
    except OSError:
        pass
