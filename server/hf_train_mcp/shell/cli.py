"""The human shell: `hf-train-mcp serve | demo` and one command per tool (validate, estimate, submit, status, logs,
cancel, jobs, hardware, ...), generated from tools.py: each option is a field of the tool's request model, with
its help. Tables by default; --json prints exactly the tool's structured output."""

import argparse
import hmac
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any


def transport_security(host: str, extra_hosts: list[str]) -> Any:
    """Host/Origin checks (DNS-rebinding protection) that accept the bind address, localhost, 127.0.0.1 and the
    operator's --allowed-hosts, each with any port: what `docker run -p` and reverse proxies send."""
    from mcp.server.transport_security import TransportSecuritySettings

    def bracketed(name: str) -> str:
        return f"[{name}]" if ":" in name and not name.startswith("[") else name

    names = list(dict.fromkeys(bracketed(n) for n in (host, "localhost", "127.0.0.1", "::1", *extra_hosts)))
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h for n in names for h in (n, f"{n}:*")],
        allowed_origins=[o for n in names for scheme in ("http", "https") for o in (f"{scheme}://{n}",
                                                                                      f"{scheme}://{n}:*")],
    )


def _http_app(host: str, auth_token: str | None, access: Any, extra_hosts: list[str]) -> Any:
    from hf_train_mcp.shell.app import build_server

    app = build_server(access=access).streamable_http_app(host=host,
                                                          transport_security=transport_security(host, extra_hosts))
    if not auth_token:
        return app
    expected = f"Bearer {auth_token}".encode()

    async def require_bearer(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b'{"error": "missing or wrong bearer token"}'})
                return
        await app(scope, receive, send)

    return require_bearer


def serve(args: argparse.Namespace) -> None:
    if args.transport == "stdio":
        from hf_train_mcp.shell.app import build_server

        build_server().run()
        return
    import uvicorn

    from hf_train_mcp.access import Access

    token = args.auth_token or os.environ.get("HF_TRAIN_AUTH_TOKEN")
    for warning in http_warnings(args, authenticated=bool(token)):
        logging.warning("%s", warning)
    access = Access.http(local_dirs=args.allow_local_files, local_jobs=args.allow_local_jobs,
                         reward_code=args.allow_reward_code, scripts=args.allow_scripts)
    extra_hosts = [h.strip() for value in args.allowed_hosts for h in value.split(",") if h.strip()]
    uvicorn.run(_http_app(args.host, token, access, extra_hosts), host=args.host, port=args.port,
                log_level="warning", lifespan="on")


def http_warnings(args: argparse.Namespace, *, authenticated: bool) -> list[str]:
    """What the operator is told at start-up about what HTTP callers get beyond Hub jobs."""
    out = []
    if not authenticated and args.host not in ("127.0.0.1", "localhost", "::1"):
        out.append(f"serving on {args.host} without --auth-token: anyone who reaches this port can launch paid jobs "
                   "with this server's Hugging Face token")
    code = [flag for flag, on in (("--allow-scripts", args.allow_scripts),
                                  ("--allow-reward-code", args.allow_reward_code)) if on]
    if code and args.allow_local_jobs:
        import getpass

        out.append(f"{' and '.join(code)} with --allow-local-jobs: HTTP callers run their own code on this machine "
                   f"as {getpass.getuser()}, which amounts to a shell: it can read whatever that user can (this "
                   "server's environment through /proc, the stored Hugging Face token, every file of the user). "
                   "Serve it only to callers you would give a shell, or run it as a user that has nothing else")
    return out


STDIO_NOTE = """hf-train-mcp is an MCP server: it speaks the MCP protocol on stdin/stdout, so an MCP client starts it
(Claude Code: claude mcp add hf-train -- {serve}
or the line `{connect} connect claude` prints). As a command line it runs each tool directly:

  hf-train-mcp validate trl-lib/Capybara            check a dataset
  hf-train-mcp estimate Qwen/Qwen2.5-0.5B --dataset trl-lib/Capybara
  hf-train-mcp submit MODEL DATASET --hub-model-id you/name --dry-run
  hf-train-mcp status JOB_ID | logs JOB_ID | jobs | hardware

hf-train-mcp --help lists every command, hf-train-mcp COMMAND --help its options; hf-train-mcp demo trains a tiny
model on this machine end to end."""


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


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)[:60]
    return str(value)


def _table(rows: list[dict]) -> list[str]:
    columns = [c for c in dict.fromkeys(k for row in rows for k in row) if not isinstance(rows[0].get(c), dict | list)]
    widths = {c: min(40, max(len(c), *(len(_cell(r.get(c))) for r in rows))) for c in columns}
    out = ["  ".join(c.ljust(widths[c]) for c in columns)]
    out += ["  ".join(_cell(r.get(c))[:40].ljust(widths[c]) for c in columns) for r in rows]
    return out


def render(result: Any) -> str:
    """A tool result for a terminal: scalars as `key: value`, lists of objects as tables, text lists as lines."""
    data = result.model_dump(mode="json", by_alias=True)
    if type(result).__name__ == "LogPage":  # a page of log lines reads best as the lines themselves
        return "\n".join(data["lines"])
    lines: list[str] = []
    for key, value in data.items():
        if value in (None, [], {}) or key == "script":
            continue
        if isinstance(value, list) and all(isinstance(v, dict) for v in value):
            lines += ["", f"{key}:", *("  " + line for line in _table(value))]
        elif isinstance(value, list):
            lines += ["", f"{key}:", *(f"  {v}" for v in value)]
        elif isinstance(value, dict):
            inner = ", ".join(f"{k}={_cell(v)}" for k, v in value.items() if v is not None)
            lines.append(f"{key}: {inner}")
        else:
            lines.append(f"{key}: {_cell(value) if not isinstance(value, str) else value}")
    if data.get("script"):
        lines.append("\nscript: (--json shows the rendered script)")
    return "\n".join(lines).strip()


def _core() -> Any:
    from hf_train_mcp.service import Core

    return Core()


def _confirm_on_terminal(assume_yes: bool):
    """The CLI's confirmation before a large spend: a y/N question when a person is at the terminal."""

    def confirm(prepared: Any) -> None:
        from hf_train_mcp.shell.app import confirm_threshold, confirmation_question
        from hf_train_mcp.errors import DeclinedError

        threshold = confirm_threshold()
        if assume_yes or threshold is None or prepared.worst_case_cost_usd <= threshold or not sys.stdin.isatty():
            return
        print(confirmation_question(prepared) + " [y/N] ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise DeclinedError("not submitted: declined at the terminal; nothing was launched")

    return confirm


def run_tool(spec: Any, args: argparse.Namespace) -> None:
    from pydantic import ValidationError

    from hf_train_mcp.errors import TrainError
    from hf_train_mcp.contract.readable import readable
    from hf_train_mcp.shell.tools import Hooks

    given = {name: getattr(args, name) for name in spec.request.model_fields if getattr(args, name, None) is not None}
    if getattr(args, "rest", None):
        if not hasattr(spec.request, "argv_field"):
            raise TrainError(f"{spec.command} takes no arguments after --")
        given[spec.request.argv_field(given)] = args.rest
    try:
        request = spec.request(**given)
    except ValidationError as exc:
        raise TrainError(f"invalid options for {spec.command}: {readable(exc)}") from None
    progress = (lambda message: print(f"... {message}", file=sys.stderr, flush=True)) if not args.json else None
    result = spec.call(_core(), request, Hooks(progress=progress, confirm=_confirm_on_terminal(args.yes)))
    print(json.dumps(result.model_dump(mode="json", by_alias=True), indent=2) if args.json else render(result))


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


def build_parser() -> argparse.ArgumentParser:
    from hf_train_mcp.shell.tools import TOOLS

    parser = argparse.ArgumentParser(prog="hf-train-mcp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # not dest="command": a tool's request may have a field of that name (run_script's command)
    sub = parser.add_subparsers(dest="cli_command", metavar="COMMAND")
    p = sub.add_parser("serve", help="run the MCP server (stdio by default, or streamable HTTP)")
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
    p = sub.add_parser("connect", help="print the line (or link) that adds this server to an MCP client")
    p.add_argument("client", choices=["claude", "cursor", "vscode", "inspector"], help="the MCP client")
    p = sub.add_parser("demo", help="train a tiny model locally end to end (needs the 'train' extra)")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps (default 8)")
    for spec in TOOLS:
        p = sub.add_parser(spec.command, help=f"{spec.title} (the {spec.name} tool)", description=spec.description)
        add_request_options(p, spec.request)
        if hasattr(spec.request, "argv_field"):  # its argument lists come after `--`, as `hf jobs` takes them
            p.epilog = "After --: the script's arguments (with --script), else the command to run."
        p.add_argument("--json", action="store_true", help="print the tool's structured output as JSON")
        p.add_argument("--yes", action="store_true", help="do not ask before a large spend")
    return parser


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=os.environ.get("HF_TRAIN_LOG_LEVEL", "WARNING"), stream=sys.stderr)
    from hf_train_mcp.hub import drop_placeholder_tokens

    for name in drop_placeholder_tokens():  # before anything reads the environment
        logging.warning("%s holds a placeholder, not a token (the MCP client passed its config's ${...} of an "
                        "unset variable as text): read as no token, so jobs run on this machine unless `hf auth "
                        "login` saved one", name)
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []  # `run ... -- ARGS`: never read as options here
    args = parser.parse_args(argv[:len(argv) - len(rest) - 1] if "--" in argv else argv)
    args.rest = rest
    from hf_train_mcp.errors import TrainError

    try:
        if args.cli_command is None:
            if sys.stdin.isatty():  # a person, not an MCP client: say what this is instead of waiting silently
                print(stdio_note(), file=sys.stderr)
                return
            args = parser.parse_args(["serve"])
        if args.cli_command == "serve":
            serve(args)
        elif args.cli_command == "connect":
            print(connect(args.client))
        elif args.cli_command == "demo":
            from hf_train_mcp.shell.demo import run_demo

            run_demo(steps=args.steps)
        else:
            from hf_train_mcp.shell.tools import BY_COMMAND

            run_tool(BY_COMMAND[args.cli_command], args)
        sys.stdout.flush()
    except TrainError as exc:
        if getattr(args, "json", False):  # a script reads the stable code, not the wording
            print(json.dumps({"error": {"code": exc.code, "message": str(exc)}}, indent=2))
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # `hf-train-mcp logs JOB | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    except KeyboardInterrupt:
        sys.exit(130)
