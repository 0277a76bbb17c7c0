"""The human shell's entry point: `hf-train-mcp` parses its command line (cli_parser.py), serves (serving.py),
prints how to connect a client (client_setup.py), runs the demo, or runs one tool and prints its result: tables by
default, exactly the tool's structured output with --json."""

import argparse
import json
import logging
import os
import sys
from typing import Any

from hf_train_mcp.shell.cli_parser import SHELL_COMMANDS, build_parser
from hf_train_mcp.shell.client_setup import connect, stdio_note
from hf_train_mcp.shell.serving import serve


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
    if not columns:
        return out
    *first, last = columns  # the last column whole: nothing is beside it (an upload's delete command)
    out += ["  ".join([*(_cell(r.get(c))[:40].ljust(widths[c]) for c in first), _cell(r.get(last))]) for r in rows]
    return [line.rstrip() for line in out]


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


def _confirm_on_terminal(assume_yes: bool, core: Any):
    """The CLI's confirmation before a large spend or upload: a y/N question when a person is at the terminal."""

    def confirm(prepared: Any) -> None:
        from hf_train_mcp.shell.spend import confirmation_question, question_due, upload_threshold
        from hf_train_mcp.errors import DeclinedError

        if assume_yes or not sys.stdin.isatty():
            return
        if upload_threshold() is not None:
            core.count_uploads(prepared)  # what the bucket lacks: the upload question's figure
        if not question_due(prepared):
            return
        print(confirmation_question(prepared) + " [y/N] ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise DeclinedError("not submitted: declined at the terminal; nothing was launched")

    return confirm


def _progress(stream: Any) -> Any:
    """A long call's phases, one line each; a phase that says how far along it is (an upload's bytes) as a bar
    redrawn in place on a terminal, else a line at each tenth."""
    shown = [-1]

    def progress(message: str) -> None:
        total = getattr(message, "total", None)
        if not total:
            print(f"... {message}", file=stream, flush=True)
            return
        tenths = int(10 * message.done / total)
        if stream.isatty():
            bar = "#" * (3 * tenths) + "." * (30 - 3 * tenths)
            print(f"\r... [{bar}] {message}", end="\n" if message.done >= total else "", file=stream, flush=True)
        elif tenths > shown[0]:
            print(f"... {message}", file=stream, flush=True)
        shown[0] = tenths

    return progress


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
    core = _core()
    result = spec.call(core, request, Hooks(progress=None if args.json else _progress(sys.stderr),
                                            confirm=_confirm_on_terminal(args.yes, core)))
    print(json.dumps(result.model_dump(mode="json", by_alias=True), indent=2) if args.json else render(result))


def _parsed(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the arguments; `run ... -- ARGS` leaves ARGS as args.rest, never read as options here."""
    parser = build_parser(tools=bool(argv) and argv[0] not in SHELL_COMMANDS)
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:len(argv) - len(rest) - 1] if "--" in argv else argv)
    args.rest = rest
    return parser, args


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=os.environ.get("HF_TRAIN_LOG_LEVEL", "WARNING"), stream=sys.stderr)
    from hf_train_mcp.hub import drop_placeholder_tokens

    for name in drop_placeholder_tokens():  # before anything reads the environment
        logging.warning("%s holds a placeholder, not a token (the MCP client passed its config's ${...} of an "
                        "unset variable as text): read as no token, so jobs run on this machine unless `hf auth "
                        "login` saved one", name)
    parser, args = _parsed(list(sys.argv[1:] if argv is None else argv))
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
