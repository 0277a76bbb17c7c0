"""The typed script CONFIG: an unknown or missing key, or a template reading a key its schema lacks, fails when
the script is rendered on the server, never in the job."""

import pytest
from pydantic import ValidationError

from hf_train_mcp import methods
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.rendering.script import render_script
from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.rendering.config import (EvaluateConfig, ExportConfig, TemplateKeyError, TrainingConfig,
                                        check_template_keys, reachable_keys)
from tests.helpers import RENDER_SIZE as SIZE

EXTRA = {"grpo": {}, "distill": {"teacher_model": "Qwen/Qwen2-0.5B-Instruct"}}


def plan(method: str, **overrides):
    req = TrainingRequest(model="Qwen/Qwen2-0.5B", dataset="org/data", hub_model_id="me/out", method=method,
                          **EXTRA.get(method, {}), **overrides)
    return plan_run(req, backend="hf", size=SIZE, catalog=fallback_catalog(), namespace="me", data=DataFacts())


def context(p, config: dict) -> dict:
    return {"config": config, "dependencies": [], "flavor": p.flavor, "jobs_table": True, "timeout": "1h",
            "method_title": "x", "reward_code": None, "sharegpt_roles": {}}


@pytest.mark.parametrize("method", methods.NAMES)
def test_every_method_renders_a_config_of_its_own_schema(method: str) -> None:
    p = plan(method)
    schema = methods.get(method).config_schema
    assert p.schema is schema and issubclass(schema, TrainingConfig)
    assert set(p.config) == set(schema.model_fields)  # nothing more, nothing less
    keys = reachable_keys(p.render().text)
    assert {k for k, required in keys.items() if required} <= set(schema.model_fields)


def test_method_only_keys_live_with_their_method() -> None:
    sft, grpo, distill = plan("sft").config, plan("grpo").config, plan("distill").config
    assert "num_generations" not in sft and "max_completion_length" not in sft and "packing" in sft
    assert grpo["num_generations"] == 8 and grpo["max_completion_length"] == 256 and "packing" not in grpo
    assert "num_generations" not in distill and distill["max_completion_length"] == 256
    assert plan("grpo", num_generations=4, per_device_batch_size=4).config["num_generations"] == 4
    assert not {"num_generations", "max_completion_length", "beta", "packing"} & set(TrainingConfig.model_fields)


def test_an_unknown_or_missing_key_fails_at_render() -> None:
    p = plan("sft")
    with pytest.raises(ValidationError, match="extra"):
        render_script("sft", p.schema, context(p, {**p.config, "num_generation": 4}))
    missing = {k: v for k, v in p.config.items() if k != "save_steps"}
    with pytest.raises(ValidationError, match="save_steps"):
        render_script("sft", p.schema, context(p, missing))
    with pytest.raises(ValidationError, match="learning_rate"):  # a wrong type, too
        render_script("sft", p.schema, context(p, {**p.config, "learning_rate": "2e-4"}))


def test_a_template_that_reads_an_undeclared_key_fails_at_render() -> None:
    """The SFT template reads CONFIG["packing"] and ["vision"]: rendered with a schema that lacks them, the server
    refuses."""
    p = plan("dpo")
    with pytest.raises(TemplateKeyError, match=r"CONFIG\['(packing|vision)'\]"):
        render_script("sft", methods.get("dpo").config_schema, context(p, p.config))


def test_only_code_that_can_run_counts_and_optional_reads_must_name_a_declared_key() -> None:
    source = '''
CONFIG = {}
def unused():
    return CONFIG["never_read"]
def helper():
    return CONFIG["model"], CONFIG.get("num_generations", 1)
class Callback:
    def on_step(self):
        return CONFIG["output_dir"]
def main():
    helper()
    return Callback
main()
'''
    assert reachable_keys(source) == {"model": True, "num_generations": False, "output_dir": True}
    check_template_keys(source, TrainingConfig)  # num_generations: optional, and some method declares it
    with pytest.raises(TemplateKeyError, match="num_generatoins"):
        check_template_keys(source.replace('get("num_generations"', 'get("num_generatoins"'), TrainingConfig)
    with pytest.raises(TemplateKeyError, match="never_read"):
        check_template_keys(source.replace("    helper()", "    helper(); unused()"), TrainingConfig)


def test_follow_up_schemas_are_separate_from_training() -> None:
    assert "learning_rate" not in EvaluateConfig.model_fields and "format" in ExportConfig.model_fields
    assert "reward_funcs" in EvaluateConfig.model_fields and "card" not in EvaluateConfig.model_fields


def test_the_scripts_convert_sharegpt_with_the_servers_own_table() -> None:
    """Validation previews ShareGPT rows with SHAREGPT_ROLES; the job converts them with the same table."""
    import ast

    from hf_train_mcp.models.chat_template import SHAREGPT_ROLES

    tree = ast.parse(plan("sft").render().text)
    convert = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "to_role_content")
    roles = next(n.value for n in ast.walk(convert) if isinstance(n, ast.Assign) and n.targets[0].id == "roles")
    assert ast.literal_eval(roles) == SHAREGPT_ROLES
