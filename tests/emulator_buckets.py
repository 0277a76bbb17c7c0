"""The emulator's Storage Buckets and the xet CAS they upload through, as huggingface_hub 2.4.0 speaks to them
(shared/reference/hf-jobs-wire-contract.md 4.7, 4.8): create (a 409 with `url` once it exists), info, tree,
the NDJSON batch (adds, server-side copies by xet hash, deletes), the xet write token, and CAS endpoints that accept
what hf_xet sends (and verify nothing)."""

import json
import re
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def handle(handler: Any, emu: Any, method: str, path: str, query: dict, raw: bytes) -> bool:
    """Answer a bucket or CAS request; False when `path` is neither."""
    if path.startswith(("/v1/", "/v2/")):
        return _cas(handler, method, path)
    match = re.fullmatch(r"/api/buckets/([^/]+)/([^/]+)(?:/(tree|batch|xet-write-token|xet-read-token)(/.*)?)?", path)
    if not match:
        return False
    if handler._role() is None:
        handler._error(401, "Invalid credentials in Authorization header")
        return True
    namespace, name, action, rest = match.groups()
    bucket_id = f"{namespace}/{name}"
    url = f"{emu.url}/buckets/{bucket_id}"
    bucket = emu.buckets.get(bucket_id)
    if action is None and method == "POST":
        if bucket is not None:
            handler._send(409, {"error": "You already created this bucket", "url": url})
            return True
        visibility = (json.loads(raw or b"{}") or {}).get("visibility", "public")
        emu.buckets[bucket_id] = {"private": visibility == "private", "created": _now(), "files": {}}
        handler._send(200, {"url": url, "id": bucket_id, "name": name})
        return True
    if bucket is None:
        handler._error(404, f"Bucket {bucket_id} not found", {"X-Error-Code": "RepoNotFound"})
        return True
    if action is None:
        files = bucket["files"].values()
        handler._send(200, {"id": bucket_id, "private": bucket["private"], "createdAt": bucket["created"],
                            "size": sum(f["size"] for f in files), "totalFiles": len(bucket["files"])})
    elif action == "tree":
        prefix = unquote((rest or "/")[1:])
        handler._send(200, [f for p, f in sorted(bucket["files"].items()) if not prefix or p.startswith(prefix + "/")])
    elif action.startswith("xet-"):
        handler._send(200, {"accessToken": "xet-emu", "exp": int(time.time()) + 3600, "casUrl": emu.url})
    else:
        _batch(handler, emu, bucket, raw)
    return True


def _batch(handler: Any, emu: Any, bucket: dict, raw: bytes) -> None:
    """addFile (the bytes went to the CAS first), copyFile (server-side, by the xet hash of a file the source
    bucket holds: refused in `failed` when it holds none) and deleteFile."""
    done, failed = 0, []
    for line in raw.decode().splitlines():
        if not line.strip():
            continue
        op = json.loads(line)
        if op["type"] == "copyFile":
            source = emu.buckets.get(op["sourceRepoId"], {}) if op.get("sourceRepoType") == "bucket" else {}
            if not any(f["xetHash"] == op["xetHash"] for f in source.get("files", {}).values()):
                failed.append({"path": op["path"], "error": "no file with this xet hash in the source"})
                continue
        if op["type"] in ("addFile", "copyFile"):
            bucket["files"][op["path"]] = {"type": "file", "path": op["path"], "size": op.get("size", 0),
                                           "xetHash": op["xetHash"], "mtime": _now(), "uploadedAt": _now(),
                                           "via": op["type"]}  # tests tell a copy from an upload (clients ignore it)
        elif op["type"] == "deleteFile":
            bucket["files"].pop(op["path"], None)
        done += 1
    handler._send(422 if failed and not done else 200,
                  {"processed": done + len(failed), "succeeded": done, "failed": failed})


def _cas(handler: Any, method: str, path: str) -> bool:
    """hf_xet's uploads: no global dedup, grants and v2 shards unknown (so it falls back), the rest accepted."""
    if method == "GET" or path.startswith(("/v1/xorb-grants/", "/v2/")):
        handler._error(404, "not found")
    elif path.startswith("/v1/xorbs/"):
        handler._send(200, {"was_inserted": True})
    elif path.startswith("/v1/shards"):
        handler._send(200, {"result": 1})
    else:  # /v1/telemetry and anything else hf_xet reports
        handler._send(200, {})
    return True
