"""A tiny Qwen2-style model, tokenizer and datasets built in-process: the demo and tests train without the Hub.

Imports transformers/tokenizers: only the demo and tests use this module.
"""

import json
import random
from pathlib import Path

from hf_train_mcp.data.formats import FORMATS, ExampleSeed
from hf_train_mcp.models.chat_template import CHATML

TOPICS = ["the sea", "a robot", "bread", "the moon", "rain", "a library", "trains", "music"]


def _question(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return f"What is {a} plus {b}?", str(a + b)


def example_rows(method: str, n: int = 16, seed: int = 0, data_format: str | None = None) -> list[dict]:
    """Small, well-formed rows in the first format a method accepts (its registry entry says which), or in
    `data_format`, another one it accepts."""
    from hf_train_mcp import methods

    data_format = data_format or methods.get(method).formats[0]
    if data_format not in FORMATS or FORMATS[data_format].example is None or \
            data_format not in methods.get(method).formats:
        raise ValueError(f"no tiny rows for the {data_format} format of method {method!r}")
    return format_rows(data_format, n, seed)


def format_rows(data_format: str, n: int, seed: int = 0) -> list[dict]:
    """n rows made by the format's own example (data/formats.py), each from a topic and a sum to answer."""
    example = FORMATS[data_format].example
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        question, answer = _question(rng)
        seeded = ExampleSeed(index=i, topic=TOPICS[i % len(TOPICS)], other_topic=TOPICS[(i + 3) % len(TOPICS)],
                             question=question, answer=answer)
        rows.append(example(seeded))
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_images(folder: Path, rows: list[dict], size: int = 32) -> None:
    """The PNGs image rows name (relative to `folder`): each class its own colour, with noise, so a tiny model
    can learn them apart."""
    from PIL import Image

    colours = {"red": (200, 30, 30), "blue": (30, 30, 200)}
    rng = random.Random(0)
    for row in rows:
        name = row["image"] if "image" in row else row["images"][0]
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        base = colours.get(Path(name).parent.name, (120, 120, 120))
        pixels = [tuple(max(0, min(255, c + rng.randint(-40, 40))) for c in base) for _ in range(size * size)]
        image = Image.new("RGB", (size, size))
        image.putdata(pixels)
        image.save(path)


def build_tiny_vit(folder: Path) -> Path:
    """A 2-layer ViT with random weights at 32 px (16 patches) and its image processor, saved to `folder`."""
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    if (folder / "config.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    config = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64, num_labels=3)
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def build_tiny_bert(folder: Path) -> Path:
    """A 2-layer BERT encoder with random weights and a WordPiece tokenizer trained here (an embedding model's
    transformer, of the architecture llama.cpp converts), saved to `folder`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, BertTokenizerFast

    if (folder / "config.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    corpus = [json.dumps(r) for f in ("sentence_triplets", "sentence_pairs", "scored_pairs")
              for r in format_rows(f, 64)]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))])
    tokenizer = BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                  sep_token="[SEP]", mask_token="[MASK]")
    tokenizer.save_pretrained(folder)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id)
    BertModel(config).save_pretrained(folder)
    return folder


def build_tiny_vlm(folder: Path, text_model: Path) -> Path:
    """A LLaVA-style vision-language model with random weights: a 2-layer CLIP vision tower at 32 px (16 patches
    and the class token), a projector and the tiny Qwen2 text model's shape and tokenizer (plus `<image>`), with
    its processor and a chat template that places image parts; saved to `folder`."""
    from transformers import (AutoTokenizer, CLIPImageProcessor, CLIPVisionConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor, Qwen2Config)

    if (folder / "config.json").exists():
        return folder
    tokenizer = AutoTokenizer.from_pretrained(text_model)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=32, patch_size=8, projection_dim=32)
    text = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                       tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id)
    config = LlavaConfig(vision_config=vision, text_config=text, vision_feature_layer=-1,
                         image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
                         vision_feature_select_strategy="full")
    LlavaForConditionalGeneration(config).save_pretrained(folder)
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=8, num_additional_image_tokens=1,
                   vision_feature_select_strategy="full", chat_template=VISION_CHAT, image_token="<image>"
                   ).save_pretrained(folder)
    return folder


VISION_CHAT = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}{% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "{{ '<image>' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def build_tiny_model(folder: Path) -> Path:
    """A 2-layer Qwen2 with random weights and a byte-level BPE tokenizer trained here, saved to `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    if (folder / "config.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    corpus = [json.dumps(r) for f in ("messages", "preference", "prompt_only") for r in format_rows(f, 64)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(folder)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return folder
