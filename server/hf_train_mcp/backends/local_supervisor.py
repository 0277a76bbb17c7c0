"""Supervises one local training process: log capture, timeout, and an exit-code file that outlives us.

Started detached (own session) by the local backend as `python -m hf_train_mcp.backends.local_supervisor JOB_DIR`, so
the job survives the MCP server; job_status reads the files it leaves in JOB_DIR.
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

EXIT_FILE = "exit_code"
CANCEL_FILE = "canceled"
LOG_FILE = "log.txt"
STARTED_FILE = "started_at"
TIMEOUT_EXIT = 124


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _interpreter(command: list[str]) -> list[str]:
    """HFTM_PYTHON, a command, runs a Python command in place of this Python (the tests' pre-warmed interpreter,
    which has the training stack's heaviest imports done before the script starts); the script never sees it."""
    given = os.environ.pop("HFTM_PYTHON", None)
    return [*shlex.split(given), *command[1:]] if given and command[:1] == [sys.executable] else command


def run(job_dir: Path) -> int:
    spec = json.loads((job_dir / "launch.json").read_text())
    command = _interpreter(spec["command"])
    env = {**os.environ, **spec["env"]}  # ours is already the job's minimal environment (backends/local.py)
    _write_atomic(job_dir / STARTED_FILE, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    with open(job_dir / LOG_FILE, "ab", buffering=0) as log:
        child = subprocess.Popen(command, cwd=job_dir / spec.get("cwd", "."), env=env, stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        signal.signal(signal.SIGTERM, lambda *_: child.terminate())
        try:
            code = child.wait(timeout=spec["timeout_seconds"])
        except subprocess.TimeoutExpired:
            error = {"type": "Timeout", "message": f"job timed out after {spec['timeout_seconds']} s"}
            log.write(f"\nHFTM_ERROR {json.dumps(error)}\n".encode())
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
            code = TIMEOUT_EXIT
    _write_atomic(job_dir / EXIT_FILE, str(code))
    return code


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
