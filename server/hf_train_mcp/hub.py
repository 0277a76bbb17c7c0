"""The one place that builds huggingface_hub clients, bounds and retries their reads, and keeps tokens out of
everything we say.

huggingface_hub retries only a few calls (list_jobs); whoami, inspect, hardware, model info and cancel raise on
the first 429/5xx, and its shared client has no timeout, so a hanging Hub would hang a tool. Every idempotent
read goes through `bounded`: a per-request timeout, retries with backoff on 429/5xx/timeouts (honouring
Retry-After and RateLimit when they fit), and a hard deadline, so that each tool answers in seconds.
"""

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from hf_train_mcp.credentials import unexpanded
from hf_train_mcp.errors import AuthError, BudgetError, HubError, NotFoundError, TrainError

T = TypeVar("T")
READ_DEADLINE_S = 6.0  # one read, retries included; a tool makes at most one read that can time out
# The read timeout also bounds the job POST, which must not be cut short (a retry could launch twice); reads
# are cut by `bounded`'s deadline instead, and their worker threads end within this.
CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S = 3.0, 30.0
BACKOFF_S = 0.5
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_timeouts_installed = False
_install_lock = threading.Lock()
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # huggingface_hub's, in its order
# when the response bodies this thread reads must have ended (monotonic), for a stream that never ends itself
_body_deadline: ContextVar[float | None] = ContextVar("hf_train_mcp_body_deadline", default=None)


class HubUnreachable(HubError):
    """The Hub did not answer in time, or kept failing: callers with a fallback (the ledger, built-in prices)
    use it and say so."""


def status_of(exc: BaseException) -> int | None:
    return getattr(getattr(exc, "response", None), "status_code", None)


def transient(exc: BaseException) -> bool:
    """Worth retrying: a 408/429/5xx answer, or no answer at all (connection, timeout, protocol errors)."""
    status = status_of(exc)
    if status is not None:
        return status in TRANSIENT_STATUS
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & {"TransportError", "ConnectError", "TimeoutException", "NetworkError", "RemoteProtocolError",
                         "ConnectionError", "TimeoutError"})


def _wait_hint(exc: BaseException) -> float | None:
    """Seconds the Hub asked us to wait (RateLimit `t=`, or Retry-After in seconds)."""
    from huggingface_hub.utils import parse_ratelimit_headers

    headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    limit = parse_ratelimit_headers(headers)
    if limit is not None and limit.remaining == 0:
        return float(limit.reset_in_seconds)
    value = headers.get("retry-after")
    return float(value) if value and value.strip().isdigit() else None


def _within(call: Callable[[], T], seconds: float) -> T:
    """Run `call` but give up after `seconds` (the thread is left to its own request timeout)."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed back to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name="hub-read", daemon=True)
    worker.start()
    worker.join(max(0.0, seconds))
    if worker.is_alive():
        raise TimeoutError(f"no answer within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def bounded(action: str, call: Callable[[], T], token: str | None, *,
            deadline_s: float | None = None, retry: bool = True) -> T:
    """An idempotent Hub read with retries and a hard deadline. Raises hub_error() for a definite answer (401,
    402, 403, 404, ...) and HubUnreachable when the Hub did not give one in time. retry=False: one attempt
    (a call whose repeat could be refused for having worked, like a cancel)."""
    install_timeouts()
    deadline = time.monotonic() + (READ_DEADLINE_S if deadline_s is None else deadline_s)
    attempt = 0
    while True:
        try:
            return _within(call, deadline - time.monotonic())
        except TrainError:
            raise  # already worded by the call itself
        except Exception as exc:
            if not transient(exc):
                raise hub_error(action, exc, token) from None
            if {cls.__name__ for cls in type(exc).__mro__} & {"ConnectError", "ConnectionRefusedError"}:
                raise HubUnreachable(f"{action} failed: no connection ({_detail(exc, token)}); check the network "
                                     "or HF_ENDPOINT") from None  # offline: retrying only makes the answer late
            hinted = _wait_hint(exc)
            wait = hinted if hinted is not None else BACKOFF_S * 2**attempt
            attempt += 1
            if not retry or time.monotonic() + wait >= deadline - 0.2:
                later = f"; the Hub asked to retry after {hinted:.0f} s" if hinted else ""
                raise HubUnreachable(f"{action} failed: the Hub did not answer in time "
                                     f"({_detail(exc, token)}, {attempt} attempt(s)){later}") from None
            time.sleep(wait)


def streamed(call: Callable[[], T], *, deadline_s: float) -> T:
    """Run `call` in this thread with every request it makes cut off deadline_s from now (as the client's own
    read timeout: huggingface_hub ends a no-follow stream on it). A Jobs SSE stream never ends by itself, and
    each keep-alive it sends resets the read timeout, so without this its reader never ends."""
    install_timeouts()
    marker = _body_deadline.set(time.monotonic() + deadline_s)
    try:
        return call()
    finally:
        _body_deadline.reset(marker)


def _wait_within_deadline(request) -> None:
    """httpx request hook: under `streamed`, no single wait (connect, headers, next chunk) outlasts what is left
    of the deadline (a silent stream or a Hub that never answers)."""
    deadline = _body_deadline.get()
    if deadline is None:
        return
    left = max(0.05, deadline - time.monotonic())
    timeouts = dict(request.extensions.get("timeout") or {})
    request.extensions = {**request.extensions, "timeout": {
        **timeouts, **{k: min(left, timeouts.get(k) or left) for k in ("connect", "read", "write", "pool")}}}


def _cut_at_deadline(response) -> None:
    """httpx response hook: wrap the body of a response read under `streamed` so that its reads stop at the
    deadline, checked at every chunk: a stream that sends keep-alives is never silent long enough for the read
    timeout."""
    import httpx2

    deadline = _body_deadline.get()
    if deadline is None or not isinstance(response.stream, httpx2.SyncByteStream):
        return
    inner, request = response.stream, response.request

    class Cut(httpx2.SyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            for chunk in inner:
                if time.monotonic() > deadline:
                    raise httpx2.ReadTimeout("the read's deadline passed", request=request)
                yield chunk

        def close(self) -> None:
            inner.close()

    response.stream = Cut()


def install_timeouts() -> None:
    """Give huggingface_hub's shared client connect/read timeouts (it has none), once per process."""
    global _timeouts_installed
    with _install_lock:  # set_client_factory closes the shared client: do it once, before anyone uses it
        if not _timeouts_installed:
            _install_client_factory()
            _timeouts_installed = True


def _install_client_factory() -> None:
    import httpx2
    from huggingface_hub.utils import set_client_factory
    from huggingface_hub.utils._http import default_client_factory

    def client_factory():
        client = default_client_factory()
        client.timeout = httpx2.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        hooks = client.event_hooks
        client.event_hooks = {"request": [*hooks.get("request", []), _wait_within_deadline],
                              "response": [*hooks.get("response", []), _cut_at_deadline]}
        return client

    set_client_factory(client_factory)


def hub_endpoint() -> str:
    """Read at call time (huggingface_hub reads HF_ENDPOINT once at import; tests and users may set it later)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def drop_placeholder_tokens() -> list[str]:
    """Remove the token variables that hold a placeholder from this process's environment, so that every reader
    (huggingface_hub, datasets, transformers, this package) finds no token there and falls back to the token
    file of `hf auth login`, if any; the names removed."""
    dropped = [name for name in TOKEN_VARIABLES if unexpanded(os.environ.get(name))]
    for name in dropped:
        os.environ.pop(name, None)
    return dropped


def hub_token() -> str | None:
    from huggingface_hub import get_token

    drop_placeholder_tokens()  # set after start-up too (a test, an embedding host): checked at every read
    return get_token()


def hub_api(token: str | None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub_endpoint(), token=token or False)


def scrub(text: str, token: str | None) -> str:
    """Remove the token from any text that leaves the process (error messages can echo headers)."""
    if token:
        text = text.replace(token, "hf_***")
    return text


def _detail(exc: BaseException, token: str | None) -> str:
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    server_message = getattr(exc, "server_message", None)  # what the Hub said, e.g. "Invalid flavor"
    if server_message and server_message not in detail:
        detail = f"{detail.rstrip(': ')}: {server_message.strip()}"
    return scrub(detail, token)


ADVICE = {
    401: "the token was rejected: log in again (`hf auth login`) or set a valid HF_TOKEN",
    403: ("the token lacks the scope for this: use a token with write access to the namespace (a fine-grained "
          "token needs 'jobs' and 'repo write' permissions)"),
    404: "not found: check the id and namespace",
    429: "rate-limited by the Hub: wait a minute and retry",
}


def _unpaid(instead: str | None) -> str:
    elsewhere = f", or send {instead}" if instead else ""
    return ("the account has no credits or payment method for Jobs: add one at https://huggingface.co/settings/billing"
            f" (or run in an organization that has one){elsewhere}; nothing was launched")


def hub_error(action: str, exc: BaseException, token: str | None, *, instead: str | None = None) -> TrainError:
    """A TrainError for a failed Hub call, worded for the agent and never carrying the token. instead: the
    argument that sends the work where it costs nothing (a backend's Words.instead), offered when the account
    cannot pay."""
    status = status_of(exc) or 0
    refused = 400 <= status < 500 and status not in TRANSIENT_STATUS  # the request itself, not the Hub's state
    fix = "the Hub refused it as sent: fix what it names (the same call again will be refused again)"
    advice = _unpaid(instead) if status == 402 else ADVICE.get(
        status, fix if refused else "retry later; if it persists, check https://status.huggingface.co")
    kind = {401: AuthError, 402: BudgetError, 403: AuthError, 404: NotFoundError}.get(status, HubError)
    return kind(f"{action} failed ({_detail(exc, token)}); {advice}")


@dataclass(frozen=True)
class Identity:
    """Who the token belongs to (a read-only token is refused before this is built)."""

    name: str
    orgs: tuple[str, ...] = ()  # the organizations it belongs to (whoami), whose namespaces it may write to


def resolve_identity(token: str | None, *, instead: str | None = None) -> Identity:
    """instead: the argument that runs the work without an account (a backend's Words.instead), offered when there
    is no token."""
    if not token:
        raise AuthError("no Hugging Face token found: run `hf auth login` or set HF_TOKEN (a token with write "
                        "access)" + (f", or submit with {instead} to run without an account" if instead else ""))
    info = bounded("checking the Hugging Face token", lambda: hub_api(token).whoami(), token)
    role = ((info.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise AuthError(
            "the Hugging Face token is read-only, so the trained model could not be pushed and would be lost: "
            "create a token with write access at https://huggingface.co/settings/tokens and set HF_TOKEN"
        )
    orgs = tuple(org["name"] for org in info.get("orgs") or [] if isinstance(org, dict) and org.get("name"))
    return Identity(info["name"], orgs)


def needs_token(token: str | None, repos: list[tuple[str, str]]) -> bool | None:
    """Whether reading these (repo_type, repo_id) pairs takes a token: True when one is gated or private.

    None when the Hub cannot tell us; a local job then runs without the token (it never needs more than this).
    """
    if not token:
        return False
    api = hub_api(token)
    for repo_type, repo_id in repos:
        try:
            info = bounded(f"reading {repo_id}", lambda: api.repo_info(repo_id, repo_type=repo_type), token)
        except TrainError:
            return None
        if info.private or info.gated:
            return True
    return False


def adapter_config(repo: str, token: str | None) -> dict | None:
    """A Hub repo's adapter_config.json (it holds a LoRA adapter), or None when it holds a whole model."""
    import json

    from huggingface_hub.errors import EntryNotFoundError

    def read() -> dict | None:
        try:
            path = hub_api(token).hf_hub_download(repo, "adapter_config.json")
        except EntryNotFoundError:
            return None
        with open(path) as f:
            return json.load(f)

    return bounded(f"reading {repo}", read, token)


def repo_has_file(repo: str, name: str, token: str | None) -> bool:
    return bounded(f"reading {repo}", lambda: hub_api(token).file_exists(repo, name), token)


def existing_repo(repo: str, token: str | None) -> str | None:
    """What a model repo holds before something is pushed there: "adapter", "model" (anything else), or None
    when there is no such repo."""
    exists = bounded(f"looking up {repo}", lambda: hub_api(token).repo_exists(repo, repo_type="model"), token)
    if not exists:
        return None
    return "adapter" if adapter_config(repo, token) is not None else "model"
