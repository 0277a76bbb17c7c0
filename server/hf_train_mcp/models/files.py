"""A model's own files, as the Hub serves them (or a local folder holds them): config.json, the JSON files beside
it (preprocessor_config.json, modules.json, sentence_bert_config.json) and the Hub's model_info (pipeline tag,
library, safetensors total). Each is read at most once per tool call (`one_read_each`), so that validation,
sizing and planning of one call read the same files, and agree.

A config.json leaves out what equals its model type's default: a nested text_config (LLaVA-1.5's names only
`model_type: llama` and a vocabulary) is filled from TEXT_DEFAULTS the way transformers' config classes fill it,
without importing transformers (tests/test_model_families.py checks the table against them).
"""

import json
import logging
import math
import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hf_train_mcp.access import is_local

log = logging.getLogger(__name__)

# The defaults of the text models vision-language models nest, as transformers' <Type>Config.__init__ sets them
# (None: derived, e.g. num_key_value_heads defaults to num_attention_heads)
_LLAMA = {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
          "num_key_value_heads": None, "vocab_size": 32000, "tie_word_embeddings": False}
TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": _LLAMA,  # LLaVA-1.5 (vicuna), Idefics2/3 and SmolVLM's SmolLM
    "mistral": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "vocab_size": 32000, "tie_word_embeddings": False},
    "qwen2": {"hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 32, "vocab_size": 151936, "tie_word_embeddings": False},
    "gemma": {"hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16,
              "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000, "tie_word_embeddings": True},
    "gemma2": {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
               "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000, "tie_word_embeddings": True},
    "gemma3_text": {"hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
                    "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208, "tie_word_embeddings": True},
    "phi3": {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": None, "vocab_size": 32064, "tie_word_embeddings": False},
    "opt": {"hidden_size": 768, "ffn_dim": 3072, "num_hidden_layers": 12, "num_attention_heads": 12,
            "vocab_size": 50272, "tie_word_embeddings": True},  # BLIP-2
}
# the vision towers VLMs nest without writing their sizes (LLaVA's CLIP, PaliGemma's SigLIP)
VISION_DEFAULTS: dict[str, dict[str, Any]] = {
    "clip_vision_model": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                          "num_attention_heads": 12, "image_size": 224, "patch_size": 32},
    "siglip_vision_model": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                            "num_attention_heads": 12, "image_size": 224, "patch_size": 16},
}


def filled(sub: dict, table: dict[str, dict[str, Any]]) -> dict:
    """A nested config with what its model type leaves out filled in, as transformers' config class would."""
    defaults = table.get(str(sub.get("model_type")), {})
    out = {**{k: v for k, v in defaults.items() if v is not None}, **{k: v for k, v in sub.items() if v is not None}}
    if "num_attention_heads" in out and out.get("num_key_value_heads") is None and "num_key_value_heads" in defaults:
        out["num_key_value_heads"] = out["num_attention_heads"]
    return out


def text_config(cfg: dict) -> dict:
    """The language model's part of a config, filled: a nested text_config (LLaVA, Idefics3), else the config
    itself (a text model, or a flat VLM such as Qwen2-VL whose text fields sit beside its vision_config)."""
    text = cfg.get("text_config")
    if not isinstance(text, dict) or not text:
        return cfg
    inherited = {"tie_word_embeddings": cfg["tie_word_embeddings"]} if "tie_word_embeddings" in cfg else {}
    return filled({**inherited, **text}, TEXT_DEFAULTS)


def sides(value: Any) -> tuple[int, int] | None:
    """(height, width) of an image or patch size as a vision config writes it: one side (ViT, SigLIP, Qwen2-VL) or a
    [height, width] pair (InternVL's image_size and patch_size); None when neither."""
    if isinstance(value, int) and value > 0:
        return value, value
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        return int(value[0]), int(value[1])
    return None


def vision_config(cfg: dict) -> dict | None:
    vision = cfg.get("vision_config")
    return filled(vision, VISION_DEFAULTS) if isinstance(vision, dict) else None


@dataclass(frozen=True)
class Quantization:
    """How a checkpoint's config.json says its weights are stored (`quantization_config`), named as transformers'
    AutoQuantizer names it (quantizers/auto.py supports_quant_method: load_in_4bit / load_in_8bit make
    "bitsandbytes_4bit" / "bitsandbytes_8bit", anything else its quant_method: "gptq", "awq", "fp8", "mxfp4", ...)."""

    method: str
    bits: float | None = None  # bits per stored weight, where the config says them

    @property
    def bitsandbytes(self) -> bool:
        return self.method.startswith("bitsandbytes")

    def unpacked_params(self, stored: dict[str, int] | None) -> int | None:
        """The parameters of a checkpoint stored so, from the Hub's count of its tensors by dtype (safetensors
        parameters), where that count can be undone exactly; None where not (the config's shape counts them).
        MXFP4 (gpt-oss): the Hub counts every byte of a `*_blocks` tensor as its two 4-bit weights, and one U8
        `*_scales` entry per 32 weights beside them (openai/gpt-oss-20b: U8 19,707,494,400 = 19,110,297,600
        weights x 33/32), and the rest (attention, biases, norms, embeddings) in bf16."""
        if self.method != "mxfp4" or not stored or not stored.get("U8") or stored["U8"] % 33:
            return None
        return sum(count for dtype, count in stored.items() if dtype != "U8") + stored["U8"] // 33 * 32

    def describe(self) -> str:
        name = {"bitsandbytes_4bit": "bitsandbytes 4-bit", "bitsandbytes_8bit": "bitsandbytes 8-bit"}.get(
            self.method, self.method)
        return f"{name} ({self.bits:g}-bit)" if self.bits and not self.bitsandbytes else name


def quantization_of(cfg: dict) -> Quantization | None:
    """The stored quantization of a pre-quantized checkpoint (None: its weights are plain floats)."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict) or not q:
        return None
    if q.get("load_in_4bit") or q.get("_load_in_4bit"):
        return Quantization("bitsandbytes_4bit", 4)
    if q.get("load_in_8bit") or q.get("_load_in_8bit"):
        return Quantization("bitsandbytes_8bit", 8)
    method = str(q.get("quant_method") or "unknown").lower()
    bits = q.get("bits") or q.get("w_bit")
    if bits is None and method in ("fp8", "mxfp8", "fbgemm_fp8"):
        bits = 8
    return Quantization(method, float(bits) if isinstance(bits, int | float) else (4.0 if method == "mxfp4" else None))


# a .safetensors file: an 8-byte little-endian header length, then that JSON header ({name: {dtype, shape,
# data_offsets}}, and "__metadata__"), then the tensors' bytes
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit on a header
# saved beside the weights, no parameters: batch norm's statistics, older checkpoints' position ids
_BUFFERS = (".running_mean", ".running_var", ".num_batches_tracked", ".position_ids")


def counted_params(shapes: dict[str, list[int]]) -> int:
    """Parameters of a checkpoint's tensors (its safetensors headers' shapes: no tensor is loaded and no torch is
    needed), buffers left out."""
    return sum(math.prod(shape) for name, shape in shapes.items() if not name.endswith(_BUFFERS))


def safetensors_shapes(folder: Path) -> dict[str, list[int]] | None:
    """Each tensor's name and shape in a local folder's .safetensors headers (the shards
    model.safetensors.index.json names, else the folder's own .safetensors files); None when it holds none (or one
    cannot be read)."""
    index = folder / "model.safetensors.index.json"
    try:
        if index.is_file():
            names = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
            files = [folder / name for name in names]
        else:
            files = sorted(folder.glob("*.safetensors"))
        shapes: dict[str, list[int]] = {}
        for path in files:
            shapes.update(_header_shapes(path))
        return shapes or None
    except (OSError, ValueError, KeyError, struct.error) as exc:
        log.info("could not read the safetensors headers of %s: %s", folder, exc)
        return None


def _header_shapes(path: Path) -> dict[str, list[int]]:
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        if length > _MAX_HEADER:
            raise ValueError(f"{path.name}: a {length}-byte header is no safetensors header")
        header = json.loads(handle.read(length))
    return {name: t["shape"] for name, t in header.items() if name != "__metadata__"}


# a weight's name past its module's: weight, bias, and what bitsandbytes saves beside a 4-bit weight
# (q_proj.weight.absmax, q_proj.weight.quant_state.bitsandbytes__nf4)
_PAST_MODULE = re.compile(r"\.(weight|bias)(\..*)?$")


def module_of(weight: str) -> str:
    """The dotted name of the module a checkpoint's weight belongs to."""
    stripped = _PAST_MODULE.sub("", weight)
    return stripped if stripped != weight else weight.rsplit(".", 1)[0]


# set while a tool call runs: (model, offline) -> its files, so that the call reads each file once
_CALL_FILES: ContextVar[dict | None] = ContextVar("call_model_files", default=None)


@contextmanager
def one_read_each() -> Iterator[None]:
    """Within this block a model's files are read once, however many layers ask for them."""
    if _CALL_FILES.get() is not None:
        yield
        return
    reset = _CALL_FILES.set({})
    try:
        yield
    finally:
        _CALL_FILES.reset(reset)


class ModelFiles:
    """What one model's files say. `config` is None when there is no config.json to read (offline, or none)."""

    def __init__(self, model: str, *, token: str | None, local: bool, config: dict | None, info: Any = None,
                 source: str, note: str | None = None, params: int | None = None,
                 weights: frozenset[str] | None = None) -> None:
        """params, weights: a local folder's count and tensor names from its safetensors headers (a Hub model's
        count is model_info's total, its names its shard index's, read when asked)."""
        self.model, self.token, self.local, self.config, self.source, self.note = (model, token, local, config,
                                                                                   source, note)
        self.pipeline_tag = getattr(info, "pipeline_tag", None)
        self.library_name = getattr(info, "library_name", None)
        safetensors = getattr(info, "safetensors", None)
        self.params = int(safetensors.total) if safetensors is not None and safetensors.total else params
        counts = getattr(safetensors, "parameters", None)  # the Hub's tensor elements by dtype
        self.stored = {str(k): int(v) for k, v in counts.items()} if isinstance(counts, dict) else None
        self._json: dict[str, Any] = {}
        self._weights = weights

    def module_names(self) -> frozenset[str] | None:
        """The dotted names of the modules the checkpoint's weights belong to (what PEFT matches LoRA targets
        against, as named in the files: transformers may rename a prefix on load, rarely a module's own name): a
        local folder's safetensors headers, a Hub model's shard index (model.safetensors.index.json); None when
        unknown (a Hub model in one file: its header is not read)."""
        weights = self._weights
        if weights is None and not self.local:
            index = self.json("model.safetensors.index.json")
            found = index.get("weight_map") if isinstance(index, dict) else None
            weights = frozenset(found) if isinstance(found, dict) else None
        return frozenset(module_of(w) for w in weights) if weights else None

    def json(self, name: str) -> Any:
        """Another JSON file of the model (None when it has none), read once; a read that fails says so in the
        log and counts as none (these files refine what config.json says)."""
        if name not in self._json:
            try:
                self._json[name] = self._read(name)
            except Exception as exc:
                log.info("could not read %s of %s: %s", name, self.model, exc)
                self._json[name] = None
        return self._json[name]

    def _read(self, name: str) -> Any:
        if self.local:
            path = Path(self.model).expanduser() / name
            return json.loads(path.read_text()) if path.is_file() else None
        if self.config is None:
            return None
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError

        from hf_train_mcp.hub import bounded, hub_endpoint

        def read() -> Any:
            try:
                path = hf_hub_download(self.model, name, token=self.token or False, endpoint=hub_endpoint())
            except EntryNotFoundError:
                return None
            return json.loads(Path(path).read_text())

        return bounded(f"reading {self.model}/{name}", read, self.token)


def model_files(model: str, token: str | None = None, *, offline: bool = False) -> ModelFiles:
    """The files of a local model folder, or of a Hub model (model_info with its pipeline tag, library and
    safetensors total, then config.json); offline, a Hub model has none. Raises when the Hub cannot be read
    (sizing falls back to the model's name and says why)."""
    cache = _CALL_FILES.get()
    key = (model, bool(offline), token)
    if cache is not None and key in cache:
        found = cache[key]
        if isinstance(found, Exception):
            raise found
        return found
    try:
        files = _read_files(model, token, offline=offline)
    except Exception as exc:
        if cache is not None:
            cache[key] = exc
        raise
    if cache is not None:
        cache[key] = files
    return files


def _read_files(model: str, token: str | None, *, offline: bool) -> ModelFiles:
    path = Path(model).expanduser()
    if is_local(model):  # a remote caller's Hub id is never read from the server's working folder
        config = path / "config.json"
        shapes = safetensors_shapes(path) if path.is_dir() else None
        params = counted_params(shapes) if shapes else None
        return ModelFiles(model, token=token, local=True, params=params, weights=frozenset(shapes or ()) or None,
                          source="local config.json" + (" + safetensors headers" if params else ""),
                          config=json.loads(config.read_text()) if config.is_file() else None)
    if offline:
        return ModelFiles(model, token=token, local=False, config=None, source="model name")
    from huggingface_hub import hf_hub_download

    from hf_train_mcp.hub import bounded, hub_api, hub_endpoint

    info = bounded(f"reading {model}", lambda: hub_api(token).model_info(
        model, expand=["safetensors", "pipeline_tag", "library_name"]), token)
    from huggingface_hub.errors import EntryNotFoundError

    def config() -> dict | None:
        try:
            return json.loads(Path(hf_hub_download(model, "config.json", token=token or False,
                                                   endpoint=hub_endpoint())).read_text())
        except EntryNotFoundError:  # a repo without one (GGUF files only, say): its safetensors total still counts
            return None

    found = bounded(f"reading {model}/config.json", config, token)
    return ModelFiles(model, token=token, local=False, info=info, config=found,
                      source="hub config.json + safetensors", note=None if found else "it has no config.json")


MAX_ROUTER_DEPTH = 4  # routers inside routers, read this deep (deeper ones are reported as custom)


def custom_modules(folder: Path, depth: int = 0) -> list[str]:
    """The module classes a local sentence-transformers folder names outside `sentence_transformers.*`: its
    modules.json's types and its routers' (router_config.json, else config.json, "types"). sentence-transformers
    imports each from the folder's own Python files whatever trust_remote_code says, a local folder being trusted
    (util/misc.py import_module_class: `trusted = trust_remote_code or is_local_dir`)."""
    modules = _json_file(folder / "modules.json") if depth == 0 else None
    if depth:
        config = _json_file(folder / "router_config.json") or _json_file(folder / "config.json")
        types = config.get("types") if isinstance(config, dict) else None
        modules = [{"type": t, "path": name} for name, t in types.items()] if isinstance(types, dict) else []
    found = []
    for module in modules if isinstance(modules, list) else []:
        kind = module.get("type") if isinstance(module, dict) else module
        if not isinstance(kind, str) or not kind.startswith("sentence_transformers."):
            found.append(str(kind))
        elif kind.rsplit(".", 1)[-1] == "Router":
            inner = folder / str(module.get("path") or "")
            found += custom_modules(inner, depth + 1) if depth < MAX_ROUTER_DEPTH else [kind]
    return found


def _json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
