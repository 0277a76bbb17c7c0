"""estimate_cost: each formula part, the calibration against the seeds' measured runs, memory-fit verdicts."""

import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.app import build_server
from hf_train_mcp.estimate import constants as C
from hf_train_mcp.estimate.cost import Workload, achieved_flops, estimate_on, optimizer_steps
from hf_train_mcp.estimate.hardware import fallback_catalog, get_catalog
from hf_train_mcp.estimate.sizing import ModelSize, memory_need, model_size, params_from_config, params_from_name
from tests.emulator import Emulator

CATALOG = fallback_catalog()
# Qwen2-0.5B-Instruct's config.json: 24 layers, hidden 896, vocab 151936, intermediate 4864, 494M parameters.
QWEN_05B = ModelSize(494_032_768, 24, 896, 151_936, 4864, "config.json")
QWEN_CONFIG = {"hidden_size": 896, "num_hidden_layers": 24, "vocab_size": 151_936, "intermediate_size": 4864,
               "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True}
SEVEN_B = ModelSize(7_240_000_000, 32, 4096, 32_000, 14_336, "name")

# Calibration (shared/seeds 000 and 003): TRL's sft.py defaults — full fine-tuning, per-device batch 8,
# no accumulation, max_length 1024, no packing, 3 epochs — on trl-lib/Capybara. Assumptions stated here:
# 15,806 training rows; 560 mean tokens per row after truncation at 1024 (x1.25 padding => 700 per row).
CAPYBARA = dict(method="sft", peft="full", num_examples=15_806, tokens_per_example=560, epochs=3.0,
                max_length=1024, per_device_batch_size=8, gradient_accumulation=1, max_steps=None)
CALIBRATION = [
    # (flavor, max_steps, measured hours, source)
    ("a10g-small", None, 2 + 20 / 60, "seed 003: 3 epochs ~2h20 on a10g-small"),
    ("a10g-largex2", None, 1 + 35 / 60, "seed 000/001: 3 epochs ~1h35 on a10g-largex2 (2 processes)"),
    ("l4x4", None, 1.0, "seed 000: 3 epochs ~1 h on l4x4 (4 processes)"),
    ("a10g-small", 100, 6 / 60, "seed 003: --max_steps 100 ~6 minutes for the whole job"),
]


@pytest.mark.parametrize(("flavor", "max_steps", "measured", "source"), CALIBRATION)
def test_the_estimate_is_within_30_percent_of_measured_runs(flavor, max_steps, measured, source) -> None:
    estimate = estimate_on(QWEN_05B, Workload(**{**CAPYBARA, "max_steps": max_steps}), CATALOG.flavors[flavor])
    assert estimate.fits
    assert abs(estimate.hours - measured) / measured <= 0.30, (source, estimate.hours)


def test_params_from_config_matches_qwen2_half_billion() -> None:
    assert abs(params_from_config(QWEN_CONFIG) - 494_032_768) / 494_032_768 < 0.02


@pytest.mark.parametrize(("name", "params"), [
    ("Qwen/Qwen2.5-0.5B-Instruct", 5e8), ("HuggingFaceTB/SmolLM2-135M", 1.35e8), ("meta-llama/Llama-3.1-8B", 8e9),
    ("mistralai/Mixtral-8x7B-v0.1", 5.6e10), ("gpt2", None),
])
def test_params_from_name(name: str, params) -> None:
    assert params_from_name(name) == (int(params) if params else None)


def test_model_size_prefers_a_local_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN_CONFIG))
    size = model_size(str(tmp_path), offline=True)
    assert size.source == "local config.json" and size.layers == 24 and size.vocab == 151_936


def test_model_size_reads_hub_safetensors_metadata(hub: Emulator) -> None:
    size = model_size("meta-llama/Llama-3.1-8B", None)
    assert size.params == 8_030_261_248 and "hub safetensors" in size.source


def test_model_size_falls_back_to_the_name_offline() -> None:
    size = model_size("someone/Thing-3B", offline=True)
    assert size.params == 3_000_000_000 and size.source.startswith("model name")
    with pytest.raises(ValueError, match="cannot tell the size"):
        model_size("someone/thing", offline=True)


def test_lora_needs_less_compute_than_full_and_qlora_is_slower_than_lora() -> None:
    flavor = CATALOG.flavors["a10g-large"]
    base = dict(CAPYBARA, max_steps=100)
    full, lora, qlora = (estimate_on(QWEN_05B, Workload(**{**base, "peft": p}), flavor).train_seconds
                         for p in ("full", "lora", "qlora"))
    assert lora == pytest.approx(full * 6 / 8) and qlora == pytest.approx(lora * C.QLORA_SLOWDOWN)


def test_dpo_counts_chosen_rejected_and_the_reference_forward() -> None:
    flavor = CATALOG.flavors["a100-large"]
    sft = estimate_on(QWEN_05B, Workload(**dict(CAPYBARA, max_steps=100, peft="lora")), flavor)
    dpo = estimate_on(QWEN_05B, Workload(**dict(CAPYBARA, max_steps=100, peft="lora", method="dpo")), flavor)
    assert dpo.train_seconds == pytest.approx(sft.train_seconds * (2 + 2 * 2 / 6))


def test_grpo_pays_for_generation() -> None:
    flavor = CATALOG.flavors["a100-large"]
    work = Workload(method="grpo", peft="lora", num_examples=1000, tokens_per_example=100, epochs=1, max_steps=None,
                    max_length=512, per_device_batch_size=8, gradient_accumulation=1, num_generations=8,
                    max_completion_length=256)
    grpo = estimate_on(QWEN_05B, work, flavor)
    assert optimizer_steps(work, 1) == 1000  # 8 completions per step = one prompt's group
    training_only = grpo.tokens * QWEN_05B.params * 6 / achieved_flops(flavor)
    assert grpo.train_seconds > training_only * 1.5


def test_multi_gpu_speedup_uses_the_calibrated_efficiency() -> None:
    one, two = CATALOG.flavors["a10g-large"], CATALOG.flavors["a10g-largex2"]
    assert achieved_flops(two) == pytest.approx(2 * C.MULTI_GPU_EFFICIENCY * achieved_flops(one))


def test_a_7b_full_fine_tune_does_not_fit_24_gb_but_lora_and_qlora_shrink_it() -> None:
    full = memory_need(SEVEN_B, method="sft", peft="full", batch=1, seq_len=1024)
    lora = memory_need(SEVEN_B, method="sft", peft="lora", batch=1, seq_len=1024)
    qlora = memory_need(SEVEN_B, method="sft", peft="qlora", batch=1, seq_len=1024)
    assert full.gb > 80 and 14 < lora.gb < 24 and qlora.gb < 12
    assert full.weights_gb == round(SEVEN_B.params * 4 / 1e9, 2)  # fp32 master weights, as the script loads them
    dpo = memory_need(SEVEN_B, method="dpo", peft="full", batch=1, seq_len=1024)
    assert dpo.weights_gb == round(SEVEN_B.params * 8 / 1e9, 2)  # and an fp32 reference copy


def test_lora_on_half_a_billion_fits_a_t4_but_warns_about_bf16() -> None:
    from hf_train_mcp.planning import DataFacts, plan_run
    from hf_train_mcp.request import TrainingRequest

    estimate = estimate_on(QWEN_05B, Workload(**dict(CAPYBARA, peft="lora", per_device_batch_size=2)),
                           CATALOG.flavors["t4-small"])
    assert estimate.fits
    request = TrainingRequest(model="Qwen/Qwen2-0.5B-Instruct", dataset="trl-lib/Capybara", hub_model_id="me/x",
                              flavor="t4-small", per_device_batch_size=2)
    plan = plan_run(request, backend="hf", size=QWEN_05B, catalog=CATALOG, namespace="me", data=DataFacts())
    assert any("T4 has no bf16" in w for w in plan.warnings)
    assert not any("too small" in w for w in plan.warnings)


def test_recommended_timeout_is_estimate_times_margin_plus_overheads_rounded_up() -> None:
    estimate = estimate_on(QWEN_05B, Workload(**CAPYBARA), CATALOG.flavors["a10g-small"])
    raw = estimate.train_seconds * C.TIMEOUT_FACTOR + estimate.overhead_seconds
    assert raw <= estimate.recommended_timeout_seconds < raw + 600
    assert estimate.recommended_timeout_seconds % 600 == 0


def test_the_live_catalog_is_used_when_the_hub_answers(hub: Emulator) -> None:
    catalog = get_catalog("hf_any")
    assert catalog.source == "live"
    assert catalog.flavors["a10g-small"].usd_per_hour == pytest.approx(0.017 * 60)
    assert catalog.flavors["l4x4"].gpus == 4 and catalog.flavors["l4x4"].gpu_memory_gb == 24


def test_the_built_in_catalog_is_used_offline(offline) -> None:
    catalog = get_catalog(None)
    assert catalog.source == "built-in" and catalog.flavors["a100-large"].gpu_memory_gb == 80




@pytest.mark.anyio
async def test_estimate_cost_recommends_the_cheapest_flavor_that_fits(offline) -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("estimate_cost", {"model": "org/Model-7B", "peft": "full",
                                                          "num_examples": 2000, "tokens_per_example": 500})
    out = result.structured_content
    assert not result.is_error and out["fits"]
    assert out["gpu_memory_gb"] >= 80 and out["memory_gb_needed"] <= out["gpu_memory_gb"]
    cheaper_fitting = [a for a in out["alternatives"] if a["fits"] and a["cost_usd"] < out["cost_usd"]]
    assert cheaper_fitting == []
    assert out["fastest"]["hours"] <= out["hours"]
    assert out["assumptions"]["tokens_source"] == "stated"


@pytest.mark.anyio
async def test_estimate_cost_on_a_flavor_that_is_too_small_says_how_to_fit(offline) -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("estimate_cost", {"model": "org/Model-7B", "peft": "full",
                                                          "flavor": "a10g-small", "num_examples": 100})
    out = result.structured_content
    assert out["fits"] is False
    warning = " ".join(out["warnings"])
    assert "peft='lora'" in warning and "peft='qlora'" in warning
    assert "no token statistics" in warning


@pytest.mark.anyio
async def test_estimate_cost_warns_for_t4_and_long_runs(offline) -> None:
    async with Client(build_server()) as client:
        result = await client.call_tool("estimate_cost", {"model": "org/Model-1B", "flavor": "t4-small",
                                                          "num_examples": 200_000, "tokens_per_example": 800})
    warnings = " ".join(result.structured_content["warnings"])
    assert "T4 has no bf16" in warnings and "over 4 h" in warnings
