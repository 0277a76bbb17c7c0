"""What makes a retry a retry: the call as its caller sent it, so that the same idempotency_key with other
arguments is a conflict and not the old job passed off as the new one.

The ledger's request_json is the request as planned (a mapping filled in, a dataset's one config named, paths
resolved), which a caller's retry never matches; so the call as sent is kept beside it (JobRecord.asked_json,
SweepRecord.request_json), and its hash labels the job on the Hub (a lost ledger's retry is checked there).
"""

import hashlib
import json
from typing import Any

ASKED_LABEL = "asked"
_NOT_THE_JOB = ("dry_run", "max_cost_usd")  # how a call is checked, not what its job is
_RESOLVED = {"engine": "trl"}  # None means this value (the request's defaults that planning names)
# run_script's folder or local file, and a training, evaluation or export call's local dataset or model folder,
# are sent by name, and what the job reads is what they hold: the hash of their content is part of the call (held
# to it only when both calls have it: older ledgers, a file gone since).
CONTENT_FIELDS = ("folder content", "file content", "local files content")


def asked_json(req: Any, backend_name: str | None = None, *, content: str | None = None) -> str:
    """The call as sent, canonical: the backend it runs on named, fields that do not change the job dropped;
    `content`: the hash of the local folder or files it names (planning/planner.Planner.content)."""
    fields = {name: value for name, value in json.loads(req.model_dump_json()).items() if name not in _NOT_THE_JOB}
    for name, value in {**_RESOLVED, "backend": backend_name}.items():
        if name in fields and fields[name] is None:
            fields[name] = value
    if content is not None:
        fields[_content_field(req)] = content
    return json.dumps(fields, sort_keys=True)


def _content_field(req: Any) -> str:
    if getattr(req, "folder", None):
        return CONTENT_FIELDS[0]
    return CONTENT_FIELDS[1] if hasattr(req, "script") else CONTENT_FIELDS[2]


def asked_label(asked: str) -> str:
    return hashlib.sha256(asked.encode()).hexdigest()[:12]


def asked_labels(asked: str) -> set[str]:
    """The labels a job of this very call may carry on the Hub: with its local files' content, or without it (a
    server that held a retry to its arguments alone posted it: a lost ledger's retry is held to them, as
    changed_fields holds an older ledger's)."""
    fields = {name: value for name, value in json.loads(asked).items() if name not in CONTENT_FIELDS}
    return {asked_label(asked), asked_label(json.dumps(fields, sort_keys=True))}


def changed_fields(recorded: str | None, asked: str) -> list[str]:
    """The fields in which a retry differs from the call its key first launched (names only: a value may be a
    script's source). Nothing when the first call was not recorded as sent (a ledger of an older server)."""
    if not recorded:
        return []
    try:
        before = json.loads(recorded)
    except ValueError:
        return []
    now = json.loads(asked)
    return sorted(name for name in now.keys() | before.keys() if before.get(name) != now.get(name)
                  and (name not in CONTENT_FIELDS or (name in now and name in before)))


def conflict_message(key: str, job: str, changed: list[str]) -> str:
    return (f"idempotency_key {key!r} already names {job}, sent with another {', '.join(changed)}: a retry sends "
            "the same arguments. Use another key for a new job. Nothing was launched.")


def check_same_sweep(existing: Any, req: Any) -> None:
    """A sweep's key with other arguments (another base or grid) is a conflict, as a job's is. The sweep's
    request_json is its call as sent (sweeps.store_and_start)."""
    from hf_train_mcp.jobs.ledger import KeyConflict

    try:
        recorded = asked_json(type(req).model_validate_json(existing.request_json))
    except ValueError:  # written by another version of the request: nothing to hold the retry to
        return
    changed = changed_fields(recorded, asked_json(req))
    if changed:
        raise KeyConflict(conflict_message(req.idempotency_key, f"sweep {existing.sweep_id}", changed))
