"""The MCP shell: the tools of tools.py, the job resource with subscriptions, and the finetune prompt.

Work happens in service.Core (created on first use, so that tools/list touches no disk, network or heavy
import); the tools are registered on their first call, tools/list being answered from the stored listing
(listing.py) until then. The runner turns the core's TrainError into ToolError and its progress into MCP progress
notifications; a large spend becomes a question to the user when the client can ask (spend.py).
"""

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import ToolManager
from mcp.types import Tool as MCPTool
from pydantic import Field, ValidationError

from hf_train_mcp.access import STDIO, Access
from hf_train_mcp.contract.readable import readable
from hf_train_mcp.shell.compact_schema import compact_tool_schema, declare_once
from hf_train_mcp.shell.listing import stored_listing
from hf_train_mcp.shell.prompts import finetune_prompt, instructions
from hf_train_mcp.shell.runner import Runner, code_of, coded_result
from hf_train_mcp.shell.subscriptions import JOB_URI, JobWatcher, register_subscriptions

RESUME_SWEEPS_AFTER_S = 2.0


def __getattr__(name: str) -> Any:
    if name == "INSTRUCTIONS":  # it names every method: read from the registry when asked, not at import
        return instructions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CompactMCPServer(MCPServer):
    """MCPServer whose tools/list carries compacted schemas (arguments are still validated by the full models),
    whose argument errors say what to send instead of pydantic's text, and whose tools are registered when first
    needed (`register` returns each tool's unlisted parameters); `stored` tools answer tools/list until then."""

    def __init__(self, *args: Any, register: Callable[[MCPServer], dict[str, set[str]]],
                 stored: list[MCPTool] | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._register: Callable[[MCPServer], dict[str, set[str]]] | None = register
        self._stored = stored
        # per tool: parameters it accepts but does not list (method options, listed inside its `options` object)
        self.unlisted: dict[str, set[str]] = {}

    def _tools(self) -> ToolManager:
        if self._register is not None:
            register, self._register = self._register, None
            self.unlisted = register(self)
        return self._tool_manager

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        self._tools()
        return super()._tool_input_schema(name)

    async def list_tools(self) -> list[MCPTool]:
        return list(self._stored) if self._stored is not None else await self.built_tools()

    async def built_tools(self) -> list[MCPTool]:
        """The tool list as the models make it (what the stored listing holds)."""
        self._tools()
        tools = await super().list_tools()
        inputs = declare_once([compact_tool_schema(_unlisted(tool.input_schema, self.unlisted.get(tool.name, set())))
                               for tool in tools])
        return [
            tool.model_copy(update={
                # no title: model APIs pass agents the name and description only, and every turn pays for the
                # list; the CLI's help still shows each ToolSpec's title
                "title": None,
                "input_schema": schema,
                "output_schema": compact_tool_schema(tool.output_schema, output=True) if tool.output_schema else None,
            })
            for tool, schema in zip(tools, inputs, strict=True)
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        tool = self._tools().get_tool(name)
        if tool is not None and arguments:  # a misspelt option would otherwise be dropped without a word
            unknown = sorted(set(arguments) - set(tool.parameters.get("properties", {})))
            if unknown:
                return coded_result(f"invalid arguments for {name}: {', '.join(unknown)} "
                                    f"{'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of this "
                                    "tool (check the spelling against its input schema); nothing was done", "invalid",
                                    name)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return coded_result(f"invalid arguments for {name}: {readable(exc.__cause__)}", "invalid", name)
            return coded_result(str(exc), code_of(exc), name)


def _unlisted(schema: dict[str, Any], names: set[str]) -> dict[str, Any]:
    properties = {k: v for k, v in schema.get("properties", {}).items() if k not in names}
    return {**schema, "properties": properties} if names else schema


def build_server(core: Any | None = None, access: Access = STDIO, *, watch_interval_s: float = 5.0) -> MCPServer:
    """The MCP server. `core` is created lazily so that tools/list never touches disk, network or heavy imports;
    `access` is what its callers may do (everything over stdio; what the operator allowed over HTTP)."""
    state: dict[str, Any] = {"core": core}

    def get_core() -> Any:
        if state["core"] is None:
            from hf_train_mcp.service import Core

            state["core"] = Core(access=access)
        return state["core"]

    def register(mcp: MCPServer) -> dict[str, set[str]]:
        from hf_train_mcp.shell.tool_handlers import register_tools

        return register_tools(mcp, runner, get_core)

    watcher = JobWatcher(get_core, interval_s=watch_interval_s)
    runner = Runner(get_core, access)
    stored = stored_listing()
    mcp = CompactMCPServer("hf-train-mcp", instructions=stored.instructions if stored else instructions(),
                           lifespan=_lifespan(watcher, get_core), subscriptions=watcher.bus, register=register,
                           stored=stored.tools if stored else None)
    mcp.watcher = watcher  # type: ignore[attr-defined]  # tests drive polls by hand
    register_subscriptions(mcp, watcher)
    _register_resources(mcp, watcher, runner)
    return mcp


def _lifespan(watcher: JobWatcher, get_core: Callable[[], Any]) -> Callable[[MCPServer], Any]:
    """The server's background work: the job watcher, and resuming sweeps whose supervisor died (a reboot, a
    container restart)."""

    async def resume_sweeps() -> None:
        if os.environ.get("HF_TRAIN_RESUME_SWEEPS", "1").strip().lower() in ("0", "off", "no", "false"):
            return
        await anyio.sleep(RESUME_SWEEPS_AFTER_S)  # after start-up: the first tools/list must not wait on the disk
        try:
            from hf_train_mcp.sweeps.sweep import resume

            await anyio.to_thread.run_sync(lambda: resume(get_core()))
        except Exception:  # the server serves regardless; the next compare_runs restarts a sweep too
            logging.getLogger(__name__).exception("could not resume running sweeps")

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as group:
            group.start_soon(watcher.run)
            group.start_soon(resume_sweeps)
            try:
                yield {"watcher": watcher}
            finally:
                group.cancel_scope.cancel()

    return lifespan


def _register_resources(mcp: MCPServer, watcher: JobWatcher, runner: Runner) -> None:
    """The job resource (subscribable), the template resource and the finetune prompt."""

    @mcp.resource(JOB_URI, name="job", title="Training job", mime_type="application/json",
                  description="A job's JobReport (as job_status returns it); subscribe for stage changes.")
    async def job(job_id: str) -> str:
        report = await runner.call(lambda core: core.job_status(job_id, 20), "job resource")
        watcher.seen(report.job_id, report.stage)
        return report.model_dump_json()

    @mcp.resource("hf-train://templates/{method}", mime_type="text/x-python")
    def template(method: str) -> str:
        """The Jinja2 template a method's training script is rendered from."""
        from hf_train_mcp.rendering.script import template_names, template_source

        if method not in template_names():
            raise ValueError(f"method must be one of {', '.join(template_names())}")
        return template_source(method)

    @mcp.prompt(name="finetune", title="Fine-tune a model",
                description="Fine-tune a model on a dataset end to end: validate, estimate, train, follow, evaluate.")
    def finetune(
        model: Annotated[str, Field(description="Hub model id or local path")],
        dataset: Annotated[str, Field(description="Hub dataset id or local file")],
        goal: Annotated[str, Field(description="what the model should get better at")] = "",
    ) -> str:
        return finetune_prompt(model, dataset, goal)
