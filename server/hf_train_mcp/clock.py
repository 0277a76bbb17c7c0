"""Time as the ledger and the backends write it: UTC, ISO 8601, to the second, with a Z."""
from datetime import UTC, datetime


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
