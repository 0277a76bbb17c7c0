"""Tiny vision-language models of every family people fine-tune, built from transformers' own config classes at
toy sizes: the real module tree (names, towers, projectors, cross-attention) with a few thousand random weights.

Test-only (the product never builds models). Each builder takes the text vocabulary and returns an unsaved model;
`FAMILIES` maps a family name to its builder, `TEXT_TOWER` / `VISION_TOWER` to the attribute paths transformers 5.24
gives its towers (read in transformers/models/<name>/modeling_<name>.py)."""

import json
from pathlib import Path
from typing import Any, Callable

# the text tower's shape everywhere: 2 layers of width 32, 4 heads of 8, 2 key-value heads
TEXT = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=512)
VOCAB = 512
IMAGE_TOKEN = VOCAB - 1  # the last id of the vocabulary stands for an image patch


def _llama(vocab: int) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, **TEXT)


def _siglip(**extra: Any) -> Any:
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=32, patch_size=8, **extra)


def qwen2_vl(vocab: int = VOCAB) -> Any:
    """Qwen2-VL: model.visual (blocks of attn.qkv/attn.proj/mlp.fc1/fc2, a merger) and model.language_model."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(
        text_config=dict(vocab_size=vocab, rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1]},
                         **TEXT),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=32, num_heads=4, mlp_ratio=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2),
        **_qwen_token_ids(vocab))
    _text_ids(config)
    return Qwen2VLForConditionalGeneration(config)


def qwen2_5_vl(vocab: int = VOCAB) -> Any:
    """Qwen2.5-VL: its vision blocks have their own gate/up/down_proj MLP, which a LoRA on the text must skip."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=vocab, rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1]},
                         **TEXT),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32, window_size=56,
                           fullatt_block_indexes=[1]),
        **_qwen_token_ids(vocab))
    _text_ids(config)
    return Qwen2_5_VLForConditionalGeneration(config)


def qwen3_vl(vocab: int = VOCAB) -> Any:
    """Qwen3-VL: model.visual (linear_fc1/fc2 MLPs, deepstack mergers) and model.language_model (Qwen3)."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    config = Qwen3VLConfig(
        text_config=dict(vocab_size=vocab, head_dim=8,
                         rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1]}, **TEXT),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32,
                           num_position_embeddings=16, deepstack_visual_indexes=[1]),
        **_qwen_token_ids(vocab))
    _text_ids(config)
    return Qwen3VLForConditionalGeneration(config)


def _qwen_token_ids(vocab: int) -> dict:
    return dict(image_token_id=vocab - 1, video_token_id=vocab - 2, vision_start_token_id=vocab - 3,
                vision_end_token_id=vocab - 4)


def _text_ids(config: Any) -> None:
    """Token ids inside the tiny vocabulary (the families' defaults are their real tokenizers' ids)."""
    text = config.get_text_config()
    text.bos_token_id, text.eos_token_id, text.pad_token_id = 1, 2, 0


def llava(vocab: int = VOCAB) -> Any:
    """LLaVA-1.5: model.vision_tower (CLIP: self_attn.q/k/v/out_proj), multi_modal_projector, language_model."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=32, patch_size=8, projection_dim=32)
    return LlavaForConditionalGeneration(LlavaConfig(vision_config=vision, text_config=_llama(vocab),
                                                     image_token_index=IMAGE_TOKEN))


def llava_next(vocab: int = VOCAB) -> Any:
    """LLaVA-NeXT: LLaVA's towers, any-resolution tiles and an image_newline parameter."""
    from transformers import CLIPVisionConfig, LlavaNextConfig, LlavaNextForConditionalGeneration

    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=32, patch_size=8, projection_dim=32)
    return LlavaNextForConditionalGeneration(LlavaNextConfig(
        vision_config=vision, text_config=_llama(vocab), image_token_index=IMAGE_TOKEN,
        image_grid_pinpoints=[[32, 32], [32, 64]]))


def idefics2(vocab: int = VOCAB) -> Any:
    """Idefics2: model.vision_model (SigLIP), model.connector (a perceiver with its own q/k/v/o_proj and
    gate/up/down_proj) and model.text_model."""
    from transformers import Idefics2Config, Idefics2ForConditionalGeneration

    return Idefics2ForConditionalGeneration(Idefics2Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        perceiver_config=dict(hidden_size=32, resampler_n_latents=4, resampler_depth=1, resampler_n_heads=4,
                              resampler_head_dim=8, num_key_value_heads=2),
        text_config=dict(model_type="mistral", vocab_size=vocab, **TEXT), image_token_id=IMAGE_TOKEN))


def idefics3(vocab: int = VOCAB) -> Any:
    """Idefics3: model.vision_model (SigLIP), model.connector (pixel shuffle + a linear) and model.text_model."""
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    return Idefics3ForConditionalGeneration(Idefics3Config(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        text_config=_llama(vocab), image_token_id=IMAGE_TOKEN, scale_factor=2))


def smolvlm(vocab: int = VOCAB) -> Any:
    """SmolVLM / SmolVLM2: Idefics3's layout under its own classes (model.text_model)."""
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

    return SmolVLMForConditionalGeneration(SmolVLMConfig(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           image_size=32, patch_size=8),
        text_config=_llama(vocab), image_token_id=IMAGE_TOKEN, scale_factor=2))


def gemma3(vocab: int = VOCAB) -> Any:
    """Gemma 3 (4B and up): model.vision_tower (SigLIP), multi_modal_projector, model.language_model."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = dict(vocab_size=vocab, head_dim=8, query_pre_attn_scalar=8, sliding_window=16, **TEXT)
    return Gemma3ForConditionalGeneration(Gemma3Config(
        text_config=text, vision_config=_siglip().to_dict(), mm_tokens_per_image=4, boi_token_index=vocab - 3,
        eoi_token_index=vocab - 2, image_token_index=IMAGE_TOKEN))


def mllama(vocab: int = VOCAB) -> Any:
    """Llama 3.2 Vision: model.vision_model (its own q/k/v/o_proj) and model.language_model, whose cross-attention
    layers (cross_attn.q/k/v/o_proj) read the image."""
    from transformers import MllamaConfig, MllamaForConditionalGeneration

    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_global_layers=1, attention_heads=4,
                  vision_output_dim=64, image_size=28, patch_size=14, max_num_tiles=2, intermediate_layers_indices=[0],
                  supported_aspect_ratios=[[1, 1], [1, 2], [2, 1]])
    text = dict(vocab_size=vocab + 8, cross_attention_layers=[1], pad_token_id=0, bos_token_id=1, eos_token_id=2,
                **{**TEXT, "num_hidden_layers": 2})
    return MllamaForConditionalGeneration(MllamaConfig(vision_config=vision, text_config=text,
                                                       image_token_index=vocab + 7))


def paligemma(vocab: int = VOCAB) -> Any:
    """PaliGemma: model.vision_tower (SigLIP), multi_modal_projector, model.language_model (Gemma)."""
    from transformers import GemmaConfig, PaliGemmaConfig, PaliGemmaForConditionalGeneration

    text = GemmaConfig(vocab_size=vocab, head_dim=8, **TEXT)
    return PaliGemmaForConditionalGeneration(PaliGemmaConfig(
        vision_config=_siglip(projection_dim=32).to_dict(), text_config=text.to_dict(), image_token_index=IMAGE_TOKEN,
        projection_dim=32, hidden_size=32))


FAMILIES: dict[str, Callable[..., Any]] = {
    "qwen2_vl": qwen2_vl, "qwen2_5_vl": qwen2_5_vl, "qwen3_vl": qwen3_vl, "llava": llava, "llava_next": llava_next,
    "idefics2": idefics2, "idefics3": idefics3, "smolvlm": smolvlm, "gemma3": gemma3, "mllama": mllama,
    "paligemma": paligemma,
}


# --- saved with their processors: models the rendered scripts load from a folder ----------------------------------
# The processor a Hub Qwen2-VL ships (Qwen/Qwen2-VL-2B-Instruct's preprocessor_config.json): up to 12,845,056 pixels
QWEN2_VL_HUB_PIXELS = {"min_pixels": 3136, "max_pixels": 12_845_056, "patch_size": 14, "temporal_patch_size": 2,
                       "merge_size": 2}
IDEFICS_CHAT = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "{{ '<image>' }}{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def _tokenizer(text_model: Path, specials: list[str]) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(text_model)
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    return tokenizer


def save_qwen2_vl_images(folder: Path, pixels: dict | None = None) -> Path:
    """Qwen2-VL's image processor as a Hub repo ships it (preprocessor_config.json, the 12.8 MP budget unless told),
    alone: AutoProcessor then loads the image processor. The whole Qwen2-VL processor also needs its video
    processor, which needs torchvision: the jobs install it (planning adds it for vision data), this machine's CPU
    torch has none."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {**(pixels or QWEN2_VL_HUB_PIXELS), "image_processor_type": "Qwen2VLImageProcessor"}))
    return folder


def save_idefics3(folder: Path, text_model: Path) -> Path:
    """A tiny Idefics3 (SmolVLM's layout: the text tower is `model.text_model`) in `folder` with its processor: 32 px
    images, no splitting, 4 image tokens each (16 patches, pixel-shuffled by 2)."""
    from transformers import AutoImageProcessor, Idefics3Processor

    if (folder / "config.json").exists():
        return folder
    tokenizer = _tokenizer(text_model, ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"])
    model = idefics3(len(tokenizer))
    model.config.image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    model.config.get_text_config().eos_token_id = tokenizer.eos_token_id
    model.config.get_text_config().pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"image_processor_type": "Idefics3ImageProcessor", "processor_class": "Idefics3Processor",
         "size": {"longest_edge": 32}, "max_image_size": {"longest_edge": 32}, "do_image_splitting": False}))
    images = AutoImageProcessor.from_pretrained(folder)
    Idefics3Processor(image_processor=images, tokenizer=tokenizer, image_seq_len=4,
                      chat_template=IDEFICS_CHAT).save_pretrained(folder)
    return folder
