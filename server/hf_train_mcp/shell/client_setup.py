"""How an MCP client starts this server: the command line (uvx from this checkout, else this installation) and
the one line or link that adds it to Claude Code, Cursor, VS Code or the MCP inspector."""

import json
import os
import sys
from pathlib import Path

STDIO_NOTE = """hf-train-mcp is an MCP server: it speaks the MCP protocol on stdin/stdout, so an MCP client starts it
(Claude Code: claude mcp add hf-train -- {serve}
or the line `{connect} connect claude` prints). As a command line it runs each tool directly:

  hf-train-mcp validate trl-lib/Capybara            check a dataset
  hf-train-mcp estimate Qwen/Qwen2.5-0.5B --dataset trl-lib/Capybara
  hf-train-mcp submit MODEL DATASET --hub-model-id you/name --dry-run
  hf-train-mcp status JOB_ID | logs JOB_ID | jobs | hardware

hf-train-mcp --help lists every command, hf-train-mcp COMMAND --help its options; hf-train-mcp demo trains a tiny
model on this machine end to end."""


def this_executable() -> list[str]:
    """This installed server by absolute path: a client starts it without an activated venv or uv. The console
    script that runs now, else the one beside this Python (a venv's bin/, not resolved: a venv's python is a
    link out of it), else this Python running the package."""
    ran = Path(sys.argv[0])
    if ran.name == "hf-train-mcp" and ran.is_file():
        return [os.path.abspath(ran)]
    beside = Path(os.path.abspath(sys.executable)).parent / ("hf-train-mcp.exe" if os.name == "nt" else "hf-train-mcp")
    if beside.is_file():
        return [str(beside)]
    return [os.path.abspath(sys.executable), "-m", "hf_train_mcp"]


def launch_command() -> list[str]:
    """How an MCP client starts this server: with uv's uvx from this checkout (or the package) where uvx is
    installed, else this installation by absolute path (uvx missing is the client's `ENOENT ... "uvx"`)."""
    import shutil

    if shutil.which("uvx") is None:
        return [*this_executable(), "serve"]
    root = Path(__file__).resolve().parents[3]
    source = str(root) if (root / "pyproject.toml").exists() else "hf-train-mcp"
    return ["uvx", "--from", source, "hf-train-mcp", "serve"]


def stdio_note() -> str:
    import shlex

    return STDIO_NOTE.format(serve=shlex.join([*this_executable(), "serve"]), connect=shlex.join(this_executable()))


def connect(client: str) -> str:
    """The one line (or link) that adds this server to an MCP client."""
    import base64
    import shlex

    command = launch_command()
    if client == "claude":
        return "claude mcp add hf-train --env HF_TOKEN=$HF_TOKEN -- " + shlex.join(command)
    if client == "cursor":
        config = {"command": command[0], "args": command[1:], "env": {"HF_TOKEN": "${env:HF_TOKEN}"}}
        encoded = base64.b64encode(json.dumps(config).encode()).decode()
        return f"cursor://anysphere.cursor-deeplink/mcp/install?name=hf-train&config={encoded}"
    if client == "vscode":
        return "code --add-mcp " + shlex.quote(json.dumps({"name": "hf-train", "command": command[0],
                                                          "args": command[1:]}))
    return "npx @modelcontextprotocol/inspector " + shlex.join(command)
