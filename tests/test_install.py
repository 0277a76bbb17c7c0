"""The one-line installs: the Claude Code plugin and its marketplace, Cursor's config and deeplink, the MCP
registry's server.json, and the skill they ship, all consistent with the package."""

import base64
import json
import os
import re
import shlex
import sys
import tomllib
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from mcp import Client, StdioServerParameters

from hf_train_mcp.shell.client_setup import connect, launch_command
from hf_train_mcp.credentials import unexpanded
from hf_train_mcp.hub import hub_token

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def load(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def test_the_claude_code_plugin_declares_the_server_and_the_skill() -> None:
    plugin = load(".claude-plugin/plugin.json")
    assert plugin["name"] == "hf-train" and plugin["version"] == PROJECT["version"]
    server = plugin["mcpServers"]["hf-train"]
    assert [server["command"], *server["args"]] == ["uvx", "--from", "${CLAUDE_PLUGIN_ROOT}", "hf-train-mcp", "serve"]
    skills = ROOT / plugin["skills"]
    skill = (skills / "hf-train" / "SKILL.md").read_text()
    front = dict(re.findall(r"^(\w+): (.+)$", skill.split("---")[1], re.M))
    assert front["name"] == "hf-train" and 20 < len(front["description"]) <= 1024
    market = load(".claude-plugin/marketplace.json")
    entry = next(p for p in market["plugins"] if p["name"] == plugin["name"])
    assert (ROOT / entry["source"] / ".claude-plugin" / "plugin.json").exists()


def test_cursor_config_and_deeplink_start_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    with_uv(monkeypatch)
    server = load(".cursor/mcp.json")["mcpServers"]["hf-train"]
    assert [server["command"], *server["args"]] == ["uvx", "--from", "${workspaceFolder}", "hf-train-mcp", "serve"]
    link = urlparse(connect("cursor"))
    assert link.scheme == "cursor" and parse_qs(link.query)["name"] == ["hf-train"]
    config = json.loads(base64.b64decode(parse_qs(link.query)["config"][0]))
    assert [config["command"], *config["args"]] == launch_command()
    assert launch_command()[:3] == ["uvx", "--from", str(ROOT)]  # run from a checkout: that checkout
    assert connect("claude").startswith("claude mcp add hf-train ") and connect("claude").endswith(" serve")


def with_uv(monkeypatch: pytest.MonkeyPatch, installed: bool = True) -> None:
    """uv installed on this machine (its uvx on PATH), or not."""
    import shutil

    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: (
        ("/opt/uv/bin/uvx" if installed else None) if name == "uvx" else real(name, *a, **k)))


@pytest.mark.anyio
async def test_without_uv_every_connect_line_starts_this_install_by_absolute_path(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No uvx here: the lines `connect` prints name this installation's own executable, absolutely, and the
    printed command starts the server with no venv on PATH (a client's environment)."""
    with_uv(monkeypatch, installed=False)
    command = launch_command()
    assert command[-1] == "serve" and "uvx" not in command and os.path.isabs(command[0])
    claude = shlex.split(connect("claude"))
    assert claude[:3] == ["claude", "mcp", "add"] and claude[claude.index("--") + 1:] == command
    cursor = json.loads(base64.b64decode(parse_qs(urlparse(connect("cursor")).query)["config"][0]))
    assert [cursor["command"], *cursor["args"]] == command
    vscode = json.loads(shlex.split(connect("vscode"))[-1])
    assert [vscode["command"], *vscode["args"]] == command
    assert shlex.split(connect("inspector"))[2:] == command
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HF_TOKEN")}, "PATH": "/usr/bin:/bin",
           "HF_ENDPOINT": "http://127.0.0.1:9"}
    async with Client(StdioServerParameters(command=command[0], args=command[1:], env=env)) as client:
        assert "submit_training" in {t.name for t in (await client.list_tools()).tools}


def test_the_readme_says_uvx_needs_uv_and_how_to_connect_without_it() -> None:
    section = (ROOT / "README.md").read_text().split("## Connect it")[1].split("\n## ")[0]
    assert "uvx" in section and "https://docs.astral.sh/uv/" in section and "pip install uv" in section
    assert 'claude mcp add hf-train -- "$PWD/.venv/bin/hf-train-mcp" serve' in section
    assert "hf-train-mcp connect" in section


def test_the_registry_entry_matches_the_package() -> None:
    entry = load("server.json")
    package = entry["packages"][0]
    assert entry["version"] == package["version"] == PROJECT["version"]
    assert package["registryType"] == "pypi" and package["identifier"] == PROJECT["name"]
    assert package["transport"] == {"type": "stdio"} and package["packageArguments"][0]["value"] == "serve"
    secrets = [v for v in package["environmentVariables"] if v.get("isSecret")]
    assert [v["name"] for v in secrets] == ["HF_TOKEN"]
    # the registry checks ownership of a PyPI package by this marker in its README
    assert f"<!-- mcp-name: {entry['name']} -->" in (ROOT / "README.md").read_text()


def client_placeholders() -> list[str]:
    """HF_TOKEN as the plugin's and Cursor's configs spell it: what the server receives when it is unset."""
    return [load(".claude-plugin/plugin.json")["mcpServers"]["hf-train"]["env"]["HF_TOKEN"],
            load(".cursor/mcp.json")["mcpServers"]["hf-train"]["env"]["HF_TOKEN"]]


def test_the_configs_spell_the_token_as_placeholders_the_server_reads_as_none() -> None:
    assert client_placeholders() == ["${HF_TOKEN}", "${env:HF_TOKEN}"]
    for value in [*client_placeholders(), "$HF_TOKEN", " ${HUGGING_FACE_HUB_TOKEN} ", "%HF_TOKEN%"]:
        assert unexpanded(value), value
    for value in ["hf_abcdefghijklmnop", "hf_$abc", "${HF_TOKEN}x", "", None]:
        assert not unexpanded(value), value


@pytest.mark.anyio
@pytest.mark.parametrize("placeholder", client_placeholders())
async def test_an_unset_token_passed_as_its_placeholder_trains_locally(placeholder: str, tmp_path: Path) -> None:
    """The real server process, started as Claude Code and Cursor start it when HF_TOKEN is unset: the literal
    placeholder in its environment. It plans the job on this machine (no account needed), as without a token."""
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                     {"role": "assistant", "content": f"a{i}"}]}) + "\n"
                            for i in range(8)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"))}
    env.update(HF_TOKEN=placeholder, HF_ENDPOINT="http://127.0.0.1:9", HF_TRAIN_DATASETS_SERVER="http://127.0.0.1:9")
    params = StdioServerParameters(command=sys.executable, args=["-m", "hf_train_mcp", "serve"], env=env)
    async with Client(params) as client:
        result = await client.call_tool("submit_training", {"model": "org/Model-0.5B", "dataset": str(data),
                                                            "dry_run": True})
    assert not result.is_error, result.content[0].text
    assert result.structured_content["backend"] == "local"


def test_a_placeholder_gives_way_to_the_token_file_of_hf_auth_login(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "token"))
    (tmp_path / "token").write_text("hf_saved_by_auth_login_0123")
    for placeholder in client_placeholders():
        monkeypatch.setenv("HF_TOKEN", placeholder)
        monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "$HUGGING_FACE_HUB_TOKEN")
        assert hub_token() == "hf_saved_by_auth_login_0123"
        assert "HF_TOKEN" not in os.environ and "HUGGING_FACE_HUB_TOKEN" not in os.environ
