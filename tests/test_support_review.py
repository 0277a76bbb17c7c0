"""An outside review of what the tools plan and refuse by a model's own files (issue 32), on real Hub configs
changed the way real checkpoints differ, or built by transformers' own config classes at published sizes, served by
the emulator as the Hub serves them. Each finding is a plan whose job would fail where transformers has no class
the job loads:

- a config.json that names no `architectures` (older exports, hand-written configs): TRL picks the class from it
  (trl/trainer/utils.py create_model_from_path: `getattr(transformers, config.architectures[0], None)`), a
  TypeError on None, so every chat method (sft, dpo, grpo, kto, distill) died at load; now refused with why,
  while the methods that name their own class (text-classification's AutoModelForSequenceClassification) plan;
- a `model_type` transformers does not know and no `auto_map`: AutoConfig stops ("Transformers does not recognize
  this architecture"), yet every method, evaluation and merged export was planned (the README says a model outside
  the table is planned only "when transformers has the classes its method loads"); now refused;
- Phi-4-multimodal in transformers' own format (Phi4MultimodalForCausalLM, a vision_config beside its text
  fields): taken for a vision-language model, so rows with images got the language-tower LoRA regex, which names no
  module of it (its layers are model.layers.N.self_attn.qkv_proj: PEFT's "Target modules ... not found"), and
  evaluate/export loaded it with AutoModelForImageTextToText, which has no class for phi4_multimodal; now a causal
  language model (AutoModelForCausalLM has Phi4MultimodalForCausalLM) whose image rows are refused;
- jina-embeddings-v3 from the Hub: its modules.json names custom_st.Transformer, its repository's own code, which
  the job's SentenceTransformer (no trust_remote_code) cannot import (a local folder's were checked, a Hub model's
  not): embedding training, evaluation and export were planned; now refused as remote code;
- InternVL in transformers' format (OpenGVLab/InternVL3-1B-hf): its vision_config's patch_size is a [height, width]
  pair, which sizing squared (a TypeError: estimate_cost and submit_training failed as the server's own defect);
- a distillation teacher no job can load (Phi-3-vision-128k-instruct, remote code, for Phi-3-mini with the same
  vocabulary): only the student's family was checked; the teacher is now checked as a model the method trains;
- a model no rows can train with the method (remote code, here for SFT on good rows): submit_training's dataset
  validation refused it worded as the data's fault ("Fix the data or pass column_mapping"); the model's own
  refusal is raised now;
- a config.json without `model_type` (not timm's): planned by its architectures, though AutoConfig stops at it
  ("Should have a `model_type` key"); now refused (as remote code where auto_map names an AutoConfig);
- Qwen2-Audio was refused where it should be, but described as an encoder-decoder model, and Whisper and Qwen2-Audio
  were planned for method='embedding' (their encoder reads audio features, never token ids): now audio-to-text
  models, refused for embedding;
- a GPTQ or AWQ checkpoint (Qwen's own releases of Qwen2.5-0.5B-Instruct): training was refused, evaluation and
  both exports planned, though their jobs load it with transformers, whose quantizers stop without optimum or
  gptqmodel; now refused with the unquantized original to pick.
"""

import json
from pathlib import Path

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from tests.conftest import needs_training
from tests.emulator import Emulator
from tests.helpers import script_config, zoo_dataset
from tests.hub_configs import CONFIGS

pytestmark = [pytest.mark.zoo, pytest.mark.anyio]
QWEN = CONFIGS / "Qwen--Qwen2.5-0.5B-Instruct"
DRY = {"hub_model_id": "emu-user/review-out", "max_steps": 2, "flavor": "h200", "dry_run": True}


def _folder(tmp_path: Path, name: str, config: dict, info: dict | None = None) -> Path:
    """A Hub model folder as tests/data/configs keeps them: config.json and model_info.json."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model_info.json").write_text(json.dumps(info or json.loads((QWEN / "model_info.json").read_text())))
    return folder


async def _call(client: Client, tool: str, arguments: dict) -> tuple[dict | None, str]:
    result = await client.call_tool(tool, arguments)
    return (None, result.content[0].text) if result.is_error else (result.structured_content, "")


async def test_a_config_without_architectures_is_refused_for_the_methods_trl_loads(zoo: Emulator,
                                                                                   tmp_path: Path) -> None:
    """Qwen2.5-0.5B-Instruct's real config.json without its `architectures`: SFT and DPO would die in TRL's
    create_model_from_path (`config.architectures[0]` of None); text-classification names its own class and plans."""
    config = json.loads((QWEN / "config.json").read_text())
    del config["architectures"]
    repo = zoo.serve_model(_folder(tmp_path, "emu-user--no-architectures", config))
    posted = len(zoo.posted_jobs())
    async with Client(build_server()) as client:
        for method in ("sft", "dpo"):
            plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": method,
                                                                 "dataset": zoo_dataset(method), "peft": "lora"})
            assert plan is None and "architectures" in text and "Nothing was launched" in text, (method, text)
        estimate, text = await _call(client, "estimate_cost", {"model": repo, "method": "sft", "peft": "lora",
                                                               "num_examples": 100, "flavor": "h200"})
        assert estimate is None and "architectures" in text, text
        plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": "text-classification",
                                                             "dataset": zoo_dataset("text-classification"),
                                                             "peft": "lora"})
        assert plan is not None, text
    assert zoo.posted_jobs()[posted:] == []


async def test_a_model_type_transformers_does_not_know_is_refused(zoo: Emulator, tmp_path: Path) -> None:
    """A checkpoint whose model_type transformers has no config class for, and no auto_map (its code is nowhere):
    AutoConfig.from_pretrained stops in the job, so no training, evaluation or export is planned."""
    config = {**json.loads((QWEN / "config.json").read_text()), "model_type": "mambaformer",
              "architectures": ["MambaformerForCausalLM"]}
    repo = zoo.serve_model(_folder(tmp_path, "emu-user--mambaformer", config))
    posted = len(zoo.posted_jobs())
    async with Client(build_server()) as client:
        plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": "sft",
                                                             "dataset": zoo_dataset("sft"), "peft": "lora"})
        assert plan is None and "'mambaformer'" in text and "nothing was launched" in text.lower(), text
        plan, text = await _call(client, "evaluate_model", {"model": repo, "dataset": zoo_dataset("sft"),
                                                            "split": "train", "dry_run": True})
        assert plan is None and "'mambaformer'" in text, text
        plan, text = await _call(client, "export_model", {"model": repo, "format": "merged", "dry_run": True,
                                                          "hub_model_id": "emu-user/review-merged"})
        assert plan is None and "'mambaformer'" in text, text
        report, _ = await _call(client, "validate_dataset", {"dataset": zoo_dataset("sft"), "model": repo})
        assert not report["valid"] and any("'mambaformer'" in i["message"] for i in report["issues"]), report
    assert zoo.posted_jobs()[posted:] == []


async def test_a_config_without_model_type_is_refused_unless_timm_or_its_code_reads_it(zoo: Emulator,
                                                                                     tmp_path: Path) -> None:
    """A config.json that names no model_type was planned by its architectures, though transformers 5's AutoConfig
    reads one only as timm's (configuration_utils: `is_timm_config_dict`, a `pretrained_cfg`) and otherwise stops:
    "Unrecognized model in ... Should have a `model_type` key in its config.json" (configuration_auto.py). Refused
    now, saying so; one whose auto_map names its AutoConfig is the repository's code, refused as remote code."""
    config = json.loads((QWEN / "config.json").read_text())
    del config["model_type"]
    repo = zoo.serve_model(_folder(tmp_path, "emu-user--no-model-type", config))
    coded = zoo.serve_model(_folder(tmp_path, "emu-user--coded-no-model-type", {
        **config, "auto_map": {"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": "modeling_x.XLM"}}))
    posted = len(zoo.posted_jobs())
    async with Client(build_server()) as client:
        for method in ("sft", "text-classification"):
            plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": method,
                                                                 "dataset": zoo_dataset(method), "peft": "lora"})
            assert plan is None and "names no model_type" in text and "`model_type` key" in text, (method, text)
        plan, text = await _call(client, "export_model", {"model": repo, "format": "merged", "dry_run": True,
                                                          "hub_model_id": "emu-user/review-merged"})
        assert plan is None and "names no model_type" in text, text
        plan, text = await _call(client, "submit_training", {**DRY, "model": coded, "method": "sft",
                                                             "dataset": zoo_dataset("sft"), "peft": "lora"})
        assert plan is None and "repository's own code" in text, text
    assert zoo.posted_jobs()[posted:] == []


@pytest.mark.parametrize("name", ["Qwen2Audio", "Whisper"])
async def test_an_audio_to_text_model_is_said_as_one_and_embeds_no_text(zoo: Emulator, tmp_path: Path,
                                                                        name: str) -> None:
    """Qwen2-Audio (an audio encoder feeding a Qwen decoder) was refused for chat methods but described as "an
    encoder-decoder (seq2seq) model"; Whisper and Qwen2-Audio were planned for method='embedding', whose
    SentenceTransformer feeds token ids to an encoder that reads audio features (WhisperModel.forward takes
    input_features), so the job died at its first batch. Configs built by transformers' own config classes at
    their defaults (Qwen2-Audio-7B's and whisper-tiny's published sizes), not copies of the Hub's files."""
    import transformers

    config = {**getattr(transformers, f"{name}Config")().to_dict(),
              "architectures": [f"{name}ForConditionalGeneration"]}
    repo = zoo.serve_model(_folder(tmp_path, f"emu-user--{name.lower()}", config))
    async with Client(build_server()) as client:
        plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": "sft",
                                                             "dataset": zoo_dataset("sft"), "peft": "lora"})
        assert plan is None and "an audio-to-text model" in text and "seq2seq" not in text, text
        plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": "embedding",
                                                             "dataset": zoo_dataset("embedding"), "peft": "lora"})
        assert plan is None and "reads audio" in text, text


@needs_training
async def test_phi4_multimodal_is_a_causal_lm_not_an_image_text_to_text_model(zoo: Emulator, tmp_path: Path) -> None:
    """Phi-4-multimodal-instruct in transformers' format, built by Phi4MultimodalConfig at its published sizes:
    text SFT plans and evaluation/export load it with AutoModelForCausalLM (the class transformers has for it);
    rows with images are refused (the language-tower regex names none of its modules), not planned."""
    from transformers import Phi4MultimodalConfig
    from transformers.models.auto import modeling_auto

    # what made the old plans fail, and the class the new ones load it with
    assert "phi4_multimodal" not in modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
    assert "phi4_multimodal" in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    config = Phi4MultimodalConfig(hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                                  num_attention_heads=24, num_key_value_heads=8, vocab_size=200064).to_dict()
    config["architectures"] = ["Phi4MultimodalForCausalLM"]
    info = {"pipeline_tag": "automatic-speech-recognition", "library_name": "transformers",
            "safetensors": {"parameters": {"BF16": 5574460384}, "total": 5574460384}}
    repo = zoo.serve_model(_folder(tmp_path, "emu-user--Phi-4-multimodal", config, info))
    posted = len(zoo.posted_jobs())
    async with Client(build_server()) as client:
        plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": "sft",
                                                             "dataset": zoo_dataset("sft", True), "peft": "lora"})
        assert plan is None and "reads no images" in text, text
        plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": "sft",
                                                             "dataset": zoo_dataset("sft"), "peft": "lora"})
        assert plan is not None, text
        for tool, arguments in (("evaluate_model", {"dataset": zoo_dataset("sft"), "split": "train"}),
                                ("export_model", {"format": "merged", "hub_model_id": "emu-user/review-merged"})):
            plan, text = await _call(client, tool, {"model": repo, "dry_run": True, **arguments})
            assert plan is not None, (tool, text)
            assert script_config(plan["script"])["auto_class"] == "AutoModelForCausalLM", tool
    assert zoo.posted_jobs()[posted:] == []


# jinaai/jina-embeddings-v3, reconstructed from its model card's published sizes (an XLM-RoBERTa of 24 layers,
# 1024 wide, its LoRA task adapters in the repository's own code): config.json names the model type transformers
# knows beside an architecture and a sentence-transformers module only its repository's code defines
JINA_V3 = {
    "architectures": ["XLMRobertaLoRA"], "model_type": "xlm-roberta",
    "auto_map": {
        "AutoConfig": "jinaai/xlm-roberta-flash-implementation--configuration_xlm_roberta.XLMRobertaFlashConfig",
        "AutoModel": "jinaai/xlm-roberta-flash-implementation--modeling_lora.XLMRobertaLoRA"},
    "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
    "max_position_embeddings": 8194, "vocab_size": 250002, "type_vocab_size": 1, "position_embedding_type": "rotary",
    "lora_adaptations": ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"],
    "torch_dtype": "bfloat16"}
JINA_MODULES = [{"idx": 0, "name": "transformer", "path": "", "type": "custom_st.Transformer", "kwargs": ["task"]},
                {"idx": 1, "name": "pooler", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "normalizer", "path": "2_Normalize",
                 "type": "sentence_transformers.models.Normalize"}]


@pytest.mark.parametrize("library", ["transformers", "sentence-transformers"])
async def test_a_hub_embedding_model_whose_modules_are_its_own_code_is_refused(zoo: Emulator, tmp_path: Path,
                                                                             library: str) -> None:
    """jina-embeddings-v3: its modules.json's first module is custom_st.Transformer, a class of the repository's
    own Python. The job's SentenceTransformer, without trust_remote_code, imports it by name
    (sentence_transformers/util/misc.py import_module_class: `return import_from_string(class_ref)` when not
    trusted): ModuleNotFoundError 'custom_st'. A local folder is checked (models/files.py custom_modules); a Hub
    model was planned for method='embedding', evaluation and export."""
    folder = _folder(tmp_path, "emu-user--jina-embeddings-v3", JINA_V3, {
        "pipeline_tag": "feature-extraction", "library_name": library,
        "safetensors": {"parameters": {"BF16": 572310396}, "total": 572310396}})
    (folder / "modules.json").write_text(json.dumps(JINA_MODULES))
    repo = zoo.serve_model(folder)
    posted = len(zoo.posted_jobs())
    async with Client(build_server()) as client:
        plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": "embedding",
                                                             "dataset": zoo_dataset("embedding"), "peft": "lora"})
        assert plan is None and "custom_st.Transformer" in text and "nothing was launched" in text.lower(), text
        for tool, arguments in (("evaluate_model", {"dataset": zoo_dataset("embedding"), "split": "train"}),
                                ("export_model", {"format": "merged", "hub_model_id": "emu-user/review-merged"})):
            plan, text = await _call(client, tool, {"model": repo, "dry_run": True, **arguments})
            assert plan is None and "custom_st.Transformer" in text, (tool, text)
    assert zoo.posted_jobs()[posted:] == []


# The quantization_config of Qwen's own GPTQ and AWQ releases of Qwen2.5-0.5B-Instruct (Qwen/Qwen2.5-0.5B-Instruct-
# GPTQ-Int4, Qwen/Qwen2.5-0.5B-Instruct-AWQ), on the zoo's real config of the original
STORED = {"gptq": {"bits": 4, "damp_percent": 0.01, "dataset": None, "desc_act": False, "group_size": 128,
                   "modules_in_block_to_quantize": None, "quant_method": "gptq", "sym": True,
                   "true_sequential": True},
          "awq": {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq",
                  "version": "gemm", "zero_point": True}}


@pytest.mark.parametrize("method", sorted(STORED))
async def test_a_gptq_or_awq_checkpoint_is_neither_evaluated_nor_exported(zoo: Emulator, tmp_path: Path,
                                                                         method: str) -> None:
    """Training refused these (quantization_refusal: the job cannot load them), and evaluate_model and
    export_model planned them: both load the model with transformers, whose GPTQ and AWQ quantizers stop without
    packages the jobs do not install (quantizers/quantizer_gptq.py: "Loading a GPTQ quantized model requires
    optimum"; quantizer_awq.py: gptqmodel), and llama.cpp's converter refuses them too."""
    config = {**json.loads((QWEN / "config.json").read_text()), "quantization_config": STORED[method]}
    repo = zoo.serve_model(_folder(tmp_path, f"emu-user--Qwen2.5-0.5B-Instruct-{method}", config))
    posted = len(zoo.posted_jobs())
    async with Client(build_server()) as client:
        plan, text = await _call(client, "evaluate_model", {"model": repo, "dataset": zoo_dataset("sft"),
                                                            "split": "train", "dry_run": True})
        assert plan is None and method in text and "Nothing was launched" in text, text
        for fmt in ("merged", "gguf"):
            plan, text = await _call(client, "export_model", {"model": repo, "format": fmt, "dry_run": True,
                                                              "hub_model_id": f"emu-user/review-{fmt}"})
            assert plan is None and method in text and "Nothing was launched" in text, (fmt, text)
    assert zoo.posted_jobs()[posted:] == []


@needs_training
async def test_internvl_whose_vision_config_gives_sizes_as_pairs_is_sized_and_planned(zoo: Emulator,
                                                                                      tmp_path: Path) -> None:
    """OpenGVLab/InternVL3-1B-hf, built by InternVLConfig at its published sizes: its vision_config writes
    image_size and patch_size as [height, width] pairs, and sizing squared the list (a TypeError: no estimate, no
    plan, an internal error instead of either)."""
    from transformers import InternVLConfig

    config = InternVLConfig(
        text_config={"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151674},
        vision_config={"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                       "num_attention_heads": 16, "image_size": [448, 448], "patch_size": [14, 14]},
        image_token_id=151667).to_dict()
    config["architectures"] = ["InternVLForConditionalGeneration"]
    assert config["vision_config"]["patch_size"] == [14, 14]
    info = {"pipeline_tag": "image-text-to-text", "library_name": "transformers",
            "safetensors": {"parameters": {"BF16": 938193024}, "total": 938193024}}
    repo = zoo.serve_model(_folder(tmp_path, "emu-user--InternVL3-1B-hf", config, info))
    posted = len(zoo.posted_jobs())
    async with Client(build_server()) as client:
        estimate, text = await _call(client, "estimate_cost", {"model": repo, "dataset": zoo_dataset("sft", True),
                                                               "flavor": "h200"})
        assert estimate is not None, text
        assert estimate["assumptions"]["image_tokens_per_example"] > 0, estimate["assumptions"]
        plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": "sft",
                                                             "dataset": zoo_dataset("sft", True), "peft": "lora"})
        assert plan is not None, text
    assert zoo.posted_jobs()[posted:] == []


async def test_a_distillation_teacher_no_job_can_load_is_refused(zoo: Emulator) -> None:
    """Phi-3-mini-4k-instruct distilled from Phi-3-vision-128k-instruct (both real zoo configs, the same 32064-token
    vocabulary): the teacher's architecture is its repository's own code (auto_map, model_type 'phi3_v'), which
    TRL's DistillationTrainer loads by id without trust_remote_code (trl/trainer/distillation_trainer.py
    `create_model_from_path(teacher_model, ...)`: AutoConfig asks for trust_remote_code), so the job failed at
    load. Only the student's family was checked; the teacher's is now checked as a model the method trains."""
    student = zoo.serve_model(CONFIGS / "microsoft--Phi-3-mini-4k-instruct")
    teacher = zoo.serve_model(CONFIGS / "microsoft--Phi-3-vision-128k-instruct")
    async with Client(build_server()) as client:
        plan, text = await _call(client, "submit_training", {**DRY, "model": student, "method": "distill",
                                                             "teacher_model": teacher,
                                                             "dataset": zoo_dataset("distill"), "peft": "lora"})
        assert plan is None and "teacher_model" in text and "repository's own code" in text, text
        assert "Nothing was launched" in text, text
        plan, text = await _call(client, "submit_training", {**DRY, "model": student, "method": "distill",
                                                             "teacher_model": student,
                                                             "dataset": zoo_dataset("distill"), "peft": "lora"})
        assert plan is not None, text


async def test_a_model_no_rows_can_train_is_refused_as_the_models_fault(zoo: Emulator) -> None:
    """Phi-3-vision-128k-instruct (remote code) for SFT on good chat rows: submit_training's dataset validation
    refused it first, worded as the data's fault ("dataset 'org/sft' will not train with sft: ... Fix the data or
    pass column_mapping"), which no change of the data fixes. The model's own refusal comes first now."""
    repo = zoo.serve_model(CONFIGS / "microsoft--Phi-3-vision-128k-instruct")
    posted = len(zoo.posted_jobs())
    async with Client(build_server()) as client:
        plan, text = await _call(client, "submit_training", {**DRY, "model": repo, "method": "sft",
                                                             "dataset": zoo_dataset("sft"), "peft": "lora"})
    assert plan is None and "repository's own code" in text and "Nothing was launched" in text, text
    assert "column_mapping" not in text and "Fix the data" not in text, text
    assert zoo.posted_jobs()[posted:] == []
