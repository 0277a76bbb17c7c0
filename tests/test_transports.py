"""The real server process over stdio and streamable HTTP, driven by the SDK's own client."""

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import free_port

pytestmark = pytest.mark.anyio

EXPECTED_TOOLS = {"list_hardware", "validate_dataset", "estimate_cost", "submit_training", "evaluate_model", "export_model",
                  "run_script", "submit_sweep", "compare_runs", "job_status", "job_logs", "cancel_job", "list_jobs"}


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_TOKEN")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_TRAIN_DATASETS_SERVER="http://127.0.0.1:9")
    return env


def http_server(*extra: str, host: str = "127.0.0.1") -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hf_train_mcp", "serve", "--transport", "http", "--host", host,
                             "--port", str(port), *extra], env=server_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def http_url() -> Iterator[str]:
    yield from http_server()


@pytest.fixture
def http_url_with_auth() -> Iterator[str]:
    yield from http_server("--auth-token", "s3cret-bearer")


async def test_the_stdio_server_lists_tools_and_answers_a_call() -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "hf_train_mcp", "serve"], env=server_env())
    async with Client(params) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == EXPECTED_TOOLS
        hints = tools["submit_training"].annotations
        assert hints.read_only_hint is False and hints.destructive_hint is False and hints.open_world_hint is True
        result = await client.call_tool("estimate_cost", {"model": "org/Model-7B", "num_examples": 1000,
                                                          "tokens_per_example": 400})
        assert not result.is_error, result.content[0].text
        assert result.structured_content["fits"] and result.structured_content["assumptions"]["prices"] == "built-in"


async def test_the_http_server_serves_the_same_tools(http_url: str) -> None:
    async with Client(http_url) as client:
        assert {t.name for t in (await client.list_tools()).tools} == EXPECTED_TOOLS
        result = await client.call_tool("job_status", {"job_id": "local-000000000000"})
        assert result.is_error and "launched through this server" in result.content[0].text  # HTTP: ledger only


async def test_the_http_server_refuses_requests_without_the_bearer_token(http_url_with_auth: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient() as http:
        denied = await http.post(http_url_with_auth, json=body)
        assert denied.status_code == 401
        wrong = await http.post(http_url_with_auth, json=body, headers={"Authorization": "Bearer s3cret-bearerX"})
        assert wrong.status_code == 401
    async with (httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-bearer"}) as bearer,
                Client(streamable_http_client(http_url_with_auth, http_client=bearer)) as client):
        assert {t.name for t in (await client.list_tools()).tools} == EXPECTED_TOOLS


def after_listing_tools(*prints: str) -> list[str]:
    """What a fresh interpreter prints (one line per expression) once it has read `serve`'s command line, built
    the server and listed tools; `listed` is sys.modules as it stood then (before the expressions' imports)."""
    code = ("import sys, anyio\n"
            "from mcp import Client\n"
            "from hf_train_mcp.shell.cli import _parsed\n"
            "from hf_train_mcp.shell.app import build_server\n"
            "_parsed(['serve'])\n"
            "async def main():\n"
            "    async with Client(build_server()) as c:\n"
            "        await c.list_tools()\n"
            "anyio.run(main)\n"
            "listed = set(sys.modules)\n"
            "from hf_train_mcp.contract.requests import TrainingRequest, SweepRequest\n"
            "from hf_train_mcp.rendering.config import TrainingConfig, EvaluateConfig\n"
            + "".join(f"print({expression})\n" for expression in prints))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=server_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-len(prints):]


def test_listing_tools_imports_no_training_library() -> None:
    assert after_listing_tools("sorted(m for m in ('torch', 'transformers', 'trl', 'datasets', 'peft') "
                               "if m in listed)") == ["[]"]


def test_listing_tools_leaves_what_waits_for_a_call_unbuilt() -> None:
    """Cold start: the Hub client, Jinja, the ledger's sqlite3, the requests' and scripts' validators, and the
    models the tool list is made of (with the methods, backends and results they read) wait for the first call
    that needs them: a fresh server lists tools from shell/tools_list.json (benchmarks/startup.py times it; this
    holds that nothing pulls them forward)."""
    assert after_listing_tools(
        "sorted(m for m in ('huggingface_hub', 'httpx', 'jinja2', 'sqlite3', 'hf_train_mcp.jobs.ledger', "
        "'hf_train_mcp.service', 'hf_train_mcp.contract.requests', 'hf_train_mcp.contract.request_fields', "
        "'hf_train_mcp.contract.results', 'hf_train_mcp.methods', 'hf_train_mcp.backends', 'hf_train_mcp.engines', "
        "'hf_train_mcp.rendering.config', 'hf_train_mcp.shell.tools', 'hf_train_mcp.shell.tool_handlers', "
        "'hf_train_mcp.shell.spend') if m in listed)",
        "sorted(m.__name__ for m in (TrainingRequest, SweepRequest, TrainingConfig, EvaluateConfig) "
        "if m.__pydantic_complete__)") == ["[]", "[]"]


UPDATE_SNAPSHOT = "HFTM_UPDATE_SNAPSHOT"


async def test_the_stored_tool_list_is_what_the_models_make() -> None:
    """shell/tools_list.json (what a fresh server lists) is, byte for byte, what the request and result models,
    the prompt and the resource templates make: a change to any of them shows in its diff."""
    from hf_train_mcp.shell.app import build_server
    from hf_train_mcp.shell.listing import STORED, generated_listing
    from hf_train_mcp.shell.prompts import instructions

    made = await generated_listing(build_server(), instructions())
    if os.environ.get(UPDATE_SNAPSHOT) == "1":
        STORED.write_text(made, encoding="utf-8")
    assert STORED.read_text(encoding="utf-8") == made, (
        f"{STORED} differs from what the models make. If the change is meant, write it again and review its diff: "
        f"{UPDATE_SNAPSHOT}=1 python -m pytest tests/test_transports.py -k stored_tool_list")


async def test_a_fresh_server_lists_the_stored_tools_and_validates_calls_with_the_models() -> None:
    from hf_train_mcp.shell.listing import STORED

    stored = json.loads(STORED.read_text(encoding="utf-8"))
    params = StdioServerParameters(command=sys.executable, args=["-m", "hf_train_mcp", "serve"], env=server_env())
    async with Client(params) as client:
        def dumped(items: list) -> list[dict]:
            return [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in items]

        assert client.instructions == stored["instructions"]
        assert dumped((await client.list_tools()).tools) == stored["tools"]
        assert dumped((await client.list_prompts()).prompts) == stored["prompts"]
        assert dumped((await client.list_resource_templates()).resource_templates) == stored["resource_templates"]
        wrong = await client.call_tool("estimate_cost", {"model": "org/Model-7B", "num_examples": 0})
        assert wrong.is_error and wrong.content[0].text.startswith("invalid arguments for estimate_cost")
        options = await client.call_tool("submit_training", {"model": "m", "dataset": "d", "options": {"beta": "x"}})
        assert options.is_error and "beta" in options.content[0].text
        unknown = await client.call_tool("job_status", {"job_id": "j", "tial": 3})
        assert unknown.is_error and "tial is not a parameter" in unknown.content[0].text


async def test_the_tool_list_stays_small_enough_for_every_agent_turn() -> None:
    from hf_train_mcp.shell.app import build_server

    async with Client(build_server()) as client:
        listed = await client.list_tools()
    # measured as the tool contract says a client sees it: json.dumps with its default separators
    size = len(json.dumps([tool.model_dump(by_alias=True, exclude_none=True) for tool in listed.tools]))
    assert size <= 15_000, size  # the official HF MCP server's single jobs tool is 14,785
    for tool in listed.tools:
        a = tool.annotations
        assert None not in (a.read_only_hint, a.destructive_hint, a.idempotent_hint, a.open_world_hint), tool.name


async def test_templates_are_readable_as_resources() -> None:
    from hf_train_mcp.shell.app import build_server

    async with Client(build_server()) as client:
        result = await client.read_resource("hf-train://templates/sft")
    assert "SFTTrainer" in result.contents[0].text


async def test_a_server_bound_to_all_interfaces_answers_the_names_clients_use_and_only_those(tmp_path) -> None:
    """What `docker run -p 8000:8000` sends: Host localhost:8000 or 127.0.0.1:8000 to a server on 0.0.0.0."""
    data = tmp_path / "allowed"
    data.mkdir()
    (data / "d.jsonl").write_text('{"text": "hello"}\n')
    (tmp_path / "secret.jsonl").write_text('{"text": "CANARY"}\n')
    for url in http_server("--allowed-hosts", "mcp.example.org,other.example", "--allow-local-files", str(data),
                           host="0.0.0.0"):
        port = url.split(":")[2].split("/")[0]
        for name in ("localhost", "127.0.0.1"):
            async with Client(url.replace("127.0.0.1", name)) as client:
                assert {t.name for t in (await client.list_tools()).tools} == EXPECTED_TOOLS
                ok = await client.call_tool("validate_dataset", {"dataset": str(data / "d.jsonl")})
                assert not ok.is_error and ok.structured_content["valid"]
                refused = await client.call_tool("validate_dataset", {"dataset": str(tmp_path / "secret.jsonl")})
                assert refused.is_error and "--allow-local-files" in refused.content[0].text
        body, headers = INITIALIZE, {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient() as http:
            for host, status in ((f"mcp.example.org:{port}", 200), ("mcp.example.org", 200), ("other.example:443", 200),
                                 (f"0.0.0.0:{port}", 200), (f"evil.example:{port}", 421), ("mcp.example.org.evil", 421)):
                answer = await http.post(url, json=body, headers={**headers, "Host": host})
                assert answer.status_code == status, (host, answer.text)
            origin = await http.post(url, json=body, headers={**headers, "Origin": "http://evil.example"})
            assert origin.status_code == 403
            same = await http.post(url, json=body, headers={**headers, "Origin": f"http://localhost:{port}"})
            assert same.status_code == 200
