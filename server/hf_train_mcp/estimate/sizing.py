"""How big a model is (Hub metadata, a local config.json, or its name): its parameters, shape and family."""

import logging
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from hf_train_mcp.estimate.images import (CONV_IMAGE_SIDE, CONV_KEPT_MIN, CONV_KEPT_PER_PARAM, DYNAMIC_IMAGE_SIDE,
                                          DYNAMIC_IMAGE_TOKENS, ImageGrid, conv_activations, image_grid, image_tokens)
from hf_train_mcp.models.family import DUAL_ENCODER_TYPES, Family, family_of
from hf_train_mcp.models.files import (Quantization, model_files, quantization_of, sides, text_config,
                                      vision_config)

log = logging.getLogger(__name__)
DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
# the same quantity under the names other architectures give it (GPT-2, T5/BART, ...)
_HIDDEN = ("hidden_size", "n_embd", "d_model", "dim", "embed_dim")
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers")
_INTERMEDIATE = ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "hidden_dim", "encoder_ffn_dim")


@dataclass(frozen=True)
class ModelSize:
    params: int
    layers: int
    hidden: int
    vocab: int
    intermediate: int
    source: str  # "hub safetensors metadata", "config.json", "model name", ...
    note: str | None = None  # why Hub metadata was not used, when the size is a guess
    active: int | None = None  # mixture of experts: parameters one token passes through
    experts: int = 0  # mixture of experts: routed experts per layer (0: dense)
    config_vocab: int | None = None  # the vocab_size config.json declares (None: guessed, or no vocabulary)
    dtype: str | None = None  # the dtype config.json says the weights are saved in ("bfloat16", "float32", ...)
    model_type: str | None = None  # config.json's model_type ("qwen2", "gemma2", "vit", ...)
    image_tokens: int = 0  # a vision-language model: the tokens one image becomes (0: it reads no images)
    image_grid: "ImageGrid | None" = None  # a dynamic-resolution one: its processor's grid (tokens per image size)
    family: Family | None = None  # what the model's files say it is (models/family.py); None: nothing was read
    quantization: Quantization | None = None  # a checkpoint stored quantized (config.json quantization_config)
    expert_params: int = 0  # a mixture of experts: its routed experts' parameters (fused 3D tensors, no nn.Linear)
    files: Any = field(default=None, repr=False, compare=False)  # the ModelFiles read (module names when asked)
    image_activations: int = 0  # a convolutional image model: elements a training forward keeps per image

    def tokens_per_image(self, pixels: tuple[float, float] | None) -> int:
        """What one image of (height, width) pixels becomes: its processor's resize and patch grid where the
        model's tokens follow the image's size, else the fixed grid of its vision config."""
        if self.image_grid is None:
            return self.image_tokens
        return self.image_grid.tokens(*(pixels or (DYNAMIC_IMAGE_SIDE, DYNAMIC_IMAGE_SIDE)))

    @property
    def billions(self) -> float:
        return self.params / 1e9

    @property
    def weight_bytes(self) -> int:
        """Bytes per parameter of the saved weights (2 unless config.json says otherwise)."""
        return DTYPE_BYTES.get(self.dtype or "", 2)

    @property
    def compute_params(self) -> int:
        """What a token's FLOPs scale with: all parameters, or a mixture of experts' active ones."""
        return self.active or self.params


def _experts(cfg: dict) -> tuple[int, int, int] | None:
    """(experts, experts per token, expert width) of a mixture-of-experts config (Mixtral, Qwen-MoE, gpt-oss,
    DeepSeek naming), or None for a dense model."""
    experts = cfg.get("num_local_experts") or cfg.get("num_experts") or cfg.get("n_routed_experts")
    per_token = (cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or cfg.get("num_experts_per_token")
                 or cfg.get("top_k_experts"))  # Gemma 4 (gemma4_text)
    if not experts or not per_token or experts <= 1:
        return None
    return int(experts), int(per_token), int(cfg.get("moe_intermediate_size") or cfg.get("intermediate_size"))


def _first(cfg: dict, names: tuple[str, ...]) -> int | None:
    return next((int(cfg[n]) for n in names if isinstance(cfg.get(n), int | float) and cfg[n]), None)


def _shape(cfg: dict) -> tuple[int, int, int]:
    """(hidden size, layers, MLP width) under whichever names the architecture uses; ValueError without them."""
    h, layers = _first(cfg, _HIDDEN), _first(cfg, _LAYERS)
    if not h or not layers:
        raise ValueError(f"config.json (model_type {cfg.get('model_type')!r}) names no hidden size or layer count, "
                         "so the model's size cannot be computed from it")
    return h, layers, _first(cfg, _INTERMEDIATE) or 4 * h


# encoders whose MLP is up and down projections only (decoders since LLaMA gate theirs: three matrices); ViT-base
# counts 86M this way, as published, against 113M as a gated MLP
UNGATED_MLP = frozenset({"vit", "deit", "beit", "dinov2", "bert", "roberta", "xlm-roberta", "distilbert", "electra",
                         "deberta", "deberta-v2", "mpnet", "clip_vision_model", "siglip_vision_model",
                         "clip_text_model", "siglip_text_model"})


GATED_VISION = frozenset({"qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"})  # vision towers with a gated MLP


def _vision_params(cfg: dict, text_hidden: int) -> int:
    """The vision tower beside the text model (a VLM's, a dual encoder's) and what joins them: patch embedding,
    its layers, and the projector into the text model's width (pixel-shuffled or merged patches first)."""
    vision = vision_config(cfg)
    width = vision and (vision.get("embed_dim") or vision.get("hidden_size"))
    depth = vision and (vision.get("depth") or vision.get("num_hidden_layers"))
    if not isinstance(width, int) or not isinstance(depth, int):
        return 0
    inter = vision.get("intermediate_size") or int(vision.get("mlp_ratio", 4) * width)
    mlp = 3 if cfg.get("model_type") in GATED_VISION else 2
    patch = math.prod(sides(vision.get("patch_size")) or (14, 14)) * (vision.get("temporal_patch_size") or 1)
    tower = depth * (4 * width * width + mlp * width * inter) + patch * (vision.get("in_chans") or 3) * width
    if cfg.get("model_type") in DUAL_ENCODER_TYPES:  # CLIP, SigLIP: each tower projected into a shared space
        return tower + (width + text_hidden) * (cfg.get("projection_dim") or 0)
    if cfg.get("scale_factor"):  # Idefics3 / SmolVLM: pixel shuffle, then one linear layer
        return tower + width * cfg["scale_factor"] ** 2 * text_hidden
    joined = width * (vision.get("spatial_merge_size") or 1) ** 2  # Qwen2-VL merges 2x2 patches first
    return tower + joined * text_hidden + max(joined, text_hidden) ** 2  # a two-layer MLP projector


def param_counts(cfg: dict) -> tuple[int, int | None]:
    """(total, active per token or None when dense) from a transformers config: embeddings, attention with GQA,
    gated MLP, and routed plus shared experts for a mixture of experts; and a vision tower beside them."""
    vision = _vision_params(cfg, _shape(text_config(cfg))[0])
    total, active = _text_param_counts(text_config(cfg))
    return total + vision, (active + vision if active is not None else None)


def _text_param_counts(cfg: dict) -> tuple[int, int | None]:
    h, layers, inter = _shape(cfg)
    vocab = cfg.get("vocab_size") or 0  # none in a vision or audio encoder (ViT): no embedding matrix to count
    heads = cfg.get("num_attention_heads") or cfg.get("n_head") or max(1, h // 64)
    head_dim = cfg.get("head_dim") or h // heads  # transformers 5 saves Mixtral's as null: derived
    kv_dim, q_dim = head_dim * (cfg.get("num_key_value_heads") or heads), head_dim * heads
    attention = 2 * h * q_dim + 2 * h * kv_dim
    # an output head the size of the embeddings, unless tied, or none at all (an encoder, a dual encoder's text)
    headless = cfg.get("model_type") in UNGATED_MLP
    embeddings = vocab * h * (1 if headless or cfg.get("tie_word_embeddings", False) else 2)
    moe = _experts(cfg)
    if moe is None:
        mlp = 2 if cfg.get("model_type") in UNGATED_MLP else 3  # up and down, or gate, up and down
        return embeddings + layers * (attention + mlp * h * inter), None
    experts, per_token, width = moe
    shared = 3 * h * (cfg.get("shared_expert_intermediate_size") or width * (cfg.get("n_shared_experts") or 0))
    router = h * experts
    total = embeddings + layers * (attention + router + shared + 3 * h * width * experts)
    active = embeddings + layers * (attention + router + shared + 3 * h * width * per_token)
    return total, active


def routed_expert_params(cfg: dict) -> int:
    """A mixture of experts' routed experts (gate, up and down projections of every expert and layer), as counted
    in _text_param_counts; 0 for a dense model. transformers 5 holds them as fused 3D parameters (e.g.
    qwen3_moe/modeling_qwen3_moe.py Qwen3MoeExperts: `self.gate_up_proj = nn.Parameter(torch.empty(num_experts,
    ...))`), which bitsandbytes does not quantize: it replaces nn.Linear modules only (integrations/bitsandbytes.py
    replace_with_bnb_linear: `if isinstance(module, Conv1D) or type(module) is nn.Linear:`)."""
    text = text_config(cfg)
    moe = _experts(text)
    if moe is None:
        return 0
    h, layers, _ = _shape(text)
    experts, _, width = moe
    dense = text.get("mlp_only_layers") if isinstance(text.get("mlp_only_layers"), list) else []  # Qwen-MoE's
    moe_layers = max(0, layers - int(text.get("first_k_dense_replace") or 0) - len(dense))  # DeepSeek's first k
    return moe_layers * 3 * h * width * experts


def params_from_config(cfg: dict) -> int:
    return param_counts(cfg)[0]


def _from_config(cfg: dict, params: int | None, source: str, family: Family | None = None,
                 stored: dict[str, int] | None = None) -> ModelSize:
    """stored: the Hub's count of the checkpoint's tensors by dtype (what a quantized checkpoint's count is read
    back from)."""
    text = text_config(cfg)
    h, layers, inter = _shape(text)
    total, active = param_counts(cfg)
    experts = routed_expert_params(cfg)
    quantization = quantization_of(cfg)
    if quantization is not None:  # a stored 4-bit tensor counts its packed bytes (the Hub's U8 total): undone
        params = quantization.unpacked_params(stored)  # where exact, else the config's shape counts them
        source = (f"{source} ({quantization.describe()} checkpoint, counted unpacked)" if params else
                  f"config.json ({quantization.describe()} checkpoint, counted unpacked)")
    if params and active:  # the Hub's exact total, with the config's share of it active per token
        active = int(params * active / total)
    if params and experts:
        experts = int(params * experts / total)
    moe = _experts(text)
    vocab = text.get("vocab_size") or None
    dtype = cfg.get("dtype") or cfg.get("torch_dtype") or text.get("dtype") or text.get("torch_dtype")
    return ModelSize(
        params=params or total,
        layers=layers,
        hidden=h,
        vocab=vocab or 0,
        intermediate=inter,
        source=source,
        active=active,
        experts=moe[0] if moe else 0,
        config_vocab=vocab,
        dtype=str(dtype).removeprefix("torch.") if dtype else None,
        model_type=cfg.get("model_type"),
        image_tokens=image_tokens(cfg) if family is None or family.vision_language else 0,
        family=family, quantization=quantization, expert_params=experts,
    )


def _conv_size(cfg: dict, params: int, source: str, family: Family | None) -> ModelSize:
    """A model whose config has no transformer shape but whose weights were counted: its stages' widths and
    depths where the config lists them, activations by conv_activations."""
    def ints(key: str) -> list[int]:
        value = cfg.get(key)
        return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []

    widths = ints("hidden_sizes") or ints("embed_dim") or ints("neck_hidden_sizes")
    hidden = (widths or [None])[-1] or _first(cfg, (*_HIDDEN, "hidden_dim")) or 1024
    layers = sum(ints("depths")) or _first(cfg, _LAYERS) or max(1, len(widths))
    return ModelSize(params=params, layers=layers, hidden=hidden, vocab=0, intermediate=4 * hidden,
                     source=f"{source}; convolutional: activations ~{CONV_KEPT_PER_PARAM:g} elements per parameter "
                            f"an image at {CONV_IMAGE_SIDE} px (at least {CONV_KEPT_MIN / 1e6:.0f} M), all kept",
                     model_type=cfg.get("model_type"), image_activations=conv_activations(params, cfg),
                     family=family, dtype=cfg.get("dtype") or cfg.get("torch_dtype"))


def _guess_architecture(params: int, source: str) -> ModelSize:
    """Typical decoder shapes for a parameter count, when only the count is known."""
    layers = 24 if params < 1e9 else 28 if params < 4e9 else 32 if params < 15e9 else 48 if params < 40e9 else 80
    vocab = 128_000
    body = max(params - vocab * 1024, params * 0.5)  # leave room for embeddings on small models
    hidden = max(256, int(round(math.sqrt(body / (12 * layers)) / 64) * 64))
    return ModelSize(params, layers, hidden, vocab, int(hidden * 3.5), source)


_NAME_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s*([bBmM])(?![A-Za-z])")


def active_from_name(name: str) -> int | None:
    """'Qwen3-30B-A3B' -> 3e9: a mixture of experts' active parameters, where the name says them."""
    found = re.search(r"(?<![A-Za-z0-9])A(\d+(?:\.\d+)?)[bB](?![A-Za-z])", name.rsplit("/", 1)[-1])
    return int(float(found.group(1)) * 1e9) if found else None


def params_from_name(name: str) -> int | None:
    """'Qwen2.5-0.5B' -> 5e8, 'SmolLM2-135M' -> 1.35e8; mixture-of-experts 'AxB' names count all experts."""
    base = re.sub(r"(?<![A-Za-z0-9])A\d+(?:\.\d+)?[bB](?![A-Za-z])", "", name.rsplit("/", 1)[-1])
    moe = re.search(r"(\d+)x(\d+(?:\.\d+)?)[bB]", base)
    if moe:
        return int(int(moe.group(1)) * float(moe.group(2)) * 1e9)
    found = _NAME_SIZE.findall(base)
    if not found:
        return None
    number, unit = found[-1]
    return int(float(number) * (1e9 if unit.lower() == "b" else 1e6))


def _with_grid(size: ModelSize, files) -> ModelSize:
    """A dynamic-resolution vision-language model with its processor's grid (read only for those); without
    it, the fixed DYNAMIC_IMAGE_TOKENS stands, as an assumption."""
    if size.image_tokens != DYNAMIC_IMAGE_TOKENS:
        return size
    grid = image_grid(files.json("preprocessor_config.json"))  # unread (log says why): the assumption stands
    return replace(size, image_grid=grid) if grid else size


def model_size(model: str, token: str | None = None, *, offline: bool = False) -> ModelSize:
    """Parameters, shape and family of `model`: its config.json (a local folder's, or the Hub's with the
    safetensors total), else its Hub total alone, else its name."""
    note = None
    try:
        files = model_files(model, token, offline=offline)
    except Exception as exc:  # metadata is a nicety: fall through to what we have, and say why
        log.info("could not read Hub metadata of %s: %s", model, exc)
        files, note = None, str(exc)
    if files is not None and files.config is not None:
        try:
            size = _from_config(files.config, files.params, files.source, family_of(files), files.stored)
        except ValueError as exc:
            if files.params:  # no transformer shape (a convolutional net): its weights were counted
                return replace(_conv_size(files.config, files.params, files.source, family_of(files)), files=files)
            if files.local:
                raise ValueError(f"cannot tell the size of {model!r}: {exc}; and the folder has no .safetensors "
                                 "weights to count (save the model with save_pretrained, which writes them)") from None
            note = str(exc)
        else:
            return replace(_with_grid(size, files), files=files)
    family = family_of(files) if files is not None else None
    if files is not None and files.params:
        return replace(_guess_architecture(files.params, "hub safetensors metadata (shape guessed)"),
                       note=note or files.note, active=active_from_name(model), family=family, files=files)
    from_name = params_from_name(model)
    if from_name:
        return replace(_guess_architecture(from_name, "model name (shape guessed)"), note=note,
                       active=active_from_name(model), family=family)
    raise ValueError(
        f"cannot tell the size of {model!r}: no local config.json, no Hub metadata, no size in its name. "
        "Send a Hub model id with safetensors weights, a local model folder, or a name such as 'org/Model-7B'."
    )
