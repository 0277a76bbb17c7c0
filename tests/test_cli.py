"""The command line: one command per tool with the tool's own options and help, --json equal to the tool's
structured output, tables otherwise, no traceback on a closed pipe, and a word for a person who runs the bare
command in a terminal."""

import json
import os
import pty
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.shell.cli_parser import build_parser
from hf_train_mcp_demo.tiny import example_rows, write_jsonl
from hf_train_mcp.shell.tools import TOOLS

pytestmark = pytest.mark.anyio


def cli(*args: str, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hf_train_mcp", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, **kwargs)


def test_every_tool_has_a_command_and_every_option_has_help() -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them here
    assert {spec.command for spec in TOOLS} <= set(commands)
    for name, command in commands.items():
        for action in command._actions:  # noqa: SLF001
            assert action.help and action.help.strip(), f"{name} {action.dest} has no help"
    submit = commands["submit"]
    dests = {a.dest for a in submit._actions}  # noqa: SLF001
    assert {"model", "dataset", "hub_model_id", "max_cost_usd", "preflight", "dry_run"} <= dests


async def test_json_output_is_exactly_the_tools_structured_output(tmp_path: Path, offline) -> None:
    data = write_jsonl(tmp_path / "dpo.jsonl", example_rows("dpo", 12))
    async with Client(build_server()) as client:
        tool = (await client.call_tool("validate_dataset", {"dataset": str(data), "method": "dpo"})).structured_content
        hardware = (await client.call_tool("list_hardware", {})).structured_content
    assert json.loads(cli("validate", str(data), "--method", "dpo", "--json").stdout) == tool
    assert json.loads(cli("hardware", "--json").stdout) == hardware


def test_tables_by_default_and_errors_in_words(tmp_path: Path, offline) -> None:
    data = write_jsonl(tmp_path / "sft.jsonl", example_rows("sft", 12))
    shown = cli("validate", str(data))
    assert shown.returncode == 0 and "detected_format: messages" in shown.stdout and "{" not in shown.stdout.split("\n")[0]
    hardware = cli("hardware").stdout.splitlines()
    assert any(line.split()[:2] == ["flavor", "gpu"] for line in hardware)
    wrong = cli("estimate", "org/Model-7B", "--epochs", "0")
    assert wrong.returncode == 2 and "epochs should be greater than 0" in wrong.stderr
    assert "Traceback" not in wrong.stderr and "pydantic" not in wrong.stderr


def test_a_closed_pipe_ends_quietly(tmp_path: Path, offline) -> None:
    out = subprocess.run(f"{sys.executable} -m hf_train_mcp hardware | head -n 1", shell=True, capture_output=True,
                         text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0 and "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr


def test_the_bare_command_in_a_terminal_says_it_is_an_mcp_server() -> None:
    leader, follower = pty.openpty()
    try:
        out = cli(stdin=follower)
    finally:
        os.close(leader)
        os.close(follower)
    assert out.returncode == 0 and "MCP server" in out.stderr and "--help" in out.stderr
    # the way to add it works from a bare terminal: this install by absolute path, not a name on a venv's PATH
    line = next(part for part in out.stderr.split("(Claude Code: ")[1:]).split("\n")[0]
    words = shlex.split(line)
    assert words[:4] == ["claude", "mcp", "add", "hf-train"] and words[-1] == "serve"
    executable = words[words.index("--") + 1]
    assert os.path.isabs(executable) and os.access(executable, os.X_OK)
    assert f"{executable} connect claude" in out.stderr
    shown = subprocess.run([executable, "connect", "claude"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert shown.returncode == 0 and shown.stdout.startswith("claude mcp add hf-train ")
