"""Supervised fine-tuning (TRL SFTTrainer) on conversations, plain text, or prompt/completion pairs."""

from typing import Annotated

from pydantic import Field

from hf_train_mcp.methods.base import MethodSpec, Option
from hf_train_mcp.rendering.config import TrainingConfig

PACKING = Option("packing", Annotated[bool, Field(description="SFT: pack rows into max_length sequences")],
                 sizing=True, default=False, top_level=True)  # the tool contract names it


# A dynamic-resolution VLM (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) makes an image as many tokens as its pixels allow, and
# its Hub processor allows up to 12,845,056 (Qwen/Qwen2-VL-2B-Instruct's preprocessor_config.json max_pixels):
# ~16k tokens for a 12 MP photo, in a row SFT/DPO never cut (max_length=None keeps image tokens whole). Training
# scripts cap the processor at this many tokens an image, Qwen's own recommended bound (max_pixels = 1280*28*28,
# the Qwen2-VL model card), and the estimate counts images at the same cap (estimate/images.image_grid).
MAX_IMAGE_TOKENS = 1280

IMAGE_ALIASES = ("image", "pictures", "photos", "image_paths", "images_path")  # what a row's images are called


def vision_config(data) -> dict:
    """What a template reads of the rows' images (DataFacts): whether there are any, and how many tokens an image
    may become (the processor's cap, which the estimate counts too)."""
    return {"vision": data.vision, "max_image_tokens": MAX_IMAGE_TOKENS if data.vision else None}


class SftConfig(TrainingConfig):
    packing: bool
    vision: bool  # messages with images: the processor, the collator for images, no max_length cut
    max_image_tokens: int | None  # vision: an image's tokens at most (the processor's pixel budget)

METHOD = MethodSpec(
    name="sft", title="SFT", summary="supervised fine-tune",
    formats=("messages", "vision_messages", "text", "prompt_completion", "conversational_prompt_completion"),
    needs="'messages' (list of {role, content}), 'text', or 'prompt' + 'completion'",
    # LoRA trains few parameters from zero-initialised adapters: ~10x the full rate (TRL's PEFT examples 1e-4..2e-4)
    learning_rate=(2e-5, 2e-4), epochs=3.0, max_length=1024, tokens_per_example=512,
    eval_metric="loss", pipeline_tag="text-generation",
    aliases={
        "messages": ("conversations", "conversation", "chat", "dialogue", "dialog", "turns"),
        "prompt": ("instruction", "question", "input", "query", "problem", "prompt_text"),
        "completion": ("output", "response", "answer", "target", "completion_text", "solution"),
        "images": IMAGE_ALIASES,
    },
    options=(PACKING,),
    config=lambda req: {"packing": req.packing}, config_schema=SftConfig,
    data_config=vision_config,
)
