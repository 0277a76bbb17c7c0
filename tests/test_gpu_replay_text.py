"""The text methods' GPU branches, replayed on CPU on the tiny Qwen2 (tests/replay.py): every TRL method (SFT,
DPO, GRPO, reward modeling, KTO, distillation) under bf16 autocast in QLoRA's real 4-bit and under fp16 autocast
with LoRA, activation checkpointing on as a GPU job has it, two optimizer steps each, in process.

Each replay checks what a paid GPU job would meet: the base's linear layers in 4-bit (QLoRA) while the trainable
weights (adapters, a reward model's score head) stay in fp32 out of 4-bit, checkpointing really on in the model
the trainer holds, a finite loss, and adapters that moved."""

from pathlib import Path
from typing import Any

import pytest

from hf_train_mcp_demo.tiny import example_rows, write_jsonl
from tests.conftest import needs_training
from tests.replay import checkpointing_on, gpu_trainer, replay_script

pytestmark = [needs_training, pytest.mark.training,
              # PEFT reads transformers 5's renamed checkpointing flag; bitsandbytes' CPU path warns of its speed
              pytest.mark.filterwarnings("ignore::FutureWarning"), pytest.mark.filterwarnings("ignore::UserWarning")]

# each method's own request fields: small generations, a teacher, whole groups of completions
FIELDS: dict[str, dict[str, Any]] = {
    "sft": {}, "dpo": {}, "reward": {}, "kto": {},
    "grpo": {"num_generations": 2, "max_completion_length": 8, "reward_funcs": ["length"], "per_device_batch_size": 2},
    "distill": {"max_completion_length": 8, "per_device_batch_size": 2},
}
RUNS = [(method, precision, peft) for method in FIELDS for precision, peft in (("bf16", "qlora"), ("fp16", "lora"))]


def perturbed(model: Path, folder: Path) -> Path:
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    shutil.copytree(model, folder)
    teacher = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        for param in teacher.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    teacher.save_pretrained(folder)
    return folder


def trained_weights(model) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize(("method", "precision", "peft"), RUNS, ids=["-".join(r) for r in RUNS])
def test_every_text_method_trains_under_gpu_precision(method: str, precision: str, peft: str, tiny_model: Path,
                                                      tmp_path: Path, offline, monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    import math

    import bitsandbytes as bnb
    import torch

    rows = example_rows("grpo" if method == "distill" else method, 16)
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    fields = {"max_length": 64, **FIELDS[method], "method": method, "peft": peft}
    if method == "distill":  # a teacher that differs from the student: the same weights have nothing to teach
        fields["teacher_model"] = str(perturbed(tiny_model, tmp_path / "teacher"))
    trainer = gpu_trainer(replay_script(tmp_path, tiny_model, data, **fields), monkeypatch, precision)
    model = trainer.model
    assert checkpointing_on(trainer)
    quantized = [n for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert bool(quantized) == (peft == "qlora"), quantized[:3]
    before = trained_weights(model)
    assert before and {p.dtype for p in before.values()} == {torch.float32}, {p.dtype for p in before.values()}
    if method == "reward":  # the new score head trains whole, unquantized
        assert any(".score." in name and "lora_" not in name for name in before), sorted(before)[:6]
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    assert model.get_base_model().is_gradient_checkpointing  # the trainer turned it on, as on the GPU
    after = dict(trainer.model.named_parameters())
    moved = [n for n, p in before.items() if "lora_B" in n and not torch.equal(after[n].detach(), p)]
    assert moved, "no adapter moved in two steps"


# --- the review of the families (issue 30, second round): findings 12 and 13 ------------------------------------
def gpt2_layout(tiny_model: Path, folder: Path, positions: int = 64) -> Path:
    """GPT-2's module tree (learned positions in `wpe`, Conv1D layers c_attn/c_proj/c_fc) at `positions`, with the
    tiny model's tokenizer."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=positions, n_embd=32, n_layer=2, n_head=4,
                               bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
                    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("packing", [False, True])
def test_sft_beyond_the_models_learned_positions_is_cut_to_them(packing: bool, tiny_model: Path, tmp_path: Path,
                                                                offline, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture) -> None:
    """Finding 12: max_length 128 on a GPT-2 layout with 64 learned positions (gpt2's 1024 asked 2048): rows of
    ~70 tokens, packed or not, indexed past `wpe` (IndexError; a device-side assert on a GPU). The script cuts
    max_length to the positions, says so, and the card shows what trained."""
    import math

    model = gpt2_layout(tiny_model, tmp_path / "gpt2")
    rows = [{"text": " ".join(f"word{j}" for j in range(60 + i))} for i in range(16)]
    script = replay_script(tmp_path, model, write_jsonl(tmp_path / "text.jsonl", rows), method="sft", peft="lora",
                           max_length=128, packing=packing)
    assert script["CONFIG"]["max_length"] == 128
    trainer = gpu_trainer(script, monkeypatch, "bf16")
    assert script["CONFIG"]["max_length"] == trainer.args.max_length == 64
    assert script["CONFIG"]["card"]["settings"]["max length"] == 64
    assert "max_length 128 -> 64 (gpt2 has learned positions for 64 tokens" in capsys.readouterr().out
    assert math.isfinite(trainer.train().training_loss)


def test_generation_runs_fit_prompt_and_completion_in_the_learned_positions(tiny_model: Path, tmp_path: Path,
                                                                            offline) -> None:
    """GRPO's sequences are the prompt (cut at max_length) and the completion: both within GPT-2's 64 positions.
    A rotary model's positions are computed for any index (LlamaRotaryEmbedding): its max_length stays."""
    from transformers import AutoConfig, GPT2Config, OPTConfig, Qwen2Config, RobertaConfig

    data = write_jsonl(tmp_path / "prompts.jsonl", example_rows("grpo", 4))
    script = replay_script(tmp_path, gpt2_layout(tiny_model, tmp_path / "gpt2"), data, method="grpo",
                           max_length=128, max_completion_length=48, num_generations=2, reward_funcs=["length"])
    script["fit_positions"]()
    assert (script["CONFIG"]["max_length"], script["CONFIG"]["max_completion_length"]) == (32, 32)
    limit = script["position_limit"]
    assert limit(GPT2Config(n_positions=1024)) == 1024 and limit(OPTConfig()) == 2048
    assert limit(RobertaConfig(max_position_embeddings=514)) == 512  # counted after the padding index
    assert limit(Qwen2Config(max_position_embeddings=64)) is None and limit(AutoConfig.for_model("mamba")) is None


def test_lora_target_names_the_model_lacks_stop_the_job_before_its_weights_load(tiny_model: Path, tmp_path: Path,
                                                                              offline,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 13: BERT's names on a Qwen2 (NoMatchingPeftModuleError once the weights are loaded), or one wrong
    name among right ones (PEFT drops it silently): the script stops first, listing the model's linear layers.
    GPT-2's Conv1D layers are linear layers PEFT adapts: c_attn passes."""
    from transformers import PreTrainedModel

    def no_weights(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the weights were loaded before the target names were checked")

    data = write_jsonl(tmp_path / "chat.jsonl", example_rows("sft", 16))
    for targets, missing in ((["query", "value"], "['query', 'value']"), (["q_proj", "query"], "['query']")):
        script = replay_script(tmp_path, tiny_model, data, method="sft", peft="lora", lora_target_modules=targets)
        with monkeypatch.context() as patch, pytest.raises(SystemExit) as stop:
            patch.setattr(PreTrainedModel, "from_pretrained", classmethod(no_weights))
            gpu_trainer(script, monkeypatch, "bf16")
        assert str(stop.value).startswith(f"lora_target_modules {missing} name no layer of Qwen2ForCausalLM: its "
                                          "linear layers are named ['down_proj', 'gate_proj', 'k_proj', 'lm_head', "
                                          "'o_proj', 'q_proj', 'up_proj', 'v_proj']")
    script = replay_script(tmp_path, gpt2_layout(tiny_model, tmp_path / "gpt2"), data, method="sft", peft="lora",
                           lora_target_modules=["c_attn"])
    trainer = gpu_trainer(script, monkeypatch, "bf16")
    assert {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in trainer.model.named_parameters()
            if "lora_A" in n} == {"c_attn"}
