"""The MCP shell: the tools of tools.py, the job resource with subscriptions, and the finetune prompt.

Work happens in service.Core (created on first use, so that tools/list touches no disk, network or heavy
import); this module turns its TrainError into ToolError, its progress into MCP progress notifications, and a
large spend into a question to the user when the client can ask.
"""

import inspect
import json
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context, Elicit, ElicitationResult, Resolve
from mcp.server.mcpserver import AcceptedElicitation
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent
from mcp.types import Tool as MCPTool
from mcp.types import ToolAnnotations
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field, ValidationError

from hf_train_mcp import methods
from hf_train_mcp.access import STDIO, Access
from hf_train_mcp.shell.compact_schema import compact_tool_schema, declare_once
from hf_train_mcp.errors import ERROR_CODE_META, BudgetError, DeclinedError, ErrorCode, TrainError, unexpected
from hf_train_mcp.contract.readable import readable
from hf_train_mcp.contract.requests import nested_options, options_description
from hf_train_mcp.shell.tools import TOOLS, Hooks, ToolSpec
from hf_train_mcp.shell.subscriptions import JOB_URI, JobWatcher, register_subscriptions

T = TypeVar("T")

INSTRUCTIONS = f"""\
Fine-tune models with TRL ({", ".join(spec.title for spec in methods.REGISTRY.values())}) on Hugging Face Jobs, or on
this machine when there is no HF account (backend='local'). Typical flow: validate_dataset -> estimate_cost ->
submit_training (dry_run=True first to review the script) -> job_status now and then, or subscribe to hf-train://jobs/{{job_id}}
(it never waits) -> evaluate_model(job_id) -> export_model(job_id, format='merged'|'gguf'). Jobs keep running
after this conversation; the model is pushed to hub_model_id with checkpoints along the way. The finetune
prompt walks through the whole loop."""
CONFIRM_DEFAULT_USD = 10.0
# the first protocol whose elicitation rides an InputRequiredResult between rounds (no question mid-call)
INPUT_REQUIRED_VERSION = "2026-07-28"
RESUME_SWEEPS_AFTER_S = 2.0


class Confirm(BaseModel):
    submit: bool = Field(description="Launch this job?")


def confirm_threshold() -> float | None:
    """Worst-case dollars above which a submission is confirmed with the user (HF_TRAIN_CONFIRM_ABOVE_USD; 'off'
    or an empty value turns it off)."""
    raw = os.environ.get("HF_TRAIN_CONFIRM_ABOVE_USD")
    if raw is None:
        return CONFIRM_DEFAULT_USD
    if raw.strip().lower() in ("", "off", "none", "never"):
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise BudgetError(f"this server's HF_TRAIN_CONFIRM_ABOVE_USD={raw!r} is not an amount of dollars; the "
                         "operator must fix it (e.g. 10, or off)") from None


def can_elicit(ctx: Context) -> bool:
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def spend_terms(prepared: Any) -> tuple:
    """What a spend question binds: the script(s) by sha256, the flavor, the machines and the worst case. A plan
    launched on other terms was never asked about (a script URL edited, a preview planned again)."""
    runs = getattr(prepared, "runs", None)  # a sweep: each of its runs
    scripts = tuple(p.script.sha256 for _, _, p in runs) if runs is not None else (prepared.script.sha256,)
    return scripts, prepared.common["flavor"], prepared.nodes, round(prepared.worst_case_cost_usd, 2)


def confirmation_question(prepared: Any) -> str:
    """The server's own figures first: what a caller sent (a model name, say) cannot pass for them. A run across
    machines says how many, each at the flavor's price."""
    common = prepared.common
    hours = f", ~{common['estimated_hours']:.1f} h estimated" if common.get("estimated_hours") else ""
    estimate = f" (estimated ${common['estimated_cost_usd']:.2f})" if common.get("estimated_cost_usd") else ""
    nodes = getattr(prepared, "nodes", 1)
    machines = f"{nodes} machines x {common['flavor']}" if nodes > 1 else common["flavor"]
    price = getattr(getattr(prepared, "plan", None), "usd_per_hour", None)
    rate = f" (${price / nodes:.2f}/h each, ${price:.2f}/h together)" if nodes > 1 and price else ""
    return (f"It can bill at most ${prepared.worst_case_cost_usd:.2f}{estimate}: {machines}{rate} for up to "
            f"{common['timeout']}{hours}, billed per minute while it runs. Launch {prepared.summary} on {machines}?")


class CompactMCPServer(MCPServer):
    """MCPServer whose tools/list carries compacted schemas (arguments are still validated by the full models),
    and whose argument errors say what to send instead of pydantic's text."""

    # per tool: parameters it accepts but does not list (method options, listed inside its `options` object)
    unlisted: dict[str, set[str]]

    async def list_tools(self) -> list[MCPTool]:
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
        tool = self._tool_manager.get_tool(name)
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
            return coded_result(str(exc), _code_of(exc), name)


def _unlisted(schema: dict[str, Any], names: set[str]) -> dict[str, Any]:
    properties = {k: v for k, v in schema.get("properties", {}).items() if k not in names}
    return {**schema, "properties": properties} if names else schema


def _code_of(exc: ToolError) -> ErrorCode:
    """The code of our own error, which the SDK re-raises as "Error executing tool ..." with ours as the cause."""
    for error in (exc, exc.__cause__):
        if isinstance(error, CodedToolError):
            return error.code
    return "unexpected" if isinstance(exc, UnexpectedToolError) else "invalid"  # the SDK's own: unknown tool


def coded_result(text: str, code: ErrorCode, tool: str) -> CallToolResult:
    """A tool error as the SDK returns one, with its stable code in _meta for clients that branch on it."""
    logging.getLogger(__name__).info("tool %r failed (%s): %r", tool, code, text)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True,
                          _meta={ERROR_CODE_META: code})


class CodedToolError(ToolError):
    """A ToolError that knows its stable code (errors.ErrorCode)."""

    def __init__(self, text: str, code: ErrorCode = "invalid") -> None:
        super().__init__(text)
        self.code = code


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


def build_server(core: Any | None = None, access: Access = STDIO, *, watch_interval_s: float = 5.0) -> MCPServer:
    """The MCP server. `core` is created lazily so that tools/list never touches disk, network or heavy imports;
    `access` is what its callers may do (everything over stdio; what the operator allowed over HTTP)."""
    state: dict[str, Any] = {"core": core}

    def get_core() -> Any:
        if state["core"] is None:
            from hf_train_mcp.service import Core

            state["core"] = Core(access=access)
        return state["core"]

    watcher = JobWatcher(get_core, interval_s=watch_interval_s)
    mcp = CompactMCPServer("hf-train-mcp", instructions=INSTRUCTIONS, lifespan=_lifespan(watcher, get_core),
                           subscriptions=watcher.bus)
    mcp.unlisted = {spec.name: set(nested_options(spec.request)) for spec in TOOLS}
    mcp.watcher = watcher  # type: ignore[attr-defined]  # tests drive polls by hand
    register_subscriptions(mcp, watcher)
    runner = _Runner(get_core, access)
    for spec in TOOLS:
        _register_tool(mcp, spec, runner, get_core)
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
            from hf_train_mcp.sweeps import sweep as sweeps

            await anyio.to_thread.run_sync(lambda: sweeps.resume(get_core()))
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


class _Runner:
    """Runs the core's work for one caller in a worker thread, and turns what it raises into ToolError."""

    def __init__(self, get_core: Callable[[], Any], access: Access) -> None:
        self.get_core, self.access = get_core, access

    def _serve(self, work: Callable[[Any], T]) -> T:
        with self.access.serving():
            return work(self.get_core())

    async def call(self, work: Callable[[Any], T], name: str) -> T:
        try:
            return await anyio.to_thread.run_sync(lambda: self._serve(work))
        except TrainError as exc:
            raise CodedToolError(str(exc), exc.code) from None
        except ValidationError as exc:
            raise CodedToolError(f"invalid arguments: {readable(exc)}") from None
        except Exception as exc:  # a bug, or an outside failure no code path foresaw: still a clear answer
            raise CodedToolError(unexpected(name, exc, remote=self.access.remote), "unexpected") from exc

    @staticmethod
    def reporter(ctx: Context | None) -> Callable[[str], None] | None:
        if ctx is None:
            return None
        done = [0]

        def progress(message: str) -> None:  # called from the worker thread the core runs in
            done[0] += 1
            anyio.from_thread.run(ctx.report_progress, done[0], None, message)

        return progress


def _register_tool(mcp: MCPServer, spec: ToolSpec, runner: _Runner, get_core: Callable[[], Any]) -> None:
    """One tool of tools.py: its request model's fields as parameters, and (if it launches) the confirmation."""
    parameters = [*_parameters(spec), inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    asked = _Asked()
    if spec.launches:
        parameters.append(inspect.Parameter(
            "confirmation", inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[ElicitationResult[Confirm], Resolve(_confirmation_resolver(spec, get_core, asked))]))

    async def body(ctx: Context, confirmation: Any = None, **arguments: Any) -> Any:
        try:
            req = spec.request(**arguments)
        except ValidationError as exc:
            raise CodedToolError(f"invalid arguments for {spec.name}: {readable(exc)}") from None
        if confirmation is not None and not isinstance(confirmation, AcceptedElicitation):
            raise CodedToolError(f"not submitted: the user {confirmation.action}d the confirmation; nothing was "
                                 "launched", "declined")
        if isinstance(confirmation, AcceptedElicitation) and isinstance(confirmation.data, Confirm) and \
                not confirmation.data.submit:
            raise CodedToolError("not submitted: the user chose not to launch it; nothing was launched", "declined")
        hooks = Hooks(progress=runner.reporter(ctx) if spec.progress else None,
                      confirm=_bound_confirmation(ctx, asked.pop(ctx)) if spec.launches else None)
        return await runner.call(lambda core: spec.call(core, req, hooks), spec.name)

    annotations = ToolAnnotations(read_only_hint=spec.read_only, destructive_hint=spec.destructive,
                                  idempotent_hint=spec.idempotent, open_world_hint=True)
    mcp.tool(name=spec.name, title=spec.title, description=spec.description, annotations=annotations)(
        _function(spec.name, parameters, spec.result, body))


def _register_resources(mcp: MCPServer, watcher: JobWatcher, runner: _Runner) -> None:
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


class _Asked:
    """The terms (spend_terms) each call's spend question showed, from its resolver to its body: the same Context
    object travels from one to the other. A few are kept (a question answered in a later round leaves one)."""

    KEPT = 64

    def __init__(self) -> None:
        self._shown: dict[int, tuple[Context, tuple]] = {}

    def put(self, ctx: Context, terms: tuple) -> None:
        self._shown[id(ctx)] = (ctx, terms)
        while len(self._shown) > self.KEPT:
            self._shown.pop(next(iter(self._shown)))

    def pop(self, ctx: Context) -> tuple | None:
        shown = self._shown.pop(id(ctx), None)
        return shown[1] if shown is not None and shown[0] is ctx else None


def _bound_confirmation(ctx: Context, shown: tuple | None) -> Callable[[Any], None]:
    """The body's check of the plan it is about to launch, in the worker thread: a plan over the threshold, or
    any plan on other terms than the question showed (a script URL edited while the user read it, a preview
    that expired and was planned again), is asked about again where the client takes a question mid-call (the
    older protocol), and refused where it does not (the user then answers about the plan that launches)."""
    def check(prepared: Any) -> None:
        terms = spend_terms(prepared)
        if terms == shown:
            return
        threshold = confirm_threshold()
        if shown is None and (threshold is None or prepared.worst_case_cost_usd <= threshold or not can_elicit(ctx)):
            return  # no question was due: the budget caps govern
        if ctx.protocol_version is None or is_version_at_least(ctx.protocol_version, INPUT_REQUIRED_VERSION):
            raise DeclinedError("not submitted: the plan changed after the spend question was asked (now: "
                                f"{confirmation_question(prepared)}); nothing was launched: call again to be asked "
                                "about this plan")
        answer = anyio.from_thread.run(ctx.elicit, confirmation_question(prepared), Confirm)
        if not (isinstance(answer, AcceptedElicitation) and isinstance(answer.data, Confirm) and answer.data.submit):
            raise DeclinedError("not submitted: the user did not confirm the plan as it changed after the first "
                                "question; nothing was launched")

    return check


def _confirmation_resolver(spec: ToolSpec, get_core: Callable[[], Any], asked: _Asked) -> Callable[..., Any]:
    """Resolves a launching tool's hidden `confirmation`: plans the submission (kept for the body, which does not
    plan again) and, when its worst case is over the threshold and the client can ask, asks the user; what the
    question showed goes to the body, which launches only a plan on those terms."""
    # the names of _parameters(spec), without building their annotations again
    names = [*spec.request.model_fields, *(["options"] if nested_options(spec.request) else [])]

    async def resolver(ctx: Context, **arguments: Any) -> Elicit[Confirm] | None:
        try:
            req = spec.request(**arguments)
        except ValidationError:
            return None  # the body reports it
        if getattr(req, "dry_run", False) or getattr(req, "measure", True) is False:
            return None  # launches nothing
        try:
            threshold = confirm_threshold()
        except TrainError as exc:  # the operator's setting is unreadable: nothing launches until it is fixed
            raise CodedToolError(str(exc), exc.code) from None
        if threshold is None or not can_elicit(ctx):
            return None  # clients that cannot ask are governed by the budget caps alone
        core = get_core()

        def preview() -> Any:
            with core.access.serving():
                if getattr(req, "idempotency_key", None) and core.existing_submission(req) is not None:
                    return None
                return core.preview(req, kind=spec.launches)

        try:
            prepared = await anyio.to_thread.run_sync(preview)
        except Exception as exc:  # a question that could not be asked is a refusal, never a pass
            text = str(exc) if isinstance(exc, TrainError) else unexpected(spec.name, exc, remote=core.access.remote)
            raise CodedToolError(f"{text} (the spend confirmation could not be prepared, so nothing was launched)",
                                 exc.code if isinstance(exc, TrainError) else "unexpected") from None
        if prepared is None or prepared.worst_case_cost_usd <= threshold:
            return None
        asked.put(ctx, spend_terms(prepared))
        return Elicit(confirmation_question(prepared), Confirm)

    parameters = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    parameters += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY) for n in names]
    resolver.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    resolver.__annotations__ = {"ctx": Context}
    return resolver


def _method_hints() -> str:
    """Each method by the columns of the first format it reads, from the registry."""
    from hf_train_mcp.data.formats import FORMATS

    return "; ".join(f"{'+'.join(FORMATS[spec.formats[0]].columns)}: {name} ({spec.summary})"
                     for name, spec in methods.REGISTRY.items())


def finetune_prompt(model: str, dataset: str, goal: str = "") -> str:
    aim = f" The goal: {goal}." if goal else ""
    return f"""Fine-tune {model} on {dataset} with the hf-train tools.{aim}

1. validate_dataset(dataset={json.dumps(dataset)}, method=...) — pick the method from the data ({_method_hints()})
   and apply its suggested_column_mapping.
2. estimate_cost(model={json.dumps(model)}, dataset=...) — show me the cheapest flavor that fits, hours, dollars and
   the recommended timeout; for a run over ~$20 offer estimate_cost(measure=True) first.
3. submit_training(..., dry_run=True) — show the plan (flavor, timeout, worst case), then submit for real with a
   hub_model_id under my account and an idempotency_key, and give me the job, Trackio and model URLs.
4. Follow it: subscribe to hf-train://jobs/<job_id> (or call job_status every few minutes, never in a loop) and
   tell me when it ends; on ERROR read `error` and `next_step` and propose the fix.
5. When it completes: evaluate_model(model=<job_id>) — held-out loss/perplexity (or preference accuracy, mean
   reward) and base vs fine-tuned samples; its job_status last_metrics hold the results, which also land in the
   model card and the Trackio project. Report them next to the training loss.
6. export_model(model=<job_id>, format="merged") for vLLM/transformers, or format="gguf" (q4_k_m) for
   llama.cpp/Ollama, if I want to run it elsewhere. Report every step with its job and model URLs.
If I ask for the best settings, use submit_sweep over a small grid (learning_rate, lora_r) under my budget, then
compare_runs and evaluate/export its best_job_id."""
