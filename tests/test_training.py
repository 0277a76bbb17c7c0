"""The rendered scripts really train: each method, a tiny in-process model, a few CPU steps, offline Trackio.

The script is the exact text submit_training renders (local backend: same templates, no Hub push) and runs
with this Python, as the local backend does.
"""

from pathlib import Path

import pytest

from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.estimate.sizing import model_size
from hf_train_mcp.jobs.logs import parse_log
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.contract.requests import TrainingRequest
from tests.conftest import needs_training
from tests.helpers import run_script

pytestmark = [needs_training, pytest.mark.training]

USER_REWARD = '''import re


def reward(completions, **kwargs):
    """Prefer completions that contain a digit."""
    return [1.0 if re.search(r"\\d", str(c)) else 0.0 for c in completions]
'''
METHOD_OPTIONS = {
    "sft": {},
    "dpo": {"beta": 0.1},
    "grpo": {"num_generations": 2, "max_completion_length": 8, "reward_funcs": ["accuracy", "think_format"],
             "reward_code": USER_REWARD},
    "reward": {},
    "kto": {"beta": 0.2},
    "distill": {"max_completion_length": 8},  # the tiny model teaches itself: same vocabulary, cheap
}


def rows_for(kind: str) -> list[dict]:
    from hf_train_mcp_demo.tiny import example_rows

    if kind == "sft-sharegpt":
        return [{"conversations": [{"from": "human", "value": r["messages"][0]["content"]},
                                   {"from": "gpt", "value": r["messages"][1]["content"]}]}
                for r in example_rows("sft", 16)]
    if kind == "kto-paired":
        return example_rows("dpo", 16)
    if kind in ("dpo-hh", "kto-hh"):  # Anthropic/hh-rlhf: the prompt is the text chosen and rejected begin with
        return [{"chosen": f"\n\nHuman: {r['prompt']}\n\nAssistant: {r['chosen']}",
                 "rejected": f"\n\nHuman: {r['prompt']}\n\nAssistant: {r['rejected']}"} for r in example_rows("dpo", 16)]
    if kind == "dpo-ultrafeedback":  # a text prompt beside conversations that repeat it
        return [{"prompt": r["prompt"], "messages": [{"role": "user", "content": r["prompt"]}],
                 **{side: [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r[side]}]
                    for side in ("chosen", "rejected")}} for r in example_rows("dpo", 16)]
    if kind == "sft-instruction":
        return [{"instruction": r["messages"][0]["content"], "output": r["messages"][1]["content"]}
                for r in example_rows("sft", 16)]
    return example_rows(kind, 16)


@pytest.mark.parametrize("kind", ["sft", "dpo", "grpo", "reward", "kto", "distill", "kto-paired", "sft-sharegpt",
                                  "sft-instruction", "dpo-hh", "kto-hh", "dpo-ultrafeedback"])
def test_the_rendered_script_trains_on_cpu_and_saves_an_adapter(kind: str, tiny_model: Path, tmp_path: Path,
                                                               offline) -> None:
    from hf_train_mcp_demo.tiny import write_jsonl

    method = kind.split("-")[0]
    data = write_jsonl(tmp_path / "data.jsonl", rows_for(kind))
    report = validate_dataset(str(data), method)
    assert report.valid, report.issues
    teacher = {"teacher_model": str(tiny_model)} if method == "distill" else {}
    request = TrainingRequest(model=str(tiny_model), dataset=str(data), method=method, backend="local",
                              max_steps=2, per_device_batch_size=2, gradient_accumulation=1, max_length=128,
                              column_mapping=report.suggested_column_mapping, **METHOD_OPTIONS[method], **teacher)
    plan = plan_run(request, backend="local", size=model_size(str(tiny_model)), catalog=fallback_catalog(),
                    namespace=None, data=DataFacts(num_rows=report.num_rows),
                    teacher=model_size(str(tiny_model)) if teacher else None)
    proc = run_script(tmp_path, plan.render().text)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    parsed = parse_log(proc.stdout.splitlines())
    assert parsed.done and parsed.error is None
    assert parsed.progress.step == 2 and parsed.progress.total_steps == 2
    assert "loss" in parsed.metrics or "train_loss" in parsed.metrics
    assert (tmp_path / "output" / "adapter_model.safetensors").exists()
    assert (tmp_path / "output" / "checkpoint-2").is_dir()
    assert any((tmp_path / "trackio").rglob("*.db")), "Trackio logged nothing offline"


def test_a_full_fine_tune_saves_model_weights(tiny_model: Path, tmp_path: Path, offline) -> None:
    from hf_train_mcp_demo.tiny import example_rows, write_jsonl

    data = write_jsonl(tmp_path / "data.jsonl", example_rows("sft", 8))
    request = TrainingRequest(model=str(tiny_model), dataset=str(data), peft="full", backend="local", max_steps=1,
                              per_device_batch_size=2, eval_split=0.25)
    plan = plan_run(request, backend="local", size=model_size(str(tiny_model)), catalog=fallback_catalog(),
                    namespace=None, data=DataFacts())
    proc = run_script(tmp_path, plan.render().text)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "output" / "model.safetensors").exists()
    assert '"eval_rows": 2' in proc.stdout


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_a_full_fine_tune_in_bf16_autocast_moves_every_weight(method: str, tiny_model: Path, tmp_path: Path,
                                                              offline) -> None:
    """The GPU branch (bf16 autocast), replayed on CPU: full fine-tunes keep fp32 master weights, so the small
    updates of the planned learning rates are not rounded away as they are in bf16 weights."""
    from safetensors.torch import load_file

    from hf_train_mcp_demo.tiny import write_jsonl

    data = write_jsonl(tmp_path / "data.jsonl", rows_for(method))
    request = TrainingRequest(model=str(tiny_model), dataset=str(data), method=method, peft="full", backend="local",
                              max_steps=4, per_device_batch_size=4, gradient_accumulation=1, max_length=128)
    plan = plan_run(request, backend="local", size=model_size(str(tiny_model)), catalog=fallback_catalog(),
                    namespace=None, data=DataFacts())
    proc = run_script(tmp_path, plan.render().text, HFTM_PRECISION="bf16")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    before, after = load_file(tiny_model / "model.safetensors"), load_file(tmp_path / "output" / "model.safetensors")
    layers = [name for name in before if ".layers." in name and name.endswith("proj.weight")]
    # bf16 keeps 8 bits of mantissa: above |w| = 0.01 a step of ~lr (2e-5 SFT, 1e-6 DPO) is below half its spacing
    large = [before[n].float().abs() > 0.01 for n in layers]
    moved = sum(int(((after[n].float() != before[n].float()) & m).sum()) for n, m in zip(layers, large))
    share = moved / sum(int(m.sum()) for m in large)
    assert layers and share > 0.9, f"only {share:.0%} of the larger weights moved"
    assert all(after[n].dtype == before[n].dtype for n in layers)  # fp32 kept, not cast down on save
