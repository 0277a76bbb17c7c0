"""What more than one test module uses: plain functions and constants, each defined here once. Fixtures live in
conftest.py; a test module imports from here (or conftest), never from another test module."""

import ast
import base64
import os
import runpy
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client import ClientRequestContext
from mcp.types import ElicitRequestParams, ElicitResult

from hf_train_mcp.rendering import pysource
from hf_train_mcp.access import Access
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.estimate.sizing import ModelSize
from hf_train_mcp.jobs.ledger import JobRecord, now_iso
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.service import Core
from tests.emulator import Emulator, JobPlan

# --- data and requests on the emulated Hub ----------------------------------------------------------------------
# org/chat (the `chat` fixture in conftest.py puts it on the Hub): 20 two-turn conversations.
CHAT_ROWS = [{"messages": [{"role": "user", "content": f"Q{i}?"}, {"role": "assistant", "content": f"A{i}."}]}
             for i in range(20)]
CHAT_BASE = {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/chat", "hub_model_id": "emu-user/out",
             "max_steps": 5}
# trl-lib/Capybara as the emulated dataset viewer serves it: 40 conversations.
CAPYBARA_ROWS = [
    {"messages": [{"role": "user", "content": f"Question {i}?"}, {"role": "assistant", "content": f"Answer {i}."}]}
    for i in range(40)
]
CAPYBARA_BASE = {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "trl-lib/Capybara",
                 "hub_model_id": "emu-user/qwen-sft"}

# The rows each method reads, in its first format and, where it reads images beside the text, its vision format
# (data/formats.py's own examples; an image is a viewer cell of 448 x 448 pixels): the datasets the `zoo` fixture
# (conftest.py) puts on the Hub as org/<method> and org/<method>-images.
ZOO_FORMATS = {"sft": ("messages", "vision_messages"), "dpo": ("preference", "vision_preference"),
               "grpo": ("prompt_only", "vision_prompt_only"), "reward": ("preference", None),
               "kto": ("unpaired_preference", None), "distill": ("prompt_only", None),
               "text-classification": ("text_classification", None),
               "image-classification": ("image_classification", None), "embedding": ("sentence_pairs", None)}
ZOO_IMAGE_SIDE = 448


def zoo_dataset(method: str, images: bool = False) -> str:
    return f"org/{method}-images" if images else f"org/{method}"


def viewer_rows(data_format: str, url: str, n: int = 12) -> list[dict]:
    """n rows of a format as the dataset viewer serves them: each image file an image cell {src, height, width}."""
    from hf_train_mcp_demo.tiny import format_rows

    def cell(name: str) -> dict:
        return {"src": f"{url}/assets/{name}", "height": ZOO_IMAGE_SIDE, "width": ZOO_IMAGE_SIDE}

    rows = format_rows(data_format, n)
    for row in rows:
        if "images" in row:
            row["images"] = [cell(name) for name in row["images"]]
        if "image" in row:
            row["image"] = cell(row["image"])
    return rows


# --- sizes and workloads for the estimator ----------------------------------------------------------------------
# Qwen2-0.5B-Instruct's config.json: 24 layers, hidden 896, vocab 151936, intermediate 4864, 494M parameters.
QWEN_05B = ModelSize(494_032_768, 24, 896, 151_936, 4864, "config.json")
# TRL's sft.py defaults on trl-lib/Capybara (shared/seeds 000 and 003): full fine-tuning, per-device batch 8, no
# accumulation, max_length 1024, no packing, 3 epochs. The accuracy against measured runs is tests/test_calibration.py.
CAPYBARA_WORKLOAD = dict(method="sft", peft="full", num_examples=15_806, tokens_per_example=1100, epochs=3.0,
                         max_length=1024, per_device_batch_size=8, gradient_accumulation=1, max_steps=None)


# --- the MCP tools through the SDK's in-memory client -----------------------------------------------------------
async def call_once(name: str, arguments: dict[str, Any], access: Access | None = None) -> Any:
    """One tool call on a fresh server (an HTTP caller's when access is given): the whole result, errors too."""
    async with Client(build_server(access=access) if access else build_server()) as client:
        return await client.call_tool(name, arguments)


async def call(client: Client, name: str, arguments: dict[str, Any]) -> dict:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def refused(client: Client, name: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(name, arguments)
    assert result.is_error, result.structured_content
    return result.content[0].text


async def finished(client: Client, job_id: str, limit: float = 300) -> dict:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        report = await call(client, "job_status", {"job_id": job_id, "tail": 60})
        if report["stage"] in ("COMPLETED", "ERROR", "CANCELED"):
            return report
        time.sleep(0.5)
    raise AssertionError(f"{job_id} did not finish: {report}")


async def completed_training(client: Client, hub: Emulator, **extra: Any) -> dict:
    """A training job on CAPYBARA_BASE that the emulated Hub runs to COMPLETED at once."""
    hub.plan_next(JobPlan(scheduling_s=0.0, running_s=0.1))
    job = await call(client, "submit_training", {**CAPYBARA_BASE, "max_steps": 10, "eval_split": 0.1, **extra})
    assert (await finished(client, job["job_id"], 30))["stage"] == "COMPLETED"
    return job


def answering(action: str, content: dict | None = None, asked: list | None = None):
    """An elicitation callback that answers every question so (and keeps each question's text in asked)."""
    async def callback(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        if asked is not None:
            asked.append(params.message)
        return ElicitResult(action=action, content=content)

    return callback


# --- what was posted to HF Jobs ---------------------------------------------------------------------------------
def decoded_script(job_spec: dict) -> str:
    return base64.b64decode(job_spec["environment"]["HFTM_SCRIPT_B64"]).decode()


def script_config(script: str) -> dict:
    """The CONFIG literal of a rendered script, as the job will see it: its `CONFIG = ` statement alone is read
    (pprint's lines: each further line of the value indented), not the whole script (~25 ms an AST)."""
    lines = script.split("\n")
    first = next(i for i, line in enumerate(lines) if line.startswith("CONFIG = "))
    last = next((i for i in range(first + 1, len(lines)) if not lines[i].startswith(" ")), len(lines))
    with pysource.LOCK:  # the server's threads may be parsing too (CPython 3.11's AST builder is not thread-safe)
        return ast.literal_eval("\n".join(lines[first:last]).removeprefix("CONFIG = "))


# --- the core, the ledger and the local backend -----------------------------------------------------------------
def wait_for(core: Core, job_id: str, stages: set[str], limit: float = 240) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        report = core.job_status(job_id)
        if report.stage in stages:
            return report
        time.sleep(0.5)
    raise AssertionError(f"{job_id} never reached {stages}; last: {report}")


def job_record(job_id: str, key: str | None = None, backend: str = "hf") -> JobRecord:
    """A running SFT job's ledger entry, with nothing behind it."""
    return JobRecord(
        job_id=job_id, backend=backend, namespace=None, method="sft", model="m", dataset="d", request_json="{}",
        script_sha256="0" * 64, script_path=None, job_dir=None, stage="RUNNING", flavor="a10g-small", timeout="1h",
        job_url="file:///tmp/x" if backend == "local" else None, hub_model_id=None, model_url=None, trackio_url=None,
        output_bucket=None, estimated_hours=None, estimated_cost_usd=None, effective_batch_size=1,
        warnings_json="[]", idempotency_key=key, created_at=now_iso())


def submit_script(core: Core, text: str) -> str:
    """Start an arbitrary script through the local backend (for crash and cancel behaviour)."""
    from hf_train_mcp.backends.base import JobSpec
    from hf_train_mcp.rendering.script import Script

    ref = core.backend("local").submit(Script(text, "0" * 64), JobSpec("sft", "local-cpu", 1, 600, {}, []))
    core.ledger.record(JobRecord(
        job_id=ref.job_id, backend="local", namespace=None, method="sft", model="m", dataset="d", request_json="{}",
        script_sha256="0" * 64, script_path=None, job_dir=ref.job_dir, stage=ref.stage, flavor="local-cpu",
        timeout="10m", job_url=ref.url, hub_model_id=None, model_url=None, trackio_url=None, output_bucket=None,
        estimated_hours=None, estimated_cost_usd=None, effective_batch_size=1, warnings_json="[]",
        idempotency_key=None, created_at=now_iso()))
    return ref.job_id


# --- rendered scripts, run or loaded on this machine ------------------------------------------------------------
# A Qwen2-0.5B as the tests that render scripts size it, with no Hub look-up (rendered() below plans with it).
RENDER_SIZE = ModelSize(494_000_000, 24, 896, 151_936, 4864, "test")


def python_command() -> list[str]:
    """How a test starts a training script's Python: this one, or in a training test the worker's pre-warmed one
    (tests/prewarmed.py), which takes the same arguments."""
    given = os.environ.get("HFTM_PYTHON")
    return shlex.split(given) if given else [sys.executable]


def torchrun_command(*options: str, script: str, args: tuple[str, ...] = ()) -> list[str]:
    """torchrun with these options, each rank `python -u SCRIPT ARGS` as torchrun starts one, in the Python of
    python_command() (--no-python: the command is given whole)."""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    return [torchrun, *options, "--no-python", *python_command(), "-u", script, *args]


def run_script(tmp_path: Path, text: str, **extra_env: str) -> subprocess.CompletedProcess:
    """Run a rendered script with this Python, offline, as the local backend does."""
    (tmp_path / "train.py").write_text(text)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRACKIO_DIR": str(tmp_path / "trackio"), "PYTHONUNBUFFERED": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1", **extra_env}
    env.pop("PYTHONWARNINGS", None)
    return subprocess.run([*python_command(), "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


def rendered(tmp_path: Path, **overrides: Any) -> str:
    """The path of the training script an HF job would get for these request fields."""
    fields = {"model": "Qwen/Qwen2-0.5B", "dataset": "org/data", "hub_model_id": "me/out", **overrides}
    plan = plan_run(TrainingRequest(**fields), backend="hf", size=RENDER_SIZE, catalog=fallback_catalog(),
                    namespace="me", data=DataFacts(num_rows=1000))
    path = tmp_path / "train.py"
    path.write_text(plan.render().text)
    return str(path)


def load_rendered(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """The script's functions and CONFIG, without running main()."""
    return runpy.run_path(rendered(tmp_path, **overrides), run_name="hftm_script_under_test")


# --- processes ---------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def merged_classifier(client: Client, job_id: str) -> Path:
    """A classifier's export: GGUF refused with the reason (nothing launched), merged run to COMPLETED; the folder."""
    refused = await client.call_tool("export_model", {"model": job_id, "format": "gguf", "backend": "local"})
    assert refused.is_error and "is a classifier, which llama.cpp does not run" in refused.content[0].text
    exported = await call(client, "export_model", {"model": job_id, "format": "merged", "backend": "local"})
    report = await finished(client, exported["job_id"])
    assert report["stage"] == "COMPLETED", report
    return Path(exported["model_url"].removeprefix("file://"))


async def estimated_then_trained(client: Client, arguments: dict[str, Any], rows: int, script_has: str
                                 ) -> tuple[dict, dict, dict]:
    """A family's first half through the tools: an estimate, a dry run whose script holds `script_has`, and the
    job run to COMPLETED. (dry run, submission, final report)."""
    estimate = await call(client, "estimate_cost", {"model": arguments["model"], "method": arguments["method"],
                                                    "num_examples": rows, "max_steps": arguments["max_steps"]})
    assert estimate["hours"] > 0
    dry = await call(client, "submit_training", {**arguments, "dry_run": True})
    assert script_has in dry["script"]
    trained = await call(client, "submit_training", arguments)
    report = await finished(client, trained["job_id"])
    assert report["stage"] == "COMPLETED", report
    return dry, trained, report


def read_gguf(llama_cpp: Path, path: Path) -> tuple[Any, Any]:
    """(llama.cpp's gguf module, a reader of the file): the tree's own reader, not an installed one."""
    sys.path.insert(0, str(llama_cpp / "gguf-py"))
    try:
        import gguf
    finally:
        sys.path.remove(str(llama_cpp / "gguf-py"))
    return gguf, gguf.GGUFReader(path)


def gguf_value(reader: Any, key: str) -> Any:
    """A GGUF metadata value: a string decoded, a number as a number."""
    field = reader.fields[key]
    part = field.parts[field.data[0]]
    return bytes(part).decode() if field.types[0].name == "STRING" else part.tolist()[0]
