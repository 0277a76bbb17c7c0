"""The pre-warmed Python (tests/prewarmed.py) imports the training stack once, under its own environment, and forks
each run from there. A forked run must see what a fresh interpreter started with the run's environment would: the
module state the stack derived from the environment at import (its constants, functions' defaults, classes'
attributes, loggers' levels), under the environment the tests' runs use."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import prewarmed
from tests.conftest import needs_training
from tests.helpers import python_command

PROBE = '''
import importlib, json, logging, pathlib, sys, types
STACK = {stack!r}
for name in STACK:
    importlib.import_module(name)
PLAIN = (str, bytes, int, float, bool, type(None), pathlib.PurePath)

def plain(value, depth=0):
    if isinstance(value, PLAIN):
        return True
    if depth < 2 and type(value) in (tuple, list, frozenset, set):
        return all(plain(v, depth + 1) for v in value)
    if depth < 2 and type(value) is dict:  # not a lazy mapping (transformers' auto classes)
        return all(plain(k, depth + 1) and plain(v, depth + 1) for k, v in value.items())
    return False

def ordered(value):  # in no order: many of these are built from a set, whose order is the hash seed's
    if type(value) in (set, frozenset, tuple, list):
        return sorted((ordered(v) for v in value), key=repr)
    if type(value) is dict:
        return sorted(((repr(k), ordered(v)) for k, v in value.items()), key=repr)
    return value

def shown(value):
    return repr(ordered(value))

state = {{}}
roots = {{name.split(".")[0] for name in STACK}} | {{"fsspec", "tqdm"}}
for name, module in list(sys.modules.items()):
    if name.split(".")[0] not in roots or not isinstance(module, types.ModuleType):
        continue
    for key, value in list(vars(module).items()):
        where = f"{{name}}.{{key}}"
        if key.startswith("__"):
            continue
        if plain(value):
            state[where] = shown(value)
        elif isinstance(value, types.FunctionType) and value.__module__ == name:
            if value.__defaults__ and plain(value.__defaults__):
                state[where + "()"] = shown(value.__defaults__)
            if value.__kwdefaults__ and plain(value.__kwdefaults__):
                state[where + "(*)"] = shown(value.__kwdefaults__)
        elif isinstance(value, type) and value.__module__ == name:
            for attr, inner in list(vars(value).items()):
                if not attr.startswith("__") and plain(inner):
                    state[f"{{where}}.{{attr}}"] = shown(inner)
            fields = getattr(value, "__dataclass_fields__", {{}})
            for field, spec in fields.items():
                if plain(spec.default):
                    state[f"{{where}}:{{field}}"] = shown(spec.default)
manager = logging.Logger.manager
for name, logger in list(manager.loggerDict.items()):
    if isinstance(logger, logging.Logger) and name.split(".")[0] in roots:
        state["logger " + name] = logger.level
pathlib.Path(sys.argv[1]).write_text(json.dumps(state, sort_keys=True))
'''


# derived from the working folder at import, not the environment: `Path("src").resolve() / "transformers"` (a path
# into a transformers source checkout, read only when its docs are built)
CWD_AT_IMPORT = {"transformers.utils.auto_docstring.PATH_TO_TRANSFORMERS"}


def run_env(tmp_path: Path) -> dict[str, str]:
    """The environment a test's run gets (tests.helpers.run_script, the local backend): its own HF_HOME, offline,
    its own Trackio folder, an emulator's endpoint, a token, a terminal's size."""
    return {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "1",
            "HF_ENDPOINT": "http://127.0.0.1:9",
            "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_TOKEN": "hf_probe_token", "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "XDG_CACHE_HOME": str(tmp_path),
            "COLUMNS": "123", "LINES": "45", "KMP_DUPLICATE_LIB_OK": "True"}  # a CLI test's width; sklearn's own


@needs_training
@pytest.mark.training
def test_a_forked_run_sees_the_stack_as_a_fresh_interpreter_does(tmp_path: Path) -> None:
    if prewarmed.WORKER is None or python_command() == [sys.executable]:
        pytest.skip("no pre-warmed Python in this session (it starts with the training tests)")
    (tmp_path / "probe.py").write_text(PROBE.format(stack=prewarmed.PRELOADED + prewarmed.STACK))  # the same modules
    env = run_env(tmp_path)
    forked_before = len(prewarmed.WORKER.runs())
    for name, command in (("forked", python_command()), ("fresh", [sys.executable]), ("again", [sys.executable])):
        proc = subprocess.run([*command, "probe.py", name + ".json"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(prewarmed.WORKER.runs()) == forked_before + 1, "the probe was not forked: the test proves nothing"
    forked, fresh, again = (json.loads((tmp_path / f"{name}.json").read_text())
                            for name in ("forked", "fresh", "again"))
    # what two fresh interpreters disagree on is no one's environment (a pid, a random id, a set's order)
    settled = {k for k in fresh.keys() | again.keys() if fresh.get(k) == again.get(k)} - CWD_AT_IMPORT
    differing = {k: (forked.get(k), fresh.get(k)) for k in settled if forked.get(k) != fresh.get(k)}
    assert not differing, "\n".join(f"{k}: {v[0]!s:.150} != {v[1]!s:.150}" for k, v in sorted(differing.items()))
    assert str(tmp_path / "hf-home") in fresh["huggingface_hub.constants.HF_HOME"]  # the environment was the run's
    assert len(settled) > 20_000, len(settled)  # the comparison covers the stack, not a handful of names
