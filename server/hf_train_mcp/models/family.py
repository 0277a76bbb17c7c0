"""What a model is, decided from its own files, in one place for every tool: validate_dataset's model check,
estimate_cost's sizing, submit_training's model checks, and the evaluation and export of a model no job of this
server trained.

The files decide in this order: config.json's `auto_map` with a model type transformers does not know makes a
model whose architecture is its repository's own code, and without one a model no job can load (transformers'
AutoConfig does not recognize it); modules.json (or the Hub's library_name) makes a
sentence-transformers model; a dual encoder's model type (CLIP, SigLIP: a vision and a text tower side by side, no text written); a vision tower
(`vision_config`) with a generating architecture, an image token id or the image-text-to-text tag makes a
vision-language model, flat (Qwen2-VL) or nested (LLaVA); then config.json's `architectures` head
(*ForCausalLM, *ForSequenceClassification, *ForImageClassification, *ForMaskedLM, *Model); then the pipeline tag.
"""

import re
from dataclasses import dataclass

from hf_train_mcp.models.files import ModelFiles
from hf_train_mcp.models.native import has_class, knows_model_type

VISION_LANGUAGE = "vision-language"
CAUSAL_LM = "causal-lm"
DUAL_ENCODER = "dual-encoder"
EMBEDDING = "sentence-transformers"
ENCODER = "encoder"  # a base or masked-LM encoder: no task head
TEXT_CLASSIFIER = "text-classifier"
IMAGE_CLASSIFIER = "image-classifier"
IMAGE_ENCODER = "image-encoder"
SEQ2SEQ = "seq2seq"
REMOTE_CODE = "remote-code"  # its architecture is the repository's own Python (config.json auto_map)
UNKNOWN_TYPE = "unknown-model-type"  # a model type transformers has no classes for, and no auto_map: no code at all
UNKNOWN = "unknown"  # nothing was read (offline, or no config.json)

DUAL_ENCODER_TYPES = frozenset({"clip", "siglip", "siglip2", "chinese_clip", "altclip", "align", "owlvit", "owlv2",
                                "metaclip_2", "x_clip"})
_GENERATING = re.compile(r"(ForConditionalGeneration|ImageTextToText|ForVision2Seq|VisionText2Text|ForCausalLM)$")
_IMAGE_TOKEN_KEYS = ("image_token_id", "image_token_index")
VLM_TAGS = frozenset({"image-text-to-text", "visual-question-answering", "image-to-text"})
_TAG_KINDS = {"text-generation": CAUSAL_LM, "fill-mask": ENCODER, "feature-extraction": ENCODER,
              "sentence-similarity": EMBEDDING, "text-classification": TEXT_CLASSIFIER,
              "image-classification": IMAGE_CLASSIFIER, "image-feature-extraction": IMAGE_ENCODER,
              "zero-shot-image-classification": DUAL_ENCODER, "image-text-to-text": VISION_LANGUAGE,
              "text2text-generation": SEQ2SEQ}
# Model types whose transformers classes (sequence and image classification, causal LM) cannot checkpoint
# activations (`supports_gradient_checkpointing` unset): their scripts train with it off (templates' checkpointing())
# and the estimate keeps every layer's activations. tests/test_model_families.py holds it to transformers.
NO_ACTIVATION_CHECKPOINTING = frozenset({
    "albert", "bit", "convnext", "convnextv2", "cpmant", "ctrl", "cvt", "dinat", "efficientnet", "flaubert", "funnel",
    "gpt_neox_japanese", "hgnet_v2", "ibert", "jetmoe", "layoutlmv2", "layoutlmv3", "levit", "markuplm",
    "mobilenet_v1", "mobilenet_v2", "mpnet", "openai-gpt", "perceiver", "poolformer", "pvt", "reformer", "regnet",
    "resnet", "shieldgemma2", "squeezebert", "textnet", "timm_wrapper", "xlm", "xlnet"})
# for a model one can pick instead, by what the caller wanted to do
# Bidirectional encoders (and BART-style encoder-decoders): the model types transformers gives both a masked-LM and
# a sequence-classification class. TRL's RewardTrainer appends the tokenizer's EOS to every sequence
# (trl/trainer/reward_trainer.py add_eos: `if not example["chosen"].endswith(eos_token)`), which BERT's and
# DistilBERT's tokenizers do not have (TypeError).
ENCODER_TYPES = frozenset({
    "albert", "bart", "bert", "big_bird", "camembert", "convbert", "data2vec-text", "deberta", "deberta-v2",
    "distilbert", "electra", "ernie", "esm", "esmc", "eurobert", "flaubert", "fnet", "funnel", "gte", "ibert",
    "jina_embeddings_v3", "layoutlm", "longformer", "luke", "mbart", "megatron-bert", "mobilebert", "modernbert",
    "modernvbert", "mpnet", "mra", "mvp", "nomic_bert", "nystromformer", "perceiver", "reformer", "rembert", "roberta",
    "roberta-prelayernorm", "roc_bert", "roformer", "squeezebert", "tapas", "ultrabert", "ultravbert", "xlm",
    "xlm-roberta", "xlm-roberta-xl", "xmod", "yoso"})


@dataclass(frozen=True)
class Family:
    kind: str
    model_type: str | None = None
    architecture: str | None = None
    why: str = ""  # the file and field that decided it
    classes: int = 0  # a classifier head's outputs (config.json id2label): 1 is a reward model's score

    @property
    def vision_language(self) -> bool:
        return self.kind == VISION_LANGUAGE

    @property
    def reads_audio(self) -> bool:
        """An audio encoder feeding a text decoder (Whisper, Qwen2-Audio): its inputs are audio features."""
        return self.kind == SEQ2SEQ and self.why == _AUDIO

    @property
    def known(self) -> bool:
        return self.kind != UNKNOWN

    @property
    def generates_text(self) -> bool:
        """A model a chat method (SFT, DPO, GRPO, ...) can train: it writes text (unknown: let the job decide)."""
        return self.kind in (CAUSAL_LM, VISION_LANGUAGE, UNKNOWN)

    def _code(self) -> str:
        """Where a remote-code model names its code: config.json's auto_map, or modules.json's module class."""
        return self.why if self.why.startswith("modules.json") else "config.json auto_map"

    def describe(self) -> str:
        what = {VISION_LANGUAGE: "a vision-language model", CAUSAL_LM: "a causal language model",
                DUAL_ENCODER: "a dual encoder (an image and a text tower side by side that embed, and write no text)",
                EMBEDDING: "a sentence-transformers embedding model", ENCODER: "an encoder without a task head",
                TEXT_CLASSIFIER: "a text classifier", IMAGE_CLASSIFIER: "an image classifier",
                IMAGE_ENCODER: "an image encoder", SEQ2SEQ: "an encoder-decoder (seq2seq) model",
                REMOTE_CODE: f"a model whose architecture is its repository's own code ({self._code()}), "
                             "which transformers does not include",
                UNKNOWN_TYPE: "a model of a type transformers has no classes for (and no auto_map)"
                if self.model_type else "a model whose config.json names no model_type",
                UNKNOWN: "a model of unknown family"}[self.kind]
        if self.reads_audio:
            what = "an audio-to-text model (an audio encoder and a text decoder)"
        named = ", ".join(x for x in (self.architecture, f"model_type {self.model_type!r}" if self.model_type
                                      else None) if x)
        return f"{what} ({named})" if named else what


_AUDIO = "config.json audio_config (or mel bins) with a generating architecture"


def _architecture(config: dict) -> str | None:
    archs = config.get("architectures")
    return str(archs[0]) if isinstance(archs, list) and archs else None


def _is_vision_language(config: dict, arch: str | None, tag: str | None) -> bool:
    if not isinstance(config.get("vision_config"), dict):
        return False
    if has_class("image_text_to_text", config.get("model_type")) is False:  # a vision tower, no image-text-to-text
        # class to load it with (Phi-4-multimodal's Phi4MultimodalForCausalLM): its architecture decides
        return False
    return bool(arch is None or _GENERATING.search(arch)  # no head named: its vision tower says it (dual encoders
                # were told apart by their model type first) or any(config.get(k) is not None for k in _IMAGE_TOKEN_KEYS)
                or tag in VLM_TAGS)


def _by_head(arch: str, config: dict) -> str | None:
    if arch.endswith("ForSequenceClassification"):
        return TEXT_CLASSIFIER
    if arch.endswith("ForImageClassification"):
        return IMAGE_CLASSIFIER
    if arch.endswith(("ForCausalLM", "LMHeadModel")):
        return CAUSAL_LM
    if arch.endswith("ForConditionalGeneration"):
        return SEQ2SEQ
    if arch.endswith(("ForMaskedLM", "ForPreTraining", "ForTokenClassification", "ForQuestionAnswering",
                      "ForMultipleChoice")):
        return ENCODER
    if arch.endswith("Model"):  # the bare backbone: text (a vocabulary) or images
        return ENCODER if config.get("vocab_size") else IMAGE_ENCODER
    return None


def decide(config: dict | None, *, pipeline_tag: str | None = None, library_name: str | None = None,
           sentence_transformers: bool = False) -> Family:
    """The family of a model from its config.json, the Hub's tags and whether it has modules.json."""
    model_type = str(config.get("model_type")) if config and config.get("model_type") else None
    arch = _architecture(config) if config else None
    labels = config.get("id2label") if config else None
    common = {"model_type": model_type, "architecture": arch, "classes": len(labels) if isinstance(labels, dict) else 0}
    if config and isinstance(config.get("auto_map"), dict) and model_type and not knows_model_type(model_type):
        return Family(REMOTE_CODE, **common, why=f"config.json auto_map, model_type {model_type!r}")
    if model_type and not knows_model_type(model_type):  # every class the jobs load starts from AutoConfig
        return Family(UNKNOWN_TYPE, **common, why=f"config.json model_type {model_type!r}, no auto_map")
    if config is not None and not model_type and "pretrained_cfg" not in config:
        # AutoConfig reads a config without model_type only as timm's (configuration_utils: is_timm_config_dict)
        # or through auto_map's AutoConfig code; else "Unrecognized model ... Should have a `model_type` key"
        auto_map = config.get("auto_map")
        if isinstance(auto_map, dict) and "AutoConfig" in auto_map:
            return Family(REMOTE_CODE, **common, why="config.json auto_map, no model_type")
        return Family(UNKNOWN_TYPE, **common, why="config.json without model_type")
    if sentence_transformers or library_name == "sentence-transformers":
        return Family(EMBEDDING, **common, why="modules.json (sentence-transformers)")
    if config is None:
        kind = _TAG_KINDS.get(pipeline_tag or "", UNKNOWN)
        return Family(kind, why=f"pipeline tag {pipeline_tag!r}" if kind != UNKNOWN else "no config.json read")
    if model_type in DUAL_ENCODER_TYPES:
        return Family(DUAL_ENCODER, **common, why=f"config.json model_type {model_type!r}")
    if _is_vision_language(config, arch, pipeline_tag):
        return Family(VISION_LANGUAGE, **common, why="config.json vision_config with a generating architecture")
    if isinstance(config.get("vision_config"), dict) and isinstance(config.get("text_config"), dict):
        return Family(DUAL_ENCODER, **common, why="config.json vision_config + text_config, no text generation")
    kind = _by_head(arch, config) if arch else None
    if kind == SEQ2SEQ and (isinstance(config.get("audio_config"), dict) or config.get("num_mel_bins")):
        return Family(kind, **common, why=_AUDIO)
    if kind:
        return Family(kind, **common, why=f"config.json architectures {arch!r}")
    if pipeline_tag in _TAG_KINDS:
        return Family(_TAG_KINDS[pipeline_tag], **common, why=f"pipeline tag {pipeline_tag!r}")
    kind = CAUSAL_LM if config.get("vocab_size") or config.get("text_config") else IMAGE_ENCODER
    return Family(kind, **common, why="config.json (no architectures named)")


# the families whose modules.json decides whether they are sentence-transformers models (a decoder with a
# generating head is used as one only through its own modules.json, which the Hub's library_name then says)
_EMBEDDABLE = frozenset({ENCODER, UNKNOWN, IMAGE_ENCODER, DUAL_ENCODER})


def family_of(files: ModelFiles) -> Family:
    """The family of the model these files belong to; modules.json (and sentence_bert_config.json) are read only
    where they can change the answer and the Hub's library_name has not said it already."""
    found = decide(files.config, pipeline_tag=files.pipeline_tag, library_name=files.library_name)
    if files.config is not None and not files.local and (found.kind == EMBEDDING or found.kind in _EMBEDDABLE):
        custom = _custom_module(files.json("modules.json"))
        if custom:
            return Family(REMOTE_CODE, model_type=found.model_type, architecture=found.architecture,
                          why=f"modules.json module class {custom!r}")
    if found.kind == EMBEDDING or files.config is None or (found.kind not in _EMBEDDABLE and not files.local):
        return found
    if files.library_name and not files.local:
        return found
    modules = files.json("modules.json")
    if isinstance(modules, list) and modules or (files.local and files.json("sentence_bert_config.json")):
        return decide(files.config, pipeline_tag=files.pipeline_tag, sentence_transformers=True)
    return found


def _custom_module(modules: object) -> str | None:
    """The first module class a Hub model's modules.json names outside sentence_transformers.*: its repository's
    own code, which the job's SentenceTransformer (no trust_remote_code) imports by name and cannot find
    (sentence_transformers/util/misc.py import_module_class: `return import_from_string(class_ref)`). A local
    folder's are the caller's own code, checked by the planner (models/files.py custom_modules)."""
    for module in modules if isinstance(modules, list) else []:
        kind = module.get("type") if isinstance(module, dict) else None
        if isinstance(kind, str) and not kind.startswith("sentence_transformers."):
            return kind
    return None
