"""Image classification (transformers Trainer + AutoModelForImageClassification), e.g. ViT on Food-101.

Images go through the model's own image processor (resize, normalise) as the trainer reads them; the labels are
the dataset's ClassLabel names, an image folder's subfolders, or the distinct values of the label column.
"""

from hf_train_mcp.methods.base import MethodSpec

# ViT-base at 224 px in 16 px patches: 196 patches and the class token. The estimate's tokens per image when the
# data gives none (an image's token count is its patch grid, not its file size).
PATCH_TOKENS = 197

METHOD = MethodSpec(
    name="image-classification", title="image classification", summary="image classifier",
    formats=("image_classification",),
    needs="'image' + 'label' (an image per row and its class), or an image folder <folder>/<label>/*.jpg",
    # the Hub's ViT-on-Food-101 recipe: 5e-5 full; LoRA trains few weights from zero: ~10x
    learning_rate=(5e-5, 5e-4), epochs=3.0, max_length=512, tokens_per_example=PATCH_TOKENS,
    eval_metric="accuracy", pipeline_tag="image-classification",
    aliases={
        "image": ("img", "picture", "photo", "image_file", "image_path", "file", "path", "pixel_values"),
        "label": ("labels", "fine_label", "coarse_label", "class", "category", "target", "species"),
    },
    keep_columns=("image", "label"), classifier=True, peft_task="IMAGE_CLS",
    template="image-classification", library="transformers Trainer", inputs="image",
    auto_class="AutoModelForImageClassification", processor="AutoImageProcessor",
)
