"""Where hf-train-mcp keeps its ledger and local jobs (HF_TRAIN_HOME, default ~/.cache/hf-train-mcp)."""

import os
from pathlib import Path


def data_home(*, create: bool = True) -> Path:
    """The server's folder (the ledger, job folders); create=False for a process that must not bring back a
    folder deleted under it (a detached supervisor)."""
    home = os.environ.get("HF_TRAIN_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hf-train-mcp"
    )
    path = Path(home)
    if create:  # job folders hold data paths, scripts and logs: the owner's
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def jobs_dir() -> Path:
    path = data_home() / "jobs"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path
