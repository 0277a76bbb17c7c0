"""GRPO (TRL GRPOTrainer): num_generations completions per prompt, scored by reward functions (built-in, or one
`reward` function of the caller's), the policy moved towards the better ones of each group."""

import ast
import re
import sys
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from hf_train_mcp.rendering import pysource
from hf_train_mcp.methods.base import MethodSpec, Option
from hf_train_mcp.methods.sft import IMAGE_ALIASES, vision_config
from hf_train_mcp.rendering.config import TrainingConfig

NUM_GENERATIONS_DEFAULT = 8
MAX_COMPLETION_DEFAULT = 256  # TRL's 512 doubles generation time; most reasoning-format tasks fit 256
REFERENCE_COLUMNS = ("answer", "solution", "ground_truth", "reference", "target")
# prompts of the most-downloaded prompt-only sets: gsm8k question, MATH/NuminaMath/OpenR1 problem, ...
PROMPT_ALIASES = ("question", "problem", "instruction", "query", "input")
RewardName = Literal["think_format", "length", "accuracy"]

# Top-level names of the rendered GRPO script: user imports must not rebind them (a test keeps this in sync).
RESERVED_NAMES = frozenset({
    "json", "os", "sys", "CONFIG", "is_main_process", "emit", "completion_text", "think_format_reward",
    "length_reward", "final_answer", "accuracy_reward", "reward_functions", "load_training_data", "to_role_content",
    "precision", "require_gpu", "model_init_kwargs", "quantization_config", "upcast_trainable", "peft_config",
    "load_tokenizer", "common_args", "resume_checkpoint", "status_callback", "build_trainer", "main", "time",
    "SCRIPT_STARTED", "rows_per_step", "preflight", "card_text", "_hours", "_dollars", "_evaluation_section",
    "base_license", "write_card", "read_card", "EVALUATION_MARK", "own_gpu", "new_trainer", "truncate_prompts",
    "truncated_prompt", "teardown", "adapter_labels", "load_processing", "trainer_model", "unsloth_model", "unsloth",
    "as_images", "vision_rows", "vision_loss", "image_path", "as_turns", "vision_processor", "vision_generate",
    "vision_preference_accuracy", "fsdp_loading", "full_state_dict_for_final_save", "cap_image_tokens",
    "image_placeholder", "frozen_vision_tower", "checkpointing", "input_limit", "weightless_model", "head_modules",
    "check_lora_targets", "position_limit", "fit_positions", "peak_memory_gb", "stop_over_budget",
})


def _plain_annotation(node: ast.expr) -> bool:
    """Type names, dotted names, subscripts, `X | Y` and constants: nothing that calls code when evaluated."""
    match node:
        case ast.Constant() | ast.Name():
            return True
        case ast.Attribute(value=value):
            return _plain_annotation(value)
        case ast.Subscript(value=value, slice=index):
            return _plain_annotation(value) and _plain_annotation(index)
        case ast.Tuple(elts=items) | ast.List(elts=items):
            return all(_plain_annotation(i) for i in items)
        case ast.BinOp(left=left, op=ast.BitOr(), right=right):
            return _plain_annotation(left) and _plain_annotation(right)
    return False


def check_reward_code(source: str) -> str:
    """User reward code must be one function definition (plus imports): nothing that runs at import time."""
    try:
        tree = pysource.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"reward_code does not parse: {exc.msg} (line {exc.lineno})") from None
    functions = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                raise ValueError("reward_code: `from __future__` imports must open a file and this code is pasted "
                                 "into the middle of the script; remove them")
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                same_module = isinstance(node, ast.Import) and alias.asname is None  # `import os` rebinds os to os
                if (bound in RESERVED_NAMES and not same_module) or alias.name == "*":
                    raise ValueError(f"reward_code: `import {alias.name}` would replace the script's own "
                                     f"`{bound}`; import it under another name")
                if bound == "reward":
                    raise ValueError("reward_code: an import may not bind `reward`, the function that is checked")
            continue
        if isinstance(node, ast.FunctionDef):
            if node.decorator_list:
                raise ValueError("reward_code: decorators run at import time; remove them")
            for arg in [*node.args.defaults, *node.args.kw_defaults]:
                if arg is not None and not isinstance(arg, ast.Constant):
                    raise ValueError("reward_code: default values must be constants (they run at import time)")
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg,
                         node.args.kwarg]
            for annotation in [node.returns, *(a.annotation for a in arguments if a is not None)]:
                if annotation is not None and not _plain_annotation(annotation):
                    raise ValueError("reward_code: annotations run at import time, so they may only name types "
                                     "(e.g. `completions: list[str]`), not call anything")
            functions.append(node.name)
            continue
        raise ValueError(
            f"reward_code line {node.lineno}: only imports and one `def reward(completions, **kwargs)` are allowed "
            "at module level"
        )
    if functions != ["reward"]:
        raise ValueError(
            "reward_code must define exactly one function named `reward(completions, **kwargs)` returning a list "
            f"of floats; found {functions or 'none'}"
        )
    return source


# import name -> PyPI name, where they differ; the job's base dependencies are not added twice
PYPI_NAMES = {"sklearn": "scikit-learn", "yaml": "pyyaml", "PIL": "pillow", "cv2": "opencv-python-headless",
              "bs4": "beautifulsoup4", "math_verify": "math-verify", "Levenshtein": "levenshtein",
              "dateutil": "python-dateutil", "attr": "attrs", "Crypto": "pycryptodome", "skimage": "scikit-image",
              "jose": "python-jose", "dotenv": "python-dotenv", "Bio": "biopython", "rapidfuzz": "rapidfuzz",
              "google": "protobuf", "sentence_transformers": "sentence-transformers", "nltk": "nltk"}
PROVIDED = frozenset({"torch", "transformers", "trl", "datasets", "accelerate", "peft", "trackio", "numpy",
                      "huggingface_hub", "safetensors", "tokenizers", "packaging", "requests", "tqdm", "regex",
                      "hf_train_mcp", "__future__"})


def reward_code_dependencies(source: str | None) -> list[str]:
    """The PyPI packages reward_code imports, for the script's PEP 723 header (the job's environment has only
    what the header lists): top-level module names read with `ast`, never text copied from the code. The
    standard library and what the job already installs are left out."""
    if not source:
        return []
    names: list[str] = []
    for node in pysource.parse(source).body:
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    found = [n for n in dict.fromkeys(names) if n not in sys.stdlib_module_names and n not in PROVIDED]
    return [PYPI_NAMES.get(n, n.replace("_", "-").lower()) for n in found if re.fullmatch(r"[A-Za-z0-9_]+", n)]


NUM_GENERATIONS = Option("num_generations", Annotated[int, Field(ge=2, le=64, description="GRPO completions per "
                                                                                          "prompt")], sizing=True,
                         resolves_to=NUM_GENERATIONS_DEFAULT, changes_loss=True)
MAX_COMPLETION_LENGTH = Option("max_completion_length", Annotated[int, Field(ge=8, le=32_768, description=(
    "GRPO/distill tokens per completion"))], sizing=True, resolves_to=MAX_COMPLETION_DEFAULT)
REWARD_FUNCS = Option("reward_funcs", Annotated[list[RewardName], Field(description="GRPO built-ins")],
                      changes_loss=True)
REWARD_CODE = Option("reward_code", Annotated[str, Field(max_length=20_000, description=(
    "GRPO `def reward(completions, **kw)` source")), AfterValidator(check_reward_code)], changes_loss=True)


class GeneratingConfig(TrainingConfig):
    """A method that samples completions while it trains."""

    max_completion_length: int


class GrpoConfig(GeneratingConfig):
    num_generations: int
    reward_funcs: list[str]
    vision: bool  # prompts with images: the processor, completions sampled from prompt and images
    max_image_tokens: int | None  # vision: an image's tokens at most (the processor's pixel budget)


def notes(columns: set[str]) -> list[tuple[str, str, str | None]]:
    refs = [c for c in REFERENCE_COLUMNS if c in columns]
    if refs:
        return [("warning", f"'{refs[0]}' can drive reward_funcs=['accuracy']", refs[0])]
    return [("warning", "no reference column (answer/solution): only format/length rewards or your reward_code can "
             "score completions", None)]


def reward_functions(req) -> list[str]:
    return req.reward_funcs or (["think_format", "length"] if not req.reward_code else [])


METHOD = MethodSpec(
    name="grpo", title="GRPO", summary="GRPO reinforcement fine-tune",
    formats=("prompt_only", "prompt_completion", "conversational_prompt_completion", "vision_prompt_only"),
    needs="'prompt' (string or list of messages; with 'images' for a vision-language model), plus a reference "
          "column such as 'answer' for accuracy rewards",
    learning_rate=(1e-6, 1e-5), epochs=1.0, max_length=512, tokens_per_example=160,
    eval_metric="reward", pipeline_tag="text-generation",
    aliases={"prompt": PROMPT_ALIASES, "images": IMAGE_ALIASES},
    options=(NUM_GENERATIONS, MAX_COMPLETION_LENGTH, REWARD_FUNCS, REWARD_CODE),
    generates=True, grouped=True, prompt_length=True, data_notes=notes,
    config=lambda req: {**METHOD.sizing_options(req), "reward_funcs": reward_functions(req)}, config_schema=GrpoConfig,
    data_config=vision_config,
    request_dependencies=lambda req: reward_code_dependencies(getattr(req, "reward_code", None)),
    card_settings=lambda config: {"generations": config["num_generations"], "rewards": ", ".join(
        config["reward_funcs"]) or "reward_code"},
)
