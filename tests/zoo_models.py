"""Real-shaped tiny models of the zoo (tests/data/configs): each folder's real config.json with its sizes made tiny
and saved as the Hub serves it (the real dict edited key by key, so a flat Qwen2-VL config stays flat and a nested
config that leaves its sizes to its model type's defaults stays nested), random weights of the class a training
job loads (the config's architectures[0]), and a tokenizer, processor files and sentence-transformers modules
beside them (tests/zoo_vocab.py), so that a folder loads offline as a Hub download does.

What stays: the class, every module name and kind of layer (per-layer lists such as layer_types,
cross_attention_layers or fullatt_block_indexes shrink with the layer count and keep each kind), positions,
rope and window settings, id2label. What shrinks: widths (32), heads (4, of 8), key-value heads (2 where the
model groups them), layers (2, or one of each kind), experts (4, 2 a token), vision towers and image sizes (a few
patches), and the vocabulary (the tiny tokenizer's, with every token id the config names remapped to it).

Built once per test session into a folder the xdist workers share (`zoo_model`), under a lock per model."""

import copy
import fcntl
import json
import shutil
from pathlib import Path
from typing import Any

from tests.hub_configs import CONFIGS, NEEDS_EXTRA, REMOTE_CODE_ONLY
from tests.zoo_vocab import PROFILES, build_vocabulary

WIDTH, HEADS, HEAD_DIM, FFN, EXPERTS, ACTIVE = 32, 4, 8, 64, 4, 2
FOLDERS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())
# why a folder is not built
UNBUILT = {**{name: "remote code only: its classes are the repository's own Python" for name in REMOTE_CODE_ONLY},
           **{name: f"needs the {pkg} package, not installed here" for name, pkg in NEEDS_EXTRA.items()}}
# the checkpoint of a config that names no architecture (tests/test_zoo.py COUNTED_AS)
_NO_ARCHITECTURE = {"microsoft--deberta-v3-base": "DebertaV2ForMaskedLM"}
# the Hub stores these as sentence-transformers checkpoints: the bare encoder (tests/test_zoo.py COUNTED_AS), with
# the pooling their PROVENANCE.md names
POOLING = {"BAAI--bge-small-en-v1.5": "cls", "Qwen--Qwen3-Embedding-0.6B": "lasttoken"}
_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id", "decoder_start_token_id",
            "image_token_id", "image_token_index", "video_token_id", "vision_start_token_id", "vision_end_token_id",
            "vision_token_id", "boi_token_index", "eoi_token_index", "boi_token_id", "eoi_token_id", "boa_token_id",
            "eoa_token_id", "eoa_token_index", "audio_token_id")
_LAYERS = ("num_hidden_layers", "n_layer", "n_layers")
_IMAGE_CLASSIFIERS = ("vit", "dinov2", "swin", "convnext", "resnet", "regnet", "efficientnet")


# --- the config, shrunk key by key -----------------------------------------------------------------------------
def named_ids(config: dict) -> set[int]:
    """Every token id the config names, at any depth."""
    found: set[int] = set()
    for key, value in config.items():
        if isinstance(value, dict):
            found |= named_ids(value)
        elif key in _ID_KEYS:
            found |= {v for v in (value if isinstance(value, list) else [value]) if isinstance(v, int) and v >= 0}
    return found


def shrunk(real: dict, *, ids: dict[int, int], vocab: int, defaults: dict[str, Any]) -> dict:
    """The real config.json dict at tiny sizes. `ids`: Hub token id -> tiny id; `vocab`: the tiny vocabulary;
    `defaults`: the text config's class defaults (a nested text config that leaves its sizes out gets them)."""
    config = copy.deepcopy(real)
    top = config.get("model_type")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
    if text is not None:
        _text(text, vocab=vocab, defaults=defaults)
    elif top not in _IMAGE_CLASSIFIERS and (any(k in config for k in _LAYERS) or "vocab_size" in config):
        _text(config, vocab=vocab, defaults={})
    if isinstance(config.get("vision_config"), dict):
        _vision(config["vision_config"], top, width=(text or config).get("hidden_size", WIDTH))
    if "vocab_size" in config:
        config["vocab_size"] = vocab
    _image_classifier(config)
    _vlm_top(config, top)
    _remap_ids(config, ids)
    return config


def _layer_plan(d: dict) -> int:
    """How many layers the tiny model keeps (one of each kind in layer_types, at least two), and the per-layer
    lists shrunk with it."""
    kinds = d.get("layer_types")
    if isinstance(kinds, list) and kinds:
        order = list(dict.fromkeys(kinds))
        if order[-1] != kinds[-1]:
            order.append(kinds[-1])
        order = order if len(order) > 1 else order * 2
        d["layer_types"] = order
        if "full_attention_interval" in d:
            d["full_attention_interval"] = order.index("full_attention") + 1 if "full_attention" in order else 1
    layers = len(d["layer_types"]) if isinstance(d.get("layer_types"), list) else 2
    if d.get("cross_attention_layers"):  # Mllama: a self-attention layer, then a cross-attention one
        d["cross_attention_layers"] = [1]
    if isinstance(d.get("mlp_only_layers"), list):
        d["mlp_only_layers"] = [i for i in d["mlp_only_layers"] if i < layers]
    if isinstance(d.get("max_window_layers"), int):
        d["max_window_layers"] = min(d["max_window_layers"], layers)
    return layers


def _head_dim(d: dict) -> int:
    """8, or more where a partial rotary and an M-RoPE split need it (Qwen3.5: a quarter of the head rotates, in
    three sections of at least one pair each)."""
    rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
    partial = rope.get("partial_rotary_factor") or d.get("partial_rotary_factor") or 1.0
    sections = len(rope.get("mrope_section") or [])
    head = HEAD_DIM
    while head * partial / 2 < sections:
        head *= 2
    return head


def _text(d: dict, *, vocab: int, defaults: dict[str, Any]) -> None:
    """A language model's (or text encoder's) sizes, in its own key names; a nested config that left a size to its
    class default gets the key."""
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size"):
        if key not in d and key in defaults:
            d[key] = defaults[key]
    if "num_key_value_heads" not in d and defaults.get("num_key_value_heads"):
        d["num_key_value_heads"] = defaults["num_key_value_heads"]
    if "head_dim" not in d and defaults.get("head_dim"):
        d["head_dim"] = defaults["head_dim"]
    real = dict(d)
    hidden = next((real[k] for k in ("hidden_size", "n_embd", "dim", "d_model") if isinstance(real.get(k), int)), 0)
    heads = next((real[k] for k in ("num_attention_heads", "n_head", "n_heads") if isinstance(real.get(k), int)), 1)
    layers = _layer_plan(d)
    head = _head_dim(d)
    _set(d, ("hidden_size", "n_embd", "dim", "d_model"), WIDTH)
    _set(d, ("intermediate_size", "hidden_dim", "ffn_dim"), FFN)
    if isinstance(d.get("n_inner"), int):
        d["n_inner"] = FFN
    _set(d, ("num_attention_heads", "n_head", "n_heads"), HEADS)
    _set(d, _LAYERS, layers)
    _set(d, ("moe_intermediate_size",), FFN // 2)
    _set(d, ("shared_expert_intermediate_size",), FFN)
    _set(d, ("num_experts", "num_local_experts", "n_routed_experts"), EXPERTS)
    _set(d, ("num_experts_per_tok", "experts_per_token", "top_k_experts"), ACTIVE)
    for key in ("num_key_value_heads", "num_global_key_value_heads"):
        if isinstance(d.get(key), int):  # multi-head stays multi-head, grouped stays grouped
            d[key] = HEADS if d[key] == heads else 1 if d[key] == 1 else HEADS // 2
    if isinstance(real.get("head_dim"), int):
        d["head_dim"] = head
        for key in ("global_head_dim", "query_pre_attn_scalar"):
            if isinstance(real.get(key), int | float):
                d[key] = type(real[key])(head * real[key] / real["head_dim"])
    if isinstance(real.get("embedding_size"), int):  # ALBERT's factorised embeddings stay narrower
        d["embedding_size"] = WIDTH if real["embedding_size"] == hidden else WIDTH // 2
    if real.get("pooler_hidden_size") == hidden:
        d["pooler_hidden_size"] = WIDTH
    for key in ("sliding_window", "local_attention"):
        if isinstance(real.get(key), int):
            d[key] = min(real[key], 16)
    _linear_attention(d, real)
    _mrope(d, head)
    for key in ("vocab_size", "vocab_size_per_layer_input"):
        if key in d:
            d[key] = vocab


def _set(d: dict, keys: tuple[str, ...], value: int) -> None:
    for key in keys:
        if isinstance(d.get(key), int):
            d[key] = value


def _linear_attention(d: dict, real: dict) -> None:
    """Qwen3.5's gated delta-net layers: their own head sizes, value heads a multiple of key heads."""
    if "linear_num_key_heads" not in real:
        return
    ratio = real["linear_num_value_heads"] // real["linear_num_key_heads"]
    d.update(linear_key_head_dim=HEAD_DIM, linear_value_head_dim=HEAD_DIM, linear_num_key_heads=2,
             linear_num_value_heads=2 * ratio)


def _mrope(d: dict, head: int) -> None:
    """An M-RoPE split (temporal, height, width) summing to the rotated pairs of the tiny head."""
    for key in ("rope_parameters", "rope_scaling"):
        rope = d.get(key)
        if isinstance(rope, dict) and rope.get("mrope_section"):
            pairs = int(head * (rope.get("partial_rotary_factor") or 1.0)) // 2
            sections = [1] * len(rope["mrope_section"])
            sections[0] += pairs - len(sections)
            rope["mrope_section"] = sections


def _vision(v: dict, top: str, *, width: int) -> None:
    """A vision tower at a few patches a picture, its output as wide as the tiny language model."""
    if top == "qwen2_vl":
        v.update(depth=2, embed_dim=WIDTH, num_heads=HEADS, hidden_size=width)
        return
    if top in ("qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5"):
        v.update(depth=2, hidden_size=WIDTH, intermediate_size=FFN, num_heads=HEADS, out_hidden_size=width)
        if v.get("fullatt_block_indexes"):
            v["fullatt_block_indexes"] = [1]  # a windowed block, then a full one
        if v.get("deepstack_visual_indexes"):
            v["deepstack_visual_indexes"] = [0]
        return
    if top == "mllama":
        v.update(hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=2, num_global_layers=1,
                 attention_heads=HEADS, intermediate_layers_indices=[0], vision_output_dim=2 * WIDTH, image_size=28)
        return
    v.update(hidden_size=WIDTH, intermediate_size=FFN, num_hidden_layers=2, num_attention_heads=HEADS)
    if "num_key_value_heads" in v:
        v["num_key_value_heads"] = HEADS
    for key in ("head_dim", "global_head_dim"):
        if key in v:
            v[key] = HEAD_DIM
    if "projection_dim" in v:
        v["projection_dim"] = WIDTH
    # a few patches of the real patch size: LLaVA 2x2, Gemma 3 4x4 (pooled to 2x2), Idefics3 6x6 (shuffled by 3)
    v["image_size"] = {"llava": 28, "gemma3": 56, "idefics3": 84}.get(top, 2 * v.get("patch_size", 16))


def _vlm_top(config: dict, top: str) -> None:
    if top == "gemma3":
        config["mm_tokens_per_image"] = 4
    if isinstance(config.get("projection_dim"), int):  # a dual encoder's shared embedding
        config["projection_dim"] = WIDTH


def _image_classifier(config: dict) -> None:
    kind = config.get("model_type")
    if kind in ("vit", "dinov2"):
        config.update(hidden_size=WIDTH, num_attention_heads=HEADS, num_hidden_layers=2,
                      image_size=2 * config["patch_size"])
        if "intermediate_size" in config:  # DINOv2 sizes its MLP by mlp_ratio
            config["intermediate_size"] = FFN
        if config.get("pooler_output_size"):
            config["pooler_output_size"] = WIDTH
        if "stage_names" in config:  # DINOv2's backbone outputs: its last stage
            config.update(stage_names=["stem", "stage1", "stage2"], out_features=["stage2"], out_indices=[2])
    elif kind == "swin":
        stages = len(config["depths"])
        # windows of 2 patches: each stage's side (16, 8, 4, 2 at 64 px) a multiple of it, as 56 is of 7 at 224 px
        config.update(embed_dim=16, depths=[1] * stages, num_heads=[2 ** i for i in range(stages)],
                      hidden_size=16 * 2 ** (stages - 1), image_size=64, window_size=2)
    elif kind in ("convnext", "resnet", "regnet"):
        stages = len(config["depths"])
        base = {"convnext": 8, "resnet": 16, "regnet": 16}[kind]
        config.update(depths=[1] * stages, hidden_sizes=[base * (i + 2) // 2 if kind == "regnet" else base * 2 ** i
                                                         for i in range(stages)])
        if kind == "regnet":  # grouped convolutions of 8 channels a group (2 to 5 groups a stage)
            config.update(groups_width=8, embedding_size=8)
        if kind == "resnet":
            config["embedding_size"] = 8
        if kind == "convnext":
            config["image_size"] = 32
    elif kind == "efficientnet":  # the compound scaling, down: one block a stage, a quarter of the channels
        config.update(width_coefficient=0.25, depth_coefficient=0.2, hidden_dim=320, image_size=32)


def _remap_ids(config: dict, ids: dict[int, int]) -> None:
    for key, value in config.items():
        if isinstance(value, dict):
            _remap_ids(value, ids)
        elif key in _ID_KEYS and value is not None:
            config[key] = [ids.get(v, v) for v in value] if isinstance(value, list) else ids.get(value, value)


# --- the folder: weights, tokenizer, processor ----------------------------------------------------------------
def model_class(name: str, config):
    """The class a training job loads (TRL's create_model_from_path: architectures[0], else a causal LM); a
    sentence-transformers checkpoint holds the bare encoder."""
    import transformers

    if (CONFIGS / name / "modules.json").is_file() or name in ("thenlper--gte-base",):
        return transformers.AutoModel
    arch = (config.architectures or [_NO_ARCHITECTURE.get(name, "")])[0]
    return getattr(transformers, arch, None) or transformers.AutoModelForCausalLM


def built(cls, config):
    """A model of class `cls` (an Auto class or a model class) from `config`, on the current device."""
    return cls.from_config(config) if hasattr(cls, "from_config") else cls(config)


def _text_defaults(real: dict) -> dict[str, Any]:
    """The class defaults of a nested text config (what the Hub file leaves out)."""
    from transformers import AutoConfig

    text = real.get("text_config")
    if not isinstance(text, dict) or not text.get("model_type"):
        return {}
    return AutoConfig.for_model(text["model_type"]).to_dict()


def tiny_files(name: str, dest: Path) -> Path:
    """Build the tiny model of zoo folder `name` into `dest` (which must not exist)."""
    import torch
    from transformers import AutoConfig

    zoo = CONFIGS / name
    real = json.loads((zoo / "config.json").read_text())
    real_config = AutoConfig.from_pretrained(zoo)
    vocabulary = build_vocabulary(zoo, PROFILES[name], named_ids(real),
                                  getattr(real_config.get_text_config(), "vocab_size", 0) or 0) \
        if name in PROFILES else None  # image models read no text
    # Mllama's <|image|> is past its language model's vocabulary (its embedding holds vocab_size + 8 rows)
    size = _loaded_size(vocabulary.tokenizer, real, dest) - (
        vocabulary.beyond if real.get("model_type") == "mllama" else 0) if vocabulary else 0
    tiny = shrunk(real, ids=vocabulary.ids if vocabulary else {}, vocab=size, defaults=_text_defaults(real))
    work = dest.with_name(dest.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "config.json").write_text(json.dumps(tiny, indent=2))
    config = AutoConfig.from_pretrained(work)
    if hasattr(config, "quantization_config"):  # the weights are written as the format stores them (below)
        del config.quantization_config
    torch.manual_seed(0)
    model = built(model_class(name, config), config)
    _save_weights(model, work, tiny.get("quantization_config"))
    (work / "config.json").write_text(json.dumps(tiny, indent=2))  # the Hub's layout, not save_pretrained's
    if vocabulary:  # as AutoTokenizer loads it (the pad token it adds: _loaded_size)
        from transformers import AutoTokenizer

        vocabulary.tokenizer.save_pretrained(work)
        AutoTokenizer.from_pretrained(work).save_pretrained(work)
    _beside(name, zoo, work, tiny)
    work.rename(dest)
    return dest


def _loaded_size(tokenizer, real: dict, dest: Path) -> int:
    """The tokenizer's length as AutoTokenizer loads it beside this config: transformers 5 adds the model type's
    default pad token where the tokenizer names none (Qwen2's <|endoftext|>), which the embedding must hold."""
    from transformers import AutoTokenizer

    probe = dest.with_name(dest.name + ".tokenizer")
    shutil.rmtree(probe, ignore_errors=True)
    tokenizer.save_pretrained(probe)
    (probe / "config.json").write_text(json.dumps(real))
    size = len(AutoTokenizer.from_pretrained(probe))
    shutil.rmtree(probe)
    return size


def _save_weights(model, folder: Path, quantization: dict | None) -> None:
    if quantization and quantization.get("quant_method") == "bitsandbytes":  # stored in 4-bit, as unsloth's repos
        import torch
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig

        model.save_pretrained(folder)
        stored = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                    bnb_4bit_compute_dtype=torch.bfloat16)
        AutoModelForCausalLM.from_pretrained(folder, quantization_config=stored,
                                             device_map={"": "cpu"}).save_pretrained(folder)
        return
    model.save_pretrained(folder)


def _beside(name: str, zoo: Path, folder: Path, tiny: dict) -> None:
    """What the Hub folder has besides weights and tokenizer: the chat template, the image processor, the
    sentence-transformers modules."""
    template = zoo / "chat_template.json"
    if template.is_file():
        (folder / "chat_template.jinja").write_text(json.loads(template.read_text())["chat_template"])
    modules = zoo / "modules.json"
    if modules.is_file():
        for path in (modules, zoo / "sentence_bert_config.json"):
            if path.is_file():
                shutil.copy(path, folder / path.name)
        (folder / "1_Pooling").mkdir()
        mode = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
                "lasttoken": "pooling_mode_lasttoken"}[POOLING.get(name, "mean")]
        (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": WIDTH, mode: True}))
        (folder / "2_Normalize").mkdir()
    from tests.zoo_processors import write_processor

    write_processor(name, zoo, folder, tiny)


# --- built once per session, shared by the workers ----------------------------------------------------------------
def zoo_model(name: str, root: Path) -> Path:
    """The tiny model of zoo folder `name` under `root` (the session's shared folder), built on first use."""
    if name in UNBUILT:
        raise ValueError(f"{name} is not built: {UNBUILT[name]}")
    dest = root / name
    if (dest / "config.json").is_file():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not dest.exists():
            tiny_files(name, dest)
    return dest
