"""Every model of the zoo (tests/data/configs) through submit_training's dry run (LoRA and QLoRA), with its real Hub
files served as the Hub serves them: each answer is a plan whose script compiles and whose LoRA targets adapt
modules of that very architecture (its modules as transformers builds them from the real config, on the meta
device), or a clear refusal that says why, with nothing launched. Chat rows for every model, and rows with an image
for the models that see images (the plan then adapts the language tower alone)."""

import json
import re

import pytest
from mcp import Client

from hf_train_mcp.shell.app import build_server
from tests.conftest import needs_training
from tests.emulator import Emulator, ViewerDataset
from tests.helpers import CHAT_ROWS, script_config
from tests.hub_configs import CONFIGS, NEEDS_EXTRA, REMOTE_CODE_ONLY

pytestmark = [pytest.mark.zoo, pytest.mark.anyio]
FOLDERS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())


@pytest.fixture
def zoo(hub: Emulator) -> Emulator:
    for name in FOLDERS:
        hub.serve_model(CONFIGS / name)
    hub.datasets["org/chat"] = ViewerDataset({"default": {"train": CHAT_ROWS}})
    rows = [{"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "A chart."}]}],
             "images": [{"src": f"{hub.url}/assets/shot{i}.png", "height": 448, "width": 448}]} for i in range(6)]
    hub.datasets["org/screens"] = ViewerDataset({"default": {"train": rows}})
    return hub


def built_modules(folder: str) -> dict[str, str]:
    """{dotted name: class name} of every module of the model as a training job loads it from the real config:
    as TRL's create_model_from_path picks the class (the config's architectures[0], else a causal LM)."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(CONFIGS / folder, trust_remote_code=False)
    if hasattr(config, "quantization_config"):  # the layout, not the stored format, decides the names
        del config.quantization_config
    cls = getattr(transformers, (config.architectures or [""])[0], None) or transformers.AutoModelForCausalLM
    with torch.device("meta"):
        model = cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    return {name: type(module).__name__ for name, module in model.named_modules() if name}


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


async def plan_or_refusal(client: Client, arguments: dict) -> tuple[dict | None, str | None]:
    result = await client.call_tool("submit_training", arguments)
    text = result.content[0].text if result.content else ""
    return (None, text) if result.is_error else (result.structured_content, None)


@needs_training
@pytest.mark.parametrize("folder", [f for f in FOLDERS if f not in REMOTE_CODE_ONLY])
async def test_each_zoo_model_is_planned_with_targets_it_has_or_refused_with_why(zoo: Emulator, folder: str) -> None:
    if folder in NEEDS_EXTRA:
        pytest.importorskip(NEEDS_EXTRA[folder])
    repo = folder.replace("--", "/", 1)
    posted = len(zoo.posted_jobs())
    answers = {}
    async with Client(build_server()) as client:
        for dataset, peft in (("org/chat", "lora"), ("org/chat", "qlora"), ("org/screens", "lora")):
            answers[dataset, peft] = await plan_or_refusal(client, {
                "model": repo, "dataset": dataset, "hub_model_id": "emu-user/zoo-out", "max_steps": 2,
                "peft": peft, "dry_run": True})
    assert zoo.posted_jobs()[posted:] == []
    for (dataset, peft), (plan, refusal) in answers.items():
        if refusal is not None:
            assert re.search(r"nothing was (launched|submitted)", refusal, re.I), (dataset, peft, refusal)
            continue
        compile(plan["script"], "train.py", "exec")
        config = script_config(plan["script"])
        modules = built_modules(folder)
        hit = adapted(config["lora"]["target_modules"], modules)
        assert hit, (dataset, peft, config["lora"]["target_modules"],
                     sorted({n.rsplit(".", 1)[-1] for n in modules})[:40])
        if dataset == "org/screens" and config.get("vision"):  # the language tower alone, never the vision tower
            assert not [n for n in hit if re.search(r"vision|visual|image", n)], (dataset, hit[:8])


def _experts(folder: str) -> int:
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return int(next((text[k] for k in ("num_local_experts", "num_experts", "n_routed_experts") if text.get(k)), 0))


@pytest.mark.parametrize("folder", [f for f in FOLDERS if _experts(f) > 1])
async def test_each_zoo_mixture_of_experts_is_estimated_by_its_active_parameters(zoo: Emulator, folder: str) -> None:
    """A token's compute is its active experts' (Gemma 4 names them top_k_experts: it was estimated at all 25.8B)."""
    repo = folder.replace("--", "/", 1)
    async with Client(build_server()) as client:
        result = await client.call_tool("estimate_cost", {"model": repo, "dataset": "org/chat", "flavor": "a100-large"})
    assert not result.is_error, result.content[0].text
    assumptions = result.structured_content["assumptions"]
    active, total = assumptions.get("active_params_billions"), assumptions["params_billions"]
    assert active and 0 < active < total / 2, (active, total)
    if folder == "google--gemma-4-26B-A4B":  # its card: 3.8B active of 25.2B ("A4B")
        assert 3.5 < active < 4.0, active
