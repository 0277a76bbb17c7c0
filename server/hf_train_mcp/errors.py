"""The one exception the core raises for problems the caller can fix.

The MCP shell turns it into a ToolError and the CLI into a one-line message; the core never imports mcp.
"""


class TrainError(Exception):
    """Something the caller sent (or the environment lacks) that they can fix; the text says how."""


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
