"""The typed CONFIG of every rendered script, and the check that a template reads only keys its CONFIG declares.

A script's CONFIG dict is validated against its schema when it is rendered (extra="forbid": an unknown key
fails; no defaults: a missing one fails), and `reachable_keys` reads the rendered script itself for the keys
the code that runs can read. Both fail on the server, in tests, before any job: not on a paid GPU at minute 20.
A method's own keys live in its module, as a subclass of TrainingConfig (methods/base.py: MethodSpec.config_schema).
"""

import ast
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from hf_train_mcp.rendering import pysource

Peft = Literal["lora", "qlora", "full"]
# What an evaluation measures, a closed set: each kind is its own templates/_eval_<kind>.py.j2, included by name, so
# a kind without one fails at render. loss (and perplexity) | preference (accuracy) | reward (mean) | accuracy (a
# classifier's, and macro F1) | embedding (cosine accuracy of triplets, Spearman of scored pairs, the loss)
EvalKind = Literal["loss", "preference", "reward", "accuracy", "embedding"]


class ProbeConfig(BaseModel):
    """The preflight's settings (measure.probe_config)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    steps: int
    only: bool
    sample_rows: int
    train_budget_s: int | None
    extra_s: int
    margin: float


class ScriptConfig(BaseModel):
    """What every script reads: the model, how it was trained, where it writes."""

    # built on the first render (each method module declares its own): tools/list needs none of them
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, defer_build=True)

    method: str
    model: str
    peft: Peft
    chat_template: str | None
    image_slot: str | None = None  # where VISION_CHATML puts the processor's image placeholder (vision_processor)
    max_length: int
    output_dir: str
    probe: ProbeConfig | None
    expects_gpu: bool
    push_to_hub: bool
    hub_model_id: str | None


class LoraConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    r: int
    alpha: int
    dropout: float
    target_modules: str | list[str]


class DataConfig(BaseModel):
    """Where the rows come from (a training run, or the evaluation of one)."""

    model_config = ConfigDict(defer_build=True)

    dataset: str | None
    dataset_config: str | None
    dataset_split: str
    column_mapping: dict[str, str]
    keep_columns: list[str] | None
    eval_split: float | None
    seed: int


class TrainingConfig(DataConfig, ScriptConfig):
    """Every training method's CONFIG; a method's own keys are a subclass in its module."""

    engine: Literal["trl", "unsloth"]  # what loads and patches the model (engines.py)
    lora: LoraConfig
    learning_rate: float
    epochs: float
    max_steps: int | None
    per_device_batch_size: int
    per_device_eval_batch_size: int
    gradient_accumulation: int
    use_liger_kernel: bool
    logging_steps: int
    save_steps: int
    save_total_limit: int
    trackio: bool
    trackio_space_id: str | None
    project: str
    run_name: str
    private: bool
    resume_from_repo: str | None
    resume_from_dir: str | None
    attn_implementation: str | None
    card: dict[str, Any]


class FollowupConfig(ScriptConfig):
    """What an evaluation or an export reads of the model it follows."""

    model_kind: Literal["adapter", "full"]
    base_model: str | None
    auto_class: str  # the transformers class that loads the model (its method's)
    processor: str  # and its preprocessing
    vision: bool  # a vision-language model: images go through its processor


class EvaluateConfig(DataConfig, FollowupConfig):
    eval_metric: EvalKind  # its method's (MethodSpec.eval_metric): which templates/_eval_<kind>.py.j2 is included
    classifier: bool
    held_out: str | None
    num_samples: int | None
    compare_samples: int
    sample_tokens: int
    max_completion_length: int
    reward_funcs: list[str]
    tasks: list[str]
    card_folder: str | None
    card_repo: str | None
    project: str
    run_name: str
    trackio_space_id: str | None
    trackio_dir: str | None


class ExportConfig(FollowupConfig):
    format: Literal["merged", "gguf"]
    classifier: bool
    model_library: Literal["transformers", "sentence-transformers"]  # what loads and saves the model (its method's)
    quantization: str | None
    file_stem: str
    dtype: str
    total_steps: int
    llama_cpp_repo: dict[str, Any]
    card_source: str | None
    private: bool
    card: dict[str, Any]


FOLLOWUP_SCHEMAS: dict[str, type[ScriptConfig]] = {"evaluate": EvaluateConfig, "export": ExportConfig}


class TemplateKeyError(ValueError):
    """A template reads a CONFIG key its schema does not declare: a bug of this server, caught at render."""


def _config_key(node: ast.AST) -> tuple[str, bool] | None:
    """(key, required) for CONFIG["key"] (required) and CONFIG.get("key", ...) (optional)."""
    match node:
        case ast.Subscript(value=ast.Name(id="CONFIG"), slice=ast.Constant(value=str() as key)):
            return key, True
        case ast.Call(func=ast.Attribute(value=ast.Name(id="CONFIG"), attr="get"),
                      args=[ast.Constant(value=str() as key), *_]):
            return key, False
    return None


def _reads(nodes: list[ast.AST]) -> tuple[dict[str, bool], set[str]]:
    """The CONFIG keys some code reads, and the names it calls or mentions (a function passed as a callback)."""
    keys: dict[str, bool] = {}
    names: set[str] = set()
    for top in nodes:
        for node in ast.walk(top):
            found = _config_key(node)
            if found:
                keys[found[0]] = keys.get(found[0], False) or found[1]
            elif isinstance(node, ast.Name):
                names.add(node.id)
    return keys, names


def reachable_keys(source: str) -> dict[str, bool]:
    """The CONFIG keys the code that can run reads: module-level code and every function or class it reaches by
    name (a helper of _base.py.j2 that this script never calls does not count). Value: read with a subscript."""
    tree = pysource.parse(source)
    defined = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    keys, pending = _reads([n for n in tree.body if n.__class__ not in (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                         ast.ClassDef)])
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen or name not in defined:
            continue
        seen.add(name)
        more, called = _reads([defined[name]])
        for key, required in more.items():
            keys[key] = keys.get(key, False) or required
        pending |= called - seen
    return keys


@lru_cache(maxsize=64)
def _reachable_keys_once(source: str) -> dict[str, bool]:
    return reachable_keys(source)


def declared_keys() -> set[str]:
    """Every key some schema declares (the methods' subclasses included, once their modules are imported)."""
    keys: set[str] = set()
    pending: list[type[ScriptConfig]] = [ScriptConfig]
    while pending:
        schema = pending.pop()
        keys |= set(schema.model_fields)
        pending += schema.__subclasses__()
    return keys


def check_template_keys(source: str, schema: type[ScriptConfig], config_literal: str | None = None) -> None:
    """Every key the script can read is a field of its schema; an optional read (.get) names a key some schema
    declares (a typo is no optional key). config_literal: the CONFIG value as the source spells it, which reads no
    key and calls nothing: the keys of every script that differs from another by its CONFIG alone are walked once."""
    fields = set(schema.model_fields)
    known = declared_keys()
    code = source.replace(f"CONFIG = {config_literal}\n", "CONFIG = {}\n", 1) if config_literal else source
    for key, required in _reachable_keys_once(code).items():
        if key not in fields and (required or key not in known):
            raise TemplateKeyError(f"the {schema.__name__} template reads CONFIG[{key!r}], which {schema.__name__} "
                                   "does not declare")


def validate_config(config: dict[str, Any], schema: type[ScriptConfig]) -> None:
    """The CONFIG a script is rendered with matches its schema exactly (raises pydantic's ValidationError)."""
    schema.model_validate(config)
