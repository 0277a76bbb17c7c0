"""Methods as plug-ins: the registry is the one place a method is declared, every layer asks it, and the two
methods added through it (KTO, distillation) train through the MCP tools. Validation maps the layouts of the
most-downloaded public preference, KTO and prompt-only datasets."""

import ast
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from pydantic import ValidationError

from hf_train_mcp import backends, methods
from hf_train_mcp.data.formats import FORMATS
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp.estimate.cost import estimate_on
from hf_train_mcp.estimate.workload import Workload
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.contract.results import DatasetReport, Method
from tests.conftest import needs_training
from tests.helpers import CAPYBARA_WORKLOAD as CAPYBARA
from tests.helpers import QWEN_05B, call, finished

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
CHAT = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}]
BASE = {"model": "org/Model-1B", "dataset": "org/data", "hub_model_id": "me/out"}


# --- one registry --------------------------------------------------------------------------------------------
def test_the_method_literal_and_every_template_come_from_the_registry() -> None:
    assert typing.get_args(Method) == methods.NAMES
    assert {"sft", "dpo", "grpo", "reward", "kto", "distill"} <= set(methods.NAMES)
    for name, spec in methods.REGISTRY.items():
        assert (TEMPLATES / f"{spec.template_name}.py.j2").is_file(), name
        assert set(spec.formats) <= set(FORMATS), name  # every format a method reads is declared once
    reported = typing.get_args(DatasetReport.model_fields["detected_format"].annotation)
    assert set(FORMATS) | {"unknown"} == set(reported)  # and validate_dataset can report each


@pytest.mark.parametrize("option", sorted(methods.options()))
def test_an_option_is_refused_for_a_method_that_does_not_take_it(option: str) -> None:
    spec = methods.options()[option]
    outsider = next(name for name in methods.NAMES if name not in methods.takers(option))
    value = {"reward_code": "def reward(completions, **kwargs):\n    return [0.0 for _ in completions]\n",
             "reward_funcs": ["length"], "teacher_model": "org/Teacher-7B", "packing": True,
             "max_completion_length": 64, "num_generations": 4}.get(option, 0.5)
    if spec.default is not None and value == spec.default:
        value = not value
    with pytest.raises(ValidationError, match=f"{option} applies to method"):
        TrainingRequest(**BASE, method=outsider, **{option: value})


@pytest.mark.parametrize("method", methods.NAMES)
def test_every_method_renders_a_script_that_compiles_and_names_its_trainer(method: str) -> None:
    extra = {"teacher_model": "org/Teacher-7B"} if method == "distill" else {}
    request = TrainingRequest(**BASE, method=method, **extra)
    plan = plan_run(request, backend="hf", size=QWEN_05B, catalog=fallback_catalog(), namespace="me",
                    data=DataFacts(num_rows=1000), teacher=QWEN_05B if extra else None)
    text = plan.render().text
    tree = ast.parse(text)
    config = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                  and getattr(node.targets[0], "id", None) == "CONFIG")
    assert ast.literal_eval(config)["method"] == method
    assert f"{methods.get(method).title.split()[0].upper()}" in text.upper()


@pytest.mark.parametrize("method", methods.NAMES)
def test_every_method_is_estimated_by_the_same_model(method: str) -> None:
    flavor = fallback_catalog().flavors["a100-large"]
    work = Workload(**dict(CAPYBARA, method=method, peft="lora", max_steps=50, per_device_batch_size=4),
                    teacher_params=7_000_000_000 if method == "distill" else None)
    estimate = estimate_on(QWEN_05B, work, flavor)
    assert estimate.train_seconds > 0 and estimate.memory.gb > 0


def test_distillation_pays_for_the_teachers_forward_and_memory() -> None:
    flavor = fallback_catalog().flavors["a100-large"]
    shape = dict(CAPYBARA, method="distill", peft="lora", max_steps=50, per_device_batch_size=4)
    small = estimate_on(QWEN_05B, Workload(**shape, teacher_params=QWEN_05B.params), flavor)
    big = estimate_on(QWEN_05B, Workload(**shape, teacher_params=7_000_000_000), flavor)
    assert big.step.compute > small.step.compute * 3  # a 7B forward per token dwarfs a 0.5B student's step
    assert big.memory.weights_gb - small.memory.weights_gb == pytest.approx((7e9 - QWEN_05B.params) * 2 / 1e9, rel=0.1)


def test_kto_and_distill_are_refused_what_they_cannot_train_with() -> None:
    with pytest.raises(ValidationError, match="teacher_model"):
        TrainingRequest(**BASE, method="distill")
    with pytest.raises(ValidationError, match="desirable_weight"):
        TrainingRequest(**BASE, method="kto", desirable_weight=-1)


def test_backends_are_asked_for_their_traits_not_compared_by_name() -> None:
    server = Path(__file__).resolve().parents[1] / "server" / "hf_train_mcp"
    offenders = [f"{path.name}:{number}" for path in server.rglob("*.py") if path.parent.name != "backends"
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if any(f'{quote}{name}{quote}' in line and ("==" in line or "!=" in line or " in (" in line)
                        for name in backends.NAMES for quote in "'\"")]
    assert offenders == []
    assert backends.owner_of("local-0123abcd") == "local" and backends.owner_of("6650f0e1a2b3c4d5e6f7a8b9") == "hf"


# --- the layouts of popular Hub datasets --------------------------------------------------------------------
LAYOUTS = [
    # (dataset, method, one row, detected format, suggested mapping)
    ("Intel/orca_dpo_pairs", "dpo", {"system": "", "question": "q?", "chosen": "yes", "rejected": "no"},
     "preference", {"prompt": "question"}),
    ("lvwerra/stack-exchange-paired", "dpo", {"qid": 1, "question": "q?", "date": "2020", "metadata": ["x"],
                                              "response_j": "good", "response_k": "bad"},
     "preference", {"prompt": "question", "chosen": "response_j", "rejected": "response_k"}),
    ("lvwerra/stack-exchange-paired", "reward", {"question": "q?", "response_j": "good", "response_k": "bad"},
     "preference", {"prompt": "question", "chosen": "response_j", "rejected": "response_k"}),
    ("HuggingFaceH4/ultrafeedback_binarized", "dpo",
     {"prompt": "q", "prompt_id": "1", "chosen": CHAT, "rejected": [CHAT[0], {"role": "assistant", "content": "5"}],
      "messages": CHAT, "score_chosen": 8.0, "score_rejected": 2.0}, "preference", None),
    ("HuggingFaceH4/ultrafeedback_binarized", "sft",
     {"prompt": "q", "chosen": CHAT, "rejected": CHAT, "messages": CHAT}, "messages", None),
    ("Anthropic/hh-rlhf", "dpo", {"chosen": "\n\nHuman: hi\n\nAssistant: hello",
                                  "rejected": "\n\nHuman: hi\n\nAssistant: go away"}, "implicit_preference", None),
    ("trl-lib/kto-mix-14k", "kto", {"prompt": CHAT[:1], "completion": CHAT[1:], "label": True},
     "unpaired_preference", None),
    ("Intel/orca_dpo_pairs", "kto", {"question": "q?", "chosen": "yes", "rejected": "no"}, "preference",
     {"prompt": "question"}),
    ("openai/gsm8k", "grpo", {"question": "2 + 2?", "answer": "#### 4"}, "prompt_only", {"prompt": "question"}),
    ("AI-MO/NuminaMath-TIR", "grpo", {"problem": "p", "solution": "s", "messages": CHAT}, "prompt_only",
     {"prompt": "problem"}),
    ("openai/gsm8k", "distill", {"question": "2 + 2?", "answer": "#### 4"}, "prompt_only", {"prompt": "question"}),
    ("tatsu-lab/alpaca", "sft", {"instruction": "i", "input": "", "output": "o", "text": "t"}, "text", None),
    ("yahma/alpaca-cleaned", "sft", {"instruction": "i", "input": "", "output": "o"}, "prompt_completion",
     {"prompt": "instruction", "completion": "output"}),
]


@pytest.mark.parametrize(("dataset", "method", "row", "fmt", "mapping"), LAYOUTS,
                         ids=[f"{d}-{m}" for d, m, *_ in LAYOUTS])
def test_popular_layouts_are_recognised_and_mapped(dataset: str, method: str, row: dict, fmt: str,
                                                   mapping: dict | None, tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for _ in range(4)))
    report = validate_dataset(str(path), method)
    assert report.valid, [issue.message for issue in report.issues]
    assert report.detected_format == fmt
    assert report.suggested_column_mapping == mapping


def test_a_pair_that_shares_no_prompt_and_has_no_prompt_column_is_refused_for_dpo(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps({"chosen": "Yes, gladly.", "rejected": "No."}) + "\n" for _ in range(4)))
    report = validate_dataset(str(path), "dpo")
    assert not report.valid and "start with the same prompt" in report.issues[0].message


# --- KTO and distillation through the tools -----------------------------------------------------------------
@pytest.mark.detached
@needs_training
@pytest.mark.training
@pytest.mark.anyio
@pytest.mark.parametrize("method", ["kto", "distill"])
async def test_kto_and_distillation_train_through_the_tools(method: str, tiny_model: Path, tmp_path: Path,
                                                            offline) -> None:
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "data.jsonl", example_rows(method, 16))
    arguments: dict[str, Any] = {"model": str(tiny_model), "dataset": str(data), "method": method,
                                 "backend": "local", "max_steps": 2, "per_device_batch_size": 2,
                                 "gradient_accumulation": 1, "max_length": 128}
    if method == "distill":
        arguments |= {"teacher_model": str(tiny_model), "max_completion_length": 8}
    async with Client(build_server()) as client:
        report = await call(client, "validate_dataset", {"dataset": str(data), "method": method})
        assert report["valid"]
        estimate = await call(client, "estimate_cost", {key: value for key, value in arguments.items()
                                                        if key not in ("dataset", "backend")} | {"num_examples": 16})
        assert estimate["hours"] > 0
        submitted = await call(client, "submit_training", arguments)
        status = await finished(client, submitted["job_id"])
    assert status["stage"] == "COMPLETED", status
    assert status["progress"]["step"] == 2 and any("loss" in key for key in status["last_metrics"])
    output = Path(submitted["model_url"].removeprefix("file://"))
    assert (output / "adapter_model.safetensors").exists()
    assert f"method: {method}" in (output / "README.md").read_text() or method.upper() in (
        output / "README.md").read_text().upper()


def test_the_servers_instructions_name_every_method_of_the_registry() -> None:
    from hf_train_mcp.shell.app import INSTRUCTIONS

    assert all(spec.title in INSTRUCTIONS for spec in methods.REGISTRY.values())
