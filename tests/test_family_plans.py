"""What the planner and the estimate decide from a model's own files, before anything is launched (issue 30's
hostile review of the families, the planning side): vision rows sized at the length they train at; mixtures of
experts whose experts transformers fuses (LoRA dropout PEFT refuses on them, experts that stay bf16 under QLoRA);
checkpoints stored quantized; classification and reward heads a model has no class for; LoRA target names;
convolutional image models; Gemma 3's pooled image tokens. Real Hub files from tests/data/configs; each table the
server keeps of transformers' or PEFT's behaviour is held to the installed library here."""

import json

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.estimate.memory import memory_need
from hf_train_mcp.estimate.sizing import model_size, routed_expert_params
from hf_train_mcp.models.family import ENCODER_TYPES
from hf_train_mcp.models.refusals import FUSED_EXPERT_LORA, MIXTRAL_STYLE_EXPERTS
from hf_train_mcp.models.native import has_class
from hf_train_mcp.models.files import quantization_of
from hf_train_mcp.contract.requests import TrainingRequest
from tests.hub_configs import CONFIGS, config_of, folder, hub_total
from tests.emulator import Emulator, ViewerDataset
from tests.helpers import call, refused, script_config

pytestmark = pytest.mark.anyio
QWEN2_VL, LLAVA, GEMMA3 = "Qwen/Qwen2-VL-2B-Instruct", "llava-hf/llava-1.5-7b-hf", "google/gemma-3-4b-it"
QWEN3_MOE, MIXTRAL, QWEN15_MOE = "Qwen/Qwen3-30B-A3B", "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen1.5-MoE-A2.7B"
BNB4, CONVNEXT = "unsloth/Qwen2.5-0.5B-Instruct-bnb-4bit", "facebook/convnext-base-224"
DISTILBERT, BERT = "distilbert/distilbert-base-uncased", "google-bert/bert-base-uncased"
NEW = (GEMMA3, QWEN3_MOE, MIXTRAL, QWEN15_MOE, BNB4, CONVNEXT)


@pytest.fixture
def models(hub: Emulator) -> Emulator:
    """The models of tests/data/configs on the emulated Hub, chat rows, labelled texts, preference pairs, and rows
    of three 1080p screenshots each."""
    for path in CONFIGS.iterdir():
        if path.is_dir():
            hub.serve_model(path)
    from tests.helpers import CHAT_ROWS

    hub.datasets["org/chat"] = ViewerDataset({"default": {"train": CHAT_ROWS}})
    hub.datasets["org/reviews"] = ViewerDataset({"default": {"train": [
        {"text": f"review {i}", "label": i % 2} for i in range(12)]}})
    hub.datasets["org/prefs"] = ViewerDataset({"default": {"train": [
        {"prompt": f"q{i}", "chosen": "good", "rejected": "bad"} for i in range(12)]}})
    three = [{"messages": [{"role": "user", "content": [{"type": "image"}] * 3 + [{"type": "text", "text": "Which?"}]},
                           {"role": "assistant", "content": [{"type": "text", "text": "The second."}]}],
              "images": [{"src": f"{hub.url}/assets/shot{i}{j}.png", "height": 1080, "width": 1920}
                         for j in range(3)]} for i in range(6)]
    hub.datasets["org/screens3"] = ViewerDataset({"default": {"train": three}})
    one = [{**row, "messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]},
                                row["messages"][1]], "images": row["images"][:1]} for row in three]
    hub.datasets["org/screens"] = ViewerDataset({"default": {"train": one}})
    return hub


def test_the_new_configs_have_the_parameter_counts_the_hub_reports() -> None:
    """transformers builds each from its config (meta device) with exactly the published total (the 4-bit
    checkpoint: its unquantized original's 494M; the Hub's total counts packed bytes)."""
    import torch
    import transformers

    classes = {GEMMA3: "AutoModelForImageTextToText", CONVNEXT: "AutoModelForImageClassification"}
    for repo in NEW:
        config = {k: v for k, v in config_of(repo).items() if k != "quantization_config"}
        with torch.device("meta"):
            model = getattr(transformers, classes.get(repo, "AutoModelForCausalLM")).from_config(
                transformers.AutoConfig.for_model(**config))
        count = sum(p.numel() for p in model.parameters())
        assert count == (494_032_768 if repo == BNB4 else hub_total(repo)), repo


# --- 1: vision rows train uncut, and are sized so -----------------------------------------------------------------
async def test_vision_rows_are_sized_at_their_uncut_length_whatever_max_length_says(models: Emulator) -> None:
    """Qwen2-VL, three 1080p images a row: ~3.7k tokens a row, which the script never cuts (max_length=None)."""
    async with Client(build_server()) as client:
        base = {"model": QWEN2_VL, "dataset": "org/screens3", "num_examples": 5000, "flavor": "a10g-small"}
        default, longer = (await call(client, "estimate_cost", base),
                           await call(client, "estimate_cost", {**base, "max_length": 4096}))
        plan = await call(client, "submit_training", {"model": QWEN2_VL, "dataset": "org/screens3", "dry_run": True,
                                                      "hub_model_id": "emu-user/x", "flavor": "a10g-small"})
    image_tokens = default["assumptions"]["image_tokens_per_example"]
    assert image_tokens == 3 * 26 * 47 and default["assumptions"]["max_length"] == 1024
    assert default["assumptions"]["tokens_per_sequence"] > image_tokens > 1024
    assert "uncut" in default["assumptions"]["tokens_total_counts"]
    for key in ("memory_gb_needed", "hours", "fits", "recommended_timeout"):  # max_length cuts nothing here
        assert default[key] == longer[key], key
    assert not default["fits"] and "images per row" in " ".join(default["warnings"])
    assert script_config(plan["script"])["vision"] is True
    assert any("a10g-small is likely too small" in w for w in plan["warnings"])


# --- 15: image tokens of models that pool their patches -----------------------------------------------------------
async def test_gemma3_counts_the_256_tokens_its_projector_pools_an_image_to(models: Emulator) -> None:
    size = model_size(GEMMA3, None)
    assert size.tokens_per_image((1080, 1920)) == 256 and size.params == hub_total(GEMMA3)
    async with Client(build_server()) as client:
        estimate = await call(client, "estimate_cost", {"model": GEMMA3, "dataset": "org/screens", "flavor": "h200"})
    assert estimate["assumptions"]["image_tokens_per_example"] == 256


def test_the_pooled_image_token_fields_are_the_config_classes_own() -> None:
    """Each field the sizing reads (Gemma 3's mm_tokens_per_image, BLIP-2's num_query_tokens, Idefics2's perceiver
    latents) with the default its transformers config class gives it."""
    from transformers import AutoConfig

    from hf_train_mcp.estimate.images import _POOLED_IMAGE_TOKENS

    for model_type, (path, default) in _POOLED_IMAGE_TOKENS.items():
        value = AutoConfig.for_model(model_type).to_dict()
        for key in path.split("."):
            value = value[key]
        assert value == default, model_type


# --- 2 and 3: mixtures of experts ------------------------------------------------------------------------------------
def test_the_fused_expert_table_is_peft_own() -> None:
    """The model types whose LoRA PEFT rewrites into parameter wrappers on fused experts (peft's copy of
    transformers' conversion table, with a conversion mapping transformers has)."""
    from peft.utils.transformers_weight_conversion import _MODEL_TO_CONVERSION_PATTERN, _MOE_FUSED_TARGETS
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    rewritten = {t: base for t, base in _MODEL_TO_CONVERSION_PATTERN.items() if base in _MOE_FUSED_TARGETS
                 and t in CONFIG_MAPPING_NAMES and get_checkpoint_conversion_mapping(t) is not None}
    assert set(rewritten) == FUSED_EXPERT_LORA
    assert {t for t, base in rewritten.items() if base == "mixtral"} == MIXTRAL_STYLE_EXPERTS


@pytest.mark.parametrize("model_type", ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3"])
def test_bitsandbytes_leaves_exactly_the_routed_experts_unquantized(model_type: str) -> None:
    """transformers' own 4-bit replacement on a mixture of experts (meta device): every parameter outside a
    Linear4bit that is an expert tensor is what routed_expert_params counts."""
    import bitsandbytes as bnb
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, BitsAndBytesConfig
    from transformers.integrations import replace_with_bnb_linear

    extra = {"mixtral": dict(num_local_experts=4), "qwen2_moe": dict(num_experts=4, moe_intermediate_size=32,
                                                                   shared_expert_intermediate_size=48),
             "qwen3_moe": dict(num_experts=4, moe_intermediate_size=32), "olmoe": dict(num_experts=4),
             "deepseek_v3": dict(n_routed_experts=4, moe_intermediate_size=32, n_shared_experts=1, kv_lora_rank=16,
                                 q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_group=1,
                                 topk_group=1, first_k_dense_replace=1, num_hidden_layers=3)}[model_type]
    config = AutoConfig.for_model(model_type, **{"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
                                                 "num_hidden_layers": 2, "num_attention_heads": 4,
                                                 "num_key_value_heads": 2, "num_experts_per_tok": 2,
                                                 "eos_token_id": 1, **extra})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model = replace_with_bnb_linear(model, modules_to_not_convert=["lm_head"],
                                    quantization_config=BitsAndBytesConfig(load_in_4bit=True))
    four_bit = {n for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
    kept = sum(p.numel() for n, p in model.named_parameters() if n.rsplit(".", 1)[0] not in four_bit and p.dim() == 3)
    assert four_bit and kept == routed_expert_params(config.to_dict()) > 0


async def test_qlora_of_a_fused_expert_moe_is_sized_with_its_experts_at_bf16(models: Emulator) -> None:
    """Mixtral's 45B of experts stay bf16 under QLoRA (~90 GB): no 80 GB card holds it (the reviewer's dry run
    picked a100-large); Qwen1.5-MoE's 12.5B no 16 or 24 GB one (it picked t4-small)."""
    async with Client(build_server()) as client:
        for repo, least_gb in ((MIXTRAL, 90.0), (QWEN15_MOE, 24.0), (QWEN3_MOE, 57.0)):
            size = model_size(repo, None)
            assert size.expert_params * 2 / 1e9 > least_gb, repo
            need = memory_need(size, method="sft", peft="qlora", batch=1, seq_len=512)
            assert need.weights_gb == pytest.approx(
                ((size.params - size.expert_params) * 0.55 + size.expert_params * 2) / 1e9, abs=0.01)
            estimate = await call(client, "estimate_cost", {"model": repo, "peft": "qlora", "num_examples": 2000,
                                                            "tokens_per_example": 512})
            plan = await call(client, "submit_training", {"model": repo, "dataset": "org/chat", "peft": "qlora",
                                                          "hub_model_id": "emu-user/out", "dry_run": True})
            assert estimate["fits"] and estimate["gpu_memory_gb"] >= estimate["memory_gb_needed"] > least_gb, repo
            assert fallback_catalog().flavors[plan["flavor"]].gpu_memory_gb > least_gb * 1.15, (repo, plan["flavor"])
            assert any("stay bf16" in w for w in estimate["warnings"] + plan["warnings"]), repo


async def test_lora_of_a_fused_expert_moe_gets_dropout_zero_and_a_nonzero_one_is_refused(models: Emulator) -> None:
    base = {"dataset": "org/chat", "hub_model_id": "emu-user/out", "dry_run": True}
    posted = len(models.posted_jobs())
    async with Client(build_server()) as client:
        for repo, dropout in ((QWEN3_MOE, 0.0), (MIXTRAL, 0.0), (QWEN15_MOE, 0.0)):  # qwen2_moe: since peft 0.22
            for peft in ("lora", "qlora"):
                plan = await call(client, "submit_training", {**base, "model": repo, "peft": peft})
                assert script_config(plan["script"])["lora"]["dropout"] == dropout, (repo, peft)
                assert any("ParamWrapper" in w for w in plan["warnings"]) == (dropout == 0.0), repo
        text = await refused(client, "submit_training", {**base, "model": QWEN3_MOE, "lora_dropout": 0.1,
                                                         "dry_run": False})
        assert "lora_dropout=0" in text and "ParamWrapper" in text and "Nothing was launched" in text
        plan = await call(client, "submit_training", {**base, "model": MIXTRAL, "lora_dropout": 0.1,
                                                      "lora_target_modules": ["q_proj", "v_proj"]})
        assert script_config(plan["script"])["lora"] == {"r": 16, "alpha": 32, "dropout": 0.1,
                                                         "target_modules": ["q_proj", "v_proj"]}
        await refused(client, "submit_training", {**base, "model": MIXTRAL, "lora_dropout": 0.1,
                                                  "lora_target_modules": ["q_proj", "w1", "w3"]})
    assert models.posted_jobs()[posted:] == []


# --- 4: checkpoints stored quantized --------------------------------------------------------------------------------
async def test_a_bitsandbytes_checkpoint_is_refused_full_and_sized_as_stored(models: Emulator) -> None:
    plain = models.serve_model(folder(BNB4), repo="emu-org/qwen2.5-0.5b-plain",
                               safetensors={"parameters": {"BF16": 494_032_768}, "total": 494_032_768})
    models.files[(plain, "config.json")] = json.dumps(
        {k: v for k, v in config_of(BNB4).items() if k != "quantization_config"}).encode()
    posted = len(models.posted_jobs())
    async with Client(build_server()) as client:
        for extra in ({}, {"nodes": 2, "flavor": "a10g-largex2"}):
            for tool, args in (("estimate_cost", {"num_examples": 2000}),
                               ("submit_training", {"dataset": "org/chat", "hub_model_id": "emu-user/out"})):
                text = await refused(client, tool, {"model": BNB4, "peft": "full", **args, **extra})
                assert "bitsandbytes 4-bit" in text and "peft='lora'" in text and "Nothing was launched" in text
        lora = await call(client, "estimate_cost", {"model": BNB4, "peft": "lora", "num_examples": 2000,
                                                    "tokens_per_example": 512, "flavor": "l4x1"})
        qlora = await call(client, "estimate_cost", {"model": plain, "peft": "qlora", "num_examples": 2000,
                                                     "tokens_per_example": 512, "flavor": "l4x1"})
        plan = await call(client, "submit_training", {"model": BNB4, "dataset": "org/chat", "dry_run": True,
                                                      "hub_model_id": "emu-user/out"})
    assert lora["assumptions"]["params_billions"] == 0.494  # not the Hub's 0.32 of packed bytes
    assert (lora["memory_gb_needed"], lora["hours"]) == (qlora["memory_gb_needed"], qlora["hours"])
    assert any("QLoRA in effect" in w for w in lora["warnings"]) and any("QLoRA in effect" in w
                                                                         for w in plan["warnings"])
    assert "bitsandbytes" in plan["script"].split("# ///")[1]  # the job loads the 4-bit weights with it
    assert models.posted_jobs()[posted:] == []


@pytest.mark.parametrize(("stored", "lora_ok", "qlora_ok"), [
    ({"quant_method": "gptq", "bits": 4}, False, False), ({"quant_method": "awq", "bits": 4}, False, False),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, False, False),
    ({"quant_method": "mxfp4"}, True, False),
    ({"load_in_8bit": True, "quant_method": "bitsandbytes"}, True, True),
])
async def test_each_stored_format_is_trained_only_as_the_job_can_load_it(models: Emulator, stored: dict,
                                                                         lora_ok: bool, qlora_ok: bool) -> None:
    repo = models.serve_model(folder(BNB4), repo=f"emu-org/q-{stored['quant_method']}-{len(stored)}")
    models.files[(repo, "config.json")] = json.dumps({**config_of(BNB4), "quantization_config": stored}).encode()
    async with Client(build_server()) as client:
        for peft, ok in (("full", False), ("lora", lora_ok), ("qlora", qlora_ok)):
            result = await client.call_tool("estimate_cost", {"model": repo, "peft": peft, "num_examples": 100})
            assert result.is_error != ok, (stored, peft, result.content[0].text)
            if not ok:
                assert "Nothing was launched" in result.content[0].text
    assert quantization_of({"quantization_config": stored}) is not None


# --- 9: classification and reward heads a model has no class for --------------------------------------------------
def test_the_head_tables_are_transformers_own() -> None:
    from transformers.models.auto import modeling_auto as auto

    sequence = auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES
    for model_type in auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:  # Gemma 3, Qwen3.5: a VLM with a class
        assert has_class("sequence_classification", model_type) == (model_type in sequence), model_type
    assert ENCODER_TYPES == {t for t in sequence if t in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES}
    for model_type in ("qwen2_vl", "llava", "idefics3", "smolvlm", "paligemma", "qwen3_vl", "clip", "siglip"):
        assert model_type not in sequence


async def test_text_classification_and_reward_on_a_vlm_are_refused_by_every_tool(models: Emulator) -> None:
    posted = len(models.posted_jobs())
    async with Client(build_server()) as client:
        for repo in (QWEN2_VL, LLAVA):
            for method, data in (("text-classification", "org/reviews"), ("reward", "org/prefs")):
                report = await call(client, "validate_dataset", {"dataset": data, "model": repo, "method": method})
                errors = [i["message"] for i in report["issues"] if i["severity"] == "error"]
                assert not report["valid"] and "AutoModelForSequenceClassification" in errors[0], (repo, method)
                for tool, extra in (("estimate_cost", {}), ("submit_training", {"hub_model_id": "emu-user/x"})):
                    text = await refused(client, tool, {"model": repo, "dataset": data, "method": method, **extra})
                    assert "no AutoModelForSequenceClassification class" in text
                    assert "nothing was launched" in text.lower()
                    assert ("Qwen/Qwen2.5-0.5B-Instruct" if method == "reward" else "ModernBERT") in text
        plan = await call(client, "submit_training", {"model": GEMMA3, "dataset": "org/reviews", "dry_run": True,
                                                      "method": "text-classification", "hub_model_id": "emu-user/x"})
        assert plan["flavor"]  # Gemma 3 has Gemma3ForSequenceClassification
    assert models.posted_jobs()[posted:] == []


async def test_reward_on_an_encoder_whose_tokenizer_has_no_eos_is_planned(models: Emulator) -> None:
    """BERT's and DistilBERT's tokenizers have no EOS (TRL's add_eos would fail on None): the reward script ends
    their texts with [SEP] instead (tests/test_gpu_replay_classifiers.py trains them), so every tool plans them."""
    base = {"dataset": "org/prefs", "method": "reward", "hub_model_id": "emu-user/x", "dry_run": True}
    posted = len(models.posted_jobs())
    async with Client(build_server()) as client:
        for repo in (DISTILBERT, BERT):
            for peft in ("lora", "qlora", "full"):
                plan = await call(client, "submit_training", {**base, "model": repo, "peft": peft})
                assert plan["flavor"] and "EOS" not in json.dumps(plan.get("warnings", [])), (repo, peft)
            assert (await call(client, "estimate_cost", {"model": repo, "dataset": "org/prefs",
                                                         "method": "reward"}))["memory_gb_needed"]
            report = await call(client, "validate_dataset", {"dataset": "org/prefs", "model": repo,
                                                             "method": "reward"})
            assert report["valid"], report["issues"]
    assert models.posted_jobs()[posted:] == []


# --- 13: LoRA target names --------------------------------------------------------------------------------------------
def test_all_linear_in_a_list_is_sent_as_peft_shorthand_and_non_names_are_refused() -> None:
    from pydantic import ValidationError

    base = {"model": "Qwen/Qwen2-0.5B", "dataset": "org/data", "hub_model_id": "me/out"}
    for spelling in (["all-linear"], ["ALL_LINEAR"], ["all-linear", "all-linear"]):
        assert TrainingRequest(**base, lora_target_modules=spelling).lora_targets == "all-linear"
    assert TrainingRequest(**base, lora_target_modules=["q_proj", "self_attn.v_proj", "q_proj"]).lora_targets == [
        "q_proj", "self_attn.v_proj"]
    for names, says in ((["all-linear", "q_proj"], "alone"), (["q-proj"], "'q_proj'"), ([], "at least one"),
                        ([".q_proj"], "empty part"), (["layers..q"], "empty part")):
        with pytest.raises(ValidationError, match=says):
            TrainingRequest(**base, lora_target_modules=names)


async def test_the_script_gets_all_linear_as_the_string_peft_expands(models: Emulator) -> None:
    async with Client(build_server()) as client:
        plan = await call(client, "submit_training", {"model": QWEN2_VL, "dataset": "org/chat", "dry_run": True,
                                                      "hub_model_id": "emu-user/x",
                                                      "lora_target_modules": ["all-linear"]})
        text = await refused(client, "submit_training", {"model": QWEN2_VL, "dataset": "org/chat",
                                                         "hub_model_id": "emu-user/x",
                                                         "lora_target_modules": ["q-proj"]})
    assert script_config(plan["script"])["lora"]["target_modules"] == "all-linear"
    assert "'q_proj'" in text


async def test_target_names_the_model_lacks_are_refused_before_anything_runs(models: Emulator) -> None:
    """['query', 'value'] (BERT's names) on Qwen3-MoE, whose shard index (model.safetensors.index.json) names its
    weights: PEFT would match none (NoMatchingPeftModuleError at trainer build). One matching name is enough."""
    layer = "model.layers.{}."
    weights = [layer.format(i) + part for i in range(2) for part in (
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "input_layernorm.weight", "mlp.gate.weight", *(f"mlp.experts.{e}.{p}.weight" for e in range(2)
                                                        for p in ("gate_proj", "up_proj", "down_proj")))]
    index = {"metadata": {}, "weight_map": {w: "model-00001-of-00002.safetensors" for w in
                                            ["model.embed_tokens.weight", *weights, "lm_head.weight"]}}
    models.files[(QWEN3_MOE, "model.safetensors.index.json")] = json.dumps(index).encode()
    base = {"model": QWEN3_MOE, "dataset": "org/chat", "hub_model_id": "emu-user/x", "dry_run": True}
    posted = len(models.posted_jobs())
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**base, "lora_target_modules": ["query", "value"],
                                                         "dry_run": False})
        plan = await call(client, "submit_training", {**base, "lora_target_modules": ["query", "self_attn.q_proj"]})
        unknown = await call(client, "submit_training", {**base, "model": QWEN15_MOE,  # one file: names unknown
                                                         "lora_target_modules": ["query"]})
    assert "NoMatchingPeftModuleError" in text and "'q_proj'" in text and "Nothing was launched" in text
    assert script_config(plan["script"])["lora"]["target_modules"] == ["query", "self_attn.q_proj"]
    assert unknown["flavor"] and models.posted_jobs()[posted:] == []


# --- 14: convolutional image models -----------------------------------------------------------------------------------
async def test_a_hub_convnet_is_sized_from_its_weights_and_stages_not_a_decoder_guess(models: Emulator) -> None:
    size = model_size(CONVNEXT, None)
    assert (size.params, size.layers, size.hidden, size.vocab) == (hub_total(CONVNEXT), 36, 1024, 0)
    assert size.image_activations == 3 * size.params and "convolutional" in size.source
    need = memory_need(size, method="image-classification", peft="full", batch=32, seq_len=197)
    assert need.activations_gb == pytest.approx(32 * 3 * size.params * 2 / 1e9, rel=0.01)
    async with Client(build_server()) as client:
        estimate = await call(client, "estimate_cost", {"model": CONVNEXT, "method": "image-classification",
                                                        "peft": "full", "num_examples": 75000, "flavor": "t4-small"})
    assert estimate["assumptions"]["params_billions"] == 0.089
    assert "activations ~3 elements per parameter" in estimate["assumptions"]["params_source"]
    assert estimate["fits"] and 2 < estimate["memory_gb_needed"] < 16


def test_the_convnet_activation_rule_holds_on_transformers_classes() -> None:
    """What a training forward really keeps (torch's saved-tensor hooks, fp32) at 224 px: the rule's count is at
    least that, and at most 2.5x it, for a residual net, a ConvNeXt and a MobileNet (the floor)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageClassification

    from hf_train_mcp.estimate.images import conv_activations

    for model_type in ("resnet", "convnext", "mobilenet_v2"):
        config = AutoConfig.for_model(model_type)
        model = AutoModelForImageClassification.from_config(config).train()
        seen: dict[tuple[int, int], int] = {}

        def keep(tensor: torch.Tensor) -> torch.Tensor:
            seen[(tensor.data_ptr(), tensor.numel())] = tensor.numel()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
            model(pixel_values=torch.randn(1, 3, 224, 224)).logits.sum()
        params = sum(p.numel() for p in model.parameters())
        kept = sum(seen.values())
        assert kept <= conv_activations(params, {"image_size": 224}) <= 2.5 * kept, (model_type, kept, params)
