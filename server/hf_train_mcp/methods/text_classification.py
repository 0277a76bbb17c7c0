"""Text classification (transformers Trainer + AutoModelForSequenceClassification): one label per text.

The labels are the dataset's own: a ClassLabel's names, else the distinct values of the label column, sorted
(the script reads them from the whole training split, so a class the sample missed still gets its id).
"""

from hf_train_mcp.methods.base import MethodSpec


METHOD = MethodSpec(
    name="text-classification", title="text classification", summary="text classifier",
    formats=("text_classification",),
    needs="'text' + 'label' (a class name or id per row)",
    # a fresh head on a pretrained encoder: the GLUE recipes' 2e-5 full, ~10x for LoRA
    learning_rate=(2e-5, 2e-4), epochs=3.0, max_length=512, tokens_per_example=128,
    aliases={
        "text": ("sentence", "content", "review", "document", "comment", "tweet", "input", "body", "utterance"),
        "label": ("labels", "class", "category", "sentiment", "target", "fine_label", "coarse_label", "intent"),
    },
    keep_columns=("text", "label"), classifier=True, peft_task="SEQ_CLS", eval_metric="accuracy",
    template="text-classification", library="transformers Trainer",
    auto_class="AutoModelForSequenceClassification",
)
