"""`hf-train-mcp demo`: a tiny local SFT job through the same core the MCP tools use, followed to the end."""

import sys
import time

from hf_train_mcp.paths import data_home
from hf_train_mcp.contract.requests import TrainingRequest, ValidateRequest
from hf_train_mcp.service import Core

FOLLOW_LIMIT_S = 600


def run_demo(steps: int = 8) -> None:
    try:
        from hf_train_mcp_demo.tiny import build_tiny_model, example_rows, write_jsonl
    except ImportError:
        sys.exit("the demo trains locally: pip install 'hf-train-mcp[train]'")
    folder = data_home() / "demo"
    print(f"building a tiny model and dataset in {folder} ...")
    model = build_tiny_model(folder / "tiny-qwen2")
    dataset = write_jsonl(folder / "sft.jsonl", example_rows("sft", 32))
    core = Core()
    report = core.validate_dataset(ValidateRequest(dataset=str(dataset)))
    print(f"dataset: {report.num_rows} rows, format {report.detected_format}, valid={report.valid}")
    sub = core.submit_training(TrainingRequest(model=str(model), dataset=str(dataset), method="sft",
                                               backend="local", max_steps=steps, timeout="30m"))
    print(f"submitted {sub.job_id} ({sub.flavor}); following it ...")
    deadline = time.monotonic() + FOLLOW_LIMIT_S
    last = None
    while time.monotonic() < deadline:
        status = core.job_status(sub.job_id, tail=5)
        progress, loss = status.progress, status.last_metrics.get("loss")
        line = f"  {status.stage}" + (f" step {progress.step}/{progress.total_steps}" if progress.total_steps else
                                      " (loading the model and data)") + (f", loss {loss:.3f}" if loss else "")
        if line != last:
            print(line, flush=True)
            last = line
        if status.stage in ("COMPLETED", "ERROR", "CANCELED"):
            break
        time.sleep(2)
    print(f"stage: {status.stage}")
    if status.error:
        print(f"error: {status.error}")
    print(f"adapter and checkpoints: {sub.model_url.removeprefix('file://')}")
    print(f"training curves: TRACKIO_DIR={sub.trackio_url.removeprefix('file://')} trackio show --project hf-train-mcp")
    if status.stage != "COMPLETED":
        sys.exit(1)
