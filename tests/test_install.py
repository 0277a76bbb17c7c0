"""The one-line installs: the Claude Code plugin and its marketplace, Cursor's config and deeplink, the MCP
registry's server.json, and the skill they ship, all consistent with the package."""

import base64
import json
import re
import tomllib
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from hf_train_mcp.cli import connect, launch_command

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


def test_cursor_config_and_deeplink_start_the_server() -> None:
    server = load(".cursor/mcp.json")["mcpServers"]["hf-train"]
    assert [server["command"], *server["args"]] == ["uvx", "--from", "${workspaceFolder}", "hf-train-mcp", "serve"]
    link = urlparse(connect("cursor"))
    assert link.scheme == "cursor" and parse_qs(link.query)["name"] == ["hf-train"]
    config = json.loads(base64.b64decode(parse_qs(link.query)["config"][0]))
    assert [config["command"], *config["args"]] == launch_command()
    assert launch_command()[:3] == ["uvx", "--from", str(ROOT)]  # run from a checkout: that checkout
    assert connect("claude").startswith("claude mcp add hf-train ") and connect("claude").endswith(" serve")


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
