"""`hf-train-mcp demo` trains a tiny model locally, end to end, through the same core as the tools."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_training


@pytest.mark.detached
@pytest.mark.training
@needs_training
def test_the_demo_completes_and_says_where_the_adapter_is(isolated_home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_TOKEN")}
    env.update(HF_TRAIN_HOME=str(isolated_home), HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    out = subprocess.run([sys.executable, "-m", "hf_train_mcp", "demo", "--steps", "3"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "stage: COMPLETED" in out.stdout
    job_dirs = list((isolated_home / "jobs").iterdir())
    assert len(job_dirs) == 1 and (job_dirs[0] / "output" / "adapter_model.safetensors").exists()
    assert f"{job_dirs[0]}/output" in out.stdout
    assert "None" not in out.stdout and "file://" not in out.stdout  # no 'step None/None', paths a shell can use
