"""A method's own settings travel in one `options` object on the wire (the schema lists one parameter, not one per
option), while the requests, sweep grids and CLI flags still name each option directly."""

import pytest
from mcp import Client

from hf_train_mcp import methods
from hf_train_mcp.shell.app import build_server
from hf_train_mcp.contract.requests import SweepRequest
from hf_train_mcp_demo.tiny import example_rows
from tests.emulator import Emulator, ViewerDataset
from tests.helpers import call, refused, script_config

pytestmark = pytest.mark.anyio

PREFS = {"model": "Qwen/Qwen2-0.5B-Instruct", "dataset": "org/prefs", "method": "dpo", "hub_model_id": "emu-user/dpo",
         "max_steps": 4, "dry_run": True}


@pytest.fixture
def prefs(hub: Emulator) -> Emulator:
    hub.datasets["org/prefs"] = ViewerDataset({"default": {"train": example_rows("dpo", 16)}})
    return hub


async def schemas() -> dict[str, dict]:
    async with Client(build_server()) as client:
        return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}


async def test_the_schema_lists_method_options_inside_one_options_object() -> None:
    listed = await schemas()
    nested = {name for name, option in methods.options().items() if not option.top_level}
    for tool in ("submit_training", "estimate_cost"):
        properties = listed[tool]["properties"]
        assert not nested & set(properties), tool
        assert "packing" in properties  # the tool contract names it at the top level
    training = listed["submit_training"]["properties"]["options"]["description"]
    assert all(name in training for name in nested)
    sizing = listed["estimate_cost"]["properties"]["options"]["description"]
    assert "num_generations" in sizing and "beta" not in sizing  # estimate_cost takes what changes time or memory


async def test_an_option_sent_inside_options_reaches_the_script(prefs: Emulator) -> None:
    async with Client(build_server()) as client:
        nested = await call(client, "submit_training", {**PREFS, "options": {"beta": 0.3}})
        flat = await call(client, "submit_training", {**PREFS, "beta": 0.3})  # the flat spelling still works
    assert script_config(nested["script"])["beta"] == 0.3
    differ = {k for k, v in script_config(nested["script"]).items() if script_config(flat["script"])[k] != v}
    assert differ <= {"run_name"}, differ


@pytest.mark.parametrize(("options", "expected"), [
    ({"bogus": 1}, "options takes"),
    ({"beta": 0.3, "eval_split": 0.1}, "not eval_split"),
    ({"num_generations": 4}, "num_generations applies to method 'grpo'"),
    ({"beta": 99}, "beta"),
    ("beta=0.3", "options should be an object"),
])
async def test_bad_options_are_refused_with_what_to_send(prefs: Emulator, options, expected: str) -> None:
    before = len(prefs.posted_jobs())
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**PREFS, "dry_run": False, "options": options})
    assert expected in text, text
    assert len(prefs.posted_jobs()) == before


async def test_an_option_sent_twice_is_refused(prefs: Emulator) -> None:
    async with Client(build_server()) as client:
        text = await refused(client, "submit_training", {**PREFS, "beta": 0.2, "options": {"beta": 0.3}})
    assert "sent both inside options and beside it" in text


async def test_estimate_cost_takes_the_sizing_options_only(hub: Emulator) -> None:
    base = {"model": "Qwen/Qwen2-0.5B-Instruct", "method": "grpo", "num_examples": 500, "flavor": "a10g-large"}
    async with Client(build_server()) as client:
        few = await call(client, "estimate_cost", {**base, "options": {"num_generations": 2}})
        many = await call(client, "estimate_cost", {**base, "options": {"num_generations": 16}})
        text = await refused(client, "estimate_cost", {**base, "options": {"beta": 0.1}})
    assert many["hours"] > few["hours"]
    assert "options takes" in text and "not beta" in text


async def test_a_sweep_base_takes_options_and_its_grid_names_an_option_directly(prefs: Emulator) -> None:
    base = {k: v for k, v in PREFS.items() if k != "dry_run"}
    sweep = {"base": {**base, "options": {"beta": 0.2}}, "grid": {"learning_rate": [1e-5, 2e-5]}, "dry_run": True}
    assert SweepRequest(**sweep).base["beta"] == 0.2  # each run's request names it, as the ledger and pruning do
    async with Client(build_server()) as client:
        planned = await call(client, "submit_sweep", sweep)
        gridded = await call(client, "submit_sweep", {**sweep, "base": base, "grid": {"beta": [0.1, 0.4]}})
        text = await refused(client, "submit_sweep", {**sweep, "grid": {"options": [{"beta": 0.1}, {"beta": 0.4}]}})
        twice = await refused(client, "submit_sweep", {**sweep, "grid": {"beta": [0.1, 0.4]}})
    assert [run["state"] for run in planned["jobs"]] == ["queued", "queued"]
    assert [run["params"] for run in gridded["jobs"]] == [{"beta": 0.1}, {"beta": 0.4}]
    assert 'name the option itself, e.g. {"beta": [' in text
    assert "beta is in both base and grid" in twice
