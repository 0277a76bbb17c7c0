"""Every model of the zoo (tests/data/configs) through submit_training's dry run, with its real Hub files served as
the Hub serves them, in every way to train it: each method, on rows with images where the method reads them, each
PEFT mode, and the Unsloth engine. What the server says of the model (planning/support.py support_of) is held to
what the tool does: a "yes" is a plan whose script compiles and whose LoRA targets adapt modules of that very
architecture, built on the meta device from the real config by the script's own functions (as the job loads it),
with a classifier's head a real module of it, trained whole beside the adapter; a "no" is the tool's refusal,
with its reason and what to pick instead, and nothing posted. And every mixture of experts is estimated by its
active parameters."""

import json
import re
import runpy
from pathlib import Path

import pytest
from mcp import Client
from pydantic import ValidationError

from hf_train_mcp import engines, methods
from hf_train_mcp.contract.readable import readable
from hf_train_mcp.contract.requests import EstimateRequest, TrainingRequest
from hf_train_mcp.errors import TrainError
from hf_train_mcp.estimate.sizing import model_size
from hf_train_mcp.planning.support import Cell, support_of
from hf_train_mcp.service import Core
from hf_train_mcp.shell.app import build_server
from tests.conftest import needs_training
from tests.emulator import Emulator
from tests.hub_configs import CONFIGS, NEEDS_EXTRA, chat_template_of
from tests.helpers import script_config, zoo_dataset

pytestmark = [pytest.mark.zoo, pytest.mark.anyio]
FOLDERS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())
BASE = {"hub_model_id": "emu-user/zoo-out", "max_steps": 2, "flavor": "h200", "dry_run": True}
_SCRIPTS: dict[str, dict] = {}  # template -> a rendered script's namespace (its functions), one per worker
_BUILT: dict[tuple[str, str | None], object] = {}  # (folder, auto class) -> the model built on the meta device
# One model of each family whose every planned PEFT mode is rendered (the others render LoRA, and are sized in the
# other modes): a chat LLM, GPT-2's Conv1D, a vision-language model, encoders, an embedding model, image models
EVERY_PEFT_RENDERED = {"Qwen--Qwen2.5-0.5B-Instruct", "openai-community--gpt2", "Qwen--Qwen2-VL-2B-Instruct",
                       "distilbert--distilbert-base-uncased", "sentence-transformers--all-MiniLM-L6-v2",
                       "google--vit-base-patch16-224", "microsoft--resnet-50", "openai--clip-vit-base-patch32"}


def adapted(targets: str | list[str], modules: dict[str, str]) -> list[str]:
    """The modules PEFT would adapt (peft/tuners/tuners_utils.py check_target_module_exists: a list matches a name
    or a `.`-suffix, a string other than 'all-linear' is re.fullmatch'ed; 'all-linear': every Linear but the
    output layer, `linear_classes = (torch.nn.Linear, Conv1D)`: GPT-2's Conv1D counts)."""
    if targets == "all-linear":
        linear = [n for n, kind in modules.items() if kind in ("Linear", "Conv1D")]
        return [n for n in linear if n.rsplit(".", 1)[-1] not in ("lm_head", "classifier", "score")]
    if isinstance(targets, str):
        return [n for n in modules if re.fullmatch(targets, n)]
    return [n for n in modules if any(n == t or n.endswith("." + t) for t in targets)]


def script_namespace(script: str, tmp_path: Path, template: str) -> dict:
    """The functions of a rendered script (its main() not run), one per template: their CONFIG is set per plan."""
    if template not in _SCRIPTS:
        path = tmp_path / f"{template}.py"
        path.write_text(script)
        functions = runpy.run_path(str(path), run_name="zoo_script_under_test")  # a copy of the module's globals
        _SCRIPTS[template] = functions["weightless_model"].__globals__  # the one its functions read CONFIG from
    return _SCRIPTS[template]


def built(namespace: dict, config: dict, folder: str, auto_class: str | None, tmp_path: Path):
    """The model the job loads, as the script's own weightless_model builds it from the real config (a checkpoint
    stored quantized is built from its layout: the module names are the unquantized model's)."""
    key = (folder, auto_class)
    if key not in _BUILT:
        source = CONFIGS / folder
        stored = json.loads((source / "config.json").read_text())
        if "quantization_config" in stored:
            source = tmp_path / folder
            source.mkdir(exist_ok=True)
            del stored["quantization_config"]
            (source / "config.json").write_text(json.dumps(stored))
        from transformers.initialization import no_init_weights  # names only: no meta tensor need be "initialised"

        namespace["CONFIG"] = {**config, "model": str(source)}
        with no_init_weights():
            _BUILT[key] = namespace["weightless_model"](auto_class)
    return _BUILT[key]


def check_plan(plan: dict, folder: str, cell: Cell, tmp_path: Path) -> None:
    """A plan: its script compiles, and its LoRA targets adapt modules of the real architecture (the language tower
    alone on images); a classifier's head is a real module, saved whole beside the adapter and never a target."""
    compile(plan["script"], "train.py", "exec")
    config = script_config(plan["script"])
    assert (config["method"], config["peft"], config["engine"]) == (cell.method, cell.peft, cell.engine)
    if cell.peft == "full" or (folder in NEEDS_EXTRA and not _importable(NEEDS_EXTRA[folder])):
        return
    spec = methods.get(cell.method)
    namespace = script_namespace(plan["script"], tmp_path, spec.template_name)
    auto_class = ("AutoModel" if spec.model_library == "sentence-transformers" else
                  spec.auto_class if spec.classifier else None)  # None: as TRL picks it (the config's own class)
    model = built(namespace, config, folder, auto_class, tmp_path)
    modules = {name: type(module).__name__ for name, module in model.named_modules() if name}
    heads = namespace["head_modules"](model) if spec.classifier and spec.model_library == "transformers" else []
    if spec.classifier and spec.model_library == "transformers":
        assert heads and set(heads) <= dict(model.named_children()).keys(), (cell, heads)
    targets = config["lora"]["target_modules"]
    if spec.inputs == "image" and targets == "all-linear":  # a convolutional net's: its convolutions
        targets = namespace["convolutions"](model) or targets
    hit = [n for n in adapted(targets, modules) if n.split(".")[0] not in heads]
    assert hit, (cell, targets, sorted({n.rsplit(".", 1)[-1] for n in modules})[:40])
    if cell.images:  # the language tower alone, never the vision tower
        assert not [n for n in hit if re.search(r"vision|visual|image", n)], (cell, hit[:8])


def _importable(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


def tried(support, every_peft: bool) -> list[tuple[Cell, str]]:
    """(cell, tool) for each cell a call checks: of each method (on rows with images or not), the LoRA plan as
    submit_training's dry run renders it, its other planned PEFT modes and another engine's plans as estimate_cost
    sizes them (the same checks, without a script: every_peft renders them all), and one dry run per distinct
    refusal (a refusal the PEFT modes share is one decision). Another engine's refusal that the default engine
    gives too is that decision again."""
    chosen: dict[tuple, tuple[Cell, str]] = {}
    for cell in support.cells:
        group = (cell.engine, cell.method, cell.images)
        if cell.refusal is None:
            lora = support.cell(cell.method, "lora", images=cell.images, engine=cell.engine)
            rendered = every_peft or (cell.engine == engines.DEFAULT and (cell.peft == "lora" or lora.refusal))
            chosen.setdefault((*group, cell.peft), (cell, "submit_training" if rendered else "estimate_cost"))
        elif cell.engine == engines.DEFAULT or cell.refusal != support.cell(
                cell.method, cell.peft, images=cell.images).refusal:
            chosen.setdefault((*group, cell.refusal), (cell, "submit_training"))
    return list(chosen.values())


def arguments(repo: str, cell: Cell) -> dict:
    extra = {"teacher_model": repo} if cell.method == "distill" else {}
    if cell.engine != engines.DEFAULT:
        extra["engine"] = cell.engine
    return {**BASE, "model": repo, "dataset": zoo_dataset(cell.method, cell.images), "method": cell.method,
            "peft": cell.peft, **extra}


def call(core: Core, tool: str, arguments: dict) -> tuple[dict | None, str]:
    """A tool through the service the MCP tool calls (the transport adds nothing to a plan): (its result, "") or
    (None, the refusal as the tool words it)."""
    try:
        if tool == "estimate_cost":  # sized from a row count (a dataset where its rows hold images)
            fields = {k: v for k, v in arguments.items() if k not in ("hub_model_id", "max_steps", "dry_run")}
            if not arguments["dataset"].endswith("-images"):
                fields = {k: v for k, v in fields.items() if k != "dataset"} | {"num_examples": 1000}
            return core.estimate_cost(EstimateRequest(**fields)).model_dump(), ""
        return core.submit_training(TrainingRequest(**arguments)).model_dump(), ""
    except ValidationError as exc:
        return None, readable(exc)
    except TrainError as exc:
        return None, str(exc)


@needs_training
@pytest.mark.parametrize("folder", FOLDERS)
def test_each_way_to_train_each_zoo_model_is_planned_or_refused_as_its_support_says(
        zoo: Emulator, folder: str, tmp_path: Path) -> None:
    _BUILT.clear()  # the models of one folder at a time
    repo = zoo.serve_model(CONFIGS / folder)
    support = support_of(model_size(repo, None), repo)
    posted, core = len(zoo.posted_jobs()), Core()
    for cell, tool in tried(support, every_peft=folder in EVERY_PEFT_RENDERED):
        result, text = call(core, tool, arguments(repo, cell))
        if result is None and cell.refusal is None and "has no chat template" in text:
            assert chat_template_of(folder) is False and "chat_template='chatml'" in text, text  # as its files say
            result, text = call(core, tool, {**arguments(repo, cell), "chat_template": "chatml"})
        if cell.refusal is None:
            assert result is not None, (cell, tool, text)
            if tool == "submit_training":
                check_plan(result, folder, cell, tmp_path)
        else:
            assert result is None, (cell, "planned, yet support says", cell.refusal)
            said = cell.refusal.removesuffix(" Nothing was launched.").rstrip(".")
            assert said[:100] in text, (cell, text)
    assert zoo.posted_jobs()[posted:] == []


def _experts(folder: str) -> int:
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return int(next((text[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if text.get(k)), 0))


@pytest.mark.parametrize("folder", [f for f in FOLDERS if _experts(f) > 1])
async def test_each_zoo_mixture_of_experts_is_estimated_by_its_active_parameters(zoo: Emulator, folder: str) -> None:
    """A token's compute is its active experts' (Gemma 4 names them top_k_experts: it was estimated at all 25.8B)."""
    repo = zoo.serve_model(CONFIGS / folder)
    async with Client(build_server()) as client:
        result = await client.call_tool("estimate_cost", {"model": repo, "dataset": "org/sft", "flavor": "a100-large"})
    assert not result.is_error, result.content[0].text
    assumptions = result.structured_content["assumptions"]
    active, total = assumptions.get("active_params_billions"), assumptions["params_billions"]
    assert active and 0 < active < total / 2, (active, total)
    if folder == "google--gemma-4-26B-A4B":  # its card: 3.8B active of 25.2B ("A4B")
        assert 3.5 < active < 4.0, active
