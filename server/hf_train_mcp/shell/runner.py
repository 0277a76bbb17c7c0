"""How the shell runs the core's work for one caller: in a worker thread, with what it raises turned into a tool
error that carries its stable code (errors.ErrorCode), and its progress into MCP progress notifications."""

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError

from hf_train_mcp.access import Access
from hf_train_mcp.contract.readable import readable
from hf_train_mcp.errors import ERROR_CODE_META, ErrorCode, TrainError, unexpected

T = TypeVar("T")


class CodedToolError(ToolError):
    """A ToolError that knows its stable code (errors.ErrorCode)."""

    def __init__(self, text: str, code: ErrorCode = "invalid") -> None:
        super().__init__(text)
        self.code = code


def code_of(exc: ToolError) -> ErrorCode:
    """The code of our own error, which the SDK re-raises as "Error executing tool ..." with ours as the cause."""
    for error in (exc, exc.__cause__):
        if isinstance(error, CodedToolError):
            return error.code
    return "unexpected" if isinstance(exc, UnexpectedToolError) else "invalid"  # the SDK's own: unknown tool


def coded_result(text: str, code: ErrorCode, tool: str) -> CallToolResult:
    """A tool error as the SDK returns one, with its stable code in _meta for clients that branch on it."""
    logging.getLogger(__name__).info("tool %r failed (%s): %r", tool, code, text)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True,
                          _meta={ERROR_CODE_META: code})


class Runner:
    """Runs the core's work for one caller in a worker thread, and turns what it raises into ToolError."""

    def __init__(self, get_core: Callable[[], Any], access: Access) -> None:
        self.get_core, self.access = get_core, access

    def _serve(self, work: Callable[[Any], T]) -> T:
        with self.access.serving():
            return work(self.get_core())

    async def call(self, work: Callable[[Any], T], name: str) -> T:
        try:
            return await anyio.to_thread.run_sync(lambda: self._serve(work))
        except TrainError as exc:
            raise CodedToolError(str(exc), exc.code) from None
        except ValidationError as exc:
            raise CodedToolError(f"invalid arguments: {readable(exc)}") from None
        except Exception as exc:  # a bug, or an outside failure no code path foresaw: still a clear answer
            raise CodedToolError(unexpected(name, exc, remote=self.access.remote), "unexpected") from exc

    @staticmethod
    def reporter(ctx: Context | None) -> Callable[[str], None] | None:
        if ctx is None:
            return None
        done = [0.0]

        def progress(message: str) -> None:  # called from the worker thread the core runs in
            total = getattr(message, "total", None)  # jobs.prepared.Share: a phase that says how far along it is
            if total:  # its bytes, after the steps so far, so that the progress value only grows
                anyio.from_thread.run(ctx.report_progress, done[0] + message.done, done[0] + total, str(message))
                if message.done >= total:
                    done[0] += total
                return
            done[0] += 1
            anyio.from_thread.run(ctx.report_progress, done[0], None, message)

        return progress
