"""Every refusal carries a stable code (errors.ErrorCode): in a tool error's _meta over MCP, in --json CLI output.
Clients and tests branch on the code, never on the wording."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from hf_train_mcp.access import Access
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.errors import ERROR_CODE_META
from hf_train_mcp_demo.tiny import example_rows, write_jsonl
from tests.emulator import Emulator, ViewerDataset
from tests.helpers import CHAT_BASE, CHAT_ROWS

pytestmark = pytest.mark.anyio


async def code_of(name: str, arguments: dict[str, Any], access: Access | None = None) -> str:
    async with Client(build_server(access=access) if access else build_server()) as client:
        result = await client.call_tool(name, arguments)
    assert result.is_error, result.structured_content
    return result.meta[ERROR_CODE_META]


async def test_mcp_refusals_say_their_kind(hub: Emulator, tmp_path: Path) -> None:
    hub.datasets["org/chat"] = ViewerDataset({"default": {"train": CHAT_ROWS}})
    before = len(hub.posted_jobs())
    base = {k: CHAT_BASE[k] for k in ("model", "dataset", "hub_model_id")}
    assert await code_of("submit_training", {**base, "flavor": "a10g-small", "timeout": "168h",
                                             "max_cost_usd": 1, "max_steps": 5}) == "budget"
    assert await code_of("job_status", {"job_id": "local-0123456789ab"}) == "not_found"
    assert await code_of("validate_dataset", {"dataset": "org/missing"}) == "not_found"
    assert await code_of("estimate_cost", {"model": "org/Model-1B", "epoch": 2}) == "invalid"  # misspelt
    assert await code_of("estimate_cost", {"model": "org/Model-1B", "epochs": "many"}) == "invalid"
    assert await code_of("submit_training", {**base, "method": "dpo", "beta": 0.2, "packing": True}) == "invalid"
    data = write_jsonl(tmp_path / "chat.jsonl", example_rows("sft", 8))
    assert await code_of("validate_dataset", {"dataset": str(data)}, access=Access.http()) == "access"
    assert len(hub.posted_jobs()) == before


def test_json_cli_output_carries_the_code(offline) -> None:
    run = subprocess.run([sys.executable, "-m", "hf_train_mcp", "status", "local-0123456789ab", "--json"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert run.returncode == 2
    error = json.loads(run.stdout)["error"]
    assert error["code"] == "not_found" and "list_jobs" in error["message"]
    words = subprocess.run([sys.executable, "-m", "hf_train_mcp", "status", "local-0123456789ab"],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert words.returncode == 2 and words.stdout == "" and words.stderr.startswith("error: ")
