"""KTO (TRL KTOTrainer): unpaired feedback, one completion per row labelled desirable or not.

Paired preference data trains too: the script unpairs it (chosen -> label True, rejected -> label False) with
TRL's own unpair_preference_dataset. Defaults from TRL's KTO documentation: beta 0.1, a learning rate of 5e-7 to
5e-6 (1e-6 full, 5e-6 LoRA here), per-device batches of at least 2 (the KL term is estimated from mismatched
pairs inside a batch), desirable/undesirable weights balancing a skewed label ratio.
"""

from typing import Annotated

from pydantic import Field

from hf_train_mcp.methods.base import MethodSpec, Option
from hf_train_mcp.methods.dpo import BETA, BETA_DEFAULT, PAIR_ALIASES, BetaConfig, positive_beta

DESIRABLE_WEIGHT = Option("desirable_weight", Annotated[float, Field(gt=0, le=100, description=(
    "KTO weight of desirable rows"))], changes_loss=True)


class KtoConfig(BetaConfig):
    desirable_weight: float


def check(req) -> None:
    positive_beta(req)
    if getattr(req, "per_device_batch_size", None) == 1:
        raise ValueError("KTO estimates its KL term from other rows of the same batch: per_device_batch_size must "
                         "be at least 2")


def notes(columns: set[str]) -> list[tuple[str, str, str | None]]:
    if {"chosen", "rejected"} <= columns:
        return [("warning", "paired data: each row becomes two KTO rows (chosen desirable, rejected not)", None)]
    return []


METHOD = MethodSpec(
    name="kto", title="KTO", summary="KTO preference fine-tune",
    formats=("unpaired_preference", "preference", "implicit_preference"),
    needs="'prompt' + 'completion' + boolean 'label' (desirable or not), or prompt/chosen/rejected pairs",
    learning_rate=(1e-6, 5e-6), epochs=1.0, max_length=1024, tokens_per_example=512,
    eval_metric="preference", pipeline_tag="text-generation",
    aliases={**PAIR_ALIASES, "completion": ("response", "output", "answer", "completion_text"),
             "label": ("is_desirable", "desirable", "thumbs_up", "kto_label", "is_good", "good")},
    options=(BETA, DESIRABLE_WEIGHT),
    # the KL batch runs the policy once more, and the reference scores both: ~3 extra forwards per token
    reference_passes=3.0, full_reference_copy=True, min_batch=2, check=check, data_notes=notes,
    config=lambda req: {"beta": BETA_DEFAULT if req.beta is None else req.beta,
                        "desirable_weight": req.desirable_weight or 1.0}, config_schema=KtoConfig,
    card_settings=lambda config: {"beta": config["beta"], "desirable weight": config["desirable_weight"]},
)
