"""Each tool of tools.py as the async function MCPServer registers: its request model's fields as the function's
parameters (what the SDK reads to build the schema and call it), a launching tool's spend confirmation, and its
work run by the Runner. Imported on a tool's first call: tools/list is answered without the models (listing.py)."""

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context, ElicitationResult, Resolve
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from hf_train_mcp.contract.readable import readable
from hf_train_mcp.contract.requests import nested_options, options_description
from hf_train_mcp.shell.runner import CodedToolError, Runner
from hf_train_mcp.shell.spend import Asked, Confirm, bound_confirmation, check_answer, confirmation_resolver
from hf_train_mcp.shell.tools import TOOLS, Hooks, ToolSpec


def register_tools(mcp: MCPServer, runner: Runner, get_core: Callable[[], Any]) -> dict[str, set[str]]:
    """Every tool of tools.py on `mcp`; returns, per tool, the parameters it accepts but does not list (method
    options, listed inside its `options` object)."""
    for spec in TOOLS:
        _register_tool(mcp, spec, runner, get_core)
    return {spec.name: set(nested_options(spec.request)) for spec in TOOLS}


def _parameters(spec: ToolSpec) -> list[inspect.Parameter]:
    """The tool's parameters: the request model's fields, with their types, limits and descriptions."""
    out = []
    for name, info in spec.request.model_fields.items():
        annotation = Annotated[(info.annotation, *info.metadata, Field(description=info.description))]
        default = inspect.Parameter.empty if info.is_required() else info.default
        out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    nested = nested_options(spec.request)
    if nested:  # one object instead of a parameter each: every agent turn pays for the schema
        annotation = Annotated[dict[str, Any] | None, Field(description=options_description(nested))]
        out.append(inspect.Parameter("options", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    return out


def _function(name: str, parameters: list[inspect.Parameter], returns: Any, body: Callable[..., Any]) -> Callable:
    """An async function with this signature (what MCPServer reads to build the schema and call it)."""

    async def function(**kwargs: Any) -> Any:
        return await body(**kwargs)

    function.__name__ = function.__qualname__ = name
    function.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
    function.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": returns}
    return function


def _register_tool(mcp: MCPServer, spec: ToolSpec, runner: Runner, get_core: Callable[[], Any]) -> None:
    """One tool of tools.py: its request model's fields as parameters, and (if it launches) the confirmation."""
    parameters = [*_parameters(spec), inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    asked = Asked()
    if spec.launches:
        # the names of _parameters(spec), without building their annotations again
        names = [*spec.request.model_fields, *(["options"] if nested_options(spec.request) else [])]
        resolve = Resolve(confirmation_resolver(spec, get_core, asked, names))
        parameters.append(inspect.Parameter("confirmation", inspect.Parameter.KEYWORD_ONLY,
                                            annotation=Annotated[ElicitationResult[Confirm], resolve]))

    async def body(ctx: Context, confirmation: Any = None, **arguments: Any) -> Any:
        try:
            req = spec.request(**arguments)
        except ValidationError as exc:
            raise CodedToolError(f"invalid arguments for {spec.name}: {readable(exc)}") from None
        check_answer(confirmation)
        hooks = Hooks(progress=runner.reporter(ctx) if spec.progress else None,
                      confirm=bound_confirmation(ctx, asked.pop(ctx)) if spec.launches else None)
        return await runner.call(lambda core: spec.call(core, req, hooks), spec.name)

    annotations = ToolAnnotations(read_only_hint=spec.read_only, destructive_hint=spec.destructive,
                                  idempotent_hint=spec.idempotent, open_world_hint=True)
    mcp.tool(name=spec.name, title=spec.title, description=spec.description, annotations=annotations)(
        _function(spec.name, parameters, spec.result, body))
