"""Load: N concurrent streamable-HTTP clients calling list_jobs and job_status for S seconds on a local server.

The server gets its own HF_TRAIN_HOME with a ledger of finished local jobs, so every call is served from the
ledger and the job folders (no Hub). Reports calls, errors, p50/p99 latency per tool, throughput and the
server's peak RSS.

On a small machine the load generator competes with the server for the same cores, and the SDK's own client
spends more CPU per call than the server (it validates every structured result against the tool's output
schema with jsonschema). So by default the clients are lean: each is a real streamable-HTTP MCP session
(initialize, notifications/initialized, Mcp-Session-Id and protocol headers, SSE responses) over one httpx
connection, run in a separate process; with --pin the server gets CPU 0 and the clients the other CPUs, so the
figure is what one core of server answers. --sdk-client uses mcp.Client instead (the old, client-bound figure).

Closed loop (the default) measures saturation: with N clients calling back to back, latency is about N divided
by throughput for any server. --rate R gives each client R calls per second instead (open loop, what agents
that poll do), which measures latency under a stated load.

Run: python benchmarks/load.py [--clients 50] [--seconds 30] [--pin] [--rate 0] [--bare] [--sdk-client]
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from hf_train_mcp.jobs.ledger import JobRecord, Ledger, now_iso  # noqa: E402

JOBS = 20
TOOLS = ("list_jobs", "job_status")
PROTOCOL = "2025-06-18"
WARMUP_S = 3.0  # sessions open and the server's first calls load its core: not part of the steady state
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


def _call(n: int, ids: list[str]) -> tuple[str, dict]:
    return ("list_jobs", {"limit": 20}) if n % 2 else ("job_status", {"job_id": ids[n % len(ids)]})


def _result(response) -> dict:
    """The JSON-RPC message of a POST answer: one SSE `data:` event, or plain JSON."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:"):
                return json.loads(line[5:])
        return {}
    return response.json()


async def _loop(call, index: int, ids: list[str], window: tuple[float, float], rate: float, out: dict) -> None:
    """Calls until the window ends: back to back, or at `rate` per second with random (Poisson) gaps, so that
    clients do not arrive in lockstep. Calls before the window opens (the warm-up) are made but not counted."""
    rng = random.Random(index)
    n, (warm_from, until) = index, window
    while time.monotonic() < until:
        if rate:
            await asyncio.sleep(rng.expovariate(rate))
        started = time.perf_counter()
        try:
            ok = await call(n)
        except Exception:
            ok = False
        if time.monotonic() >= warm_from:
            out[_call(n, ids)[0]].append((time.perf_counter() - started, ok))
        n += 1


async def _lean_client(url: str, ids: list[str], window: tuple[float, float], index: int, rate: float, out: dict) -> None:
    import httpx

    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with httpx.AsyncClient(timeout=60) as http:
        hello = await http.post(url, headers=headers, json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "load", "version": "1"}}})
        headers = {**headers, "mcp-session-id": hello.headers["mcp-session-id"], "mcp-protocol-version": PROTOCOL}
        await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

        async def call(n: int) -> bool:
            name, args = _call(n, ids)
            answer = await http.post(url, headers=headers, json={
                "jsonrpc": "2.0", "id": n + 1, "method": "tools/call", "params": {"name": name, "arguments": args}})
            return answer.status_code == 200 and _result(answer).get("result", {}).get("isError") is False

        await _loop(call, index, ids, window, rate, out)


async def _sdk_client(url: str, ids: list[str], window: tuple[float, float], index: int, rate: float, out: dict) -> None:
    from mcp import Client

    async with Client(url) as client:

        async def call(n: int) -> bool:
            return not (await client.call_tool(*_call(n, ids))).is_error

        await _loop(call, index, ids, window, rate, out)


def _worker(url: str, ids: list[str], wall_window: tuple[float, float], first: int, count: int, rate: float,
            sdk: bool, cpus: list[int] | None, queue) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    out: dict[str, list] = {name: [] for name in TOOLS}
    offset = time.monotonic() - time.time()
    window = (wall_window[0] + offset, wall_window[1] + offset)
    client = _sdk_client if sdk else _lean_client

    async def main() -> None:
        await asyncio.gather(*(client(url, ids, window, i, rate, out) for i in range(first, first + count)))

    asyncio.run(main())
    queue.put(out)


def run(clients: int, seconds: float, *, bare: bool, pin: bool, rate: float, sdk: bool, workers: int) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    pin = pin and len(cpus) >= 2
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
        if pin:
            os.sched_setaffinity(server.pid, cpus[:1])
        try:
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.1)
            url = f"http://127.0.0.1:{port}/mcp"
            context = multiprocessing.get_context("spawn")
            queue = context.Queue()
            opens = time.time() + 2 + WARMUP_S  # the workers start within the 2 s
            until = opens + seconds
            share = [clients // workers + (i < clients % workers) for i in range(workers)]
            procs = [context.Process(target=_worker, args=(url, ids, (opens, until), sum(share[:i]), share[i], rate, sdk,
                                                           cpus[1:] if pin else None, queue))
                     for i in range(workers)]
            for p in procs:
                p.start()
            peak = 0.0
            while time.time() < until:
                if time.time() >= opens:
                    peak = max(peak, rss_mb(server.pid))
                time.sleep(0.5)
            results = [queue.get(timeout=120) for _ in procs]
            for p in procs:
                p.join(30)
        finally:
            server.terminate()
            server.wait(10)
    label = "bare MCPServer" if bare else "hf-train-mcp"
    mode = f"{rate:g} calls/s per client" if rate else "back to back"
    print(f"{label}: {clients} {'SDK' if sdk else 'lean'} clients, {mode}, {seconds:.0f} s"
          f"{', server pinned to 1 CPU' if pin else ''}; server peak RSS {peak:.0f} MB")
    summary: dict = {"server": label, "clients": clients, "rate": rate, "pinned": pin, "rss_mb": round(peak)}
    total = 0
    for name in TOOLS:
        samples = [s for r in results for s in r[name]]
        times = sorted(t for t, _ in samples)
        errors = sum(not ok for _, ok in samples)
        total += len(samples)

        def pct(q: float) -> float:
            return times[min(len(times) - 1, int(q * len(times)))] * 1000 if times else 0.0

        summary[name] = {"calls": len(times), "errors": errors, "p50_ms": round(pct(0.5), 1),
                         "p99_ms": round(pct(0.99), 1),
                         "mean_ms": round(statistics.fmean(times) * 1000, 1) if times else 0.0}
        print(f"{name:11s} calls {len(times):6d}  errors {errors:3d}  p50 {pct(0.5):7.1f} ms  p99 {pct(0.99):7.1f} ms")
    summary["calls_per_s"] = round(total / seconds)
    print(f"throughput  {total / seconds:.0f} calls/s")
    print(json.dumps(summary))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=float, default=0.0, help="calls per second per client (0: back to back)")
    parser.add_argument("--pin", action="store_true", help="server on CPU 0, clients on the other CPUs")
    parser.add_argument("--workers", type=int, default=1, help="client processes")
    parser.add_argument("--bare", action="store_true", help="a bare MCPServer with trivial tools, as a baseline")
    parser.add_argument("--sdk-client", action="store_true", help="mcp.Client sessions instead of lean clients")
    args = parser.parse_args()
    run(args.clients, args.seconds, bare=args.bare, pin=args.pin, rate=args.rate, sdk=args.sdk_client,
        workers=args.workers)


if __name__ == "__main__":
    main()
