"""The slow marks are checked, not trusted: a test that starts a training interpreter or a detached process
without its mark fails and says which mark it lacks (tests/marks.py), so the fast loop stays fast."""

import os
from pathlib import Path

import pytest

INNER = '''
import subprocess, sys
import pytest

def start(name):
    subprocess.run([sys.executable, "-c", "pass", name], check=True)

def test_unmarked_training():
    start("train.py")

@pytest.mark.training
def test_marked_training():
    start("train.py")

def test_unmarked_detached():
    start("hf_train_mcp.detach")

def test_plain():
    start("other.py")
'''


def test_a_test_that_starts_a_training_interpreter_or_a_detached_process_without_its_mark_fails(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    root = Path(__file__).resolve().parents[1]
    pytester.makeconftest('pytest_plugins = ["tests.marks"]\n')
    pytester.makepyfile(test_inner=INNER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "ignore")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*test_unmarked_training lacks @pytest.mark.training: it started*train.py*",
                                 "*test_unmarked_detached lacks @pytest.mark.detached: it started*"])
