"""The test tree's own layout: what several test modules share lives in tests/helpers.py (plain functions and
constants) or tests/conftest.py (fixtures), so no test module imports another and each runs, moves or goes alone."""

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TEST_MODULES = {path.stem for path in TESTS.glob("test_*.py")}


def imported(source: str) -> set[str]:
    """Every module a source file imports, as a dotted name (a relative import taken from the tests package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ("tests" + (f".{node.module}" if node.module else "")) if node.level else node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # `from tests import test_x`
    return names


def imports_of_test_modules(source: str) -> set[str]:
    return {name.removeprefix("tests.") for name in imported(source)
            if name.removeprefix("tests.") in TEST_MODULES and name.count(".") <= 1}


@pytest.mark.parametrize("source", [
    "from tests.{other} import call", "def f():\n    from tests.{other} import call\n", "import tests.{other}",
    "from tests import {other}", "from .{other} import call", "from . import {other}", "import {other}"])
def test_the_check_sees_each_way_of_importing_a_test_module(source: str) -> None:
    other = "test_sweeps"  # spelled apart, so that a grep of the tree for such imports finds none here either
    assert imports_of_test_modules(source.format(other=other)) == {other}


def test_the_check_lets_helpers_and_fixtures_through() -> None:
    assert imports_of_test_modules("from tests.helpers import call\nfrom tests.conftest import needs_training") == set()


def test_no_test_module_imports_another_test_module() -> None:
    offenders = {path.name: sorted(found) for path in sorted(TESTS.glob("*.py"))
                 if (found := imports_of_test_modules(path.read_text()) - {path.stem})}
    assert offenders == {}, f"import shared helpers from tests.helpers (fixtures from conftest): {offenders}"
