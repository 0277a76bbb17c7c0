"""Start a process that belongs to nobody: its own session, reparented to init, so it outlives this server and is
never left a zombie of it (no Popen to reap, and none to warn about when a server exits while it runs).

`spawn` runs `python -m hf_train_mcp.detach LOG ARGV...`: that middle process forks, the child starts a new
session, points its output at LOG and execs ARGV, and the middle process prints the child's pid and exits.
"""

import os
import subprocess
import sys
from pathlib import Path


def spawn(argv: list[str], *, cwd: Path, log: Path, env: dict[str, str] | None = None,
          keep_fds: tuple[int, ...] = ()) -> int:
    """Start argv detached; its pid, which is also its process group (so killpg stops all it started).
    keep_fds: descriptors it inherits under the same numbers (a lock it must hold from its first instant)."""
    out = subprocess.run([sys.executable, "-m", "hf_train_mcp.detach", str(log), *argv], cwd=cwd, env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False,
                         timeout=60, pass_fds=keep_fds)
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        raise OSError(f"could not start {argv[0]}: {out.stderr.decode(errors='replace')[-500:]}")
    return int(out.stdout)


def spawn_once(lock_path: Path, argv: list[str], *, lock_env: str) -> int | None:
    """Start argv detached unless a process holds lock_path's lock (then None). The lock is taken here and handed
    to the process started (an inherited descriptor named by env `lock_env`), so it is held from before that
    process starts: a retry while it is still importing cannot start a second one, and LOCK.pid names the one
    that runs. Closing our descriptor leaves the lock held: an flock belongs to the open file, which it shares."""
    import fcntl

    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # one has it, or another call is starting one this moment
        pid = spawn(argv, cwd=lock_path.parent, log=lock_path.with_suffix(".log"),
                    env={**os.environ, lock_env: str(lock.fileno())}, keep_fds=(lock.fileno(),))
        lock_path.with_suffix(".pid").write_text(str(pid))
        return pid


def held_lock(lock_path: Path, *, lock_env: str):
    """The lock a process started by spawn_once was handed (or, started by hand, the lock taken here); None
    when another process holds it."""
    import fcntl

    handed = os.environ.pop(lock_env, None)  # popped: what this process starts must not think it holds it
    if handed is not None and handed.isdigit():
        os.set_inheritable(int(handed), False)
        return os.fdopen(int(handed), "a")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path, "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    return lock


def _main(log: str, argv: list[str]) -> None:
    pid = os.fork()
    if pid:  # this middle process's stdout is spawn()'s pipe, never an MCP stream: the pid, written unbuffered
        os.write(sys.stdout.fileno(), f"{pid}\n".encode())
        os._exit(0)
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2:])
