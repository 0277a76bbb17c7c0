"""Run the rendered script on this machine, detached, with the same status/logs/cancel as Jobs."""

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from hf_train_mcp.backends.base import GpuReading, JobGone, JobRef, JobSpec, JobState, LogRead, UserRun, Words
from hf_train_mcp.backends.catalog import Catalog
from hf_train_mcp.backends.jobs_hardware import jobs_catalog
from hf_train_mcp.user_scripts.source import copy_ignore
from hf_train_mcp.clock import now_iso
from hf_train_mcp.credentials import TOKEN_NAMES, secret_value
from hf_train_mcp.detach import spawn
from hf_train_mcp.errors import TrainError, EnvironmentMissing, NotFoundError
from hf_train_mcp.backends.local_supervisor import CANCEL_FILE, EXIT_FILE, LOG_FILE, STARTED_FILE, TIMEOUT_EXIT
from hf_train_mcp.paths import jobs_dir
from hf_train_mcp.rendering.script import Script

TRAINING_PACKAGES = ("torch", "transformers", "trl", "datasets", "peft", "accelerate", "trackio")
# What a local job inherits from the server: how to find programs, caches, GPUs, proxies and certificates.
# Nothing else (the server's own settings, other services' credentials) reaches the user's script.
_INHERITED = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "TEMP", "TMP", "PYTHONPATH", "VIRTUAL_ENV",
    "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY",
    "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
    "HFTM_LLAMA_CPP",  # a llama.cpp checkout for GGUF exports (else the job clones one)
    "HFTM_PYTHON",  # a pre-warmed Python that the supervisor runs the script with (tests; backends/local_supervisor.py)
})  # fmt: skip
_INHERITED_PREFIXES = ("LC_", "XDG_", "HF_", "TRANSFORMERS_", "TORCH", "PYTORCH_", "NCCL_", "NVIDIA_", "OMP_",
                       "MKL_", "OPENBLAS_", "UV_", "PIP_")
_NEVER = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|API_KEY|PRIVATE|^HF_TRAIN_", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"://[^/@\s]+@")  # an index or proxy URL with user:password in it


# What a caller's own script (run_script) inherits: how to find programs, the Hub's address, locale, GPUs, proxies,
# certificates and thread settings; no cache or config location of the server's user (HF_HOME and its token file,
# XDG_CONFIG_HOME, uv's user config): its HOME is a folder of its own.
_SCRIPT_INHERITED = frozenset({
    "PATH", "LANG", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
    "no_proxy", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "HF_ENDPOINT", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY",
})  # fmt: skip
_SCRIPT_PREFIXES = ("LC_", "NCCL_", "NVIDIA_", "OMP_", "MKL_", "OPENBLAS_", "PYTORCH_", "UV_", "PIP_")


def _allowed(names: frozenset[str], prefixes: tuple[str, ...]) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if (k in names or k.startswith(prefixes)) and not _NEVER.search(k)
            and not _URL_CREDENTIALS.search(v)}


def _with_token(env: dict[str, str], read_token: bool) -> dict[str, str]:
    token = None
    if read_token:
        from hf_train_mcp.hub import hub_token

        token = hub_token()
    if token:
        env["HF_TOKEN"] = token
    else:  # nor may huggingface_hub in the job fall back on the token the user stored with `hf auth login`
        env["HF_TOKEN_PATH"] = os.devnull
    return env


def job_environment(*, read_token: bool) -> dict[str, str]:
    """The environment of a local training job (this server's own script): an allow-list of the server's, plus
    HF_TOKEN only when the job reads gated or private Hub data (local jobs never push)."""
    return _with_token(_allowed(_INHERITED, _INHERITED_PREFIXES), read_token)


def script_environment(home: Path, *, read_token: bool) -> dict[str, str]:
    """The environment of a caller's own script run here: the minimum to run, HOME a folder of its own (uv's
    cache and Pythons still the server's, so nothing is downloaded again), HF_TOKEN only when named. It runs as
    this server's user, so it could still read that user's files: this keeps mistakes out, not a determined
    script (README: --allow-scripts with --allow-local-jobs)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**_allowed(_SCRIPT_INHERITED, _SCRIPT_PREFIXES), "HOME": str(home)}
    user = Path.home()  # where uv keeps them for this user (its defaults on Linux and macOS)
    env.setdefault("UV_CACHE_DIR", str(Path(os.environ.get("XDG_CACHE_HOME") or user / ".cache") / "uv"))
    env.setdefault("UV_PYTHON_INSTALL_DIR", str(Path(os.environ.get("XDG_DATA_HOME") or user / ".local" / "share")
                                               / "uv" / "python"))
    return _with_token(env, read_token)



def has_training_stack() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in TRAINING_PACKAGES)


def has_cuda() -> bool:
    """Cheap check without importing torch (the server must stay light)."""
    return shutil.which("nvidia-smi") is not None or os.path.exists("/dev/nvidia0")


NVIDIA_SMI_QUERY = ["--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"]
NVIDIA_SMI_TIMEOUT_S = 2.0  # a wedged driver can hang nvidia-smi; job_status must not wait on it


def parse_nvidia_smi(text: str, *, visible: str | None = None) -> list[GpuReading] | None:
    """`nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits`
    (memory in MiB), limited to CUDA_VISIBLE_DEVICES when it names indices (the GPUs a local job sees).
    Rows nvidia-smi cannot fill ("[N/A]") are skipped; None when no row is left."""
    shown = None
    if visible is not None:  # "" hides every GPU; UUIDs (GPU-...) are not matched, so all rows stay
        parts = [v.strip() for v in visible.split(",") if v.strip()]
        if not parts:
            return None
        shown = set(parts) if all(p.isdigit() for p in parts) else None
    out = []
    for row in text.strip().splitlines():
        cells = [c.strip() for c in row.split(",")]
        if len(cells) != 4 or (shown is not None and cells[0] not in shown):
            continue
        try:
            index, util, used, total = int(cells[0]), float(cells[1]), float(cells[2]), float(cells[3])
        except ValueError:
            continue
        out.append(GpuReading(index=index, utilization_pct=util, memory_used_gb=round(used * 2**20 / 1e9, 2),
                              memory_total_gb=round(total * 2**20 / 1e9, 2)))
    return out or None


def this_machines_gpus() -> list[GpuReading] | None:
    """This machine's GPUs through nvidia-smi (never torch: the server stays light); None without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, *NVIDIA_SMI_QUERY], capture_output=True, text=True,
                              timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return parse_nvidia_smi(done.stdout, visible=os.environ.get("CUDA_VISIBLE_DEVICES"))


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a finished child we have not reaped yet is a zombie: dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _mtime_iso(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class LocalBackend:
    name = "local"
    place = "this machine"
    words = Words(job="a local job", the_backend="the local backend", flavor_kind="local flavor",
                  catalog="this machine's hardware", instead="backend='hf'",
                  no_nodes="nodes spans several Jobs machines in a network group: send backend='hf', or drop nodes to "
                           "train on this machine",
                  lost_ledger="local jobs are not found")
    reads_local_paths = True
    bills = False
    chooses_flavor = False
    pushes_to_hub = False
    has_namespace = False
    needs_local_jobs_permission = True
    labels_submissions = False  # a submission is a folder written here: nothing to find after a crash
    output_dir = "output"
    default_timeout_s = 6 * 3600
    logs_final_when_settled = True
    runs_images = False
    cancel_note = "stopped (a local job costs nothing); resume_from this job continues from its last checkpoint"

    @staticmethod
    def flavor(*, cuda: bool) -> str | None:
        return "local-cuda" if cuda else "local-cpu"

    @staticmethod
    def catalog(token: str | None, *, offline: bool) -> Catalog:
        """This machine has no price list of its own: a run here is estimated against the Jobs flavors (what each
        would take), and runs on flavor(); a measurement (estimate_cost(measure=True)) times this machine."""
        return jobs_catalog(token, offline=offline)

    @staticmethod
    def claims(job_id: str) -> bool:
        """Whether a job id not in the ledger is one of ours (they look like 'local-1a2b3c4d5e6f')."""
        return job_id.startswith("local-")

    def __init__(self, token: str | None = None):
        pass  # a local job reads the server's token only when it needs it (job_environment)

    def find(self, submission: str, namespace: str | None = None) -> JobRef | None:
        return None

    def find_keyed(self, key: str, namespace: str | None = None) -> JobRef | None:
        return None

    def job_dir(self, job_id: str) -> Path:
        if not job_id.startswith("local-") or not job_id[6:].isalnum():
            raise NotFoundError(f"{job_id!r} is not a local job id (they look like 'local-1a2b3c4d5e6f')")
        return jobs_dir() / job_id

    def training_command(self) -> list[str]:
        if has_training_stack():
            return [sys.executable, "-u", "train.py"]
        if shutil.which("uv"):
            return ["uv", "run", "train.py"]
        raise EnvironmentMissing(
            "local training needs the training stack: `pip install 'hf-train-mcp[train]'` (in Docker: build with "
            "--build-arg EXTRAS=train), or install uv so the script's own header can provision it"
        )

    @staticmethod
    def script_command(run: UserRun) -> list[str]:
        """A run_script job here: its command as sent, else `uv run` (which provisions the header's and the
        extra dependencies) or, without uv, this server's Python."""
        if run.command:
            return list(run.command)
        entry = run.entry or "script.py"
        if shutil.which("uv"):
            return ["uv", "run", *(x for dep in run.dependencies for x in ("--with", dep)), entry, *run.script_args]
        return [sys.executable, "-u", entry, *run.script_args]

    def command(self, spec: JobSpec) -> list[str]:
        """What would run (a dry run shows it even where the training stack is not installed yet)."""
        if spec.run is not None:
            return self.script_command(spec.run)
        try:
            return self.training_command()
        except TrainError:
            return ["uv", "run", "train.py"]

    def submit(self, script: Script, spec: JobSpec) -> JobRef:
        # read before anything is made: a secret that is not set refuses the run
        handed = {name: secret_value(name) for name in spec.run.secrets if name not in TOKEN_NAMES} if spec.run else {}
        job_id = f"local-{uuid.uuid4().hex[:12]}"
        folder = jobs_dir() / job_id
        folder.mkdir(parents=True)
        env = job_environment(read_token=spec.read_token)
        if spec.run is not None:
            command, cwd = self._place_run(spec.run, script, folder), spec.run.folder and "project" or "."
            env = {**script_environment(folder / "home", read_token="HF_TOKEN" in spec.run.secrets), **handed,
                   **dict(spec.run.env)}
        else:
            command, cwd = self.training_command(), "."
            (folder / "train.py").write_text(script.text)
        launch = {
            "command": command,
            "cwd": cwd,
            "timeout_seconds": spec.timeout_seconds,
            "env": {
                "PYTHONUNBUFFERED": "1",
                "TRACKIO_DIR": str(folder / "trackio"),
                "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
                "TOKENIZERS_PARALLELISM": "false",
            },
        }
        (folder / "launch.json").write_text(json.dumps(launch, indent=2))
        (folder / LOG_FILE).touch()
        # detached: survives the server; its pid is its process group, which cancel stops whole
        pid = spawn([sys.executable, "-m", "hf_train_mcp.backends.local_supervisor", str(folder)], cwd=folder,
                    log=folder / "runner.err", env=env)  # passed down by the runner, never on disk
        (folder / "pid").write_text(str(pid))

        return JobRef(job_id, folder.as_uri(), "RUNNING", now_iso(), job_dir=str(folder))

    def _place_run(self, run: UserRun, script: Script, folder: Path) -> list[str]:
        """A run_script job's files in its folder: the project copied (a job never writes into the caller's
        own folder), or the script's source; and what runs there."""
        if run.folder:
            # links stay links (as the hash and the caps counted them): a linked folder is not copied whole
            shutil.copytree(run.folder, folder / "project", symlinks=True,
                            ignore=copy_ignore(run.folder, run.withheld))
        elif run.command is None:
            (folder / "script.py").write_text(script.text)
        return self.script_command(run)

    def inspect(self, job_id: str, namespace: str | None = None) -> JobState:
        folder = self.job_dir(job_id)
        if not folder.is_dir():
            raise JobGone(f"no local job {job_id!r}: pass a job_id from submit_training or list_jobs")
        state = JobState(stage="RUNNING", created_at=_mtime_iso(folder / "launch.json"), url=folder.as_uri())
        if (folder / STARTED_FILE).exists():
            state.started_at = (folder / STARTED_FILE).read_text().strip()
        if (folder / CANCEL_FILE).exists():
            state.stage, state.message = "CANCELED", "canceled by request"
            state.finished_at = _mtime_iso(folder / CANCEL_FILE)
        elif not self._exited(folder, state) and not process_alive(int((folder / "pid").read_text())):
            # the runner writes its exit code and then exits: look again, it may have done both since
            if not self._exited(folder, state):
                state.stage, state.message = "ERROR", "the training process died without an exit code (killed?)"
                state.finished_at = _mtime_iso(folder / LOG_FILE) if (folder / LOG_FILE).exists() else None
        return state

    @staticmethod
    def _exited(folder: Path, state: JobState) -> bool:
        """Fill `state` from the exit-code file the runner leaves; False when there is none yet."""
        if not (folder / EXIT_FILE).exists():
            return False
        code = int((folder / EXIT_FILE).read_text().strip() or 1)
        state.finished_at = _mtime_iso(folder / EXIT_FILE)
        if code == 0:
            state.stage, state.message = "COMPLETED", "training finished"
        else:
            state.stage = "ERROR"
            state.message = "timed out" if code == TIMEOUT_EXIT else f"training exited with code {code}"
        return True

    def read_log(self, job_id: str) -> list[str]:
        log = self.job_dir(job_id) / LOG_FILE
        if not log.exists():
            return []
        return log.read_text(errors="replace").splitlines()

    def logs(self, job_id: str, namespace: str | None = None, *, tail: int | None, finished: bool,
             upto: int | None = None) -> LogRead:
        lines = self.read_log(job_id)
        return LogRead(lines[-tail:] if tail else lines[:upto])

    def cancel(self, job_id: str, namespace: str | None = None) -> None:

        folder = self.job_dir(job_id)
        (folder / CANCEL_FILE).write_text(now_iso())
        pid = int((folder / "pid").read_text())
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if process_alive(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def gpus(self, job_id: str, namespace: str | None = None) -> list[GpuReading] | None:
        """This machine's GPUs (a local job shares them with whatever else runs here); None on a CPU machine."""
        self.job_dir(job_id)  # refuses what is not a local job id
        return this_machines_gpus()
