"""Direct preference optimisation (TRL DPOTrainer) on prompt/chosen/rejected pairs."""

from typing import Annotated

from pydantic import Field

from hf_train_mcp.methods.base import MethodSpec, Option
from hf_train_mcp.methods.sft import IMAGE_ALIASES, vision_config
from hf_train_mcp.rendering.config import TrainingConfig

BETA_DEFAULT = 0.1  # TRL's DPO and KTO default
BETA = Option("beta", Annotated[float, Field(ge=0, le=10, description="DPO/KTO KL strength; distill 0 fwd.."
                                                                        "1 rev KL")], changes_loss=True)


class BetaConfig(TrainingConfig):
    beta: float


class DpoConfig(BetaConfig):
    vision: bool  # prompts with images: the processor, TRL's vision collator, no max_length cut
    max_image_tokens: int | None  # vision: an image's tokens at most (the processor's pixel budget)

# target column <- the paired-answer layouts of popular preference datasets (Intel/orca_dpo_pairs: question;
# lvwerra/stack-exchange-paired: response_j/response_k; argilla: chosen_response/rejected_response, ...)
PAIR_ALIASES = {
    "chosen": ("preferred", "winner", "chosen_response", "accepted", "positive", "response_chosen", "response_j",
               "better_response", "preferred_response", "good_response", "chosen_text"),
    "rejected": ("dispreferred", "loser", "rejected_response", "negative", "response_rejected", "response_k",
                 "worse_response", "dispreferred_response", "bad_response", "rejected_text"),
    "prompt": ("instruction", "question", "input", "query", "problem", "prompt_text", "history", "post"),
}


def positive_beta(req) -> None:
    if getattr(req, "beta", None) is not None and req.beta <= 0:
        raise ValueError(f"beta must be above 0 for method={req.method!r} (it scales the KL penalty)")


METHOD = MethodSpec(
    name="dpo", title="DPO", summary="DPO preference fine-tune",
    formats=("preference", "implicit_preference", "vision_preference"),
    needs="'prompt' + 'chosen' + 'rejected' (or conversational 'chosen'/'rejected' sharing the prompt turns), "
          "with 'images' for a vision-language model",
    # a policy moved away from its reference diverges at SFT rates: TRL's 1e-6, ~5x for LoRA
    learning_rate=(1e-6, 5e-6), epochs=1.0, max_length=1024, tokens_per_example=640,
    eval_metric="preference", pipeline_tag="text-generation",
    aliases={**PAIR_ALIASES, "images": IMAGE_ALIASES}, options=(BETA,),
    keep_columns=("prompt", "chosen", "rejected", "images"),
    sequences_per_example=2, reference_passes=1.0, full_reference_copy=True,
    prompt_required=True, check=positive_beta,
    config=lambda req: {"beta": BETA_DEFAULT if req.beta is None else req.beta}, config_schema=DpoConfig,
    data_config=vision_config,
    card_settings=lambda config: {"beta": config["beta"]},
)
