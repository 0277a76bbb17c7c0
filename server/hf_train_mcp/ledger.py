"""SQLite record of every submission on either backend; survives restarts, safe for concurrent servers.

WAL mode lets readers and one writer proceed together; each write is one short transaction with a busy
timeout, so two servers (two agents) writing at once queue instead of failing or corrupting the file.
"""

import json
import sqlite3
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hf_train_mcp.paths import data_home

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
    finished_at TEXT
);
CREATE INDEX IF NOT EXISTS jobs_created ON jobs(created_at);
"""

_COLUMNS = (
    "job_id", "backend", "namespace", "method", "model", "dataset", "request_json", "script_sha256", "script_path",
    "job_dir", "stage", "flavor", "timeout", "job_url", "hub_model_id", "model_url", "trackio_url", "output_bucket",
    "estimated_hours", "estimated_cost_usd", "effective_batch_size", "warnings_json", "idempotency_key",
    "created_at", "finished_at",
)  # fmt: skip


PENDING = "pending:"  # job_id prefix of an idempotency-key reservation
STALE_RESERVATION_S = 600


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class JobRecord:
    job_id: str
    backend: str
    namespace: str | None
    method: str | None
    model: str | None
    dataset: str | None
    request_json: str
    script_sha256: str
    script_path: str | None
    job_dir: str | None
    stage: str
    flavor: str | None
    timeout: str | None
    job_url: str | None
    hub_model_id: str | None
    model_url: str | None
    trackio_url: str | None
    output_bucket: str | None
    estimated_hours: float | None
    estimated_cost_usd: float | None
    effective_batch_size: int | None
    warnings_json: str
    idempotency_key: str | None
    created_at: str
    finished_at: str | None = None

    @property
    def request(self) -> dict[str, Any]:
        return json.loads(self.request_json)

    @property
    def warnings(self) -> list[str]:
        return json.loads(self.warnings_json)


class Ledger:
    def __init__(self, path: Path | None = None):
        self.path = path or data_home() / "ledger.sqlite3"
        self._local = threading.local()
        with self._connect() as db:
            db.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA busy_timeout=30000")
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    def _write(self, sql: str, args: tuple) -> None:
        self._transaction((sql, args))

    def _transaction(self, *statements: tuple[str, tuple]) -> None:
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            for sql, args in statements:
                db.execute(sql, args)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def record(self, job: JobRecord) -> None:
        """Store a submission; a reservation of its idempotency key is replaced in the same transaction."""
        values = tuple(getattr(job, c) for c in _COLUMNS)
        insert = f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
        self._transaction(("DELETE FROM jobs WHERE job_id = ?", (PENDING + str(job.idempotency_key),)),
                          (insert, values))

    def reserve(self, key: str) -> JobRecord | None:
        """Claim an idempotency key before submitting, so that two servers cannot both launch for it.

        Returns None when the key is now ours, else the record holding it (a job, or a pending reservation).
        A reservation older than STALE_RESERVATION_S (its server died mid-submit) is taken over.
        """
        claim = ("INSERT INTO jobs (job_id, backend, request_json, script_sha256, stage, idempotency_key, "
                 "created_at) VALUES (?, 'pending', '{}', '', 'SCHEDULING', ?, ?)")
        for _ in range(2):
            try:
                self._write(claim, (PENDING + key, key, now_iso()))
                return None
            except sqlite3.IntegrityError:
                holder = self.by_idempotency_key(key)
                if holder is None:
                    continue
                age = datetime.now(UTC) - datetime.fromisoformat(holder.created_at.replace("Z", "+00:00"))
                if not holder.job_id.startswith(PENDING) or age.total_seconds() < STALE_RESERVATION_S:
                    return holder
                self.release(key)
        return self.by_idempotency_key(key)

    def release(self, key: str) -> None:
        self._write("DELETE FROM jobs WHERE job_id = ?", (PENDING + key,))

    def update_stage(self, job_id: str, stage: str, finished_at: str | None = None) -> None:
        self._write(
            "UPDATE jobs SET stage = ?, finished_at = COALESCE(finished_at, ?) WHERE job_id = ?",
            (stage, finished_at, job_id),
        )

    def _one(self, sql: str, args: tuple) -> JobRecord | None:
        row = self._connect().execute(sql, args).fetchone()
        return JobRecord(**dict(row)) if row else None

    def get(self, job_id: str) -> JobRecord | None:
        return self._one("SELECT * FROM jobs WHERE job_id = ?", (job_id,))

    def by_idempotency_key(self, key: str) -> JobRecord | None:
        return self._one("SELECT * FROM jobs WHERE idempotency_key = ?", (key,))

    def list(self, *, stage: str | None = None, backend: str | None = None, limit: int = 20) -> list[JobRecord]:
        clauses, args = ["job_id NOT LIKE ?"], [PENDING + "%"]
        if stage:
            clauses.append("stage = ?")
            args.append(stage)
        if backend:
            clauses.append("backend = ?")
            args.append(backend)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._connect().execute(
            f"SELECT * FROM jobs {where} ORDER BY created_at DESC, rowid DESC LIMIT ?", (*args, limit)
        )
        return [JobRecord(**dict(r)) for r in rows.fetchall()]
