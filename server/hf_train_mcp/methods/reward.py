"""Reward modeling (TRL RewardTrainer): a scalar head trained to score chosen above rejected."""

from hf_train_mcp.methods.base import MethodSpec
from hf_train_mcp.methods.dpo import PAIR_ALIASES
from hf_train_mcp.methods.text_classification import no_qlora_overflow


def no_liger(req) -> None:
    if getattr(req, "use_liger_kernel", False):
        raise ValueError("use_liger_kernel does not work with method='reward' (Liger's fused cross-entropy replaces "
                         "the classification head's forward); leave it off")


METHOD = MethodSpec(
    name="reward", title="reward modeling", summary="reward model",
    formats=("preference", "implicit_preference"),
    needs="'chosen' + 'rejected' (optionally 'prompt')",
    # a fresh scalar head: TRL defaults to 1e-4 with LoRA
    learning_rate=(1e-5, 1e-4), epochs=1.0, max_length=1024, tokens_per_example=512,
    eval_metric="preference", pipeline_tag="text-classification",
    aliases=PAIR_ALIASES, keep_columns=("prompt", "chosen", "rejected"), sequences_per_example=2,
    classifier=True, appends_eos=True, peft_task="SEQ_CLS", check=no_liger,
    check_sizes=no_qlora_overflow,  # the same DeBERTa attention under the same 4-bit layers as a text classifier
    auto_class="AutoModelForSequenceClassification",
)
