"""Python source parsed and compiled one call at a time, in every thread of the server.

CPython 3.11 and 3.12 keep the AST builder's recursion depth in shared state: two threads parsing at once (two
HTTP callers, two sweeps planned in parallel, a job_status reading log lines while a script renders) can fail with
"SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). Jinja compiles its templates to
Python too, so rendering takes the same lock.
"""

import ast
import threading
from typing import Any

LOCK = threading.RLock()  # re-entrant: a render holds it while it parses what it rendered


def parse(source: str) -> ast.Module:
    with LOCK:
        return ast.parse(source)


def literal(text: str) -> Any:
    with LOCK:
        return ast.literal_eval(text)


def check_compiles(source: str, filename: str) -> None:
    """SyntaxError unless `source` compiles: more than parsing (where `return` or `await` may stand, too)."""
    with LOCK:
        compile(source, filename, "exec", dont_inherit=True)
