"""Everything that lists methods or their options asks the registry: a new method lands in its module alone."""

import importlib.util
import sys
from pathlib import Path

import pytest

from hf_train_mcp import methods
from hf_train_mcp.shell.app import finetune_prompt
from hf_train_mcp.data.formats import FORMATS
from hf_train_mcp.estimate.measured import config_key
from hf_train_mcp.methods.base import MethodSpec, Option
from hf_train_mcp.contract.requests import PRUNE_INCOMPARABLE, EstimateRequest
from hf_train_mcp_demo.tiny import example_rows

ROOT = Path(__file__).resolve().parents[1]


def test_the_finetune_prompt_names_every_method_by_its_data() -> None:
    text = finetune_prompt("m", "d")
    for name, spec in methods.REGISTRY.items():
        assert f"{'+'.join(FORMATS[spec.formats[0]].columns)}: {name} " in text


@pytest.mark.parametrize("method", methods.NAMES)
def test_tiny_rows_exist_for_every_method_in_its_first_format(method: str) -> None:
    rows = example_rows(method, 3)
    assert len(rows) == 3 and set(FORMATS[methods.get(method).formats[0]].columns) <= set(rows[0])


def test_the_gpu_benchmark_runs_every_method_with_the_options_each_takes() -> None:
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["gpu_bench"] = bench
    spec.loader.exec_module(bench)
    assert bench.options("sft", "m") == {}
    assert bench.options("grpo", "m") == {"num_generations": 4, "max_completion_length": 32}
    assert bench.options("distill", "m") == {"max_completion_length": 32, "teacher_model": "m"}


def test_pruning_compares_only_runs_whose_losses_mean_the_same() -> None:
    flagged = {o.name for o in methods.options().values() if o.changes_loss}
    assert flagged == {"beta", "desirable_weight", "reward_funcs", "reward_code", "num_generations", "teacher_model"}
    assert flagged <= PRUNE_INCOMPARABLE and "learning_rate" not in PRUNE_INCOMPARABLE


def test_a_new_sizing_option_reaches_the_measurement_key_from_its_method_alone(monkeypatch) -> None:
    """A method's sizing options key a measurement by name: the config and the estimate agree with no list of
    them outside the method."""
    spec = methods.get("sft")
    extra = Option("packing_window", int, sizing=True, resolves_to=64)
    monkeypatch.setitem(methods.REGISTRY, "sft", MethodSpec(**{**spec.__dict__, "options": (*spec.options, extra)}))
    sized = methods.get("sft").sizing_options(EstimateRequest(model="m", dataset="d"))
    assert sized == {"packing": False, "packing_window": 64}
    config = {"model": "m", "dataset": "d", "dataset_config": None, "dataset_split": "train", "method": "sft",
              "peft": "lora", "per_device_batch_size": 4, "gradient_accumulation": 4, "max_length": 1024,
              "lora": {"r": 16, "target_modules": "all-linear"}, "use_liger_kernel": False, "chat_template": None,
              **sized}
    assert config_key(config, flavor="a10g-large", backend="hf") != config_key(
        {**config, "packing_window": 128}, flavor="a10g-large", backend="hf")
