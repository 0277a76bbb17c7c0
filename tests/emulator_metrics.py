"""The emulator's Jobs metrics stream (`GET /api/jobs/{ns}/{id}/metrics`), as huggingface_hub's
fetch_job_metrics reads it: SSE `event: metric` samples, one a second, with no timestamp and per-GPU figures
under opaque ids; silence while the job waits for hardware (or only keep-alive comments, when a test plans
them); 406 once it has ended (the real API's answer).
"""

import hashlib
import json
import re
import time
from typing import Any

TERMINAL = ("COMPLETED", "ERROR", "CANCELED")
GPU_GB = {"t4": 16, "l4": 24, "l40s": 48, "a10g": 24, "a100": 80, "h200": 141, "rtx-pro-6000": 96}  # per card
STREAM_S = 30  # the real stream never ends; the client's 10 s read timeout cuts it, so this is only a cap


def flavor_gpus(flavor: str) -> tuple[int, float]:
    """(GPU count, GB per GPU) of a flavor, as its metrics report them (a CPU flavor: no GPU)."""
    if flavor.startswith("cpu"):
        return 0, 0.0
    family, _, count = re.fullmatch(r"(.+?)(-small|-medium|-large)?(?:x(\d+))?", flavor).groups()
    return int(count or 1), float(GPU_GB.get(family, 24))


def metric_event(job: Any) -> dict:
    """One sample: the job plan's (utilisation %, GB used) per GPU, else the flavor's GPUs idle (a NaN
    utilisation is sent as JSON's NaN, which Python's json reads back)."""
    count, per_card = flavor_gpus(job.spec.get("flavor") or "cpu-basic")
    figures = job.plan.gpus if job.plan.gpus is not None else [(0.0, 0.0)] * count
    gpus = {hashlib.sha256(f"{job.id}{i}".encode()).hexdigest()[:8]: {
        "utilization": util if util != util else int(util), "memory_used_bytes": int(used * 1e9), "memory_total_bytes": int(per_card * 1e9)}
        for i, (util, used) in enumerate(figures)}
    return {"cpu_usage_pct": 12, "cpu_millicores": 3500, "memory_used_bytes": 1_306_624,
            "memory_total_bytes": 15_032_385_536, "rx_bps": 0, "tx_bps": 0, "gpus": gpus, "replica": "57vr7"}


def stream(handler: Any, job: Any) -> None:
    """Answer one metrics request on `handler` (the emulator's request handler)."""
    if job.stage(time.time()) in TERMINAL:
        return handler._error(406, "Job is not running")
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.close_connection = True
    until, kept_alive = time.time() + STREAM_S, time.time()
    try:
        while time.time() < until and job.stage(time.time()) not in TERMINAL:
            if job.stage(time.time()) == "RUNNING" and not job.plan.metrics_hang:
                handler.wfile.write(b"event: metric\ndata: " + json.dumps(metric_event(job)).encode() + b"\n\n")
                handler.wfile.flush()
                time.sleep(1.0)
            elif job.plan.metrics_keepalive_s and time.time() - kept_alive >= job.plan.metrics_keepalive_s:
                handler.wfile.write(b": keep-alive\n\n")  # resets the client's read timeout, carries no sample
                handler.wfile.flush()
                kept_alive = time.time()
            else:
                time.sleep(0.05)
    except (BrokenPipeError, ConnectionResetError):
        return
