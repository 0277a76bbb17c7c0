"""A pre-warmed Python for the training scripts that tests run: a fork server that imported torch and
bitsandbytes (with them torch._dynamo and torch._inductor: ~2-5 s of each training interpreter's start) once, and
a client that stands in for `python [-u] SCRIPT ARGS...`.

The client hands the server its argv, working folder, environment and stdin/stdout/stderr; the server forks, and
the child becomes that interpreter (its own process group, the client's environment, cwd, argv and standard
streams, `sys.path[0]` the script's folder) and runs the real file with runpy as `__main__`. The client exits as
the script did (its code, or the signal that killed it) and passes on the signals it gets (SIGTERM, SIGINT,
SIGHUP) to the child's process group; when the client dies, the child's group is killed.

The training stack (transformers, TRL, PEFT, datasets, accelerate, trackio: ~5 s more of each start) is imported
ahead too, under the server's environment, and it reads that environment at import. The server notes which
variables each module read then. A forked run whose environment differs in one of them gets that module's state
derived again from its own: the modules of REDERIVED (constants only) are executed again in place, and the
names other modules imported from them follow (`_rederive`). A difference in anything else a module read at
import, or in what torch's native libraries read when they load (thread counts, library paths, CUDA devices),
gets a fresh interpreter instead (the client execs the real Python), as does every run when no server answers.
tests/test_prewarmed.py holds it: a forked run's module state equals a fresh interpreter's under the
environments the tests use.

    python tests/prewarmed.py serve SOCKET             the server (conftest.py starts one per worker)
    python tests/prewarmed.py SOCKET [-u] SCRIPT ARGS  the client (HFTM_PYTHON, tests.helpers.python_command)
"""

import json
import os
import signal
import socket
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager

PRELOADED = ("torch", "torch._dynamo", "torch._inductor.compile_fx", "bitsandbytes", "numpy", "safetensors",
             "PIL.Image")
# The training stack, imported ahead under the server's environment (what the rendered scripts import). sklearn
# (sentence-transformers imports it) sets KMP_DUPLICATE_LIB_OK and KMP_INIT_AT_FORK, which a test worker that
# imported it passes on to its runs: the server sets them too, so that those runs are forked
STACK = ("huggingface_hub", "datasets", "transformers", "transformers.trainer", "peft", "accelerate", "trackio",
         "trl", "trl.trainer.sft_trainer", "trl.trainer.dpo_trainer", "trl.trainer.grpo_trainer",
         "trl.trainer.kto_trainer", "trl.trainer.reward_trainer", "sklearn", "sentence_transformers")
# Its modules whose constants come from the environment (HF_HOME, HF_ENDPOINT, HF_HUB_OFFLINE, TRACKIO_DIR, the
# terminal's COLUMNS, ...), directly or through an earlier one of them, in the order a run whose environment
# differs there derives them again
REDERIVED = ("huggingface_hub.constants", "huggingface_hub.utils._http", "datasets.config", "transformers.utils.hub",
             "transformers.utils.logging", "trackio.utils", "trackio.frontend_config", "trackio._vendor.tunneling",
             "accelerate.commands.config.config_args", "accelerate.commands.menu.helpers")
# What native libraries read when they load: a run with other values gets a fresh interpreter.
_LOAD_TIME = ("OMP_", "MKL_", "OPENBLAS_", "GOMP_", "KMP_", "CUDA_", "NVIDIA_", "LD_", "TORCHINDUCTOR_", "TORCHDYNAMO_",
              "TORCH_LOGS", "TORCH_CPP_", "PYTORCH_", "BNB_", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONWARNINGS",
              "PYTHONHOME")
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LOG_NAME = "started.log"  # one line per run the server forked (tests/marks.py reads it)
_started_with: dict[str, str] = {}  # the server's environment before its imports
_imports_set: dict[str, str] = {}  # what its imports set there (TORCHINDUCTOR_CACHE_DIR): a script's would too
# Modules that copy the whole environment at import and keep only the variables with this prefix (fsspec/config.py
# set_conf_env: `envdict = dict(envdict)`, then `if key.startswith("FSSPEC_")`)
_WALKS = {"fsspec.config": "FSSPEC_"}
_import_reads: dict[str, tuple[str | None, set[str]]] = {}  # variable -> (the value seen, the modules that read it)


def _threads() -> list[str]:
    """This process's threads other than its main one and pyarrow's jemalloc background thread (jemalloc's fork
    handlers make that one safe: datasets forks workers with it running)."""
    names = [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")
             if int(t) != os.getpid()]
    return [n for n in names if n != "jemalloc_bg_thd"]


@contextmanager
def _noting_reads() -> Iterator[None]:
    """Within the block, each variable read from os.environ (get, [], in; not a walk over all of it), with the
    value seen and the module whose code asked, is noted in _import_reads."""
    real = os._Environ.__getitem__

    def noted(self: os._Environ, key: str) -> str:
        frame = sys._getframe(1)
        if frame.f_code.co_name in ("__iter__", "__eq__", "copy"):  # a walk over the whole mapping: none of its own
            return real(self, key)
        while frame is not None and frame.f_globals.get("__name__") in ("os", "collections.abc", "shutil"):
            frame = frame.f_back
        module = frame.f_globals.get("__name__", "?") if frame is not None else "?"
        if not key.startswith(_WALKS.get(module, "")):
            return real(self, key)
        try:
            value = real(self, key)
        except KeyError:
            _import_reads.setdefault(key, (None, set()))[1].add(module)
            raise
        _import_reads.setdefault(key, (value, set()))[1].add(module)
        return value

    os._Environ.__getitem__ = noted  # type: ignore[method-assign]
    try:
        yield
    finally:
        os._Environ.__getitem__ = real  # type: ignore[method-assign]


def _differing_reads(env: dict[str, str]) -> tuple[list[str], list[str]]:
    """(what the child derives again, what it cannot): the variables the stack read at import whose value in the
    run's environment differs from the one seen, split by whether only REDERIVED modules read them."""
    # a variable the imports set themselves (sklearn's KMP_DUPLICATE_LIB_OK, by setdefault) may be there with
    # that value, as in the environment of a process that imported them before it started the run
    differing = sorted(k for k, (seen, _) in _import_reads.items()
                       if env.get(k) != seen and (k not in _imports_set or env.get(k) != _imports_set[k]))
    rederived = [k for k in differing if _import_reads[k][1] <= set(REDERIVED)]  # read by nothing else
    return rederived, [k for k in differing if k not in rederived]


def _plain(value: object, depth: int = 0) -> bool:
    """Data, as a constant derived from the environment is: no object of a class the module defines."""
    from pathlib import PurePath

    if isinstance(value, (str, bytes, int, float, bool, type(None), PurePath)):
        return True
    if depth < 2 and type(value) in (tuple, list, frozenset, set):
        return all(_plain(v, depth + 1) for v in value)  # type: ignore[attr-defined]
    return depth < 2 and type(value) is dict and all(_plain(k, depth + 1) and _plain(v, depth + 1)
                                                     for k, v in value.items())  # type: ignore[attr-defined]


def _rederive() -> None:
    """In a forked child whose environment differs in what REDERIVED modules read at import: each is executed
    again, in order, in a scratch namespace, and its constants (plain data) take the values found there; its
    classes and functions stay the ones other modules hold. A name another module imported from one
    (`from ..constants import HF_HUB_CACHE`) follows at once, before the next one is derived from it; a function's
    default computed from one (the same path or URL string) follows at the end."""
    spaces = [space for space in (getattr(m, "__dict__", None) for m in list(sys.modules.values()))
              if isinstance(space, dict)]
    defaults: dict[int, tuple[object, object]] = {}  # id(old) -> (old, new)
    for name in REDERIVED:
        module = sys.modules[name]
        scratch = {k: getattr(module, k) for k in ("__name__", "__file__", "__package__", "__spec__", "__loader__")}
        with open(module.__file__, "rb") as source:  # type: ignore[arg-type]
            exec(compile(source.read(), module.__file__, "exec"), scratch)  # type: ignore[arg-type]
        for key, old in list(vars(module).items()):
            new = scratch.get(key, old)
            if key.startswith("__") or not _plain(old) or not _plain(new) or new == old:
                continue
            for space in spaces:  # the module itself among them
                if space.get(key, new) is old:
                    space[key] = new
            if isinstance(old, (str, bytes)) and len(old) > 8:  # never an object many values share (True, 0, "")
                defaults[id(old)] = (old, new)
    roots = {n.split(".")[0] for n in STACK}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in roots and isinstance(getattr(module, "__dict__", None), dict):
            _follow_defaults(vars(module), defaults)


def _follow_defaults(space: dict, defaults: dict[int, tuple[object, object]]) -> None:
    """The module's functions (and its classes' methods) whose default is the very object of a changed constant."""
    from types import FunctionType

    for value in list(space.values()):
        inside = list(vars(value).values()) if isinstance(value, type) else [value]
        for function in (getattr(v, "__func__", v) for v in inside):
            given = function.__defaults__ if isinstance(function, FunctionType) else None
            if given and any(id(d) in defaults and defaults[id(d)][0] is d for d in given):
                function.__defaults__ = tuple(defaults[id(d)][1] if id(d) in defaults and defaults[id(d)][0] is d
                                              else d for d in given)


def _unlike_load_time(env: dict[str, str]) -> list[str]:
    """The names whose values in env differ from the server's when its native libraries loaded. A value that
    its imports set themselves (as the script's would) may be there or not."""
    def load_time(values: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in values.items() if k.startswith(_LOAD_TIME) and _imports_set.get(k) != v}

    want, got = load_time(_started_with), load_time(env)
    return sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))


# --- the server -------------------------------------------------------------------------------------------------
def serve(path: str) -> None:
    import importlib

    _started_with.update(os.environ)
    for name in PRELOADED:
        importlib.import_module(name)
    with _noting_reads():
        for name in STACK:
            importlib.import_module(name)
    _imports_set.update({k: v for k, v in os.environ.items() if _started_with.get(k) != v})
    threads = _threads()
    if threads:  # a thread's locks would be held forever in a forked child
        raise SystemExit(f"prewarmed: cannot serve (threads: {threads})")
    import tempfile

    tempfile.tempdir = None  # the child finds its own TMPDIR
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)  # clients connect only once it is ready
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # runners are reaped by the kernel
    parent = os.getppid()
    listener.settimeout(2.0)
    while os.getppid() == parent:  # the pytest worker that started it is gone: so is the server
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        if os.fork() == 0:
            try:
                listener.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _runner(conn, os.path.join(os.path.dirname(path), LOG_NAME))
            finally:  # a runner never goes back to the server's loop
                os._exit(0)
        conn.close()


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, 8, 3)
    while len(head) < 8:
        head += conn.recv(8 - len(head))
    size = struct.unpack("!Q", head)[0]
    body = b""
    while len(body) < size:
        body += conn.recv(size - len(body))
    return json.loads(body), fds


def _runner(conn: socket.socket, log: str) -> None:
    """One run: the child forked, its signals passed on, its end reported to the client."""
    conn.settimeout(None)
    request, fds = _receive(conn)
    rederived, unlike = _differing_reads(request["env"])
    unlike += _unlike_load_time(request["env"])
    if unlike:
        readers = {k: sorted(_import_reads[k][1]) for k in unlike if k in _import_reads}
        print(f"prewarmed: not forked, these differ from the server's: {unlike} (read at import by {readers})",
              file=sys.stderr, flush=True)
        conn.sendall(b"cold\n")
        return
    request["rederived"] = rederived
    pid = os.fork()
    if pid == 0:
        try:
            conn.close()
            _become(request, fds)
        except BaseException:
            import traceback

            traceback.print_exc()  # on the client's stderr once _become has put it in place
        finally:
            os._exit(1)
    try:
        os.setpgid(pid, pid)  # here too: a signal passed on at once must find the child's group
    except (PermissionError, ProcessLookupError):
        pass  # the child did it first, or is already gone
    for fd in fds:
        os.close(fd)
    with open(log, "a") as out:  # whose run it is: a test's HF_HOME lies in its own tmp_path
        out.write(request["env"].get("HF_HOME", "") + "\t" + " ".join(["python", *request["argv"]]) + "\n")
    conn.sendall(b"forked\n")
    _watch(conn, pid)


def _watch(conn: socket.socket, pid: int) -> None:
    import select

    child = os.pidfd_open(pid)
    pending = b""
    while True:
        ready, _, _ = select.select([conn, child], [], [])
        if child in ready:
            _, status = os.waitpid(pid, 0)
            conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            return
        data = conn.recv(64)
        if not data:  # the client is gone (killed): so is what it ran
            _signal_group(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            _signal_group(pid, int(line))


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def _become(request: dict, fds: list[int]) -> None:
    """This forked child becomes `python [-u] SCRIPT ARGS` as the client was started; never returns."""
    os.setpgid(0, 0)
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for name, value in _imports_set.items():
        os.environ.setdefault(name, value)
    if request["rederived"]:
        _rederive()
    sys.argv = list(request["argv"])
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
    _standard_streams(unbuffered=request["unbuffered"] or bool(request["env"].get("PYTHONUNBUFFERED")))
    import numpy

    numpy.random.seed()  # a fresh interpreter's global RNG is seeded from the OS, not shared with its siblings
    os._exit(_run(sys.argv[0]))


def _standard_streams(*, unbuffered: bool) -> None:
    import io
    import locale

    encoding = os.environ.get("PYTHONIOENCODING") or locale.getpreferredencoding(False)

    def stream(fd: int, mode: str, **kwargs) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        writes = mode == "wb"
        buffered = raw if unbuffered and writes else (io.BufferedWriter if writes else io.BufferedReader)(raw)
        return io.TextIOWrapper(buffered, encoding=encoding, write_through=unbuffered and writes, **kwargs)

    sys.stdin = sys.__stdin__ = stream(0, "rb")
    sys.stdout = sys.__stdout__ = stream(1, "wb")
    sys.stderr = sys.__stderr__ = stream(2, "wb", errors="backslashreplace", line_buffering=True)


def _run(script: str) -> int:
    """Runs the script as `python SCRIPT` would, through interpreter shutdown (threads joined, atexit)."""
    import atexit
    import runpy
    import threading

    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        code = -signal.SIGINT
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:  # runpy's frames: not the script's
            tb = tb.tb_next
        sys.excepthook(type(exc), exc, tb or exc.__traceback__)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for out in (sys.stdout, sys.stderr):
        try:
            out.flush()
        except (OSError, ValueError):
            pass
    if code < 0:  # as CPython does after an uncaught KeyboardInterrupt: the signal's own death
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


# --- the test worker's side -------------------------------------------------------------------------------------
class Server:
    """This worker's server (conftest.py starts it when the session holds training tests): its client's command
    once it is ready, and the runs it forked so far (tests/marks.py)."""

    def __init__(self) -> None:
        import subprocess
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="hftm-prewarmed-")
        self.socket = os.path.join(self.folder, "sock")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
        with open(os.path.join(self.folder, "server.log"), "ab") as log:
            self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", self.socket],
                                            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True)

    def command(self, wait_s: float = 180.0) -> list[str] | None:
        """The client's command (None when the server could not start: then scripts run in a fresh Python)."""
        import time

        deadline = time.monotonic() + wait_s
        while not os.path.exists(self.socket) and self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return [sys.executable, os.path.abspath(__file__), self.socket] if os.path.exists(self.socket) else None

    def runs(self) -> list[tuple[str, str]]:
        """(the run's HF_HOME, its command) of each run forked so far."""
        try:
            with open(os.path.join(self.folder, LOG_NAME)) as log:
                return [tuple(line.split("\t", 1)) for line in log.read().splitlines()]  # type: ignore[misc]
        except FileNotFoundError:
            return []

    def stop(self) -> None:
        import shutil

        self.process.terminate()
        self.process.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)


WORKER: Server | None = None  # this pytest worker's, once started


# --- the client -------------------------------------------------------------------------------------------------
def client(path: str, args: list[str]) -> None:
    """Stands in for `python [-u] SCRIPT ARGS`; never returns."""
    unbuffered = args[:1] == ["-u"]
    argv = args[1:] if unbuffered else args
    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "unbuffered": unbuffered}
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        _cold(args)
    body = json.dumps(request).encode()
    socket.send_fds(conn, [struct.pack("!Q", len(body))], [0, 1, 2])
    conn.sendall(body)
    reader = conn.makefile("rb")
    if reader.readline().strip() != b"forked":
        _cold(args)
    for signum in _FORWARDED:
        signal.signal(signum, lambda n, _: conn.sendall(f"{n}\n".encode()))
    line = reader.readline()
    code = int(line.split()[1]) if line.startswith(b"exit ") else 1
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _cold(args: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *args])


if __name__ == "__main__":
    del sys.path[0]  # this folder: the script's own takes its place
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        client(sys.argv[1], sys.argv[2:])
