"""Text classification (transformers Trainer + AutoModelForSequenceClassification): one label per text.

The labels are the dataset's own: a ClassLabel's names, else the distinct values of the label column, sorted
(the script reads them from the whole training split, so a class the sample missed still gets its id).
"""

from hf_train_mcp.methods.base import MethodSpec

# transformers' DeBERTa attention fills masked scores with the minimum of the query's dtype
# (modeling_deberta_v2.py: `torch.finfo(query_layer.dtype).min`): under QLoRA the 4-bit layers return float32
# queries while autocast computes the scores in bf16/fp16, which cannot hold that value (RuntimeError at step 1)
QLORA_OVERFLOWS = ("deberta", "deberta-v2")


def no_qlora_overflow(req, size, teacher) -> None:
    if req.peft == "qlora" and size.model_type in QLORA_OVERFLOWS:
        raise ValueError(
            f"peft='qlora' does not train {req.model!r} (model_type {size.model_type!r}): transformers' DeBERTa "
            "attention fills its masked scores with float32's minimum, which the half-precision scores of a 4-bit "
            "model cannot hold (a RuntimeError at the first step). Send peft='lora' (DeBERTa-v3-large trains with "
            "LoRA in 16-bit on one 24 GB GPU) or peft='full'. Nothing was launched.")


METHOD = MethodSpec(
    name="text-classification", title="text classification", summary="text classifier",
    formats=("text_classification",),
    needs="'text' + 'label' (a class name or id per row)",
    # a fresh head on a pretrained encoder: the GLUE recipes' 2e-5 full, ~10x for LoRA
    learning_rate=(2e-5, 2e-4), epochs=3.0, max_length=512, tokens_per_example=128,
    eval_metric="accuracy", pipeline_tag="text-classification",
    aliases={
        "text": ("sentence", "content", "review", "document", "comment", "tweet", "input", "body", "utterance"),
        "label": ("labels", "class", "category", "sentiment", "target", "fine_label", "coarse_label", "intent"),
    },
    keep_columns=("text", "label"), classifier=True, peft_task="SEQ_CLS",
    template="text-classification", library="transformers Trainer",
    auto_class="AutoModelForSequenceClassification", check_sizes=no_qlora_overflow,
)
