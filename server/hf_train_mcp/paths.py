"""Where hf-train-mcp keeps its ledger and local jobs (HF_TRAIN_HOME, default ~/.cache/hf-train-mcp)."""

import os
from pathlib import Path


def data_home() -> Path:
    home = os.environ.get("HF_TRAIN_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "hf-train-mcp"
    )
    path = Path(home)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)  # job folders hold data paths, scripts and logs: the owner's
    return path


def jobs_dir() -> Path:
    path = data_home() / "jobs"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path
