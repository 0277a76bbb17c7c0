"""Keeps the slow marks honest: a test that starts a training interpreter without `training`, or starts a detached
process without `detached`, fails at teardown and says which mark it lacks. The fast loop (README) leaves both
marks out, so a mark that is missing would make the fast loop slow, and one that is there for no reason would
hide a fast test from it.

Seen here: every process this interpreter starts (the `subprocess.Popen` audit event, so helpers and libraries are
covered alike), a Trainer's `train()` run in process, and what a test's own HF_TRAIN_HOME holds at its end: the
local jobs and detached supervisors that a server or a child interpreter of the test started, and the scripts that
the worker's pre-warmed Python (tests/prewarmed.py) forked for it."""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests import prewarmed

_TRAINING = ("train.py", "torchrun", "torch.distributed.run", "rendezvous.py", "Trainer.train", "training stack")
_DETACHED = ("hf_train_mcp.detach",)
_seen: list[str] | None = None  # what the running test started; None between tests


def _audit(event: str, args: tuple) -> None:
    if event == "subprocess.Popen" and _seen is not None:
        argv = args[1] if isinstance(args[1], (list, tuple)) else [args[1]]
        _seen.append(" ".join(str(a) for a in argv))


sys.addaudithook(_audit)


def _trainer_ran(*_: object) -> None:
    if _seen is not None:
        _seen.append("Trainer.train")


class _TrainerWatch:
    """Wraps transformers' Trainer.train once transformers.trainer is imported (by a test or a library)."""

    def find_spec(self, name: str, path=None, target=None):
        if name != "transformers.trainer":
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        real_exec = spec.loader.exec_module

        def exec_module(module):
            real_exec(module)
            train = module.Trainer.train

            def watched(self, *args, **kwargs):
                _trainer_ran()
                return train(self, *args, **kwargs)

            module.Trainer.train = watched

        spec.loader.exec_module = exec_module
        return spec


if "transformers.trainer" in sys.modules:
    _TrainerWatch.find_spec(_TrainerWatch(), "transformers.trainer")  # pragma: no cover (imported before us)
else:
    sys.meta_path.insert(0, _TrainerWatch())


_STACK = re.compile(r"^\s*(import|from)\s+(torch|transformers|trl|peft|sentence_transformers|unsloth)\b", re.M)


def _left_in_home(home: Path) -> list[str]:
    """The local jobs and detached supervisors that this test's home shows were started. A local job is a
    training interpreter when the program it runs imports the training stack (a stand-in that sleeps or crashes
    is not)."""
    found = []
    for launch in home.glob("jobs/*/launch.json"):
        found.append(f"hf_train_mcp.detach (local job {launch.parent.name})")
        try:
            spec = json.loads(launch.read_text())
            programs = [launch.parent / spec.get("cwd", ".") / arg for arg in spec["command"] if arg.endswith(".py")]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if any(p.is_file() and _STACK.search(p.read_text(errors="replace")) for p in programs):
            found.append(f"a local job whose program imports the training stack: {' '.join(spec['command'])}")
    found += [f"hf_train_mcp.detach ({pid.name})" for pid in home.rglob("*.pid")]
    return found


def _forked_for(test_dir: Path, skipped: int) -> list[str]:
    """What the worker's pre-warmed Python forked for this test (a run whose HF_HOME is in its tmp_path): a
    training interpreter, whatever the script is called. A job a previous test left running is not this test's."""
    return [f"{command} (in the pre-warmed training stack)" for hf_home, command in prewarmed.WORKER.runs()[skipped:]
            if hf_home.startswith(f"{test_dir}{os.sep}")]


def _lacking(item: pytest.Item, started: list[str]) -> list[str]:
    lacking = []
    if any(word in s for s in started for word in _TRAINING) and item.get_closest_marker("training") is None:
        lacking.append("training")
    if any(word in s for s in started for word in _DETACHED) and item.get_closest_marker("detached") is None:
        lacking.append("detached")
    return lacking


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    global _seen
    _seen = []
    forked = len(prewarmed.WORKER.runs()) if prewarmed.WORKER else 0
    try:
        result = yield
    finally:
        started, _seen = _seen, None
    home = os.environ.get("HF_TRAIN_HOME")
    started += _forked_for(Path(home).parent, forked) if home and prewarmed.WORKER else []
    started += _left_in_home(Path(home)) if home else []
    lacking = _lacking(item, started)
    if lacking:
        shown = "; ".join(dict.fromkeys(s[:160] for s in started))
        pytest.fail(f"{item.nodeid} lacks @pytest.mark.{' and '.join(lacking)}: it started {shown}", pytrace=False)
    return result
