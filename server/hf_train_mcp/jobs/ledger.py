"""SQLite record of every submission on either backend; survives restarts, safe for concurrent servers.

WAL mode lets readers and one writer proceed together; each write is one short transaction with a busy
timeout, so two servers (two agents) writing at once queue instead of failing or corrupting the file.
"""

import json
import sqlite3
import threading
from dataclasses import fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hf_train_mcp.clock import now_iso
from hf_train_mcp.errors import ConflictError
from hf_train_mcp.jobs.ledger_file import Connection, make_private, wal_mode
from hf_train_mcp.paths import data_home
from hf_train_mcp.jobs.records import (COPY_KIND, PENDING, SUBMITTING, UNKNOWN, JobRecord, SweepRecord,
                                       SweepRunRecord, claim_id)

# the rows' names, where most callers import them from
__all__ = ["COPY_KIND", "PENDING", "SUBMITTING", "UNKNOWN", "JobRecord", "KeyConflict", "Ledger", "SubmissionInProgress",
           "SweepRecord", "SweepRunRecord", "claim_id", "now_iso"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    namespace TEXT,
    method TEXT,
    model TEXT,
    dataset TEXT,
    request_json TEXT NOT NULL,
    script_sha256 TEXT NOT NULL,
    script_path TEXT,
    job_dir TEXT,
    stage TEXT NOT NULL,
    flavor TEXT,
    timeout TEXT,
    job_url TEXT,
    hub_model_id TEXT,
    model_url TEXT,
    trackio_url TEXT,
    output_bucket TEXT,
    estimated_hours REAL,
    estimated_cost_usd REAL,
    effective_batch_size INTEGER,
    warnings_json TEXT NOT NULL DEFAULT '[]',
    idempotency_key TEXT UNIQUE,
    created_at TEXT NOT NULL,
    finished_at TEXT,
    worst_case_cost_usd REAL,
    claim TEXT,
    output_dir TEXT
);
CREATE INDEX IF NOT EXISTS jobs_created ON jobs(created_at);
CREATE TABLE IF NOT EXISTS sweeps (
    sweep_id TEXT PRIMARY KEY,
    idempotency_key TEXT UNIQUE,
    created_at TEXT NOT NULL,
    backend TEXT NOT NULL,
    request_json TEXT NOT NULL,
    max_parallel INTEGER NOT NULL,
    prune INTEGER NOT NULL,
    state TEXT NOT NULL,
    estimated_cost_usd REAL,
    worst_case_cost_usd REAL,
    trackio_url TEXT,
    warnings_json TEXT NOT NULL DEFAULT '[]',
    access_json TEXT
);
CREATE TABLE IF NOT EXISTS sweep_runs (
    sweep_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    params_json TEXT NOT NULL,
    request_json TEXT NOT NULL,
    state TEXT NOT NULL,
    job_id TEXT,
    note TEXT,
    history_json TEXT NOT NULL DEFAULT '[]',
    estimated_cost_usd REAL,
    worst_case_cost_usd REAL,
    saved_usd REAL,
    claimed_at TEXT,
    PRIMARY KEY (sweep_id, idx)
);
"""

# Columns added after the first release: older ledgers get them on open.
_ADDED_COLUMNS = {"worst_case_cost_usd": "REAL", "claim": "TEXT", "output_dir": "TEXT", "started_at": "TEXT",
                  "message": "TEXT", "kind": "TEXT NOT NULL DEFAULT 'train'", "measured_json": "TEXT",
                  "parent_job_id": "TEXT", "node_rank": "INTEGER", "asked_json": "TEXT",
                  "secrets_json": "TEXT", "submission": "TEXT", "doubted": "INTEGER", "stopped": "TEXT",
                  "uploads_json": "TEXT"}
_ADDED_SWEEP_COLUMNS = {"access_json": "TEXT"}


STALE_RESERVATION_S = 600
# The reservation of a key whose submission journal is still open is never taken over as stale: its POST may
# have created a job, and only the Hub can say it did not (crash recovery releases it then).
_JOURNALED = ("SELECT 1 FROM jobs WHERE job_id >= ? AND job_id < ? AND claim = ?",
              (SUBMITTING, SUBMITTING[:-1] + chr(ord(SUBMITTING[-1]) + 1)))


class KeyConflict(ConflictError):
    """The idempotency key already names a job of another kind: retrying cannot succeed."""


class SubmissionInProgress(ConflictError):
    """Another call holds the idempotency key and is submitting its job: call again shortly."""


def _insert(table: str, cls: type) -> str:
    names = [f.name for f in fields(cls)]
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"


def _values(record: Any) -> tuple:
    return tuple(getattr(record, f.name) for f in fields(record))


_SWEEP_SELECT = f"SELECT {', '.join(f.name for f in fields(SweepRecord))} FROM sweeps"
_RUN_SELECT = f"SELECT {', '.join(f.name for f in fields(SweepRunRecord))} FROM sweep_runs"
_RUN_FIELDS = frozenset(f.name for f in fields(SweepRunRecord)) - {"sweep_id", "idx"}
_COLUMNS = tuple(f.name for f in fields(JobRecord))
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM jobs"  # in field order: rows build records positionally (fast)
_INSERT = f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"


class Ledger:
    def __init__(self, path: Path | None = None):
        home = None if path else data_home()
        self.path = path or home / "ledger.sqlite3"
        make_private(self.path, home=home)
        self._local = threading.local()
        db = self._connect()
        for statement in filter(str.strip, _SCHEMA.split(";")):  # one by one: execute reports a corrupt file
            db.execute(statement)
        for table, added in (("jobs", _ADDED_COLUMNS), ("sweeps", _ADDED_SWEEP_COLUMNS)):
            present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            for column, kind in added.items():
                if column not in present:
                    try:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                    except sqlite3.OperationalError:  # another server added it first
                        pass

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, factory=Connection)
            db.execute("PRAGMA busy_timeout=30000")
            wal_mode(db)
            self._local.db = db
        return db

    def _write(self, sql: str, args: tuple) -> None:
        self._rowcount(sql, args)

    def _rowcount(self, sql: str, args: tuple) -> int:
        """Run one statement in its own immediate transaction; the number of rows it changed."""
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            count = db.execute(sql, args).rowcount
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return count

    def journal(self, entry: JobRecord) -> None:
        """Note a submission about to be posted (job_id SUBMITTING + its label), so that a server killed before
        `record` is called leaves a trace that the next call can look up on the backend."""
        self._write(_INSERT, tuple(getattr(entry, c) for c in _COLUMNS))

    def submissions(self) -> list[JobRecord]:
        # a range on the primary key (an index lookup, not a scan: every job_status call asks)
        rows = self._connect().execute(f"{_SELECT} WHERE job_id >= ? AND job_id < ?",
                                       (SUBMITTING, SUBMITTING[:-1] + chr(ord(SUBMITTING[-1]) + 1))).fetchall()
        return [JobRecord(*r) for r in rows]

    def forget(self, job_id: str) -> None:
        self._write("DELETE FROM jobs WHERE job_id = ?", (job_id,))

    def record(self, job: JobRecord, claim: str | None = None, journal: str | None = None) -> bool:
        """Store a submission, replacing our reservation of its idempotency key in the same transaction.

        Returns False when the reservation was no longer ours (taken over as stale): the job is then stored
        without the key, which its new holder owns.
        """
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            if journal is not None and not db.execute("DELETE FROM jobs WHERE job_id = ?", (journal,)).rowcount:
                db.execute("COMMIT")  # recorded already, by crash recovery racing a slow submitter (or another)
                return True
            owned = True
            if job.idempotency_key is not None:
                if claim is None:  # recorded without a reservation: the key is ours if nobody holds it
                    owned = db.execute("SELECT 1 FROM jobs WHERE idempotency_key = ?",
                                       (job.idempotency_key,)).fetchone() is None
                else:
                    owned = db.execute("DELETE FROM jobs WHERE job_id = ? AND claim = ?",
                                       (PENDING + job.idempotency_key, claim)).rowcount == 1
                if not owned:
                    job = replace(job, idempotency_key=None)
            db.execute(_INSERT, tuple(getattr(job, c) for c in _COLUMNS))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return owned

    def reserve(self, key: str, claim: str) -> JobRecord | None:
        """Claim an idempotency key (as `claim`, a one-off id) before submitting, so only one server launches.

        Returns None when the key is now ours, else the record holding it (a job, or a pending reservation).
        A reservation older than STALE_RESERVATION_S (its server died mid-submit) is taken over by a
        compare-and-swap on its claim, so of two servers that both saw it stale exactly one wins; never while
        its submission's journal entry remains (the POST may have created a job).
        """
        for _ in range(3):  # a holder that vanishes between our INSERT and our look (released) frees the key
            try:
                self._write("INSERT INTO jobs (job_id, backend, request_json, script_sha256, stage, idempotency_key, "
                            "created_at, claim) VALUES (?, 'pending', '{}', '', 'SCHEDULING', ?, ?, ?)",
                            (PENDING + key, key, now_iso(), claim))
                return None
            except sqlite3.IntegrityError:
                holder = self.by_idempotency_key(key)
            if holder is None:
                continue
            if not holder.job_id.startswith(PENDING):
                return holder
            age = datetime.now(UTC) - datetime.fromisoformat(holder.created_at.replace("Z", "+00:00"))
            if age.total_seconds() < STALE_RESERVATION_S:
                return holder
            if self._rowcount(f"UPDATE jobs SET claim = ?, created_at = ? WHERE job_id = ? AND claim IS ? "
                              f"AND NOT EXISTS ({_JOURNALED[0]})",
                              (claim, now_iso(), holder.job_id, holder.claim, *_JOURNALED[1], holder.claim)):
                return None
            return holder  # its submission may have created a job: held until recovery settles it
        return self.by_idempotency_key(key)

    def renew(self, key: str, claim: str) -> bool:
        """Still ours? Refreshes the reservation's age, so a slow submission is not taken over as stale."""
        return self._rowcount("UPDATE jobs SET created_at = ? WHERE job_id = ? AND claim = ?",
                              (now_iso(), PENDING + key, claim)) == 1

    def release(self, key: str, claim: str) -> None:
        """Give up our reservation (and only ours: a stale one taken over belongs to someone else)."""
        self._write("DELETE FROM jobs WHERE job_id = ? AND claim IS ?", (PENDING + key, claim))

    def update_stage(self, job_id: str, stage: str, finished_at: str | None = None, *,
                     started_at: str | None = None, message: str | None = None) -> None:
        self._write(
            "UPDATE jobs SET stage = ?, finished_at = COALESCE(finished_at, ?), started_at = COALESCE(started_at, ?), "
            "message = COALESCE(?, message) WHERE job_id = ?",
            (stage, finished_at, started_at, message, job_id),
        )

    def set_stopped(self, job_id: str, why: str) -> None:
        """Note why the server stopped a run; the first reason stays (what stopping it did is no reason)."""
        self._write("UPDATE jobs SET stopped = COALESCE(stopped, ?) WHERE job_id = ?", (why, job_id))

    def set_claim(self, job_id: str, claim: str | None) -> None:
        self._write("UPDATE jobs SET claim = ? WHERE job_id = ?", (claim, job_id))

    def set_measured(self, job_id: str, measured: dict) -> None:
        self._write("UPDATE jobs SET measured_json = ? WHERE job_id = ?", (json.dumps(measured), job_id))

    def _one(self, sql: str, args: tuple) -> JobRecord | None:
        row = self._connect().execute(sql, args).fetchone()
        return JobRecord(*row) if row else None

    def get(self, job_id: str) -> JobRecord | None:
        return self._one(f"{_SELECT} WHERE job_id = ?", (job_id,))

    def pushed_to(self, repo: str) -> bool:
        """Whether a job of this server pushed (or was sent to push) to this repo."""
        return self._connect().execute("SELECT 1 FROM jobs WHERE hub_model_id = ? LIMIT 1", (repo,)).fetchone() is not None

    def by_idempotency_key(self, key: str) -> JobRecord | None:
        return self._one(f"{_SELECT} WHERE idempotency_key = ?", (key,))

    def keyed(self, prefix: str) -> list[JobRecord]:
        """Records whose idempotency key starts with `prefix`, newest first (the attempts of one measurement)."""
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)  # a range on the key's unique index, not a scan
        rows = self._connect().execute(
            f"{_SELECT} WHERE idempotency_key >= ? AND idempotency_key < ? ORDER BY created_at DESC, rowid DESC",
            (prefix, upper))
        return [JobRecord(*r) for r in rows.fetchall()]

    def list(self, *, stage: str | None = None, backend: str | None = None, backends: tuple[str, ...] | None = None,
             limit: int = 20) -> list[JobRecord]:
        """The newest jobs; `backends`: only those of these backends (the ones a caller may reach)."""
        # a run's nodes are listed as their run (rank 0's record), as a sweep's runs are listed by job_status
        # (and copies of one submission, canceled, under the job they copy)
        clauses, args = (["job_id NOT LIKE ?", "job_id NOT LIKE ?", f"kind NOT IN ('node', '{COPY_KIND}')"],
                         [PENDING + "%", SUBMITTING + "%"])
        if stage:
            clauses.append("stage = ?")
            args.append(stage)
        if backend:
            clauses.append("backend = ?")
            args.append(backend)
        if backends is not None:
            clauses.append(f"backend IN ({', '.join('?' * len(backends))})" if backends else "0")
            args.extend(backends)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._connect().execute(
            f"{_SELECT} {where} ORDER BY created_at DESC, rowid DESC LIMIT ?", (*args, limit)
        )
        return [JobRecord(*r) for r in rows.fetchall()]

    def children(self, parent_job_ids: "list[str]", kind: str) -> "list[JobRecord]":
        """The `kind` jobs (evaluations, exports) of these training jobs, oldest first."""
        if not parent_job_ids:
            return []
        marks = ", ".join("?" * len(parent_job_ids))
        rows = self._connect().execute(f"{_SELECT} WHERE parent_job_id IN ({marks}) AND kind = ? "
                                       "ORDER BY created_at, rowid", (*parent_job_ids, kind))
        return [JobRecord(*r) for r in rows.fetchall()]

    # --- sweeps -------------------------------------------------------------------------------------------
    def create_sweep(self, sweep: SweepRecord, runs: "list[SweepRunRecord]") -> SweepRecord | None:
        """Store a sweep and its runs in one transaction. Returns None when stored, else the sweep that already
        holds its idempotency key (a retry, or a second server racing this one)."""
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(_insert("sweeps", SweepRecord), _values(sweep))
            db.executemany(_insert("sweep_runs", SweepRunRecord), [_values(run) for run in runs])
            db.execute("COMMIT")
        except sqlite3.IntegrityError:
            db.execute("ROLLBACK")
            holder = self.sweep_by_key(sweep.idempotency_key) if sweep.idempotency_key else None
            if holder is None:
                raise
            return holder
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return None

    def sweep(self, sweep_id: str) -> SweepRecord | None:
        row = self._connect().execute(f"{_SWEEP_SELECT} WHERE sweep_id = ?", (sweep_id,)).fetchone()
        return SweepRecord(*row) if row else None

    def sweeps(self, *, state: str) -> "list[SweepRecord]":
        rows = self._connect().execute(f"{_SWEEP_SELECT} WHERE state = ? ORDER BY created_at", (state,))
        return [SweepRecord(*r) for r in rows.fetchall()]

    def sweep_by_key(self, key: str) -> SweepRecord | None:
        row = self._connect().execute(f"{_SWEEP_SELECT} WHERE idempotency_key = ?", (key,)).fetchone()
        return SweepRecord(*row) if row else None

    def sweep_runs(self, sweep_id: str) -> "list[SweepRunRecord]":
        rows = self._connect().execute(f"{_RUN_SELECT} WHERE sweep_id = ? ORDER BY idx", (sweep_id,))
        return [SweepRunRecord(*r) for r in rows.fetchall()]

    def update_sweep_run(self, sweep_id: str, idx: int, *, only_if_state: str | None = None, **values: Any) -> bool:
        """Set some of a run's fields; with only_if_state, only while the run is still in that state (so a
        cancel and a launch racing each other cannot both win). Whether it changed."""
        unknown = set(values) - _RUN_FIELDS
        if unknown:
            raise ValueError(f"not sweep run fields: {sorted(unknown)}")
        sets = ", ".join(f"{name} = ?" for name in values)
        where, args = "sweep_id = ? AND idx = ?", [sweep_id, idx]
        if only_if_state is not None:
            where += " AND state = ?"
            args.append(only_if_state)
        return self._rowcount(f"UPDATE sweep_runs SET {sets} WHERE {where}", (*values.values(), *args)) == 1

    def set_sweep_state(self, sweep_id: str, state: str, *, only_if_state: str | None = None) -> bool:
        where, args = "sweep_id = ?", [sweep_id]
        if only_if_state is not None:
            where += " AND state = ?"
            args.append(only_if_state)
        return self._rowcount(f"UPDATE sweeps SET state = ? WHERE {where}", (state, *args)) == 1
