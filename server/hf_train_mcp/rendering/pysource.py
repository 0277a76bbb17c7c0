"""Python source parsed and compiled one call at a time, in every thread of the server.

CPython 3.11 and 3.12 keep the AST builder's recursion depth in shared state: two threads parsing at once (two
HTTP callers, two sweeps planned in parallel, a job_status reading log lines while a script renders) can fail with
"SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). Jinja compiles its templates to
Python too, so rendering takes the same lock. Parses this lock cannot reach (Python 3.11's traceback module parses
a line to place its carets, in whichever thread formats a traceback) can still overlap one of ours: that rare
mismatch says nothing about the source, so the parse is tried again.
"""

import ast
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
LOCK = threading.RLock()  # re-entrant: a render holds it while it parses what it rendered
_TRIES = 5


def _locked(work: Callable[[], T]) -> T:
    for attempt in range(_TRIES):
        try:
            with LOCK:
                return work()
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == _TRIES - 1:
                raise
            time.sleep(0.01 * (attempt + 1))  # the other thread's parse ends, and the shared depth with it
    raise AssertionError("unreachable")


def parse(source: str) -> ast.Module:
    return _locked(lambda: ast.parse(source))


def literal(text: str) -> Any:
    return _locked(lambda: ast.literal_eval(text))


def check_compiles(source: str, filename: str) -> None:
    """SyntaxError unless `source` compiles: more than parsing (where `return` or `await` may stand, too)."""
    _locked(lambda: compile(source, filename, "exec", dont_inherit=True))
