"""The human shell: `hf-train-mcp serve | demo | status | jobs | logs | cancel | hardware`."""

import argparse
import hmac
import json
import logging
import os
import sys
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
    from hf_train_mcp.app import build_server

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
        from hf_train_mcp.app import build_server

        build_server().run()
        return
    import uvicorn

    from hf_train_mcp.access import Access

    token = args.auth_token or os.environ.get("HF_TRAIN_AUTH_TOKEN")
    if not token and args.host not in ("127.0.0.1", "localhost", "::1"):
        logging.warning("serving on %s without --auth-token: anyone who reaches this port can launch paid jobs "
                        "with this server's Hugging Face token", args.host)
    access = Access.http(local_dirs=args.allow_local_files, local_jobs=args.allow_local_jobs,
                         reward_code=args.allow_reward_code)
    extra_hosts = [h.strip() for value in args.allowed_hosts for h in value.split(",") if h.strip()]
    uvicorn.run(_http_app(args.host, token, access, extra_hosts), host=args.host, port=args.port,
                log_level="warning", lifespan="on")


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
                        "off by default)")
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
