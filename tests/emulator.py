"""A local emulator of the Hub endpoints hf-train-mcp uses: Jobs API, whoami, hardware, model info, dataset viewer.

It speaks the wire format of shared/reference/hf-jobs-wire-contract.md so that the real huggingface_hub
client can be pointed at it with HF_ENDPOINT. Jobs move SCHEDULING -> RUNNING -> final stage on a clock;
their log lines are released over the running period and streamed as SSE; the stream closes at the end.
"""

import hashlib
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests import emulator_buckets, emulator_metrics

FLAVORS = (
    "cpu-basic", "cpu-upgrade", "cpu-performance", "cpu-xl", "t4-small", "t4-medium", "l4x1", "l4x4", "l40sx1",
    "l40sx4", "l40sx8", "a10g-small", "a10g-large", "a10g-largex2", "a10g-largex4", "a100-large", "a100x4",
    "a100x8", "h200", "h200x2", "h200x4", "h200x8", "rtx-pro-6000", "rtx-pro-6000x2", "rtx-pro-6000x4",
    "rtx-pro-6000x8",
)  # fmt: skip

# (name, accelerator model or None, count, vram per card, $/minute): prices deliberately differ from the built-in
# table so tests can tell the live catalog was used.
HARDWARE = (
    ("cpu-basic", None, 0, "", 0.0002), ("cpu-upgrade", None, 0, "", 0.0005), ("t4-small", "T4", 1, "16 GB", 0.0070), ("l4x1", "L4", 1, "24 GB", 0.0140),
    ("l4x4", "L4", 4, "96 GB", 0.0640), ("a10g-small", "A10G", 1, "24 GB", 0.0170),
    ("a10g-large", "A10G", 1, "24 GB", 0.0250), ("a10g-largex2", "A10G", 2, "48 GB", 0.0500),
    ("a100-large", "A100", 1, "80 GB", 0.0420), ("a100x8", "A100", 8, "640 GB", 0.3360),
    ("h200", "H200", 1, "141 GB", 0.0840),
)  # fmt: skip

HOSTS = {"cpu-basic": (2, 16), "cpu-upgrade": (8, 32), "t4-small": (4, 15), "l4x1": (8, 30), "l4x4": (48, 186),
         "a10g-small": (4, 15), "a10g-large": (12, 46), "a10g-largex2": (24, 92), "a100-large": (12, 142),
         "h200": (23, 256)}  # (vCPUs, GB of memory), as the Jobs hardware list reports them
TOKENS = {"hf_emu_write_token_0123456789": "write", "hf_emu_read_token_0123456789": "read"}
USER = "emu-user"
ORGS = ("emu-org",)


def hub_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(ts * 1000) % 1000:03d}Z"


@dataclass
class JobPlan:
    """How an emulated job behaves: seconds in each stage, the final stage, and its log lines."""

    scheduling_s: float = 0.2
    running_s: float = 1.0
    final_stage: str = "COMPLETED"
    log_lines: list[str] = field(default_factory=lambda: ["HFTM_START {}", "HFTM_DONE {}"])
    message: str | None = None
    drop_logs_after: int | None = None  # the log stream breaks off (mid-chunk) after this many lines
    # the metrics stream: (utilisation %, memory used GB) per GPU, which a test may change while the job runs;
    # None: the flavor's GPUs, idle. metrics_hang: the stream answers 200 and then never sends a sample
    # (with metrics_keepalive_s, only an SSE ": keep-alive" comment that often, as the real stream sends).
    gpus: list[tuple[float, float]] | None = None
    metrics_hang: bool = False
    metrics_keepalive_s: float | None = None
    logs_keepalive_s: float | None = None  # the log stream sends ": keep-alive" this often while the job runs


@dataclass
class Job:
    id: str
    namespace: str
    spec: dict
    plan: JobPlan
    created: float
    canceled_at: float | None = None

    def stage(self, now: float) -> str:
        if self.canceled_at is not None:
            return "CANCELED"
        elapsed = now - self.created
        if elapsed < self.plan.scheduling_s:
            return "SCHEDULING"
        if elapsed < self.plan.scheduling_s + self.plan.running_s:
            return "RUNNING"
        return self.plan.final_stage

    def started(self) -> float:
        return self.created + self.plan.scheduling_s

    def finished(self, now: float) -> float | None:
        if self.canceled_at is not None:
            return self.canceled_at
        end = self.started() + self.plan.running_s
        return end if now >= end else None

    def released_lines(self, now: float) -> list[tuple[float, str]]:
        """Lines printed so far, each with its timestamp, spread evenly over the running period."""
        lines = self.plan.log_lines
        out = []
        cutoff = min(now, self.canceled_at or now)
        for i, line in enumerate(lines):
            at = self.started() + self.plan.running_s * (i + 0.5) / max(1, len(lines))
            if at <= cutoff:
                out.append((at, line))
        return out

    def info(self, now: float) -> dict:
        stage = self.stage(now)
        data = {
            "id": self.id,
            "createdAt": hub_time(self.created),
            "dockerImage": self.spec.get("dockerImage"),
            "command": self.spec.get("command"),
            "arguments": self.spec.get("arguments", []),
            "environment": self.spec.get("environment", {}),
            "secrets": {k: None for k in self.spec.get("secrets", {})},  # names only, never values
            "flavor": self.spec.get("flavor"),
            "labels": self.spec.get("labels", {}),
            "volumes": self.spec.get("volumes"),
            **({"network": self.spec["network"]} if self.spec.get("network") else {}),
            "owner": {"id": "u-" + self.namespace, "name": self.namespace, "type": "user"},
            "status": {"stage": stage, "message": self.plan.message if stage == "ERROR" else None},
        }
        if stage != "SCHEDULING":
            data["startedAt"] = hub_time(self.started())
        finished = self.finished(now)
        if finished is not None and stage in ("COMPLETED", "ERROR", "CANCELED"):
            data["finishedAt"] = hub_time(finished)
        return data


@dataclass
class ViewerDataset:
    """A dataset as the dataset viewer API sees it."""

    configs: dict[str, dict[str, list[dict]]]  # config -> split -> rows
    access: str = "public"  # public | private (needs a token) | gated (401 always) | broken (viewer unavailable)
    features: dict[str, dict] = field(default_factory=dict)  # column -> its feature type, as the viewer says it


class Emulator:
    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.plans: list[JobPlan] = []
        self.requests: list[dict[str, Any]] = []
        self.models: dict[str, int] = {}  # repo id -> parameter count
        self.model_info: dict[str, dict] = {}  # repo id -> more model_info fields (pipeline_tag, library_name, ...)
        self.gated_models: set[str] = set()
        self.datasets: dict[str, ViewerDataset] = {}
        self.files: dict[tuple[str, str], bytes] = {}  # (repo id, path) -> content, served under /resolve/
        self.faults: list[dict[str, Any]] = []
        self.buckets: dict[str, dict] = {}  # bucket id -> {private, created, files: {path: entry}}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "Emulator":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve_model(self, folder: Path, repo: str | None = None, **overrides: Any) -> str:
        """Serve a real model's Hub files (tests/data/configs/<org>--<name>/, see its README.md) as the Hub does:
        each JSON file under /resolve/, and model_info with its model_info.json fields (pipeline tag, library,
        safetensors) and the file list (siblings). `overrides` replace model_info fields (None: left out).
        Returns the repo id (<org>/<name>, or `repo`)."""
        repo = repo or folder.name.replace("--", "/", 1)
        info = {**json.loads((folder / "model_info.json").read_text()), **overrides}
        names = sorted(p.name for p in folder.iterdir() if p.suffix == ".json" and p.name != "model_info.json")
        with self.lock:
            for name in names:
                self.files[(repo, name)] = (folder / name).read_bytes()
            self.models[repo] = int(info["safetensors"]["total"]) if info.get("safetensors") else 0
            self.model_info[repo] = {**{k: v for k, v in info.items() if v is not None},
                                     "siblings": [{"rfilename": name} for name in names]}
        return repo

    def plan_next(self, plan: JobPlan) -> None:
        """The next submitted job follows `plan` (else a quick successful default)."""
        with self.lock:
            self.plans.append(plan)

    def advance(self, seconds: float) -> None:
        """Every emulated job moves on `seconds` at once, as if that long had passed (its creation and cancel
        times move back): what a test would otherwise sleep for, without waiting. Only the jobs' clock moves; the
        server's times stay real, so what the Hub reports stays in the past."""
        with self.lock:
            for job in self.jobs.values():
                job.created -= seconds
                if job.canceled_at is not None:
                    job.canceled_at -= seconds

    def fail_next(self, method: str, path_regex: str, status: int | None, *, count: int = 1, after: bool = False,
                  echo_auth: bool = False, headers: dict[str, str] | None = None, hang: float = 0.0,
                  skip: int = 0) -> None:
        """The next `count` matching requests get `status` (with `headers`, e.g. Retry-After); with after=True
        the request is served first (a job created, then a 500: what a proxy timeout looks like to the client);
        with echo_auth the error message quotes the request's Authorization header, as misconfigured proxies do;
        `hang` seconds of silence come first (status None: then the normal answer, so a POST hung past the client's
        timeout makes its job after the client gave up, as the Hub does); the first `skip` matching requests are
        served as usual (the second of two POSTs fails)."""
        with self.lock:
            self.faults.append({"method": method, "path": re.compile(path_regex), "status": status, "count": count,
                                "after": after, "echo_auth": echo_auth, "headers": headers or {}, "hang": hang,
                                "skip": skip})

    def count(self, method: str, path_regex: str) -> int:
        """Requests received so far for a method and path."""
        with self.lock:
            return sum(1 for r in self.requests if r["method"] == method and re.fullmatch(path_regex, r["path"]))

    def _fault(self, method: str, path: str) -> dict | None:
        with self.lock:
            for fault in self.faults:
                if fault["method"] == method and fault["path"].fullmatch(path) and fault["count"] > 0:
                    if fault["skip"] > 0:
                        fault["skip"] -= 1
                        continue
                    fault["count"] -= 1
                    return fault
        return None

    def labeled(self, **labels: str) -> list[Job]:
        """The jobs carrying these labels, oldest first (a submission's label names every job one call made)."""
        with self.lock:
            jobs = [j for j in self.jobs.values()
                    if all(j.spec.get("labels", {}).get(k) == v for k, v in labels.items())]
        return sorted(jobs, key=lambda j: j.created)

    def in_group(self, group: str) -> list[Job]:
        """The jobs of one network group (a run across nodes), oldest first."""
        with self.lock:
            jobs = [j for j in self.jobs.values() if (j.spec.get("network") or {}).get("group") == group]
        return sorted(jobs, key=lambda j: j.created)

    @staticmethod
    def billing(jobs: list[Job]) -> list[str]:
        """The ids of those jobs still scheduled or running now: what the account pays for."""
        now = time.time()
        return [j.id for j in jobs if j.stage(now) in ("SCHEDULING", "RUNNING")]

    def posted_jobs(self) -> list[dict]:
        return [r["json"] for r in self.requests if r["method"] == "POST" and re.fullmatch(r"/api/jobs/[^/]+", r["path"])]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        emu = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY (socketserver.StreamRequestHandler.setup: `if self.disable_nagle_algorithm:
            # self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)`): an answer's headers and body
            # are two writes, and Nagle held the body until the client's delayed ACK, ~40 ms on every request
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
                self._send(status, {"error": message}, {"X-Error-Message": message, **(headers or {})})

            def _token(self) -> str | None:
                auth = self.headers.get("authorization", "")
                return auth[7:] if auth.lower().startswith("bearer ") else None

            def _role(self) -> str | None:
                return TOKENS.get(self._token() or "")

            def _record(self, body: bytes | None) -> None:
                parsed = urlparse(self.path)
                entry = {"method": self.command, "path": parsed.path, "query": parse_qs(parsed.query),
                         "headers": dict(self.headers.items()), "json": None}
                if body:
                    try:
                        entry["json"] = json.loads(body)
                    except ValueError:
                        entry["json"] = None
                with emu.lock:
                    emu.requests.append(entry)

            def setup(self) -> None:
                super().setup()
                self._real_wfile = self.wfile

            def do_GET(self) -> None:
                self.raw = b""
                self._record(None)
                if not self._file(head=False):
                    self._route("GET", None)

            def do_HEAD(self) -> None:
                self._record(None)
                if not self._file(head=True):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def _file(self, *, head: bool) -> bool:
                """/{repo}/resolve/{revision}/{path}: the files of emu.files, with the headers hf_hub_download reads."""
                match = re.fullmatch(r"/(?:api/)?(?:models/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", urlparse(self.path).path)
                if not match:
                    return False
                repo, _, name = match.groups()
                known = repo in emu.models or any(r == repo for r, _ in emu.files)
                body = emu.files.get((repo, name))
                if body is None:
                    code = "EntryNotFound" if known else "RepoNotFound"
                    self.send_response(404)
                    self.send_header("X-Error-Code", code)
                    self.send_header("X-Error-Message", f"{code}: {repo}/{name}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return True
                digest = hashlib.sha256(body).hexdigest()
                self.send_response(200)
                self.send_header("ETag", f'"{digest}"')
                self.send_header("X-Repo-Commit", digest[:40])
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)
                return True

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":  # hf_xet streams its uploads
                    out = b""
                    while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)):
                        out += self.rfile.read(size)
                        self.rfile.readline()
                    self.rfile.readline()
                    return out
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def do_POST(self) -> None:
                body = self.raw = self._body()
                self._record(body)
                try:
                    parsed = json.loads(body) if body else None
                except ValueError:  # NDJSON batches, xet's binary xorbs and shards
                    parsed = None
                self._route("POST", parsed)

            def _route(self, method: str, body: Any) -> None:
                parsed = urlparse(self.path)
                path, query = parsed.path, parse_qs(parsed.query)
                fault = emu._fault(method, path)
                if fault is not None and fault["hang"]:
                    time.sleep(fault["hang"])
                if fault is not None and fault["status"] is not None:
                    if fault["after"]:
                        self.wfile = _Discard()  # serve the request, drop its answer
                        self._dispatch(method, body, path, query)
                        self.wfile = self._real_wfile
                    echoed = f" (Authorization: {self.headers.get('authorization')})" if fault["echo_auth"] else ""
                    return self._error(fault["status"], "injected failure" + echoed, fault["headers"])
                return self._dispatch(method, body, path, query)

            def _dispatch(self, method: str, body: Any, path: str, query: dict) -> None:
                if emulator_buckets.handle(self, emu, method, path, query, getattr(self, "raw", b"")):
                    return None
                if path in ("/is-valid", "/splits", "/first-rows", "/size", "/rows"):
                    return self._viewer(path, query)
                if path == "/api/whoami-v2":
                    role = self._role()
                    if role is None:
                        return self._error(401, "Invalid credentials in Authorization header")
                    return self._send(200, {"type": "user", "id": "u-1", "name": USER, "fullname": "Emu User",
                                            "orgs": [{"name": o} for o in ORGS],
                                            "auth": {"accessToken": {"displayName": "emu", "role": role}}})
                if path == "/api/jobs/hardware":
                    return self._send(200, [_hardware(h) for h in HARDWARE])
                match = re.fullmatch(r"/api/models/(.+)", path)
                if match:
                    repo = match.group(1)
                    if repo not in emu.models:  # the Hub's code for it: huggingface_hub raises RepositoryNotFoundError
                        return self._error(404, "Repository not found", {"X-Error-Code": "RepoNotFound"})
                    n = emu.models[repo]
                    body = {"id": repo, "modelId": repo, "private": False,
                            "gated": "manual" if repo in emu.gated_models else False,
                            "safetensors": {"parameters": {"BF16": n}, "total": n}}
                    return self._send(200, {**body, **emu.model_info.get(repo, {})})
                match = re.fullmatch(r"/api/datasets/(.+)", path)
                if match:
                    ds = emu.datasets.get(match.group(1))
                    if ds is None or (ds.access == "private" and self._role() is None):
                        return self._error(404, "Repository not found")
                    return self._send(200, {"id": match.group(1), "private": ds.access == "private",
                                            "gated": "auto" if ds.access == "gated" else False})
                match = re.fullmatch(r"/api/jobs/([^/]+)(?:/([^/]+)(?:/(logs|cancel|metrics))?)?", path)
                if not match:
                    return self._error(404, f"no route {method} {path}")
                if self._role() is None:
                    return self._error(401, "Invalid credentials in Authorization header")
                namespace, job_id, action = match.groups()
                if namespace not in (USER, *ORGS):
                    return self._error(403, f"You are not allowed to run jobs in {namespace}")
                if job_id is None:
                    return self._create(namespace, body) if method == "POST" else self._list(namespace, query)
                job = emu.jobs.get(job_id)
                if job is None or job.namespace != namespace:
                    return self._error(404, f"Job {job_id} not found")
                if action == "logs":
                    return self._logs(job, query)
                if action == "metrics":
                    return emulator_metrics.stream(self, job)
                if action == "cancel" and method == "POST":
                    with emu.lock:
                        if job.stage(time.time()) in ("SCHEDULING", "RUNNING"):
                            job.canceled_at = time.time()
                    return self._send(200, job.info(time.time()))
                return self._send(200, job.info(time.time()))

            def _create(self, namespace: str, spec: dict) -> None:
                if self._role() != "write":
                    return self._error(403, "This token does not have write access")
                if spec.get("flavor") not in FLAVORS:
                    return self._error(400, f"Invalid flavor {spec.get('flavor')!r}")
                if not isinstance(spec.get("command"), list) or not spec.get("dockerImage"):
                    return self._error(400, "command (list) and dockerImage are required")
                timeout = spec.get("timeoutSeconds")
                if timeout is not None and (not isinstance(timeout, int) or timeout <= 0):
                    return self._error(400, "Invalid timeoutSeconds")
                for key, value in (spec.get("labels") or {}).items():
                    if not re.fullmatch(r"[\w.\-]{1,63}", key) or not re.fullmatch(r"[\w.\-=]{0,63}", str(value)):
                        return self._error(400, f"Invalid label {key}={value}")
                problem = _network_problem(spec.get("network"))
                if problem:
                    return self._error(400, problem)
                with emu.lock:
                    plan = emu.plans.pop(0) if emu.plans else JobPlan()
                    job = Job(uuid.uuid4().hex[:24], namespace, spec, plan, time.time())
                    emu.jobs[job.id] = job
                return self._send(200, job.info(time.time()))

            def _list(self, namespace: str, query: dict) -> None:
                now = time.time()
                stages = set(query.get("stage", []))
                labels = dict(item.split("=", 1) for item in query.get("label", []))
                out = [j.info(now) for j in emu.jobs.values() if j.namespace == namespace
                       and (not stages or j.stage(now) in stages)
                       and all(j.spec.get("labels", {}).get(k) == v for k, v in labels.items())]
                return self._send(200, out)

            def _logs(self, job: Job, query: dict) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                drop = job.plan.drop_logs_after
                if drop is not None:  # chunked, so that closing early is a protocol error, not a clean end
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                self.close_connection = True
                if drop is not None:
                    lines = job.released_lines(time.time())[:drop]
                    for at, line in lines:
                        event = b"data: " + json.dumps({"timestamp": hub_time(at), "data": line}).encode() + b"\n\n"
                        self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.write(b"40\r\ndata: {\"trunc")  # a chunk cut short, then the socket closes
                    self.wfile.flush()
                    return
                tail = int(query["tail"][0]) if "tail" in query else None
                sent = 0
                try:
                    self.wfile.write(b"data: " + json.dumps({"timestamp": hub_time(job.created),
                                                            "data": "===== Job started ====="}).encode() + b"\n\n")
                    first, kept_alive = True, time.time()
                    while True:
                        now = time.time()
                        lines = job.released_lines(now)
                        if first and tail is not None:
                            sent = max(0, len(lines) - tail)
                            first = False
                        for at, line in lines[sent:]:
                            self.wfile.write(b"data: " + json.dumps({"timestamp": hub_time(at), "data": line}).encode()
                                             + b"\n\n")
                        sent = len(lines)
                        if job.plan.logs_keepalive_s and now - kept_alive >= job.plan.logs_keepalive_s:
                            self.wfile.write(b": keep-alive\n\n")  # resets the client's read timeout
                            kept_alive = now
                        self.wfile.flush()
                        if job.stage(now) in ("COMPLETED", "ERROR", "CANCELED"):
                            return
                        time.sleep(0.05)
                except (BrokenPipeError, ConnectionResetError):
                    return

            def _viewer(self, path: str, query: dict) -> None:
                name = (query.get("dataset") or [""])[0]
                ds = emu.datasets.get(name)
                if ds is None:
                    return self._error(404, "The dataset does not exist, or is not accessible without authentication")
                if ds.access == "gated" or (ds.access == "private" and self._token() is None):
                    return self._error(401, "The dataset is gated or private: authentication needed")
                if ds.access == "private" and self._role() is None:
                    return self._error(403, "Forbidden")
                if path == "/is-valid":
                    ok = ds.access != "broken"
                    return self._send(200, {"viewer": ok, "preview": ok, "search": ok, "filter": ok})
                if ds.access == "broken":
                    return self._error(501, "The dataset viewer is not available for this dataset")
                if path == "/splits":
                    return self._send(200, {"splits": [{"dataset": name, "config": c, "split": s}
                                                       for c, splits in ds.configs.items() for s in splits]})
                config = (query.get("config") or [None])[0]
                if path == "/size":
                    splits = [{"dataset": name, "config": c, "split": s, "num_rows": len(rows)}
                              for c, sp in ds.configs.items() for s, rows in sp.items() if config in (None, c)]
                    return self._send(200, {"size": {"splits": splits}, "partial": False})
                split = (query.get("split") or [None])[0]
                if config not in ds.configs or split not in ds.configs[config]:
                    return self._error(404, "Not found: config or split")
                rows = ds.configs[config][split][:100]
                features = [{"feature_idx": i, "name": k, "type": ds.features.get(k, {"dtype": "string", "_type": "Value"})}
                            for i, k in enumerate(rows[0])] if rows else []
                return self._send(200, {"dataset": name, "config": config, "split": split, "features": features,
                                        "rows": [{"row_idx": i, "row": r, "truncated_cells": []}
                                                 for i, r in enumerate(rows)], "truncated": False})

        return Handler


class _Discard:
    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass


def _network_problem(network: Any) -> str | None:
    """What Jobs refuses in a job's network group (huggingface_hub's run_job docstring states the rules)."""
    if network is None:
        return None
    if not isinstance(network, dict) or not re.fullmatch(r"[a-z0-9-]{1,46}", str(network.get("group", ""))):
        return "Invalid network group: lowercase alphanumerics and dashes, 46 characters max"
    aliases = network.get("aliases") or []
    if not isinstance(aliases, list) or len(set(aliases)) != len(aliases) or not all(
            re.fullmatch(r"[a-z0-9-]{1,34}", str(a)) for a in aliases):
        return "Invalid network aliases: lowercase alphanumerics and dashes, 34 characters max, unique"
    return None


def _hardware(entry: tuple) -> dict:
    name, model, count, vram, per_minute = entry
    accelerator = None
    if model:
        accelerator = {"type": "gpu", "model": model, "quantity": str(count), "vram": vram, "manufacturer": "Nvidia"}
    cpus, ram = HOSTS.get(name, (8, 32))
    return {"name": name, "prettyName": name, "cpu": f"{cpus} vCPU", "ram": f"{ram} GB", "ephemeralStorage": "N/A",
            "accelerator": accelerator, "unitCostMicroUSD": int(per_minute * 1e6), "unitCostUSD": per_minute,
            "unitLabel": "minute"}
