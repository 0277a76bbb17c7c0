"""The CLI's argparse table: `serve`, `connect`, `demo`, and one command per tool of tools.py whose options are
the fields of the tool's request model, with their help."""

import argparse
import json
from typing import Any

SHELL_COMMANDS = ("serve", "connect", "demo")  # the commands that are no tool: their parser needs no request model


def _inner(annotation: Any) -> tuple[Any, bool]:
    """(the type to parse, whether it is a list) of a field annotation, through Optional and Annotated. A type
    with its own parser (a BeforeValidator, e.g. the timeout's '2h') takes the text as typed."""
    import types
    from typing import Annotated, Union, get_args, get_origin

    from pydantic import BeforeValidator

    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            if any(isinstance(meta, BeforeValidator) for meta in get_args(annotation)[1:]):
                return str, False
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        elif origin is list:
            return _inner(get_args(annotation)[0])[0], True
        else:
            return annotation, False


def _nested_description(annotation: Any) -> str | None:
    """The description a shared type declares inside Optional (e.g. the timeout's accepted forms)."""
    from typing import get_args

    for arg in get_args(annotation):
        description = getattr(arg, "description", None) or _nested_description(arg)
        if isinstance(description, str):
            return description
    return None


def _help(info: Any, kind: Any) -> str:
    """The field's description, else what it takes; plus its limits and default."""
    from typing import Literal, get_args, get_origin

    description = info.description or _nested_description(info.annotation)
    parts = [description] if description else []
    for meta in info.metadata:
        for attr, word in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if getattr(meta, attr, None) is not None:
                parts.append(f"{word} {getattr(meta, attr)}")
    if get_origin(kind) is Literal:
        parts.append("one of " + ", ".join(map(str, get_args(kind))))
    elif not description:
        parts.append({int: "a whole number", float: "a number", bool: "on/off", dict: "JSON object or k=v"}.get(
            kind, "text"))
    if not info.is_required() and info.default not in (None, False):
        parts.append(f"default {info.default}")
    return "; ".join(parts).replace("%", "%%")  # argparse formats help strings


def _mapping(text: str) -> dict:
    """`{"prompt": "question"}` or `prompt=question,completion=answer`."""
    text = text.strip()
    if text.startswith("{"):
        return json.loads(text)
    return dict(pair.split("=", 1) for pair in text.split(",") if pair)


def add_request_options(parser: argparse.ArgumentParser, request: Any) -> None:
    """One option (or positional, for required fields) per field of a tool's request model."""
    from typing import Literal, get_args, get_origin

    for name, info in request.model_fields.items():
        kind, many = _inner(info.annotation)
        flag = "--" + name.replace("_", "-")
        options: dict[str, Any] = {"help": _help(info, kind)}
        if kind is bool:
            options.update(action=argparse.BooleanOptionalAction, default=None)
        elif get_origin(kind) is Literal:
            options["choices"] = list(get_args(kind))
        elif kind in (int, float):
            options["type"] = kind
        elif kind is dict or get_origin(kind) is dict:
            options["type"] = _mapping
        if many:
            options["nargs"] = "+"
        if info.is_required():
            parser.add_argument(name, metavar=name.upper(), **options)
        else:
            parser.add_argument(flag, dest=name, **options)


DESCRIPTION = """The human shell: `hf-train-mcp serve | demo` and one command per tool (validate, estimate, submit, status, logs,
cancel, jobs, hardware, ...), generated from tools.py: each option is a field of the tool's request model, with
its help. Tables by default; --json prints exactly the tool's structured output."""


def build_parser(*, tools: bool = True) -> argparse.ArgumentParser:
    """The CLI's parser; without `tools`, only the commands that are no tool (what `serve` needs: a server's
    start-up waits for no request model)."""
    parser = argparse.ArgumentParser(prog="hf-train-mcp", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # not dest="command": a tool's request may have a field of that name (run_script's command)
    sub = parser.add_subparsers(dest="cli_command", metavar="COMMAND")
    _add_serve(sub.add_parser("serve", help="run the MCP server (stdio by default, or streamable HTTP)"))
    p = sub.add_parser("connect", help="print the line (or link) that adds this server to an MCP client")
    p.add_argument("client", choices=["claude", "cursor", "vscode", "inspector"], help="the MCP client")
    p = sub.add_parser("demo", help="train a tiny model locally end to end (needs the 'train' extra)")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps (default 8)")
    if tools:
        _add_tools(sub)
    return parser


def _add_serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio", help="default stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP: the address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="HTTP: the port (default 8000)")
    p.add_argument("--auth-token", default=None, help="require this bearer token on HTTP (or HF_TRAIN_AUTH_TOKEN)")
    p.add_argument("--allowed-hosts", action="append", default=[], metavar="NAME",
                   help="HTTP: another Host name to accept (any port), besides the bind address, localhost and "
                        "127.0.0.1; repeatable or comma-separated")
    p.add_argument("--allow-local-files", action="append", default=[], metavar="DIR",
                   help="HTTP: a folder whose files callers may name as local datasets/models (repeatable; "
                        "none by default)")
    p.add_argument("--allow-local-jobs", action="store_true",
                   help="HTTP: let callers run jobs on this machine (backend='local'; off by default)")
    p.add_argument("--allow-reward-code", action="store_true",
                   help="HTTP: let callers send GRPO reward_code (it runs in the job, beside the server's token; "
                        "with --allow-local-jobs on this machine as this user: a shell; off by default)")
    p.add_argument("--allow-scripts", action="store_true",
                   help="HTTP: let callers use run_script (their code runs in the job, beside the server's token; "
                        "local script files and folders follow --allow-local-files; with --allow-local-jobs it runs "
                        "on this machine as this user: a shell; off by default)")


def _add_tools(sub: Any) -> None:
    """A command per tool of tools.py, its options from the tool's request model."""
    from hf_train_mcp.shell.tools import TOOLS

    for spec in TOOLS:
        p = sub.add_parser(spec.command, help=f"{spec.title} (the {spec.name} tool)", description=spec.description)
        add_request_options(p, spec.request)
        if hasattr(spec.request, "argv_field"):  # its argument lists come after `--`, as `hf jobs` takes them
            p.epilog = "After --: the script's arguments (with --script), else the command to run."
        p.add_argument("--json", action="store_true", help="print the tool's structured output as JSON")
        p.add_argument("--yes", action="store_true", help="do not ask before a large spend")
