"""Why a model cannot be trained, evaluated or exported the way a call asks, with what to pick instead: each
rule reads the model's family (models/family.py) and what the method loads, and says the error the job would
have met. submit_training, estimate_cost and validate_dataset ask the training rules; evaluate_model and
export_model the follow-up ones (planning/subjects.py); planning/support.py draws the README's table from them.
"""

from hf_train_mcp.models.family import (CAUSAL_LM, DUAL_ENCODER, EMBEDDING, ENCODER, IMAGE_CLASSIFIER,
                                        IMAGE_ENCODER, REMOTE_CODE, SEQ2SEQ, TEXT_CLASSIFIER, UNKNOWN_TYPE,
                                        VISION_LANGUAGE, Family)
from hf_train_mcp.models.files import Quantization
from hf_train_mcp.models.native import has_class, transformers_version

VLM_EXAMPLES = ("Qwen/Qwen2-VL-2B-Instruct", "HuggingFaceTB/SmolVLM-Instruct")
TEXT_CLASSIFIER_EXAMPLES = ("answerdotai/ModernBERT-base", "Qwen/Qwen2.5-0.5B")
REWARD_EXAMPLE = "Qwen/Qwen2.5-0.5B-Instruct"
IMAGE_CLASSIFIER_EXAMPLES = ("google/vit-base-patch16-224", "facebook/dinov2-small")
EMBEDDING_EXAMPLES = ("sentence-transformers/all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5")

# Mixtures of experts whose LoRA PEFT rewrites for transformers 5's fused experts (peft/utils/
# transformers_weight_conversion.py _convert_peft_config_moe: every model type transformers' conversion_mapping.py
# maps to "mixtral" or "qwen2_moe", and those two themselves, qwen2_moe since peft 0.22: `_MODEL_TO_CONVERSION_PATTERN
# ["qwen2_moe"] = "qwen2_moe"`): a target reaching the experts or the router (all-linear, a regex, or one of their
# v4 names) becomes a target_parameters entry, a lora.ParamWrapper, which refuses lora_dropout != 0 (peft/tuners/
# lora/layer.py ParamWrapper.__init__). The jobs' headers ask for peft>=0.22 (PEFT_REQUIREMENT), the PEFT this
# table is of; tests/test_family_plans.py holds it to the installed peft.
MIXTRAL_STYLE_EXPERTS = frozenset({"minimax", "minimax_m2", "mixtral"})
FUSED_EXPERT_LORA = MIXTRAL_STYLE_EXPERTS | frozenset({
    "afmoe", "beam", "cohere2_moe", "deepseek_v2", "deepseek_v3", "deepseek_v32", "dots1", "ernie4_5_moe",
    "exaone_moe", "flex_olmo", "glm4_moe", "glm4_moe_lite", "glm4v_moe", "glm_moe_dsa", "hunyuan_v1_moe",
    "longcat_flash", "mellum", "olmoe", "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_omni_moe",
    "qwen3_omni_moe_text", "qwen3_omni_moe_thinker", "sarvam_mla", "solar_open"})


def training_refusal(family: Family, model: str, *, method: str, generative: bool, vision: bool,
                     sequence_head: bool = False, appends_eos: bool = False, image_rows: bool = False,
                     sentence_model: bool = False) -> str | None:
    """Why a model cannot be trained this way, with what to pick instead; None when it can (or is unknown).
    sequence_head: the method loads AutoModelForSequenceClassification (text-classification, reward);
    appends_eos: it ends every text with an end token (reward: a causal LM is the example to pick);
    image_rows: it loads AutoModelForImageClassification (image-classification); sentence_model: it loads a
    SentenceTransformer that embeds text (embedding)."""
    if not family.known:
        return None
    if family.kind == UNKNOWN_TYPE:
        said = ("Transformers does not recognize this architecture" if family.model_type else
                "Unrecognized model ... Should have a `model_type` key in its config.json")
        return (f"{model} is {family.describe()}: every job loads a model with transformers, whose AutoConfig "
                f"stops at it (\"{said}\"; this server checks against "
                f"transformers {transformers_version()}). Pick a model of a type transformers supports (e.g. "
                f"{REWARD_EXAMPLE} for text, {VLM_EXAMPLES[0]} for images). Nothing was launched.")
    if family.kind == REMOTE_CODE:
        return (f"{model} is {family.describe()}: the job loads models with transformers' own classes and never "
                "runs a repository's code (trust_remote_code would run it next to your token), so it would fail "
                f"loading it. Pick a model transformers supports (e.g. {REWARD_EXAMPLE} for text, "
                f"{VLM_EXAMPLES[0]} for images). Nothing was launched.")
    refusal = (_image_head_refusal(family, model, method=method) if image_rows else
               _sentence_refusal(family, model, method=method) if sentence_model else None)
    if refusal:
        return refusal
    if sequence_head:
        refusal = _sequence_head_refusal(family, model, method=method, appends_eos=appends_eos)
        if refusal:
            return refusal
    instead_vlm = ", ".join(m for m in VLM_EXAMPLES if m.lower() != model.lower())
    if vision and not family.vision_language:
        extra = (" To fine-tune its image and text embeddings, use its own contrastive recipe (open_clip, or "
                 "sentence-transformers' CLIP support): this server trains vision-language models that write "
                 "text." if family.kind == DUAL_ENCODER else "")
        return (f"the rows hold images, but {model} is {family.describe()}, which reads no images as a "
                f"vision-language model: pick an image-text-to-text model (e.g. {instead_vlm}), or map the text "
                f"columns only.{extra} Nothing was launched.")
    if generative and not family.generates_text:
        return (f"method={method!r} trains a model that writes text, and {model} is {family.describe()}: pick a "
                "causal language model (or an image-text-to-text model for images); for an encoder, "
                "method='text-classification' or 'embedding' fit. Nothing was launched.")
    return None


def method_refusal(family: Family, model: str, spec, *, vision: bool) -> str | None:
    """training_refusal for a method (its methods.MethodSpec: what it loads and what it feeds the model), as
    submit_training, estimate_cost and validate_dataset ask it."""
    return training_refusal(family, model, method=spec.name, generative=not spec.classifier, vision=vision,
                            sequence_head=spec.auto_class == "AutoModelForSequenceClassification",
                            appends_eos=spec.appends_eos, image_rows=spec.inputs == "image",
                            sentence_model=spec.model_library == "sentence-transformers")


def unnamed_architecture_refusal(family: Family | None, model: str, *, method: str) -> str | None:
    """A language model whose config.json names no `architectures`, for a method whose TRL trainer is given the
    model's id: TRL picks the class from that list (trl/trainer/utils.py create_model_from_path:
    `architecture = getattr(transformers, config.architectures[0], None)`), a TypeError on None at load. The
    methods that name their class (text-classification, reward, embedding) and Unsloth's loader are not asked."""
    if family is None or family.kind not in (CAUSAL_LM, VISION_LANGUAGE) or not family.model_type or (
            family.architecture is not None):
        return None
    return (f"{model}'s config.json names no architectures (model_type {family.model_type!r}), and "
            f"method={method!r} loads it through TRL, which picks the model's class from that list (its "
            "create_model_from_path reads `config.architectures[0]`: a TypeError at load). Send a checkpoint whose "
            "config.json names its class (save_pretrained writes it, e.g. \"architectures\": "
            "[\"Qwen2ForCausalLM\"]). Nothing was launched.")


def _image_head_refusal(family: Family, model: str, *, method: str) -> str | None:
    """An image-classification head on a model transformers has no AutoModelForImageClassification class for: a
    text model, a vision-language model (its vision tower reads images for the text model), an embedding model."""
    known = has_class("image_classification", family.model_type)  # CLIP's and SigLIP's too: their vision tower
    if known or (known is None and family.kind in (IMAGE_CLASSIFIER, IMAGE_ENCODER)):
        return None
    vlm = (" To teach a vision-language model labels of images, train it with method='sft' on rows whose answer "
           "is the label." if family.vision_language else "")
    return (f"method={method!r} loads the model with AutoModelForImageClassification, and {model} is "
            f"{family.describe()}, which transformers has no image-classification class for (the job would fail "
            f"loading it): pick an image classifier or backbone (e.g. {' or '.join(IMAGE_CLASSIFIER_EXAMPLES)})."
            f"{vlm} Nothing was launched.")


def _sentence_refusal(family: Family, model: str, *, method: str) -> str | None:
    """Sentence embeddings of text from an image model: sentence-transformers loads it for the image modality alone
    and refuses texts (sentence_transformers/base/modality.py: "Modality 'text' is not supported by this
    SentenceTransformer model. Supported modalities: image.")."""
    if family.reads_audio:  # its encoder reads audio features, never token ids
        return (f"method={method!r} trains a SentenceTransformer on texts, and {model} is {family.describe()}, whose "
                "encoder reads audio (input_features), not the token ids sentence-transformers feeds it: pick a text "
                f"encoder or an embedding model (e.g. {' or '.join(EMBEDDING_EXAMPLES)}). Nothing was launched.")
    if family.kind not in (IMAGE_CLASSIFIER, IMAGE_ENCODER):
        return None
    return (f"method={method!r} trains a SentenceTransformer on texts, and {model} is {family.describe()}, which "
            "reads images only (sentence-transformers refuses its texts: \"Modality 'text' is not supported\"): "
            f"pick a text encoder or an embedding model (e.g. {' or '.join(EMBEDDING_EXAMPLES)}), or "
            "method='image-classification' for images. Nothing was launched.")


def _sequence_head_refusal(family: Family, model: str, *, method: str, appends_eos: bool) -> str | None:
    """A text classifier's or reward model's head on a model transformers has no sequence-classification class for
    (most VLMs, dual encoders, image models, and decoders such as OLMoE, Granite, Cohere or Gemma 4: transformers'
    MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES, models/native.py; a model type it does not know is judged by
    its family). An encoder whose tokenizer has no EOS (BERT) is no reason: the reward script ends its texts with
    the [SEP] token instead (templates/reward.py.j2)."""
    instead = (f"a causal language model (e.g. {REWARD_EXAMPLE})" if appends_eos else
               f"a text encoder or a causal language model (e.g. {' or '.join(TEXT_CLASSIFIER_EXAMPLES)})")
    known = has_class("sequence_classification", family.model_type)
    if known is False or (known is None and family.kind in (VISION_LANGUAGE, DUAL_ENCODER, IMAGE_CLASSIFIER,
                                                            IMAGE_ENCODER)):
        images = (" To teach it labels of images, train it with method='sft' on rows whose answer is the label"
                  if family.kind == VISION_LANGUAGE else " For images, method='image-classification' fits"
                  if family.kind in (IMAGE_CLASSIFIER, IMAGE_ENCODER) else "")
        return (f"method={method!r} puts a sequence-classification head on the model, and {model} is "
                f"{family.describe()}, for which transformers has no AutoModelForSequenceClassification class (the "
                f"job would fail loading it): pick {instead}.{images} Nothing was launched.")
    return None


def lora_reaches_experts(model_type: str | None, targets: str | list[str]) -> bool:
    """Whether PEFT turns these LoRA targets into parameter wrappers on a mixture of experts' fused experts or
    router (which need lora_dropout=0): 'all-linear' and a regex always may; a list where a name is one of the
    experts' or the router's pre-transformers-5 names (peft's _MOE_TARGET_MODULE_MAPPING keys)."""
    if model_type not in FUSED_EXPERT_LORA:
        return False
    if isinstance(targets, str):
        return True
    names = {"gate", "w1", "w2", "w3"} if model_type in MIXTRAL_STYLE_EXPERTS else {
        "gate", "gate_proj", "up_proj", "down_proj"}
    return any(t.rsplit(".", 1)[-1] in names for t in targets)


def lora_target_refusal(modules: frozenset[str] | None, targets: list[str], model: str) -> str | None:
    """Why LoRA target names would adapt nothing of the model, with the names it has; None when one matches (or
    its modules are unknown). PEFT adapts a module whose dotted name is a target or ends with '.' + target
    (peft/tuners/tuners_utils.py check_target_module_exists: `key.endswith(f".{target_key}")`), and stops with
    NoMatchingPeftModuleError only when no target matches (inject_adapter: "Target modules ... not found in the
    base model"); one unmatched name among matched ones adapts the others."""
    if not modules or any(m == t or m.endswith("." + t) for m in modules for t in targets):
        return None
    leaves = sorted({m.rsplit(".", 1)[-1] for m in modules} - {""}, key=lambda n: (n.isdigit(), n))
    named = ", ".join(repr(n) for n in leaves[:24] if not n.isdigit()) + (", ..." if len(leaves) > 24 else "")
    return (f"lora_target_modules {targets} name no module of {model} (PEFT would stop with "
            f"NoMatchingPeftModuleError when the job builds its trainer): its weights belong to modules named "
            f"{named}. Send some of those (e.g. the attention projections), or leave lora_target_modules out for "
            "every linear layer. Nothing was launched.")


def quantization_refusal(quantization: Quantization | None, model: str, *, peft: str) -> str | None:
    """Why a checkpoint stored quantized cannot be trained with this peft, and what to send; None when it can.
    bitsandbytes 4/8-bit: LoRA and QLoRA train adapters on the stored weights (transformers keeps the model's own
    quantization_config over the script's: quantizers/auto.py merge_quantization_configs). MXFP4 (gpt-oss): the job
    has no `kernels` package, so transformers dequantizes it to bf16 (quantizers/quantizer_mxfp4.py) and LoRA trains
    that. No other format loads in the job (GPTQ/AWQ need optimum + gptqmodel, FP8 on compute capability >= 8.9 the
    `kernels` package), and no quantized model takes a full fine-tune (transformers/trainer_utils.py: "You cannot
    perform fine-tuning on purely quantized models")."""
    if quantization is None:
        return None
    original = ("the unquantized original it was made from (its model card's base_model), which trains in full, "
                "LoRA or QLoRA")
    stored = f"{model} is stored quantized ({quantization.describe()}, config.json quantization_config)"
    if quantization.bitsandbytes or quantization.method == "mxfp4":
        if peft == "full":
            return (f"{stored}: transformers fine-tunes no quantized model in full (only adapters on top of it). Send "
                    f"peft='lora' (it trains as QLoRA on the stored weights), or pick {original}. Nothing was "
                    "launched." if quantization.bitsandbytes else
                    f"{stored}: transformers fine-tunes no quantized model in full. Send peft='lora' (the job "
                    f"dequantizes it to bf16 and trains adapters), or pick {original}. Nothing was launched.")
        if peft == "qlora" and quantization.method == "mxfp4":
            return (f"{stored}: peft='qlora' asks bitsandbytes to quantize a model already stored in MXFP4, which "
                    "transformers refuses. Send peft='lora' (the job dequantizes it to bf16). Nothing was launched.")
        return None
    return (f"{stored}: the training job cannot load {quantization.method} weights (they need that format's own "
            f"packages and kernels, which the job does not install), and no quantized model takes a full fine-tune. "
            f"Pick {original}; peft='qlora' of it needs about the memory of this checkpoint. Nothing was launched.")


# Formats stored quantized that an evaluation or export job loads: bitsandbytes (the evaluation installs it; export
# refuses it itself, planning/export.py stored_refusal), MXFP4 (dequantized to bf16 without `kernels`), and
# fine-grained FP8, which transformers dequantizes where the GPU has no FP8 (quantizers/quantizer_finegrained_fp8.py)
_FOLLOWUP_LOADS = frozenset({"mxfp4", "fp8"})


def followup_quantization_refusal(quantization: Quantization | None, ref: str, what: str) -> str | None:
    """Why no evaluation or export (`what`) can load a checkpoint stored in this format: GPTQ, AWQ and the rest
    need packages the jobs do not install (quantizers/quantizer_gptq.py: "Loading a GPTQ quantized model
    requires optimum"; quantizer_awq.py: gptqmodel), and llama.cpp's converter refuses them; None when it can."""
    if quantization is None or quantization.bitsandbytes or quantization.method in _FOLLOWUP_LOADS:
        return None
    return (f"{ref} is stored quantized ({quantization.describe()}, config.json quantization_config), which no "
            f"{what} of this server can load: its job would load {quantization.method} weights, which need that "
            "format's own packages and kernels (not installed in the job), and llama.cpp's converter refuses them. "
            "Pick the unquantized original it was made from (its model card's base_model). Nothing was launched.")


# what a model no job of this server trained is evaluated and exported as, by its family (followup.for_family)
FOLLOWUP_METHODS = {EMBEDDING: "embedding", TEXT_CLASSIFIER: "text-classification",
                    IMAGE_CLASSIFIER: "image-classification"}
_FOLLOWUP_INSTEAD = {
    ENCODER: "train it first (submit_training with method='text-classification' on labelled rows, or "
             "method='embedding' on pairs) and pass that job_id; or pass a model with a trained head (a "
             "*ForSequenceClassification checkpoint) or a sentence-transformers model (modules.json)",
    IMAGE_ENCODER: "train it first (submit_training with method='image-classification') and pass that job_id, or "
                   "pass a *ForImageClassification checkpoint",
    DUAL_ENCODER: "this server evaluates and exports models it can train: vision-language models that write text "
                  f"(e.g. {VLM_EXAMPLES[0]}), causal language models, classifiers and sentence-transformers models",
    SEQ2SEQ: "this server evaluates and exports causal and vision-language models, classifiers and "
             "sentence-transformers models",
    REMOTE_CODE: "its jobs load models with transformers' own classes and never run a repository's code "
                 f"(trust_remote_code): pick a model transformers supports (e.g. {REWARD_EXAMPLE})",
    UNKNOWN_TYPE: "its jobs load models with transformers, whose AutoConfig does not recognize that model type: "
                  f"pick a model transformers supports (e.g. {REWARD_EXAMPLE})",
}


def followup_method(family: Family) -> str | None:
    """The method whose evaluation and export fit a model of this family (None: a language model's)."""
    if family.kind == TEXT_CLASSIFIER and family.classes == 1:
        return "reward"  # one score, no classes
    return FOLLOWUP_METHODS.get(family.kind)


def followup_refusal(family: Family, ref: str, what: str) -> str | None:
    """Why no evaluation or export (`what`) of this server can read a model of this family, and what to send."""
    if family.kind not in _FOLLOWUP_INSTEAD:
        return None
    head = (" It has no trained task head, so an accuracy would score a randomly initialised classifier, and "
            "llama.cpp converts an encoder only as an embedding model with the pooling of its modules.json, which "
            "it has none of." if family.kind in (ENCODER, IMAGE_ENCODER) else "")
    return (f"{ref} is {family.describe()}, which no {what} of this server can read: "
            f"{_FOLLOWUP_INSTEAD[family.kind]}.{head} Nothing was launched.")
