"""Shared fixtures: the Hub/Jobs emulator on 127.0.0.1, isolated data dirs, a tiny local model."""

import atexit
import importlib.util
import os
import shlex
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Before anything imports huggingface_hub or datasets (which fix their cache and token paths from HF_HOME at
# import): this process's Hub files live in a folder of its own, never in the developer's ~/.cache/huggingface,
# where a file one run downloaded would answer the next run's read without a request (isolated_home then gives
# each test its own folder).
_SESSION_HF_HOME = tempfile.mkdtemp(prefix="hftm-hf-home-")
atexit.register(shutil.rmtree, _SESSION_HF_HOME, ignore_errors=True)
os.environ["HF_HOME"] = _SESSION_HF_HOME
for _name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ASSETS_CACHE", "HF_TOKEN_PATH", "HF_XET_CACHE",
              "HF_DATASETS_CACHE"):
    os.environ.pop(_name, None)

import pytest  # noqa: E402

from tests import prewarmed  # noqa: E402
from tests.emulator import TOKENS, Emulator, ViewerDataset

pytest_plugins = ["tests.marks", "pytester"]  # the slow marks, checked against what each test starts

# Never read a developer's real token or cache, never phone home.
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.pop("HF_TOKEN", None)
os.environ.pop("HUGGING_FACE_HUB_TOKEN", None)
os.environ.pop("HF_TRAIN_BACKEND", None)
os.environ["HF_TRAIN_RESUME_SWEEPS"] = "0"  # a server start in one test must not revive another test's sweep
if os.environ.get("PYTEST_XDIST_WORKER"):  # workers share two cores: one torch thread each, not several that fight
    os.environ.setdefault("OMP_NUM_THREADS", "1")

WRITE_TOKEN = next(t for t, role in TOKENS.items() if role == "write")
READ_TOKEN = next(t for t, role in TOKENS.items() if role == "read")
HAS_TRAINING_STACK = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "trl", "peft", "datasets"))
needs_training = pytest.mark.skipif(not HAS_TRAINING_STACK, reason="the 'train' extra (torch, trl, ...) is absent")


_LOOPBACK = ("127.", "::1", "localhost")
_real_connect = socket.socket.connect


def _loopback_only(self: socket.socket, address) -> None:
    if isinstance(address, tuple) and not str(address[0]).startswith(_LOOPBACK):
        raise ConnectionRefusedError(f"tests may only reach 127.0.0.1, not {address[0]}")
    return _real_connect(self, address)


socket.socket.connect = _loopback_only  # any test reaching past this machine fails loudly


def _signature_models_built_once() -> None:
    """The SDK builds each tool's argument model (pydantic, from the function's signature) anew for every server,
    ~40 ms of each of the hundreds of servers the tests start. The model depends on nothing but what the key
    holds (the parameters' names, kinds, annotations and defaults, the return annotation, what is skipped), so a
    server built later gets the same model that a first build made from the same signature."""
    import inspect

    from mcp.server.mcpserver.tools import base

    real, built = base.func_metadata, {}

    def func_metadata(func, skip_names=(), structured_output=None):
        signature = inspect.signature(func)
        key = (func.__module__, func.__qualname__, tuple(skip_names), structured_output,
               repr(signature.return_annotation),
               tuple((p.name, p.kind, repr(p.annotation), repr(p.default)) for p in signature.parameters.values()
                     if p.name not in skip_names))
        if key not in built:
            built[key] = real(func, skip_names=skip_names, structured_output=structured_output)
        return built[key]

    base.func_metadata = func_metadata


_signature_models_built_once()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first (training, then detached), each group in its files' order: workers that draw
    from this list finish together instead of one running the last long test alone."""
    def weight(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("training") else 1 if item.get_closest_marker("detached") else 2

    items.sort(key=weight)  # stable, and the same on every worker (xdist checks that they collected alike)


def pytest_collection_finish(session: pytest.Session) -> None:
    """A worker that will run training tests starts its pre-warmed Python now: its imports overlap the first
    tests, not a training test's start."""
    if HAS_TRAINING_STACK and any(item.get_closest_marker("training") for item in session.items):
        prewarmed.WORKER = prewarmed.Server()


@pytest.fixture(autouse=True)
def prewarmed_python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A training test runs its scripts in the worker's pre-warmed Python (tests/prewarmed.py): the local
    backend's supervisor through HFTM_PYTHON, tests' own runs through tests.helpers.python_command()."""
    if prewarmed.WORKER is None or request.node.get_closest_marker("training") is None:
        return
    command = prewarmed.WORKER.command()
    if command is not None:
        monkeypatch.setenv("HFTM_PYTHON", shlex.join(command))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def emulator() -> Iterator[Emulator]:
    emu = Emulator().start()
    emu.models["Qwen/Qwen2-0.5B-Instruct"] = 494_032_768
    emu.models["meta-llama/Llama-3.1-8B"] = 8_030_261_248
    yield emu
    emu.stop()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own ledger/jobs dir and HF cache; the hardware cache starts empty."""
    from hf_train_mcp.estimate.hardware import reset_cache

    home = tmp_path / "hf-train-home"
    monkeypatch.setenv("HF_TRAIN_HOME", str(home))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    _point_hub_paths(monkeypatch, tmp_path / "hf-home")
    reset_cache()
    return home


def _point_hub_paths(monkeypatch: pytest.MonkeyPatch, hf_home: Path) -> None:
    """huggingface_hub read HF_HOME once, at import: its downloads (ours, transformers') and token files follow
    this test's HF_HOME too, so that no test finds a file that another one downloaded."""
    import huggingface_hub.constants as constants

    for name, path in (("HF_HOME", hf_home), ("HF_HUB_CACHE", hf_home / "hub"),
                       ("HUGGINGFACE_HUB_CACHE", hf_home / "hub"), ("HF_ASSETS_CACHE", hf_home / "assets"),
                       ("HF_TOKEN_PATH", hf_home / "token"), ("HF_STORED_TOKENS_PATH", hf_home / "stored_tokens"),
                       ("HF_XET_CACHE", hf_home / "xet")):
        monkeypatch.setattr(constants, name, str(path))


def point_hub_constants(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """huggingface_hub reads HF_ENDPOINT once, at import: a library that downloads through it (transformers'
    tokenizers) must follow this test's endpoint, not the one of whichever test imported it first."""
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")


@pytest.fixture
def hub(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Emulator]:
    """The Hub is the emulator, and a write token is configured. What a test puts on it (files, models,
    datasets) and what it set up but did not consume (faults, job plans) is gone before the next test."""
    monkeypatch.setenv("HF_ENDPOINT", emulator.url)
    monkeypatch.setenv("HF_TRAIN_DATASETS_SERVER", emulator.url)
    monkeypatch.setenv("HF_TOKEN", WRITE_TOKEN)
    point_hub_constants(monkeypatch, emulator.url)
    with emulator.lock:
        emulator.faults.clear()
        emulator.plans.clear()
        kept = (dict(emulator.files), dict(emulator.models), set(emulator.gated_models), dict(emulator.datasets),
                dict(emulator.jobs), dict(emulator.buckets), dict(emulator.model_info))
    yield emulator
    with emulator.lock:  # jobs too: a job's labels (its idempotency key) must not answer another test's lookup
        (emulator.files, emulator.models, emulator.gated_models, emulator.datasets, emulator.jobs,
         emulator.buckets, emulator.model_info) = kept


@pytest.fixture
def quick_hub_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub read that keeps failing (5xx, no answer) gives up after 1.5 s of retries instead of the production
    6 s (hub.READ_DEADLINE_S, `bounded`'s default): the same retries and the same HubUnreachable, sooner. For
    tests whose Hub stays down for many reads; a test that counts retries or waits out a Retry-After keeps 6 s."""
    from hf_train_mcp import hub as hub_module

    monkeypatch.setattr(hub_module, "READ_DEADLINE_S", 1.5)
    monkeypatch.setattr(hub_module, "BACKOFF_S", 0.1)


@pytest.fixture
def quick_log_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """job_status waits 1 s, not the production 3 s (hf_jobs.LOG_DEADLINE_S), on the log stream of a running
    job: the emulator, like the Hub, keeps that stream open, so every look at a running job waited the whole 3 s.
    The lines printed so far come at once, so 1 s reads the same lines."""
    from hf_train_mcp.backends import hf_jobs

    monkeypatch.setattr(hf_jobs, "LOG_DEADLINE_S", 1.0)
    monkeypatch.setattr(hf_jobs, "LOG_READER_GRACE_S", 0.5)


@pytest.fixture
def chat(hub: Emulator) -> Emulator:
    """The Hub, with org/chat on it: tests.helpers.CHAT_ROWS as its one train split."""
    from tests.helpers import CHAT_ROWS  # not at the top: helpers imports huggingface_hub, which reads the env above

    hub.datasets["org/chat"] = ViewerDataset({"default": {"train": CHAT_ROWS}})
    return hub


@pytest.fixture
def zoo(hub: Emulator) -> Emulator:
    """The Hub, with the rows every method reads (tests.helpers.ZOO_FORMATS) as org/<method> and, for the methods
    that read images beside their text, org/<method>-images; a test serves the zoo's models it needs
    (hub.serve_model)."""
    from tests.helpers import ZOO_FORMATS, viewer_rows, zoo_dataset

    for method, formats in ZOO_FORMATS.items():
        for images, data_format in zip((False, True), formats):
            if data_format:
                hub.datasets[zoo_dataset(method, images)] = ViewerDataset({"default": {
                    "train": viewer_rows(data_format, hub.url)}})
    return hub


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, emulator: Emulator) -> None:
    """No token; any Hub call would go to a closed emulator port, never the internet."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_TRAIN_DATASETS_SERVER", "http://127.0.0.1:9")
    point_hub_constants(monkeypatch, "http://127.0.0.1:9")
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HAS_TRAINING_STACK:
        pytest.skip("the 'train' extra is absent")
    from hf_train_mcp_demo.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen2")


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch):
    """Scripts served over plain http from 127.0.0.1, which the server may read only because this test's
    HF_TRAIN_HTTP_SCRIPT_HOSTS names that loopback host (real URLs must be https). A value that is bytes is the
    file; ("redirect", path) answers 302 to it; ("trickle", bytes, seconds) sends one byte per that many seconds."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    files: dict[str, object] = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            entry = files.get(self.path)
            if isinstance(entry, tuple) and entry[0] == "redirect":
                self.send_response(302)
                self.send_header("Location", entry[1])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = entry[1] if isinstance(entry, tuple) else entry
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            if isinstance(entry, tuple) and entry[0] == "trickle":
                for byte in body:
                    time.sleep(entry[2])
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
            else:
                self.wfile.write(body or b"")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True  # a trickling answer must not hold the test's end
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_TRAIN_HTTP_SCRIPT_HOSTS", "127.0.0.1")
    yield files, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# llama.cpp's real converter, from the llama.cpp sources that llama-cpp-python's sdist carries
LLAMA_CPP_SDIST = "llama-cpp-python==0.3.36"


@pytest.fixture(scope="session")
def llama_cpp() -> Path:
    """A llama.cpp source tree: HFTM_LLAMA_CPP, else the one inside llama-cpp-python's sdist (PyPI), cached."""
    import fcntl

    given = os.environ.get("HFTM_LLAMA_CPP")
    if given:
        return Path(given)
    cache = Path(__file__).resolve().parents[1] / ".cache" / "llama.cpp"
    cache.parent.mkdir(exist_ok=True)
    with open(cache.parent / "llama.cpp.lock", "a") as lock:  # the workers (pytest -n) fetch it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cache / "convert_hf_to_gguf.py").exists():
            _fetch_llama_cpp(cache)
    return cache


def _fetch_llama_cpp(cache: Path) -> None:
    import subprocess
    import sys
    import tarfile

    download = cache.parent / "sdist"
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d",
                        str(download), LLAMA_CPP_SDIST], check=True, timeout=300, capture_output=True)
    except (subprocess.SubprocessError, OSError) as exc:
        pytest.skip(f"llama.cpp's converter is not installable here ({LLAMA_CPP_SDIST} from PyPI: {exc})")
    prefix = f"llama_cpp_python-{LLAMA_CPP_SDIST.split('==')[1]}/vendor/llama.cpp/"
    with tarfile.open(next(download.glob("*.tar.gz"))) as sdist:
        members = [m for m in sdist.getmembers() if m.name.startswith(prefix) and m.isfile() and
                   m.name[len(prefix):].split("/")[0] in ("convert_hf_to_gguf.py", "conversion", "gguf-py")]
        for member in members:
            member.name = member.name[len(prefix):]
        sdist.extractall(cache, members=members, filter="data")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """No sweep supervisor or run watcher of this session outlives it (each would poll a Hub emulator that is
    gone), nor does the worker's pre-warmed Python."""
    import signal

    if prewarmed.WORKER is not None:
        prewarmed.WORKER.stop()

    base = str(session.config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        home = next((v[len(b"HF_TRAIN_HOME="):].decode() for v in environ if v.startswith(b"HF_TRAIN_HOME=")), "")
        detached = b"hf_train_mcp.shell.sweep_supervisor" in command or b"hf_train_mcp.shell.node_supervisor" in command
        if detached and home.startswith(base):
            try:
                os.kill(int(entry.name), signal.SIGTERM)
            except OSError:
                pass


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's working folder, holding tickets.jsonl (what `./tickets.jsonl` names)."""
    monkeypatch.chdir(tmp_path)
    from hf_train_mcp_demo.tiny import write_jsonl
    from tests.local_files import ROWS

    write_jsonl(tmp_path / "tickets.jsonl", ROWS)
    return tmp_path
