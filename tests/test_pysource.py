"""Parsing shared with threads the lock cannot reach: a parse that overlaps one of theirs (Python 3.11's traceback
module parses a line to place its carets) fails with a SystemError that says nothing about the source."""

import ast
import types

import pytest

from hf_train_mcp.rendering import pysource

MISMATCH = SystemError("AST constructor recursion depth mismatch (before=66, after=36)")


def _failing_first(times: int, real):
    calls = []

    def parse(*args, **kwargs):
        calls.append(args)
        if len(calls) <= times:
            raise MISMATCH
        return real(*args, **kwargs)
    return parse, calls


def _patched(monkeypatch: pytest.MonkeyPatch, parse) -> None:
    """pysource's own view of `ast` (pytest's rewriting and tracebacks keep the real one)."""
    fake = types.SimpleNamespace(parse=parse, literal_eval=lambda text: ast.literal_eval(parse(text, mode="eval")),
                                 Module=ast.Module)
    monkeypatch.setattr(pysource, "ast", fake)


def test_a_parse_that_overlapped_another_threads_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    parse, calls = _failing_first(2, ast.parse)
    _patched(monkeypatch, parse)
    assert isinstance(pysource.parse("x = 1"), ast.Module) and len(calls) == 3
    parse, calls = _failing_first(1, ast.parse)
    _patched(monkeypatch, parse)
    assert pysource.literal("{'a': [1, 2]}") == {"a": [1, 2]} and len(calls) == 2


def test_a_mismatch_that_never_clears_and_any_other_system_error_are_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    parse, calls = _failing_first(99, ast.parse)
    _patched(monkeypatch, parse)
    with pytest.raises(SystemError, match="mismatch"):
        pysource.parse("x = 1")
    assert len(calls) == 5

    def broken(*args, **kwargs):
        raise SystemError("something else")
    _patched(monkeypatch, broken)
    with pytest.raises(SystemError, match="something else"):
        pysource.parse("x = 1")
