"""The image processors (and vision-language processors) of the zoo's tiny models (tests/zoo_models.py): the real
folder's preprocessor_config.json where the zoo has it, else the family's processor class as its Hub repos use it,
at the tiny model's image size. A vision-language processor whose class needs a video processor (Qwen2-VL,
Qwen2.5-VL, Qwen3-VL, Qwen3.5, Gemma 4) cannot be built where torchvision is missing: its folder gets the files
the Hub folder has (preprocessor_config.json naming the processor class, the tokenizer, the chat template), which
AutoProcessor assembles where torchvision is installed, as it is in the jobs."""

import json
from pathlib import Path

# each image classifier's tiny picture and its Hub repos' processor (microsoft/resnet-50's, facebook/regnet's and
# facebook/convnext's ConvNextImageProcessor; google/vit's and microsoft/swin's ViTImageProcessor; DINOv2's
# BitImageProcessor; google/efficientnet's EfficientNetImageProcessor)
IMAGE_SIZES = {"vit": 32, "swin": 64, "dinov2": 28, "convnext": 32, "resnet": 32, "regnet": 32, "efficientnet": 32}
_CLASSIFIER_PROCESSORS = {"vit": "ViTImageProcessor", "swin": "ViTImageProcessor", "dinov2": "BitImageProcessor",
                          "convnext": "ConvNextImageProcessor", "resnet": "ConvNextImageProcessor",
                          "regnet": "ConvNextImageProcessor", "efficientnet": "EfficientNetImageProcessor"}
# the Qwen-VL families' image processors (their processor also needs a video processor: torchvision)
_QWEN_VL = {"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor", "qwen3_vl": "Qwen3VLProcessor",
            "qwen3_vl_moe": "Qwen3VLProcessor", "qwen3_5": "Qwen3VLProcessor"}


def write_processor(name: str, zoo: Path, folder: Path, tiny: dict) -> None:
    kind = tiny.get("model_type")
    if kind in IMAGE_SIZES:
        _classifier(zoo, folder, kind)
    elif kind in _QWEN_VL:
        _qwen_vl_files(zoo, folder, tiny, _QWEN_VL[kind])
    elif kind in _BUILDERS:
        _BUILDERS[kind](zoo, folder, tiny)


def _sized(settings: dict, pixels: int) -> dict:
    """A processor's sizes set to `pixels`, in the keys it has (shortest_edge, height/width, crop_size)."""
    out = dict(settings)
    size = out.get("size") or {"height": pixels, "width": pixels}
    out["size"] = {k: pixels for k in size} if isinstance(size, dict) else pixels
    if "crop_size" in out:
        out["crop_size"] = {"height": pixels, "width": pixels}
    return out


def _classifier(zoo: Path, folder: Path, kind: str) -> None:
    import transformers

    real = zoo / "preprocessor_config.json"
    if real.is_file():
        settings = json.loads(real.read_text())
    else:
        settings = getattr(transformers, _CLASSIFIER_PROCESSORS[kind])().to_dict()
    (folder / "preprocessor_config.json").write_text(json.dumps(_sized(settings, IMAGE_SIZES[kind]), indent=2))


def _qwen_vl_files(zoo: Path, folder: Path, tiny: dict, processor: str) -> None:
    from transformers import Qwen2VLImageProcessor

    real = zoo / "preprocessor_config.json"
    vision = tiny["vision_config"]
    settings = json.loads(real.read_text()) if real.is_file() else {
        **Qwen2VLImageProcessor().to_dict(), "image_processor_type": "Qwen2VLImageProcessor"}
    settings.update(patch_size=vision.get("patch_size", 14), merge_size=vision.get("spatial_merge_size", 2),
                    processor_class=processor)
    (folder / "preprocessor_config.json").write_text(json.dumps(settings, indent=2))


def _tokenizer(folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def _template(zoo: Path) -> str | None:
    path = zoo / "chat_template.json"
    return json.loads(path.read_text())["chat_template"] if path.is_file() else None


def _llava(zoo: Path, folder: Path, tiny: dict) -> None:
    from transformers import CLIPImageProcessor, LlavaProcessor

    pixels = tiny["vision_config"]["image_size"]
    settings = _sized(json.loads((zoo / "preprocessor_config.json").read_text()), pixels)
    settings.pop("image_processor_type", None)
    settings.pop("processor_class", None)
    LlavaProcessor(image_processor=CLIPImageProcessor(**settings), tokenizer=_tokenizer(folder),
                   patch_size=tiny["vision_config"]["patch_size"], num_additional_image_tokens=1,
                   vision_feature_select_strategy=tiny["vision_feature_select_strategy"],
                   chat_template=_template(zoo)).save_pretrained(folder)


def _idefics3(zoo: Path, folder: Path, tiny: dict) -> None:
    """SmolVLM: 84 px tiles of 6x6 patches, shuffled by 3 into 4 tokens; a picture resized to two tiles a side
    and split, plus the whole picture, as the Hub processor does at 384 px."""
    from transformers import Idefics3ImageProcessor, Idefics3Processor

    tile = tiny["vision_config"]["image_size"]
    images = Idefics3ImageProcessor(size={"longest_edge": 2 * tile}, max_image_size={"longest_edge": tile},
                                    do_image_splitting=True)
    tokens = (tile // tiny["vision_config"]["patch_size"]) ** 2 // tiny["scale_factor"] ** 2
    Idefics3Processor(image_processor=images, tokenizer=_tokenizer(folder), image_seq_len=tokens,
                      chat_template=_template(zoo)).save_pretrained(folder)


def _gemma3(zoo: Path, folder: Path, tiny: dict) -> None:
    from transformers import Gemma3ImageProcessor, Gemma3Processor

    pixels = tiny["vision_config"]["image_size"]
    Gemma3Processor(image_processor=Gemma3ImageProcessor(size={"height": pixels, "width": pixels}),
                    tokenizer=_tokenizer(folder), image_seq_length=tiny["mm_tokens_per_image"],
                    chat_template=_template(zoo)).save_pretrained(folder)


def _mllama(zoo: Path, folder: Path, tiny: dict) -> None:
    from transformers import MllamaImageProcessor, MllamaProcessor

    pixels = tiny["vision_config"]["image_size"]
    images = MllamaImageProcessor(size={"height": pixels, "width": pixels},
                                  max_image_tiles=tiny["vision_config"]["max_num_tiles"])
    MllamaProcessor(image_processor=images, tokenizer=_tokenizer(folder),
                    chat_template=_template(zoo)).save_pretrained(folder)


_BUILDERS = {"llava": _llava, "idefics3": _idefics3, "gemma3": _gemma3, "mllama": _mllama}
