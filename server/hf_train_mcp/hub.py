"""The one place that builds huggingface_hub clients, and keeps tokens out of everything we say."""

import os
from dataclasses import dataclass

from hf_train_mcp.errors import TrainError


def hub_endpoint() -> str:
    """Read at call time (huggingface_hub reads HF_ENDPOINT once at import; tests and users may set it later)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()


def hub_api(token: str | None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub_endpoint(), token=token or False)


def scrub(text: str, token: str | None) -> str:
    """Remove the token from any text that leaves the process (error messages can echo headers)."""
    if token:
        text = text.replace(token, "hf_***")
    return text


def hub_error(action: str, exc: Exception, token: str | None) -> TrainError:
    """A TrainError for a failed Hub call, worded for the agent and never carrying the token."""
    status = getattr(getattr(exc, "response", None), "status_code", None)
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    server_message = getattr(exc, "server_message", None)  # what the Hub said, e.g. "Invalid flavor"
    if server_message and server_message not in detail:
        detail = f"{detail.rstrip(': ')}: {server_message.strip()}"
    detail = scrub(detail, token)
    advice = {
        401: "the token was rejected: log in again (`hf auth login`) or set a valid HF_TOKEN",
        403: "the token may not act in this namespace: use a token with write access to it",
        404: "not found: check the id and namespace",
        429: "rate-limited by the Hub: wait a minute and retry",
    }.get(status or 0, "retry later; if it persists, check https://status.huggingface.co")
    return TrainError(f"{action} failed ({detail}); {advice}")


@dataclass(frozen=True)
class Identity:
    """Who the token belongs to (a read-only token is refused before this is built)."""

    name: str


def resolve_identity(token: str | None) -> Identity:
    if not token:
        raise TrainError(
            "no Hugging Face token found: run `hf auth login` or set HF_TOKEN (a token with write access), "
            "or submit with backend='local' to train on this machine"
        )
    try:
        info = hub_api(token).whoami()
    except Exception as exc:
        raise hub_error("checking the Hugging Face token", exc, token) from None
    role = ((info.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise TrainError(
            "the Hugging Face token is read-only, so the trained model could not be pushed and would be lost: "
            "create a token with write access at https://huggingface.co/settings/tokens and set HF_TOKEN"
        )
    return Identity(info["name"])


def needs_token(token: str | None, repos: list[tuple[str, str]]) -> bool | None:
    """Whether reading these (repo_type, repo_id) pairs takes a token: True when one is gated or private.

    None when the Hub cannot tell us; a local job then runs without the token (it never needs more than this).
    """
    if not token:
        return False
    api = hub_api(token)
    for repo_type, repo_id in repos:
        try:
            info = api.repo_info(repo_id, repo_type=repo_type)
        except Exception:
            return None
        if info.private or info.gated:
            return True
    return False
