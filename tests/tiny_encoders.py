"""Tiny encoders of the architectures people fine-tune as classifiers and embedding models, built from transformers'
own config and model classes (so their module names are the Hub models': DistilBERT's pre_classifier, DeBERTa's
pooler, RoBERTa's classifier.dense/out_proj, ResNet's classifier.1, ...) at tiny sizes, with random weights and a
tokenizer or image processor trained or made here; each saved to a folder that from_pretrained loads offline.

The shapes keep what a family's Hub config.json sets and the code paths depend on: RoBERTa, MPNet and BART count
positions after the padding index (pad id 1, a table of the limit + 2), DeBERTa-v3 uses relative attention without
absolute positions and no token types, ALBERT factorises its embeddings, ResNet's head is a Sequential.
"""

import json
from pathlib import Path

from hf_train_mcp_demo.tiny import format_rows

WIDTH = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
POSITIONS = 64  # the longest input of the BERT-style tiny encoders (BERT's 512)

# special tokens in the order the family's Hub vocabulary has them (the pad id matters to RoBERTa-style positions)
BERT_SPECIALS = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
ROBERTA_SPECIALS = {"bos": "<s>", "pad": "<pad>", "eos": "</s>", "unk": "<unk>", "mask": "<mask>"}


def _tokenizer(folder: Path, specials: dict[str, str], input_names: list[str], ends: bool = False):
    """A WordPiece tokenizer trained on the tiny rows' texts, wrapping each text as the family does
    ([CLS] ... [SEP] or <s> ... </s>), saved to `folder`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    formats = ("text_classification", "sentence_triplets", "scored_pairs")
    corpus = [json.dumps(r) for f in formats for r in format_rows(f, 64, 0)]
    tok = Tokenizer(models.WordPiece(unk_token=specials["unk"]))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(corpus, trainers.WordPieceTrainer(vocab_size=300, special_tokens=list(specials.values())))
    first, last = (specials["cls"], specials["sep"]) if "cls" in specials else (specials["bos"], specials["eos"])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{first} $A {last}", pair=f"{first} $A {last} $B:1 {last}:1",
        special_tokens=[(first, tok.token_to_id(first)), (last, tok.token_to_id(last))])
    names = {"cls_token": first, "sep_token": last, "pad_token": specials["pad"], "unk_token": specials["unk"],
             "mask_token": specials["mask"]}
    if "bos" in specials:
        names.update(bos_token=specials["bos"], eos_token=specials["eos"])
    if ends:  # DeBERTa-v3's tokenizer names its [CLS] and [SEP] its bos and eos (BERT's and DistilBERT's name none)
        names.update(bos_token=first, eos_token=last)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, model_input_names=input_names, **names)
    tokenizer.save_pretrained(folder)
    return tokenizer


def _config(model_type: str, tokenizer, **fields):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **fields)


def _text_fields(model_type: str, tokenizer) -> dict:
    """A family's config fields at tiny sizes, in its own field names."""
    if model_type == "distilbert":
        return dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=POSITIONS)
    if model_type == "deberta-v3":  # DeBERTa-v3's config.json (model_type deberta-v2)
        return dict(**WIDTH, max_position_embeddings=POSITIONS, relative_attention=True, position_buckets=16,
                    norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
                    position_biased_input=False, type_vocab_size=0, max_relative_positions=-1)
    if model_type == "albert":
        return dict(**WIDTH, embedding_size=16, max_position_embeddings=POSITIONS)
    if model_type in ("roberta", "mpnet"):
        return dict(**WIDTH, max_position_embeddings=POSITIONS + 2, bos_token_id=tokenizer.bos_token_id,
                    eos_token_id=tokenizer.eos_token_id)
    if model_type == "bart":
        return dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                    max_position_embeddings=POSITIONS, bos_token_id=tokenizer.bos_token_id,
                    eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.eos_token_id,
                    forced_eos_token_id=tokenizer.eos_token_id)
    return dict(**WIDTH, max_position_embeddings=POSITIONS)  # bert


TEXT_ENCODERS = ("bert", "distilbert", "deberta-v3", "roberta", "albert", "mpnet", "bart")
# what each family's tokenizer returns (the Hub's tokenizer_config.json model_input_names)
_INPUTS = {"bert": ["input_ids", "token_type_ids", "attention_mask"], "albert": ["input_ids", "token_type_ids",
           "attention_mask"], "deberta-v3": ["input_ids", "token_type_ids", "attention_mask"]}


def build_text_encoder(folder: Path, model_type: str, head: bool = False) -> Path:
    """A tiny `model_type` encoder (one of TEXT_ENCODERS) and its tokenizer in `folder`: the base model, as the
    Hub's pretrained encoders are saved (a classifier's head is new), or with head=True a sequence-classification
    checkpoint with a 3-class head, as a Hub fine-tune of another task has (the job's own classes replace it)."""
    from transformers import AutoModel, AutoModelForSequenceClassification

    if (folder / "config.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    bert_like = model_type in ("bert", "distilbert", "deberta-v3", "albert")
    tokenizer = _tokenizer(folder, BERT_SPECIALS if bert_like else ROBERTA_SPECIALS,
                           _INPUTS.get(model_type, ["input_ids", "attention_mask"]), ends=model_type == "deberta-v3")
    real_type = "deberta-v2" if model_type == "deberta-v3" else model_type
    config = _config(real_type, tokenizer, **_text_fields(model_type, tokenizer))
    if head:
        config.num_labels = 3
    model = (AutoModelForSequenceClassification if head else AutoModel).from_config(config)
    model.save_pretrained(folder)
    return folder


IMAGE_ENCODERS = ("vit", "convnext", "resnet", "dinov2", "swin", "focalnet", "regnet-y", "mobilenet_v2",
                  "efficientnet")
# each family's config at 32 px: a width or group size that keeps its layout (RegNet-Y's grouped convolutions of 8
# channels a group, MobileNet's depthwise ones, EfficientNet's depthwise subclass, Swin's and FocalNet's stages)
_IMAGE_FIELDS = {
    "vit": dict(image_size=32, patch_size=8, **WIDTH),
    "dinov2": dict(image_size=32, patch_size=8, **WIDTH),
    "convnext": dict(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], image_size=32),
    "resnet": dict(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"),
    "swin": dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4),
    "focalnet": dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], focal_levels=[2, 2],
                     focal_windows=[3, 3]),
    "regnet-y": dict(embedding_size=16, hidden_sizes=[48, 96], depths=[1, 1], groups_width=16, layer_type="y"),
    "mobilenet_v2": dict(image_size=32, depth_multiplier=0.25),
    "efficientnet": dict(image_size=32, width_coefficient=0.25, depth_coefficient=0.2, hidden_dim=320),
}


def build_image_encoder(folder: Path, model_type: str, **fields) -> Path:
    """A tiny `model_type` image classifier (one of IMAGE_ENCODERS) at 32 px with a 3-class head, and the image
    processor its Hub checkpoints use, in `folder`; `fields` change its config."""
    import torch
    from transformers import AutoConfig, AutoModelForImageClassification, ConvNextImageProcessor, ViTImageProcessor

    if (folder / "config.json").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.for_model(model_type.split("-")[0], **{**_IMAGE_FIELDS[model_type], **fields})
    if model_type in ("vit", "dinov2", "swin", "focalnet"):
        processor = ViTImageProcessor(size={"height": 32, "width": 32})
    else:  # microsoft/resnet-50's and facebook/convnext's preprocessor_config.json: a ConvNextImageProcessor
        processor = ConvNextImageProcessor(size={"shortest_edge": 32})
    config.num_labels = 3
    model = AutoModelForImageClassification.from_config(config)
    for norm in model.modules():  # EfficientNet's init draws its BatchNorm scales from N(0, 0.02): at 16 blocks the
        if isinstance(norm, torch.nn.BatchNorm2d):  # features vanish (1e-34); pretrained ones are ~1, as here
            torch.nn.init.ones_(norm.weight)
            torch.nn.init.zeros_(norm.bias)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
