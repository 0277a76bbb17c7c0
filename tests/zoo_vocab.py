"""The tokenizers (and processors) shipped with the zoo's tiny models (tests/zoo_models.py): a vocabulary of a few
hundred tokens trained here, holding every special token the real model's config.json names by id (its bos, eos,
pad, image, video, vision start/end tokens), under their Hub names, so that the ids the tiny config carries are
the tokenizer's own. The Hub's special tokens that sit at the start of a vocabulary (BERT's [PAD] 0, RoBERTa's
<pad> 1: position ids depend on it) keep their order there; the others follow the trained tokens in the order of
their Hub ids, so that an image token past the language model's vocabulary (Mllama's <|image|>) stays past it.

Each folder's profile gives the Hub names of its vocabulary's special tokens (tokenizer_config.json's
added_tokens_decoder of each family) and how its tokenizer wraps a text; a zoo folder's own tokenizer_config.json
(chat template, names) takes precedence."""

import json
from dataclasses import dataclass, field
from pathlib import Path

# special tokens by Hub id, per vocabulary (the families' tokenizer_config.json added_tokens_decoder)
_QWEN = {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>", 151652: "<|vision_start|>",
         151653: "<|vision_end|>", 151654: "<|vision_pad|>", 151655: "<|image_pad|>", 151656: "<|video_pad|>"}
_QWEN35 = {248044: "<|endoftext|>", 248045: "<|im_start|>", 248046: "<|im_end|>", 248053: "<|vision_start|>",
           248054: "<|vision_end|>", 248055: "<|vision_pad|>", 248056: "<|image_pad|>", 248057: "<|video_pad|>"}
_R1 = {151643: "<｜end▁of▁sentence｜>", 151644: "<｜User｜>", 151645: "<｜Assistant｜>",
       151646: "<｜begin▁of▁sentence｜>"}
_LLAMA3 = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128004: "<|finetune_right_pad_id|>",
           128006: "<|start_header_id|>", 128007: "<|end_header_id|>", 128008: "<|eom_id|>", 128009: "<|eot_id|>",
           128010: "<|python_tag|>", 128256: "<|image|>"}
_SENTENCEPIECE = {0: "<unk>", 1: "<s>", 2: "</s>"}  # Llama 2, Mistral, Mixtral, Vicuna
_PHI3 = {**_SENTENCEPIECE, 32000: "<|endoftext|>", 32001: "<|assistant|>", 32006: "<|system|>", 32007: "<|end|>",
         32010: "<|user|>"}
_LLAVA = {**_SENTENCEPIECE, 32000: "<image>", 32001: "<pad>"}
_GEMMA = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 105: "<start_of_turn>", 106: "<end_of_turn>",
          255999: "<start_of_image>", 256000: "<end_of_image>", 262144: "<image_soft_token>"}
_GEMMA2 = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 106: "<start_of_turn>", 107: "<end_of_turn>"}
_GEMMA4 = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 105: "<|turn>", 106: "<turn|>", 255999: "<|image>",
           256000: "<|audio>", 258880: "<|image|>", 258881: "<|audio|>", 258882: "<image|>", 258883: "<audio|>",
           258884: "<|video|>"}
_SMOL = {0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>"}
_SMOLVLM = {**_SMOL, 49190: "<image>"}
# the tokens Idefics3's processor reads by name (processing_idefics3.py: the image's frame and its tiles' grid)
_IDEFICS3_MORE = ("<fake_token_around_image>", "<end_of_utterance>", "<global-img>",
                  *(f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)))
_GPT2 = {50256: "<|endoftext|>"}
_OLMO = {0: "|||IP_ADDRESS|||", 1: "<|padding|>", 50279: "<|endoftext|>"}
_GPT_OSS = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200005: "<|channel|>",
            200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>", 200012: "<|call|>"}
_BERT = {0: "[PAD]", 100: "[UNK]", 101: "[CLS]", 102: "[SEP]", 103: "[MASK]"}
_ALBERT = {0: "<pad>", 1: "<unk>", 2: "[CLS]", 3: "[SEP]", 4: "[MASK]"}
_DEBERTA = {0: "[PAD]", 1: "[CLS]", 2: "[SEP]", 3: "[UNK]", 128000: "[MASK]"}
_ROBERTA = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>", 50264: "<mask>"}
_XLMR = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>", 250001: "<mask>"}
_MPNET = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>", 30526: "<mask>"}
_MODERNBERT = {50280: "[UNK]", 50281: "[CLS]", 50282: "[SEP]", 50283: "[PAD]", 50284: "[MASK]"}
_CLIP = {49406: "<|startoftext|>", 49407: "<|endoftext|>"}
_SIGLIP = {0: "<pad>", 1: "</s>", 2: "<unk>"}


@dataclass(frozen=True)
class Profile:
    """A vocabulary: its special tokens by Hub id, the roles (bos_token, eos_token, ...) they play, how a text is
    wrapped ("bert": [CLS] a [SEP]; "roberta": <s> a </s>; "bos": bos a; "none"), WordPiece (encoders) or byte BPE."""

    specials: dict[int, str]
    roles: dict[str, str]
    wrap: str = "none"
    wordpiece: bool = False
    inputs: tuple[str, ...] = ("input_ids", "attention_mask")
    extra: dict[str, str] = field(default_factory=dict)  # named special tokens a processor reads (image_token, ...)
    more: tuple[str, ...] = ()  # special tokens a processor reads by name, without a Hub id any config names


_BERT_ROLES = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
_ROBERTA_ROLES = dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>", cls_token="<s>",
                      sep_token="</s>", mask_token="<mask>")
_TYPED = ("input_ids", "token_type_ids", "attention_mask")
_QWEN_ROLES = dict(eos_token="<|im_end|>", pad_token="<|endoftext|>")
_QWEN_VL = dict(image_token="<|image_pad|>", video_token="<|video_pad|>", vision_start_token="<|vision_start|>",
                vision_end_token="<|vision_end|>")
QWEN = Profile(_QWEN, _QWEN_ROLES)
QWEN_VL = Profile(_QWEN, _QWEN_ROLES, extra=_QWEN_VL)
LLAMA3 = Profile(_LLAMA3, dict(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"), wrap="bos")
BERT = Profile(_BERT, _BERT_ROLES, wrap="bert", wordpiece=True, inputs=_TYPED)
PROFILES: dict[str, Profile] = {
    "openai-community--gpt2": Profile(_GPT2, dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>")),
    "HuggingFaceTB--SmolLM2-1.7B-Instruct": Profile(_SMOL, dict(bos_token="<|im_start|>", eos_token="<|im_end|>",
                                                                pad_token="<|im_end|>")),
    "Qwen--Qwen2.5-0.5B-Instruct": QWEN, "Qwen--Qwen3-0.6B": QWEN, "Qwen--Qwen3-1.7B": QWEN,
    "Qwen--Qwen3-4B-Thinking-2507": QWEN, "Qwen--Qwen3-8B": QWEN, "Qwen--Qwen3-30B-A3B": QWEN,
    "Qwen--Qwen3-32B-FP8": QWEN, "Qwen--Qwen1.5-MoE-A2.7B": QWEN, "unsloth--Qwen2.5-0.5B-Instruct-bnb-4bit": QWEN,
    "Qwen--Qwen3-Embedding-0.6B": Profile(_QWEN, dict(eos_token="<|endoftext|>", pad_token="<|endoftext|>")),
    "allenai--OLMoE-1B-7B-0924": Profile(_OLMO, dict(eos_token="<|endoftext|>", pad_token="<|padding|>")),
    "deepseek-ai--DeepSeek-R1-Distill-Qwen-1.5B": Profile(_R1, dict(bos_token="<｜begin▁of▁sentence｜>",
                                                                    eos_token="<｜end▁of▁sentence｜>",
                                                                    pad_token="<｜end▁of▁sentence｜>"), wrap="bos"),
    "google--gemma-2-2b-it": Profile(_GEMMA2, dict(bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                                   unk_token="<unk>"), wrap="bos"),
    "meta-llama--Llama-3.1-8B": Profile(_LLAMA3, dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>"),
                                        wrap="bos"),
    "meta-llama--Llama-3.2-1B": Profile(_LLAMA3, dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>"),
                                        wrap="bos"),
    "meta-llama--Llama-3.2-1B-Instruct": LLAMA3,
    "microsoft--Phi-3-mini-4k-instruct": Profile(_PHI3, dict(bos_token="<s>", eos_token="<|endoftext|>",
                                                             pad_token="<|endoftext|>", unk_token="<unk>")),
    "mistralai--Mistral-7B-Instruct-v0.3": Profile(_SENTENCEPIECE, dict(bos_token="<s>", eos_token="</s>",
                                                                        unk_token="<unk>"), wrap="bos"),
    "mistralai--Mixtral-8x7B-v0.1": Profile(_SENTENCEPIECE, dict(bos_token="<s>", eos_token="</s>",
                                                                 unk_token="<unk>"), wrap="bos"),
    "openai--gpt-oss-20b": Profile(_GPT_OSS, dict(bos_token="<|startoftext|>", eos_token="<|return|>",
                                                  pad_token="<|endoftext|>")),
    "HuggingFaceTB--SmolVLM-Instruct": Profile(_SMOLVLM, dict(bos_token="<|im_start|>", eos_token="<|im_end|>",
                                                              pad_token="<|im_end|>"), more=_IDEFICS3_MORE),
    "Qwen--Qwen2-VL-2B-Instruct": QWEN_VL, "Qwen--Qwen2.5-VL-3B-Instruct": QWEN_VL,
    "Qwen--Qwen3-VL-2B-Instruct": QWEN_VL, "Qwen--Qwen3-VL-30B-A3B-Instruct": QWEN_VL,
    "Qwen--Qwen3.5-27B": Profile(_QWEN35, dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"), extra=_QWEN_VL),
    "google--gemma-3-4b-it": Profile(_GEMMA, dict(bos_token="<bos>", eos_token="<end_of_turn>", pad_token="<pad>",
                                                  unk_token="<unk>"), wrap="bos",
                                     extra=dict(image_token="<image_soft_token>", boi_token="<start_of_image>",
                                                eoi_token="<end_of_image>")),
    "google--gemma-4-26B-A4B": Profile(_GEMMA4, dict(bos_token="<bos>", eos_token="<turn|>", pad_token="<pad>",
                                                     unk_token="<unk>"), wrap="bos",
                                       extra=dict(image_token="<|image|>", boi_token="<|image>", eoi_token="<image|>",
                                                  audio_token="<|audio|>", boa_token="<|audio>",
                                                  eoa_token="<audio|>")),
    "llava-hf--llava-1.5-7b-hf": Profile(_LLAVA, dict(bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                                      unk_token="<unk>"), wrap="bos",
                                         extra=dict(image_token="<image>")),
    "meta-llama--Llama-3.2-11B-Vision-Instruct": Profile(_LLAMA3, dict(bos_token="<|begin_of_text|>",
                                                                       eos_token="<|eot_id|>",
                                                                       pad_token="<|finetune_right_pad_id|>"),
                                                         wrap="bos", extra=dict(image_token="<|image|>")),
    "google--siglip-base-patch16-224": Profile(_SIGLIP, dict(eos_token="</s>", pad_token="<pad>", unk_token="<unk>")),
    "openai--clip-vit-base-patch32": Profile(_CLIP, dict(bos_token="<|startoftext|>", eos_token="<|endoftext|>",
                                                         pad_token="<|endoftext|>")),
    "albert--albert-base-v2": Profile(_ALBERT, dict(pad_token="<pad>", unk_token="<unk>", cls_token="[CLS]",
                                                    sep_token="[SEP]", mask_token="[MASK]"), wrap="bert",
                                      wordpiece=True, inputs=_TYPED),
    "microsoft--deberta-v3-base": Profile(_DEBERTA, _BERT_ROLES, wrap="bert", wordpiece=True, inputs=_TYPED),
    "FacebookAI--roberta-base": Profile(_ROBERTA, _ROBERTA_ROLES, wrap="roberta"),
    "FacebookAI--xlm-roberta-base": Profile(_XLMR, _ROBERTA_ROLES, wrap="roberta"),
    "sentence-transformers--all-mpnet-base-v2": Profile(_MPNET, _ROBERTA_ROLES, wrap="roberta",
                                                        wordpiece=True),
    "answerdotai--ModernBERT-base": Profile(_MODERNBERT, _BERT_ROLES, wrap="bert"),
    "distilbert--distilbert-base-uncased": Profile(_BERT, _BERT_ROLES, wrap="bert", wordpiece=True),
    **{name: BERT for name in ("google-bert--bert-base-uncased", "google--electra-base-discriminator",
                               "BAAI--bge-small-en-v1.5", "intfloat--e5-base-v2", "thenlper--gte-base",
                               "sentence-transformers--all-MiniLM-L6-v2")},
}
_START = 1000  # Hub ids below this are the special tokens a vocabulary starts with


def _corpus() -> list[str]:
    from hf_train_mcp_demo.tiny import format_rows

    formats = ("messages", "preference", "prompt_only", "text_classification", "sentence_triplets", "scored_pairs")
    return [json.dumps(r) for f in formats for r in format_rows(f, 48)]


@dataclass(frozen=True)
class Vocabulary:
    tokenizer: object  # the transformers tokenizer, unsaved
    ids: dict[int, int]  # Hub id -> the tiny tokenizer's id
    beyond: int  # tokens whose Hub id is past the real vocab_size (Mllama's <|image|>): last in the tokenizer


def build_vocabulary(folder: Path, profile: Profile, named_ids: set[int], real_vocab: int) -> Vocabulary:
    """The tiny tokenizer of a zoo folder: its profile's special tokens, the zoo's own tokenizer_config.json's
    (names, added tokens, chat template) and a placeholder for any id the config names that neither knows."""
    zoo = _zoo_tokenizer_config(folder)
    specials = dict(profile.specials)
    specials.update({int(k): v["content"] for k, v in zoo.get("added_tokens_decoder", {}).items()})
    specials.update({i: f"<|reserved_{i}|>" for i in named_ids if i not in specials})
    tokenizer = _tokenizer(profile, specials, zoo)
    ids = {hub: tokenizer.convert_tokens_to_ids(token) for hub, token in specials.items()}
    return Vocabulary(tokenizer, ids, sum(1 for hub in specials if hub >= real_vocab))


def _zoo_tokenizer_config(folder: Path) -> dict:
    path = folder / "tokenizer_config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _tokenizer(profile: Profile, specials: dict[int, str], zoo: dict):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    first = [specials[i] for i in sorted(specials) if i < _START]
    later = [specials[i] for i in sorted(specials) if i >= _START and specials[i] not in first]
    if profile.wordpiece:
        tok = Tokenizer(models.WordPiece(unk_token=profile.roles.get("unk_token", "[UNK]")))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=first)
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=first,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    tok.add_special_tokens(later + [t for t in profile.more if t not in later])
    roles = {**profile.roles, **{k: zoo[k] for k in ("bos_token", "eos_token", "pad_token") if zoo.get(k)}}
    tok.post_processor = _wrap(profile, roles, tok)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, model_input_names=list(profile.inputs),
                                        extra_special_tokens=dict(profile.extra), **roles)
    if zoo.get("chat_template"):
        tokenizer.chat_template = zoo["chat_template"]
    return tokenizer


def _wrap(profile: Profile, roles: dict[str, str], tok):
    from tokenizers import processors

    def special(name: str) -> tuple[str, int]:
        return roles[name], tok.token_to_id(roles[name])

    if profile.wrap == "bert":
        cls, sep = special("cls_token"), special("sep_token")
        return processors.TemplateProcessing(single=f"{cls[0]} $A {sep[0]}",
                                             pair=f"{cls[0]} $A {sep[0]} $B:1 {sep[0]}:1", special_tokens=[cls, sep])
    if profile.wrap == "roberta":
        bos, eos = special("bos_token"), special("eos_token")
        return processors.TemplateProcessing(single=f"{bos[0]} $A {eos[0]}",
                                             pair=f"{bos[0]} $A {eos[0]} {eos[0]} $B {eos[0]}",
                                             special_tokens=[bos, eos])
    if profile.wrap == "bos":
        bos = special("bos_token")
        return processors.TemplateProcessing(single=f"{bos[0]} $A", pair=f"{bos[0]} $A {bos[0]} $B",
                                             special_tokens=[bos])
    return processors.ByteLevel(trim_offsets=False)
