"""On-policy knowledge distillation (TRL DistillationTrainer): the student generates completions for the
prompts and learns the teacher's next-token distribution on them (generalized JSD; beta 0 forward KL, 1 reverse
KL). The teacher must share the student's vocabulary (same tokenizer family)."""

from typing import Annotated

from pydantic import Field

from hf_train_mcp.methods.base import MethodSpec, Option
from hf_train_mcp.methods.dpo import BETA
from hf_train_mcp.methods.grpo import MAX_COMPLETION_LENGTH, PROMPT_ALIASES, GeneratingConfig

TEACHER_MODEL = Option("teacher_model", Annotated[str, Field(min_length=1, max_length=512, description=(
    "distill teacher, same tokenizer"))], sizing=True, changes_loss=True)


class DistillConfig(GeneratingConfig):
    teacher_model: str
    beta: float


BETA_DEFAULT = 0.5  # the symmetric JSD: TRL's 1.0 (reverse KL) is mode-seeking, 0.5 the GKD paper's middle


def check(req) -> None:
    if not getattr(req, "teacher_model", None):
        raise ValueError("method='distill' needs teacher_model (a larger model with the same tokenizer)")
    if getattr(req, "beta", None) is not None and req.beta > 1:
        raise ValueError("beta for distillation interpolates forward (0) and reverse (1) KL: send 0..1")


def same_vocabulary(req, student, teacher) -> None:
    """TRL's DistillationTrainer compares config.get_text_config().vocab_size of the two models and raises when
    they differ, even with one tokenizer (Qwen2.5 0.5B-3B pad their embeddings to 151,936 rows, 7B-72B to
    152,064): only after both models downloaded on the paid GPU. Refused here when both config.json are read."""
    if teacher is None or not student.config_vocab or not teacher.config_vocab:
        return
    if student.config_vocab != teacher.config_vocab:
        raise ValueError(
            f"teacher_model {req.teacher_model!r} has vocab_size {teacher.config_vocab:,} and the student "
            f"{req.model!r} {student.config_vocab:,}: TRL's distillation compares the two models' full next-token "
            "distributions and refuses different vocabulary sizes, even where the tokenizers are the same (Qwen2.5 "
            "0.5B/1.5B/3B have 151,936, 7B and larger 152,064). Pick a teacher whose config.json has vocab_size "
            f"{student.config_vocab:,} (the same family, within one vocabulary size), or a student with the "
            f"teacher's {teacher.config_vocab:,}. Nothing was launched.")


METHOD = MethodSpec(
    name="distill", title="distillation", summary="distillation",
    formats=("prompt_only", "prompt_completion", "conversational_prompt_completion"),
    needs="'prompt' (string or list of messages): the student answers them and the teacher grades every token",
    learning_rate=(1e-6, 1e-5), epochs=1.0, max_length=512, tokens_per_example=512,
    eval_metric="loss", pipeline_tag="text-generation",
    aliases={"prompt": PROMPT_ALIASES},
    options=(TEACHER_MODEL, BETA, MAX_COMPLETION_LENGTH), keep_columns=("prompt",),
    generates=True, prompt_length=True, check=check, check_sizes=same_vocabulary,
    config=lambda req: {**METHOD.sizing_options(req), "beta": BETA_DEFAULT if req.beta is None else req.beta},
    config_schema=DistillConfig,
    card_settings=lambda config: {"teacher": config["teacher_model"], "beta": config["beta"],
                                  "max completion length": config["max_completion_length"]},
)
