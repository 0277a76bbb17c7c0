"""Load: N concurrent streamable-HTTP clients calling list_jobs and job_status for S seconds on a local server.

The server gets its own HF_TRAIN_HOME with a ledger of finished local jobs, so every call is served from the
ledger and the job folders (no Hub). Reports calls, errors, p50/p99 latency per tool and the server's peak RSS.
Run: python benchmarks/load.py [--clients 50] [--seconds 30]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from hf_train_mcp.ledger import JobRecord, Ledger, now_iso  # noqa: E402

JOBS = 20
# The same two tool names on a bare MCPServer: what the SDK and uvicorn cost alone, on this machine.
BARE = """
import sys, uvicorn
from mcp.server import MCPServer
mcp = MCPServer("bare")

@mcp.tool()
def list_jobs(limit: int = 20) -> dict:
    return {"jobs": []}

@mcp.tool()
def job_status(job_id: str) -> dict:
    return {"job_id": job_id, "stage": "COMPLETED"}

uvicorn.run(mcp.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def seed(home: Path) -> list[str]:
    """Finished local jobs, as the local runner leaves them."""
    os.environ["HF_TRAIN_HOME"] = str(home)
    ledger = Ledger()
    ids = []
    for i in range(JOBS):
        job_id = f"local-{i:012x}"
        folder = home / "jobs" / job_id
        folder.mkdir(parents=True)
        (folder / "launch.json").write_text("{}")
        (folder / "pid").write_text("1")
        (folder / "log.txt").write_text("".join(
            f'HFTM_LOG {{"step": {s}, "total_steps": 100, "loss": {2 - s / 100}}}\n' for s in range(1, 101)))
        (folder / "exit_code").write_text("0")
        ledger.record(JobRecord(
            job_id=job_id, backend="local", namespace=None, method="sft", model="m", dataset="d", request_json="{}",
            script_sha256="0" * 64, script_path=None, job_dir=str(folder), stage="COMPLETED", flavor="local-cpu",
            timeout="1h", job_url=folder.as_uri(), hub_model_id=None, model_url=None, trackio_url=None,
            output_bucket=None, estimated_hours=None, estimated_cost_usd=None, effective_batch_size=1,
            warnings_json="[]", idempotency_key=None, created_at=now_iso()))
        ids.append(job_id)
    return ids


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def client_loop(url: str, ids: list[str], until: float, index: int, latencies: dict, errors: dict) -> None:
    async with Client(url) as client:
        n = index
        while time.monotonic() < until:
            name, args = (("list_jobs", {"limit": 20}) if n % 2 else ("job_status", {"job_id": ids[n % len(ids)]}))
            started = time.perf_counter()
            try:
                result = await client.call_tool(name, args)
                ok = not result.is_error
            except Exception:
                ok = False
            latencies[name].append(time.perf_counter() - started)
            if not ok:
                errors[name] += 1
            n += 1


async def run(clients: int, seconds: float, bare: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ids = seed(Path(tmp))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "HF_TRAIN_HOME": tmp, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": ""}
        command = (["-c", BARE, str(port)] if bare else
                   ["-m", "hf_train_mcp", "serve", "--transport", "http", "--port", str(port), "--allow-local-jobs"])
        server = subprocess.Popen([sys.executable, *command], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            url = f"http://127.0.0.1:{port}/mcp"
            latencies: dict[str, list[float]] = {"list_jobs": [], "job_status": []}
            errors = {"list_jobs": 0, "job_status": 0}
            peak = 0.0
            until = time.monotonic() + seconds
            async with anyio.create_task_group() as group:
                for i in range(clients):
                    group.start_soon(client_loop, url, ids, until, i, latencies, errors)
                while time.monotonic() < until:
                    peak = max(peak, rss_mb(server.pid))
                    await anyio.sleep(0.5)
        finally:
            server.terminate()
            server.wait(10)
    print(f"{'bare MCPServer' if bare else 'hf-train-mcp'}: {clients} clients, {seconds:.0f} s, "
          f"server peak RSS {peak:.0f} MB")
    summary = {}
    for name, times in latencies.items():
        ordered = sorted(times)
        p = (lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000) if ordered else (lambda q: 0)
        summary[name] = {"calls": len(times), "errors": errors[name], "p50_ms": round(p(0.5), 1),
                         "p99_ms": round(p(0.99), 1), "mean_ms": round(statistics.fmean(times) * 1000, 1) if times else 0}
        print(f"{name:11s} calls {len(times):6d}  errors {errors[name]:3d}  p50 {p(0.5):7.1f} ms  p99 {p(0.99):7.1f} ms")
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--bare", action="store_true", help="a bare MCPServer with trivial tools, as a baseline")
    args = parser.parse_args()
    anyio.run(run, args.clients, args.seconds, args.bare)


if __name__ == "__main__":
    main()
