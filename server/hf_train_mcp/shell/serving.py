"""How the MCP server is served: over stdio, or over streamable HTTP with its Host/Origin checks, an optional
bearer token, and the operator's warnings about what HTTP callers get."""

import argparse
import hmac
import logging
import os
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
