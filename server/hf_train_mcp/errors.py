"""The exception the core raises for problems the caller can fix, with a stable code for each kind.

The MCP shell turns it into a tool error (the code in its `_meta`) and the CLI into a one-line message (with
--json, an {"error": {"code", "message"}} object); the core never imports mcp. Callers decide by the code, never by
the message, whose wording may change.
"""

from typing import ClassVar, Literal

ErrorCode = Literal["invalid", "budget", "access", "auth", "dataset", "hub", "not_found", "conflict", "fit",
                    "declined", "environment", "unexpected"]
ERROR_CODE_META = "hf-train-mcp/error-code"  # the key of a tool error's _meta that holds its code


class TrainError(Exception):
    """Something the caller sent (or the environment lacks) that they can fix; the text says how."""

    code: ClassVar[ErrorCode] = "invalid"  # arguments that cannot work as sent


class BudgetError(TrainError):
    code = "budget"  # the worst case is over a budget, or a price or budget setting cannot be judged


class AccessError(TrainError):
    code = "access"  # what the operator does not allow callers over HTTP


class AuthError(TrainError):
    code = "auth"  # no Hugging Face token, or one without the rights the action needs


class DatasetError(TrainError):
    code = "dataset"  # the data cannot be read, or does not fit the method


class HubError(TrainError):
    code = "hub"  # a Hugging Face call failed (network, rate limit, 5xx, 402): often worth a retry


class NotFoundError(TrainError):
    code = "not_found"  # no such job, sweep, model or dataset


class ConflictError(TrainError):
    code = "conflict"  # another submission holds the idempotency key


class NoFitError(TrainError):
    code = "fit"  # no hardware has the memory for the run as sent


class DeclinedError(TrainError):
    code = "declined"  # the user declined the spend confirmation: nothing was launched


class EnvironmentMissing(TrainError):
    code = "environment"  # this machine lacks a package or setting the action needs


def unexpected(tool: str, exc: BaseException, *, remote: bool) -> str:
    """What a caller reads when a tool fails in a way no check foresaw: the tool, the error's kind and first line
    (never the token; no server paths for a remote caller), and what to do. The traceback goes to the server log."""
    import logging
    import os
    import re

    logging.getLogger("hf_train_mcp").error("%s failed unexpectedly", tool, exc_info=exc)
    detail = (str(exc).splitlines() or [""])[0][:300]
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(name):
            detail = detail.replace(os.environ[name], "hf_***")
    detail = re.sub(r"hf_[A-Za-z0-9]{8,}", "hf_***", detail)
    if remote:
        detail = re.sub(r"(?:[A-Za-z]:)?[\\/][^\s'\",:)]+", "<path>", detail)
    return (f"{tool} failed on an unexpected error ({type(exc).__name__}{': ' + detail if detail else ''}). This is "
            "a defect of hf-train-mcp, not of your arguments; the server log has the traceback. Before retrying a "
            "submission, check list_jobs: it may have started.")
