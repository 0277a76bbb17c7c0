"""estimate_cost: each formula part, the calibration against the seeds' measured runs, memory-fit verdicts."""

import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.estimate import constants as C
from hf_train_mcp.estimate.cost import estimate_on
from hf_train_mcp.estimate.workload import Workload, optimizer_steps
from hf_train_mcp.estimate.hardware import fallback_catalog, get_catalog
from hf_train_mcp.estimate.memory import memory_need
from hf_train_mcp.estimate.sizing import ModelSize, model_size, params_from_config, params_from_name
from tests.emulator import Emulator
from tests.helpers import CAPYBARA_WORKLOAD as CAPYBARA
from tests.helpers import QWEN_05B

CATALOG = fallback_catalog()
# Qwen2-0.5B-Instruct's config.json (QWEN_05B is the size read from it).
QWEN_CONFIG = {"hidden_size": 896, "num_hidden_layers": 24, "vocab_size": 151_936, "intermediate_size": 4864,
               "num_attention_heads": 14, "num_key_value_heads": 2, "tie_word_embeddings": True}
SEVEN_B = ModelSize(7_240_000_000, 32, 4096, 32_000, 14_336, "name")


def test_a_mixture_of_experts_computes_with_its_active_parameters_and_holds_them_all() -> None:
    from hf_train_mcp.estimate.sizing import active_from_name, param_counts

    mixtral = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000, "intermediate_size": 14336,
               "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2}
    total, active = param_counts(mixtral)
    assert abs(total - 46.7e9) / 46.7e9 < 0.01 and abs(active - 12.9e9) / 12.9e9 < 0.01  # Mistral's own figures
    assert active_from_name("Qwen/Qwen3-30B-A3B") == 3_000_000_000 and params_from_name("Qwen/Qwen3-30B-A3B") == 30e9
    small_dense = ModelSize(int(active), 32, 4096, 32000, 14336, "config")
    big_dense = ModelSize(int(total), 32, 4096, 32000, 14336, "config")
    moe = ModelSize(int(total), 32, 4096, 32000, 14336, "config", active=int(active), experts=8)
    work = Workload(**dict(CAPYBARA, peft="lora", max_steps=10))
    flavor = CATALOG.flavors["h200"]
    on = {name: estimate_on(size, work, flavor) for name, size in (("small", small_dense), ("big", big_dense),
                                                                    ("moe", moe))}
    # a token runs through the active experts only, but routed experts run slower than one dense matmul
    assert on["moe"].step.compute == pytest.approx(
        on["small"].step.compute / C.CALIBRATED.moe_efficiency + 3 * total * 2 / (4.8e12), rel=0.01)
    assert on["moe"].memory.gb == on["big"].memory.gb > on["small"].memory.gb  # every expert is held


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


def test_lora_needs_less_compute_than_full_and_qlora_pays_for_dequantising() -> None:
    flavor = CATALOG.flavors["a10g-large"]
    base = dict(CAPYBARA, max_steps=100)
    full, lora, qlora = (estimate_on(SEVEN_B, Workload(**{**base, "peft": p}), flavor).step for p in ("full", "lora", "qlora"))
    # forward + backward (2 with weight gradients, 1 without) + recompute: 4 vs 3 forward-equivalents of weights
    assert 0.74 < lora.compute / full.compute < 0.80
    assert qlora.compute == pytest.approx(lora.compute) and qlora.dequantise > 0 and lora.dequantise == 0
    # dequantising does not shrink with the batch: small micro-batches make QLoRA relatively slow
    small = estimate_on(SEVEN_B, Workload(**{**base, "peft": "qlora", "per_device_batch_size": 1}), flavor).step
    assert small.dequantise / small.total > qlora.dequantise / qlora.total


def test_padding_grows_with_the_batch_and_packing_removes_it() -> None:
    from hf_train_mcp.estimate.workload import padded_length

    work = Workload(**CAPYBARA)
    assert padded_length(work, 1) == padded_length(work, 8) == 1024  # rows longer than max_length are cut anyway
    short = Workload(**{**CAPYBARA, "tokens_per_example": 200})
    assert 200 == padded_length(short, 1) < padded_length(short, 4) < padded_length(short, 16) <= 1024
    packed = Workload(**{**CAPYBARA, "tokens_per_example": 200, "packing": True})
    assert optimizer_steps(packed, 1) < optimizer_steps(short, 1)  # a packed row holds several examples


def test_the_padding_term_grows_smoothly_with_the_batch() -> None:
    from hf_train_mcp.estimate.workload import expected_max_normal

    values = [expected_max_normal(b) for b in range(1, 600)]
    assert all(0 <= later - earlier <= 0.564 for earlier, later in zip(values, values[1:]))  # 1 -> 2 rows is the most
    assert expected_max_normal(129) - expected_max_normal(128) < 0.01  # no step where the table ends


def test_dpo_counts_chosen_rejected_and_the_reference_forward() -> None:
    flavor = CATALOG.flavors["a100-large"]
    sft = estimate_on(QWEN_05B, Workload(**dict(CAPYBARA, max_steps=100, peft="lora", per_device_batch_size=4)), flavor)
    dpo = estimate_on(QWEN_05B, Workload(**dict(CAPYBARA, max_steps=100, peft="lora", per_device_batch_size=2,
                                                method="dpo")), flavor)
    # the same 4 sequences per micro-batch, plus one forward of the reference: (3 + 1) / 3 of the SFT compute
    assert dpo.step.compute == pytest.approx(sft.step.compute * 4 / 3, rel=0.05)


def test_grpo_pays_for_generation_token_by_token() -> None:
    flavor = CATALOG.flavors["a100-large"]
    work = Workload(method="grpo", peft="lora", num_examples=1000, tokens_per_example=100, epochs=1, max_steps=None,
                    max_length=512, per_device_batch_size=8, gradient_accumulation=1, num_generations=8,
                    max_completion_length=256)
    grpo = estimate_on(QWEN_05B, work, flavor)
    assert optimizer_steps(work, 1) == 1000  # 8 completions per step = one prompt's group
    assert grpo.step.generation > grpo.step.compute  # decoding 256 tokens one by one dominates a small model
    longer = estimate_on(QWEN_05B, Workload(**{**work.__dict__, "max_completion_length": 512}), flavor)
    assert longer.step.generation == pytest.approx(grpo.step.generation * 2, rel=0.15)


def test_more_gpus_are_faster_but_not_linearly_over_pcie() -> None:
    one, two = CATALOG.flavors["a10g-large"], CATALOG.flavors["a10g-largex2"]
    work = Workload(**CAPYBARA)
    single, double = estimate_on(QWEN_05B, work, one), estimate_on(QWEN_05B, work, two)
    assert single.train_seconds / 2 < double.train_seconds < single.train_seconds * 0.75
    assert double.step.communication > 0 == single.step.communication


def test_a_7b_full_fine_tune_does_not_fit_24_gb_but_lora_and_qlora_shrink_it() -> None:
    full = memory_need(SEVEN_B, method="sft", peft="full", batch=1, seq_len=1024)
    lora = memory_need(SEVEN_B, method="sft", peft="lora", batch=1, seq_len=1024)
    qlora = memory_need(SEVEN_B, method="sft", peft="qlora", batch=1, seq_len=1024)
    assert full.gb > 80 and 14 < lora.gb < 24 and qlora.gb < 12
    assert full.weights_gb == round(SEVEN_B.params * 4 / 1e9, 2)  # fp32 master weights, as the script loads them
    dpo = memory_need(SEVEN_B, method="dpo", peft="full", batch=1, seq_len=1024)
    assert dpo.weights_gb == round(SEVEN_B.params * 8 / 1e9, 2)  # and an fp32 reference copy


def test_lora_on_half_a_billion_fits_a_t4_but_warns_about_bf16() -> None:
    from hf_train_mcp.planning.training import DataFacts, plan_run
    from hf_train_mcp.contract.requests import TrainingRequest

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


def test_a_live_l40s_is_an_l40s_not_an_l4() -> None:
    from hf_train_mcp.backends.jobs_hardware import _gpu_for

    assert _gpu_for("L40S", "48 GB").model == "L40S" and _gpu_for("NVIDIA L4", "24 GB").model == "L4"
    assert _gpu_for("A10G", "24 GB").model == "A10G" and _gpu_for("H200", "141 GB").memory_gb == 141


def test_the_built_in_catalog_is_used_offline(offline) -> None:
    catalog = get_catalog(None)
    assert catalog.source == "built-in" and catalog.flavors["a100-large"].gpu_memory_gb == 80


def test_each_backend_is_priced_on_its_own_catalog(hub: Emulator) -> None:
    """Jobs on the Hub's live list; this machine, which has no prices of its own, against the same Jobs flavors (a
    run here is placed on flavor(), and a measurement times it); either offline on the built-in table."""
    assert get_catalog("hf_any", backend="hf").source == "live"
    assert get_catalog("hf_any", backend="local").flavors == get_catalog("hf_any", backend="hf").flavors
    for backend in ("hf", "local"):
        assert get_catalog("hf_any", offline=True, backend=backend).flavors == fallback_catalog().flavors




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


@pytest.mark.anyio
@pytest.mark.parametrize("extra", [{}, {"method": "dpo"}, {"packing": True}, {"max_steps": 50},
                                   {"flavor": "l4x4"}])
async def test_tokens_total_can_be_recomputed_from_the_assumptions(offline, extra: dict) -> None:
    """1,000 examples x 500 tokens read as 3,003,187 tokens: 3 epochs and padding to the longest row of each
    micro-batch, which assumptions now state (issue 30 item 30)."""
    async with Client(build_server()) as client:
        result = await client.call_tool("estimate_cost", {"model": "Qwen/Qwen2-0.5B-Instruct", "num_examples": 1000,
                                                          "tokens_per_example": 500, **extra})
    out = result.structured_content
    a = out["assumptions"]
    recomputed = out["steps"] * a["sequences_per_step"] * a["tokens_per_sequence"]
    assert abs(recomputed - a["tokens_total"]) <= out["steps"] * a["sequences_per_step"] * 0.05 + 1
    assert a["tokens_total_counts"].startswith("steps x sequences_per_step x tokens_per_sequence (")
    if "max_steps" in extra:
        assert a["max_steps"] == 50 and "epochs" not in a
    else:
        assert a["epochs"] == {"dpo": 1.0}.get(extra.get("method"), 3.0)
    if not extra:  # the example: 188 steps x 16 rows x 998.4 tokens, each row padded to its batch's longest
        assert (a["tokens_total"], out["steps"], a["sequences_per_step"]) == (3_003_187, 188, 16)
        assert a["tokens_per_sequence"] > 500 and "padded to the longest of the 8" in a["tokens_total_counts"]
    if extra.get("method") == "dpo":
        assert a["sequences_per_step"] == 2 * out["effective_batch_size"] and "2 per example" in a["tokens_total_counts"]
    if extra.get("packing"):
        assert a["tokens_per_sequence"] == 1024 and "packed" in a["tokens_total_counts"]


DOCS_RUN = {"model": "Qwen/Qwen2-0.5B-Instruct", "peft": "full", "epochs": 3, "num_examples": 15_806,
            "tokens_per_example": 1100, "max_length": 1024, "per_device_batch_size": 8, "gradient_accumulation": 1}


@pytest.mark.anyio
@pytest.mark.parametrize(("flavor", "extra", "docs_hours"), [
    ("a10g-small", {}, 2 + 20 / 60), ("a10g-largex2", {}, 1 + 35 / 60), ("l4x4", {}, 1.0),
    ("a10g-small", {"max_steps": 100}, 0.1)])
async def test_estimate_cost_meets_the_docs_headline_run(hub: Emulator, flavor: str, extra: dict,
                                                         docs_hours: float) -> None:
    """The docs' own figures for TRL's sft.py on Capybara (shared/seeds): within 15% through the tool, with the
    model's real config; a multi-GPU estimate says the scaling it used."""
    hub.files[("Qwen/Qwen2-0.5B-Instruct", "config.json")] = json.dumps(
        {**QWEN_CONFIG, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}).encode()
    async with Client(build_server()) as client:
        result = await client.call_tool("estimate_cost", {**DOCS_RUN, "flavor": flavor, **extra})
    out = result.structured_content
    assert not result.is_error and out["assumptions"]["params_billions"] == 0.494, out["assumptions"]
    assert abs(out["hours"] / docs_hours - 1) <= 0.15, (out["hours"], docs_hours)
    scaling = out["assumptions"].get("multi_gpu")
    if flavor == "a10g-largex2":
        assert scaling.startswith("2 x A10G over PCIe: ") and "x one GPU's pace" in scaling
    elif flavor == "l4x4":
        assert scaling.startswith("4 x L4 over PCIe: ")
    else:
        assert scaling is None
