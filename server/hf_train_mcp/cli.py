"""The human shell: `hf-train-mcp serve | demo | status | jobs | logs | cancel | hardware`."""

import argparse
import hmac
import json
import logging
import os
import sys
from typing import Any


def _http_app(host: str, port: int, auth_token: str | None) -> Any:
    from mcp.server.transport_security import TransportSecuritySettings

    from hf_train_mcp.app import build_server

    security = None
    if host not in ("127.0.0.1", "localhost", "::1"):
        security = TransportSecuritySettings(allowed_hosts=[f"{host}:{port}", host], allowed_origins=[])
    app = build_server().streamable_http_app(host=host, transport_security=security)
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
        from hf_train_mcp.app import build_server

        build_server().run()
        return
    import uvicorn

    token = args.auth_token or os.environ.get("HF_TRAIN_AUTH_TOKEN")
    if not token and args.host not in ("127.0.0.1", "localhost", "::1"):
        logging.warning("serving on %s without --auth-token: anyone who reaches this port can launch paid jobs "
                        "with this server's Hugging Face token", args.host)
    uvicorn.run(_http_app(args.host, args.port, token), host=args.host, port=args.port, log_level="warning",
                lifespan="on")


def _print(model: Any) -> None:
    print(json.dumps(model.model_dump(mode="json", exclude_none=True), indent=2))


def _core() -> Any:
    from hf_train_mcp.service import Core

    return Core()


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=os.environ.get("HF_TRAIN_LOG_LEVEL", "WARNING"), stream=sys.stderr)
    parser = argparse.ArgumentParser(prog="hf-train-mcp", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("serve", help="run the MCP server (default)")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--auth-token", default=None, help="require this bearer token on HTTP (or HF_TRAIN_AUTH_TOKEN)")
    p = sub.add_parser("demo", help="train a tiny model locally end to end (needs the 'train' extra)")
    p.add_argument("--steps", type=int, default=8)
    for name in ("status", "logs", "cancel"):
        sub.add_parser(name, help=f"{name} of a job").add_argument("job_id")
    p = sub.add_parser("jobs", help="list jobs")
    p.add_argument("--stage", default=None)
    sub.add_parser("hardware", help="list Jobs hardware and prices")
    args = parser.parse_args(argv)

    from hf_train_mcp.errors import TrainError

    try:
        match args.command:
            case None | "serve":
                if args.command is None:
                    args = parser.parse_args(["serve"])
                serve(args)
            case "demo":
                from hf_train_mcp.demo import run_demo

                run_demo(steps=args.steps)
            case "status":
                _print(_core().job_status(args.job_id))
            case "logs":
                print("\n".join(_core().job_logs(args.job_id, 0, 100_000).lines))
            case "cancel":
                _print(_core().cancel_job(args.job_id))
            case "jobs":
                _print(_core().list_jobs(args.stage, 50))
            case "hardware":
                _print(_core().list_hardware())
    except TrainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
