"""The real Hub files of tests/data/configs (see its README.md), read by the tests of model families and plans."""

import json
from pathlib import Path

CONFIGS = Path(__file__).parent / "data" / "configs"
# Architectures whose classes live outside transformers (only their files are checked), and those whose classes
# need a package of their own
REMOTE_CODE_ONLY = {"microsoft--Phi-3-vision-128k-instruct"}
NEEDS_EXTRA = {"timm--resnet50.a1_in1k": "timm"}

# The class whose parameters the Hub's safetensors total counts, where it is not the config's own
# architectures[0], and what the checkpoint holds besides that class's parameters (persistent tensors a model
# rebuilds instead of loading). Each with why.
COUNTED_AS: dict[str, tuple[str, int, str]] = {
    "openai-community--gpt2": ("GPT2LMHeadModel", 12 * 1024 * 1024,
                               "the checkpoint also holds each of the 12 blocks' causal mask `attn.bias` "
                               "(1x1x1024x1024), which transformers rebuilds as a buffer"),
    "Qwen--Qwen3-0.6B": ("Qwen3ForCausalLM", 151936 * 1024,
                         "tied embeddings, yet the checkpoint stores `lm_head.weight` too (151936 x 1024): the "
                         "Hub counts it, the built model shares it with the input embeddings"),
    "Qwen--Qwen3-1.7B": ("Qwen3ForCausalLM", 151936 * 2048, "tied, yet `lm_head.weight` stored, as Qwen3-0.6B"),
    "Qwen--Qwen3-32B-FP8": ("Qwen3ForCausalLM", 1_904_640,
                            "block FP8: each quantized linear of the decoder layers also stores `weight_scale_inv`, "
                            "one per 128x128 block (sum of ceil(out/128) * ceil(in/128))"),
    "openai--gpt-oss-20b": ("GptOssForCausalLM", 597_196_800,
                            "MXFP4 experts: the Hub counts each packed byte of `*_blocks` as two 4-bit weights (so "
                            "they equal the parameters) and stores one `*_scales` byte per 32 weights on top"),
    "unsloth--Qwen2.5-0.5B-Instruct-bnb-4bit": ("Qwen2ForCausalLM", 320_806_733 - 494_032_768,
                                                "stored in bitsandbytes 4-bit: the Hub counts each U8 byte of a "
                                                "packed weight (two 4-bit values) and its quantization state, so "
                                                "its total is under the parameters (see its PROVENANCE.md)"),
    "sentence-transformers--all-mpnet-base-v2": ("AutoModel", 0,
                                                 "a sentence-transformers checkpoint: the bare encoder, though its "
                                                 "config names MPNetForMaskedLM"),
    "Qwen--Qwen3-Embedding-0.6B": ("AutoModel", 0,
                                   "a sentence-transformers checkpoint: Qwen3Model without the LM head its config "
                                   "names (tied, so no weight is missing)"),
    "FacebookAI--roberta-base": ("RobertaForMaskedLM", 0,
                                 "the Hub checkpoint is the masked-LM one; the public copy was re-saved from "
                                 "RobertaModel"),
    "microsoft--deberta-v3-base": ("DebertaV2ForMaskedLM", 0,
                                   "the Hub file names no architectures; the checkpoint is the masked-LM one"),
    "google-bert--bert-base-uncased": ("BertForPreTraining", 0, "the checkpoint holds both pretraining heads"),
}


def folder(repo: str) -> Path:
    return CONFIGS / repo.replace("/", "--")


def config_of(repo: str) -> dict:
    return json.loads((folder(repo) / "config.json").read_text())


def hub_total(repo: str) -> int:
    return json.loads((folder(repo) / "model_info.json").read_text())["safetensors"]["total"]


def parameters(repo: str) -> int:
    """The model's parameters: the Hub's total, less what its checkpoint stores besides them where that checkpoint
    is stored quantized (COUNTED_AS: scales, packed bytes); a checkpoint's own extras in plain floats (GPT-2's
    causal masks, a tied head stored twice) are in the Hub's total, and so in what the server counts."""
    stored = "quantization_config" in config_of(repo)
    return hub_total(repo) - (COUNTED_AS.get(repo.replace("/", "--"), ("", 0, ""))[1] if stored else 0)


def chat_template_of(name: str) -> bool | None:
    """What a zoo folder's files say of its chat template: True (tokenizer_config.json's chat_template, or a
    chat_template.json), False (a tokenizer_config.json without one: Llama-3.2-1B, a base model), None (no tokenizer
    file kept)."""
    files = CONFIGS / name
    if (files / "chat_template.json").is_file():
        return True
    tokenizer = files / "tokenizer_config.json"
    return bool(json.loads(tokenizer.read_text()).get("chat_template")) if tokenizer.is_file() else None
