"""The renderer: plain-data literals only, hostile values add no statement, every combination parses."""

import ast
import re
import itertools

import pytest

from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.rendering.script import python_literal, toml_literal
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.contract.results import FLAVORS
from tests.helpers import RENDER_SIZE as SIZE

HOSTILE = [
    '"); import os; os.system("x")#',
    "'''\nimport os\n'''",
    '"""\nos.system("rm -rf /")\n"""',
    "line one\nline two\r\n# /// end",
    "\\x00\\ \\' \" {{ config }} {% raw %}",
    "name\u2028with\u2029separators",
]


def statements(text: str) -> list[str]:
    """Top-level statement kinds (and names), which no value may change."""
    out = []
    for node in ast.parse(text).body:
        name = getattr(node, "name", None) or ",".join(
            t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name))
        out.append(f"{type(node).__name__}:{name}")
    return out


def render(*, unchecked: dict | None = None, **overrides) -> str:
    """unchecked: values set past the request's validation (the renderer must hold on its own)."""
    req = TrainingRequest(**{"model": "Qwen/Qwen2-0.5B", "dataset": "org/data", "hub_model_id": "me/out",
                             **overrides})
    req = req.model_copy(update=unchecked or {})
    plan = plan_run(req, backend="hf", size=SIZE, catalog=fallback_catalog(), namespace="me", data=DataFacts())
    return plan.render().text


def test_flavor_list_matches_huggingface_hub() -> None:
    from huggingface_hub import JobHardware

    assert set(FLAVORS) == {h.value for h in JobHardware}


@pytest.mark.parametrize("value", HOSTILE)
def test_python_literal_round_trips_hostile_strings(value: str) -> None:
    assert ast.literal_eval(python_literal({"k": [value]})) == {"k": [value]}


@pytest.mark.parametrize("value", [float("nan"), float("inf"), object(), {1: "x"}, b"bytes"])
def test_python_literal_refuses_what_is_not_plain_data(value) -> None:
    with pytest.raises(ValueError):
        python_literal(value)


def test_toml_literal_never_breaks_the_comment_line() -> None:
    assert "\n" not in toml_literal("a\nb") and toml_literal(True) == "true" and toml_literal(3) == "3"


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_add_no_statement_to_the_script(value: str) -> None:
    baseline = statements(render())
    text = render(unchecked={"model": value, "dataset": value}, column_mapping={"prompt": value},
                  dataset_config=value)
    assert statements(text) == baseline
    config = next(n for n in ast.parse(text).body if isinstance(n, ast.Assign) and n.targets[0].id == "CONFIG")
    values = ast.literal_eval(config.value)
    assert values["model"] == value and values["dataset"] == value and values["column_mapping"] == {"prompt": value}
    header = text[: text.index("# ///\n") + 5]
    assert header.startswith("# /// script") and all(line.startswith("#") for line in header.splitlines())


@pytest.mark.parametrize("value", [v for v in HOSTILE if "\\" not in v])  # a backslash spells a (Windows) path
def test_hostile_model_and_dataset_names_are_refused_by_the_request(value: str) -> None:
    for field in ("model", "dataset"):
        with pytest.raises(ValueError):
            TrainingRequest(**{"model": "Qwen/Qwen2-0.5B", "dataset": "org/data", field: value})


def test_project_and_run_name_cannot_carry_newlines() -> None:
    with pytest.raises(ValueError):
        TrainingRequest(model="m", dataset="d", run_name="x\nimport os")


@pytest.mark.parametrize(
    ("method", "peft", "extra"),
    [
        (m, p, e)
        for m, p, e in itertools.product(
            ["sft", "dpo", "grpo", "reward"],
            ["lora", "qlora", "full"],
            [{}, {"eval_split": 0.1, "max_steps": 10}, {"use_liger_kernel": True, "epochs": 2}],
        )
        if not (m == "reward" and e.get("use_liger_kernel"))
    ],
)
def test_every_method_and_peft_option_renders_a_compilable_script(method: str, peft: str, extra: dict) -> None:
    text = render(method=method, peft=peft, **extra)
    compile(text, "train.py", "exec")
    assert '# secrets = ["HF_TOKEN"]' in text and "report_to=" in text
    if peft == "qlora":
        assert '"bitsandbytes>=0.45"' in text


def test_the_header_matches_the_submission() -> None:
    text = render(flavor="l4x1", timeout="3h")
    assert '# flavor = "l4x1"' in text and '# timeout = "3h"' in text
    assert '# timeout = "150m"' in render(timeout="2h30m")  # `hf jobs` reads one number and one unit
    assert "max_seq_length" not in text and "max_length=CONFIG" in text


GOOD_REWARD = '''import re


def reward(completions, **kwargs):
    """Reward completions that mention a number."""
    return [1.0 if re.search(r"\\d", str(c)) else 0.0 for c in completions]
'''


def test_reward_code_is_placed_as_its_own_marked_block_and_wired_in() -> None:
    text = render(method="grpo", reward_code=GOOD_REWARD, reward_funcs=["accuracy"])
    assert "# ----- BEGIN user reward_code" in text and "funcs.append(reward)" in text
    assert "'reward_funcs': ['accuracy']" in text


def test_reserved_names_cover_every_top_level_name_of_the_grpo_script() -> None:
    from hf_train_mcp.methods.grpo import RESERVED_NAMES

    tree = ast.parse(render(method="grpo", reward_code=GOOD_REWARD))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.Assign):
            names |= {node.name} if isinstance(node, ast.FunctionDef) else {t.id for t in node.targets}
    assert names - {"reward", "re"} <= RESERVED_NAMES


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("import os\nos.system('x')\ndef reward(completions, **kw):\n    return []", "only imports and one"),
        ("x = __import__('os').system('x')\ndef reward(c, **kw):\n    return []", "only imports and one"),
        ("def helper():\n    pass\ndef reward(c, **kw):\n    return []", "exactly one function named `reward("),
        ("def score(c, **kw):\n    return []", "exactly one function named `reward("),
        ("@print\ndef reward(c, **kw):\n    return []", "decorators"),
        ("def reward(c, n=__import__('os').system('x')):\n    return []", "default values must be constants"),
        ("class Reward:\n    pass", "only imports and one"),
        ("import pickle as json\ndef reward(c, **kw):\n    return []", "would replace the script's own `json`"),
        ("from os import *\ndef reward(c, **kw):\n    return []", "would replace"),
        ("def reward(c, **kw):\n  return [", "does not parse"),
        ("if True:\n    import os\ndef reward(c, **kw):\n    return []", "only imports and one"),
        ("from __future__ import annotations\ndef reward(c, **kw):\n    return []", "`from __future__`"),
        ("def reward(completions: print('x'), **kw):\n    return []", "annotations run at import time"),
        ("def reward(c, *a: exec('1'), **kw):\n    return []", "annotations run at import time"),
        ("def reward(c, **kw: list[open('/x')]):\n    return []", "annotations run at import time"),
        ("def reward(c, **kw) -> (lambda: 1)():\n    return []", "annotations run at import time"),
        ("def reward(c, /, *, k: print('x') = 1, **kw):\n    return []", "annotations run at import time"),
        ("def reward(c, **kw):\n    return []\nfrom os import system as reward", "may not bind `reward`"),
    ],
)
def test_reward_code_that_would_run_at_import_is_refused(code: str, expected: str) -> None:
    with pytest.raises(ValueError, match=re.escape(expected)):
        TrainingRequest(model="m", dataset="d", method="grpo", reward_code=code)


def test_reward_code_may_annotate_with_plain_types() -> None:
    code = ("import typing\ndef reward(completions: list[str], *, answer: typing.Optional[str] = None,\n"
            "           **kwargs: dict[str, int] | None) -> list[float]:\n    return [0.0 for _ in completions]\n")
    assert TrainingRequest(model="m", dataset="d", method="grpo", reward_code=code).reward_code == code
    compile(render(method="grpo", reward_code=code), "train.py", "exec")


def test_a_rendered_script_that_parses_but_does_not_compile_is_refused() -> None:
    """ast.parse accepts a late `from __future__` import; only compile() shows the job would die on it."""
    from hf_train_mcp.rendering.script import render_script

    late_future = "from __future__ import annotations\ndef reward(c, **kw):\n    return []\n"
    ast.parse("import os\n" + late_future)  # what the old check ran: no error
    req = TrainingRequest(model="Qwen/Qwen2-0.5B", dataset="org/data", hub_model_id="me/out", method="grpo")
    plan = plan_run(req, backend="hf", size=SIZE, catalog=fallback_catalog(), namespace="me", data=DataFacts())
    context = {"config": plan.config, "dependencies": [], "flavor": "cpu-basic", "jobs_table": False, "timeout": "1h",
               "method_title": "GRPO", "reward_code": late_future, "sharegpt_roles": {}}
    with pytest.raises(SyntaxError, match="from __future__ imports must occur at the beginning"):
        render_script("grpo", plan.schema, context)


def test_reward_modeling_with_liger_is_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="use_liger_kernel does not work with method='reward'"):
        TrainingRequest(model="m", dataset="d", method="reward", use_liger_kernel=True)
