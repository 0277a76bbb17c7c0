"""What images weigh in a model's size: the tokens one image becomes in a vision-language model (a fixed patch
grid, a pooled count, or a dynamic-resolution processor's grid), and what a convolutional net keeps per image."""

import math
from dataclasses import dataclass

from hf_train_mcp.methods.sft import MAX_IMAGE_TOKENS
from hf_train_mcp.models.files import vision_config

# Qwen2-VL style dynamic resolution has no fixed image size: a 448x448 image in 14 px patches, merged 2x2
DYNAMIC_IMAGE_TOKENS = 256
DYNAMIC_IMAGE_SIDE = 448  # the image assumed when the rows' sizes are unknown


@dataclass(frozen=True)
class ImageGrid:
    """A dynamic-resolution processor (Qwen2-VL's preprocessor_config.json): images resized to multiples of
    patch x merge within [min_pixels, max_pixels], one token per merged patch."""

    patch: int
    merge: int
    min_pixels: int
    max_pixels: int

    def tokens(self, height: float, width: float) -> int:
        # transformers' qwen2_vl smart_resize: round each side to the factor, then scale into the pixel bounds
        factor = self.patch * self.merge
        h, w = max(factor, round(height / factor) * factor), max(factor, round(width / factor) * factor)
        if h * w > self.max_pixels:
            beta = math.sqrt(height * width / self.max_pixels)
            h, w = (max(factor, math.floor(side / beta / factor) * factor) for side in (height, width))
        elif h * w < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h, w = (math.ceil(side * beta / factor) * factor for side in (height, width))
        return (h // factor) * (w // factor)


def image_grid(processor: dict | None) -> ImageGrid | None:
    """The grid a preprocessor_config.json describes, if it is a dynamic-resolution one (min/max pixels, or
    transformers 5's size.shortest_edge/longest_edge in pixels, with a merge size)."""
    if not isinstance(processor, dict):
        return None
    size = processor.get("size") if isinstance(processor.get("size"), dict) else {}
    low = processor.get("min_pixels") or size.get("shortest_edge")
    high = processor.get("max_pixels") or size.get("longest_edge")
    patch, merge = processor.get("patch_size"), processor.get("merge_size")
    if all(isinstance(v, int) and v > 0 for v in (low, high, patch, merge)) and high >= low:
        # the training scripts cap the processor at MAX_IMAGE_TOKENS an image (their cap_image_tokens)
        return ImageGrid(patch, merge, low, max(low, min(high, MAX_IMAGE_TOKENS * (patch * merge) ** 2)))
    return None


# Models that pool or resample the vision tower's patch grid into a fixed number of tokens an image, and the config
# field (with its config class's default) their modeling code and processor read: Gemma 3 average-pools its 64x64
# SigLIP patches to mm_tokens_per_image (gemma3/modeling_gemma3.py Gemma3MultiModalProjector: `self.tokens_per_side
# = int(config.mm_tokens_per_image**0.5)`; processing_gemma3.py image_seq_length 256), as ShieldGemma 2 does;
# BLIP-2 and InstructBLIP read num_query_tokens learned queries (processing_blip_2.py); Idefics2's
# perceiver resamples to perceiver_config.resampler_n_latents (processing_idefics2.py image_seq_len 64, "the
# config.perceiver_config.resampler_n_latents value").
_POOLED_IMAGE_TOKENS = {"gemma3": ("mm_tokens_per_image", 256), "shieldgemma2": ("mm_tokens_per_image", 256),
                        "blip-2": ("num_query_tokens", 32),
                        "instructblip": ("num_query_tokens", 32), "instructblipvideo": ("num_query_tokens", 32),
                        "idefics2": ("perceiver_config.resampler_n_latents", 64)}


def _pooled_image_tokens(cfg: dict) -> int | None:
    found = _POOLED_IMAGE_TOKENS.get(str(cfg.get("model_type")))
    if found is None:
        return None
    path, default = found
    value: object = cfg
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, int) and value > 0 else default


def image_tokens(cfg: dict) -> int:
    """Tokens per image of a vision-language model (its vision tower's patch grid; pixel-shuffled by
    scale_factor where the model does so), 0 for a model without a vision tower. Flat (Qwen2-VL: text fields beside
    `vision_config`) and nested (LLaVA: `text_config`) configs alike; whether the model reads images as a VLM at
    all is its family's to say (models/family.py), a dual encoder has a vision tower too."""
    vision = vision_config(cfg)
    if vision is None:
        return 0
    pooled = _pooled_image_tokens(cfg)
    if pooled:
        return pooled
    size, patch = vision.get("image_size"), vision.get("patch_size")
    if isinstance(size, int) and isinstance(patch, int) and patch:
        return (size // patch) ** 2 // (cfg.get("scale_factor") or 1) ** 2
    return DYNAMIC_IMAGE_TOKENS


# A convolutional image model (ResNet, ConvNeXt, RegNet, EfficientNet, MobileNet, ...) names stages in its
# config.json, no transformer width or depth: its parameters come from its weights, and the activations a training
# forward keeps (no activation checkpointing: models/family.py NO_ACTIVATION_CHECKPOINTING) from that count.
# Measured with torch's saved-tensor hooks on transformers' classes at 224 px, they keep 1.7-2.8 elements per
# parameter an image (ResNet-50 1.9, ConvNeXt-T 2.0, ConvNeXt-B 1.7, RegNet 2.4, EfficientNet 2.2, Swin 2.0);
# MobileNets keep 6-10 on few parameters: the floor. tests/test_family_plans.py holds the rule to those classes.
CONV_KEPT_PER_PARAM = 3.0
CONV_KEPT_MIN = 40e6
CONV_IMAGE_SIDE = 224  # what the activations are stated at (config.json image_size scales them)


def conv_activations(params: int, cfg: dict) -> int:
    """Elements a training forward of a convolutional image model keeps per image, at its config's image size."""
    side = cfg.get("image_size") if isinstance(cfg.get("image_size"), int) else CONV_IMAGE_SIDE
    return int(max(CONV_KEPT_PER_PARAM * params, CONV_KEPT_MIN) * (side / CONV_IMAGE_SIDE) ** 2)
