"""A family added from its own declarations alone: a throwaway token-classification method whose data format
(tokens + tags) no production file knows is declared here, with its template in a folder of the test's own, and
it validates a dataset, is listed where methods and formats are listed, renders a script that compiles, and has
its tokens counted. Evaluation kinds are a closed set: each has its template partial, and an unknown one fails
at render."""

import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError

from hf_train_mcp.rendering.config import EvalKind, EvaluateConfig
from hf_train_mcp.rendering.script import render_script, templates_dir

ROOT = Path(__file__).resolve().parents[1]

TEMPLATE = '''{% extends "_base.py.j2" %}
{% block title %}Token classification (transformers Trainer){% endblock %}
{% block definitions %}


def tagged(data, tokenizer, ids):
    """Each word's first token labelled with its tag's id; the other tokens of a word are left out of the loss."""
    if data is None:
        return None

    def encode(batch):
        encoded = tokenizer(batch["tokens"], is_split_into_words=True, truncation=True,
                            max_length=CONFIG["max_length"])
        labels = []
        for i, tags in enumerate(batch["tags"]):
            words, previous = encoded.word_ids(i), None
            labels.append([-100 if w is None or w == previous else ids[tags[w]]
                           for w, previous in zip(words, [None, *words[:-1]])])
        encoded["labels"] = labels
        return encoded

    return data.map(encode, batched=True, remove_columns=["tokens", "tags"])
{% endblock %}
{% block build_trainer %}
    """A tag per word: a token-classification head on the model."""
    from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification, Trainer
    from transformers import TrainingArguments

    names = sorted({tag for row in train for tag in row["tags"]})
    ids = {name: i for i, name in enumerate(names)}
    options = common_args(prec, evaluation is not None, probe)
    options.pop("model_init_kwargs")
    model = AutoModelForTokenClassification.from_pretrained(CONFIG["model"], num_labels=len(names))
    return Trainer(model=model, args=TrainingArguments(**options), train_dataset=tagged(train, tokenizer, ids),
                   eval_dataset=tagged(evaluation, tokenizer, ids),
                   data_collator=DataCollatorForTokenClassification(tokenizer))
{% endblock %}
'''

# Run in a fresh interpreter: a family is declared when its modules are imported, before the contract's models
# read the registries (their Literals of methods and formats are built once), as the production ones are.
DECLARE_AND_USE = '''
import json, sys, typing
from pathlib import Path

import jinja2

from hf_train_mcp import methods
from hf_train_mcp.data import formats
from hf_train_mcp.methods.base import MethodSpec
from hf_train_mcp.rendering import script

folder, tiny_model = Path(sys.argv[1]), sys.argv[2]


def tags_row(checker, index, row):
    tokens, tags = row.get("tokens"), row.get("tags")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        checker.add("error", "'tokens' must be a non-empty list of words", "tokens", index)
    elif not isinstance(tags, list) or len(tags) != len(tokens):
        checker.add("error", "'tags' must hold one tag per word", "tags", index)


formats.declare(formats.DataFormat(
    "token_tags", ("tokens", "tags"), tags_row, lambda text_of, row: " ".join(row.get("tokens") or []),
    example=lambda seed: {"tokens": seed.topic.split(), "tags": ["O"] * (len(seed.topic.split()) - 1) + ["THING"]}))
methods.register(MethodSpec(
    name="token-classification", title="token classification", summary="token tagger", formats=("token_tags",),
    needs="'tokens' + 'tags' (a tag per word)", learning_rate=(2e-5, 2e-4), epochs=3.0, max_length=512,
    tokens_per_example=64, eval_metric="accuracy", pipeline_tag="token-classification",
    aliases={"tags": ("ner_tags", "labels")}, keep_columns=("tokens", "tags"), classifier=True,
    peft_task="TOKEN_CLS", library="transformers Trainer", auto_class="AutoModelForTokenClassification"))
# the test's own templates first, then the package's (_base.py.j2)
script._environment().loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(folder / "templates"),
                                                     script._environment().loader])

from hf_train_mcp.contract.requests import TrainingRequest
from hf_train_mcp.contract.results import DatasetReport, Method
from hf_train_mcp.data import tokens
from hf_train_mcp.data.validate import validate_dataset
from hf_train_mcp.estimate.hardware import fallback_catalog
from hf_train_mcp.planning.training import DataFacts, plan_run
from hf_train_mcp.shell.app import finetune_prompt
from hf_train_mcp_demo.tiny import example_rows, write_jsonl
from tests.helpers import QWEN_05B

# this fresh interpreter imports transformers inside the tokenizer's bounded load: on a loaded machine that alone
# can pass the 8 s a server gives it (a server has imported it by then), and the counts would be left out
tokens.TOKENIZER_DEADLINE_S = 120.0
rows = example_rows("token-classification", 8)
good = write_jsonl(folder / "tags.jsonl", [{"ner_tags": r["tags"], "tokens": r["tokens"]} for r in rows])
bad = write_jsonl(folder / "bad.jsonl", [*rows[:2], {"tokens": ["a", "b"], "tags": ["O"]}])
report = validate_dataset(str(good), "token-classification", model=tiny_model)
wrong = validate_dataset(str(bad), "token-classification")
sft = validate_dataset(str(good), "sft")
request = TrainingRequest(model="org/Model-1B", dataset="org/tags", method="token-classification",
                          hub_model_id="me/tagger")
plan = plan_run(request, backend="hf", size=QWEN_05B, catalog=fallback_catalog(), namespace="me",
                data=DataFacts(num_rows=1000))
print(json.dumps({
    "listed_formats": typing.get_args(DatasetReport.model_fields["detected_format"].annotation),
    "listed_methods": typing.get_args(Method),
    "prompt": finetune_prompt("m", "d"),
    "report": report.model_dump(), "wrong": wrong.model_dump(), "sft": sft.model_dump(),
    "script": plan.render().text,
}))
'''


@pytest.fixture(scope="module")
def declared(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("new-method")
    (folder / "templates").mkdir()
    (folder / "templates" / "token-classification.py.j2").write_text(TEMPLATE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "server"), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", DECLARE_AND_USE, str(folder), str(tiny_model)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_new_format_is_listed_with_the_new_method(declared: dict) -> None:
    assert "token_tags" in declared["listed_formats"] and "unknown" in declared["listed_formats"]
    assert "token-classification" in declared["listed_methods"]
    assert "tokens+tags: token-classification (token tagger)" in declared["prompt"]


def test_the_new_format_validates_a_dataset_by_its_own_row_check(declared: dict) -> None:
    report = declared["report"]
    assert report["valid"] and report["detected_format"] == "token_tags", report["issues"]
    assert report["suggested_column_mapping"] == {"tags": "ner_tags"}  # the method's aliases
    wrong = declared["wrong"]
    assert not wrong["valid"] and [(i["message"], i["row"]) for i in wrong["issues"]] == [
        ("'tags' must hold one tag per word", 3)]
    assert declared["sft"]["detected_format"] == "unknown" and not declared["sft"]["valid"]


def test_the_new_formats_tokens_are_counted_with_the_models_tokenizer(declared: dict) -> None:
    stats = declared["report"]["token_stats"]
    assert stats and stats["sampled_rows"] == 8 and stats["max"] >= 2  # "the sea" is two words, both counted


def test_the_new_method_renders_a_script_from_its_own_template_with_its_own_card(declared: dict) -> None:
    text = declared["script"]  # render_script compiled it and checked its CONFIG keys
    assert "AutoModelForTokenClassification" in text and "'method': 'token-classification'" in text
    assert "'pipeline_tag': 'token-classification'" in text  # the card's task, as the method module names it
    compile(text, "train.py", "exec")


# --- evaluation kinds: a closed set, each its own partial ---------------------------------------------------------
def test_every_evaluation_kind_has_its_template_partial_and_nothing_else_does() -> None:
    partials = {p.name.removeprefix("_eval_").removesuffix(".py.j2") for p in templates_dir().glob("_eval_*.py.j2")}
    assert partials == set(typing.get_args(EvalKind))


def _evaluation_config(kind: str) -> dict:
    return {"auto_class": "AutoModelForCausalLM", "processor": "AutoTokenizer", "vision": False, "model": "m",
            "model_kind": "full", "base_model": None, "method": "sft", "peft": "full", "chat_template": None,
            "max_length": 512, "output_dir": "/tmp/out", "probe": None, "expects_gpu": False, "push_to_hub": False,
            "hub_model_id": None, "eval_metric": kind, "classifier": False, "dataset": "d", "dataset_split": "train",
            "dataset_config": None, "column_mapping": {}, "keep_columns": None, "eval_split": None, "seed": 42,
            "held_out": None, "num_samples": 10, "compare_samples": 2, "sample_tokens": 16,
            "max_completion_length": 32, "reward_funcs": ["length"], "tasks": [], "card_folder": None,
            "card_repo": None, "project": "p", "run_name": "r", "trackio_space_id": None, "trackio_dir": None}


def _render_evaluation(kind: str) -> str:
    return render_script("evaluate", EvaluateConfig, {
        "config": _evaluation_config(kind), "dependencies": [], "flavor": "cpu-basic", "jobs_table": False,
        "timeout": "1h", "method_title": "SFT", "reward_code": None, "sharegpt_roles": {}}).text


@pytest.mark.parametrize("kind", typing.get_args(EvalKind))
def test_each_evaluation_kind_renders_its_own_measure(kind: str) -> None:
    text = _render_evaluation(kind)
    assert text.count("def measure_rows(") == 1
    own = {"loss": "def held_out_loss(", "preference": "def preference_accuracy(", "reward": "def mean_reward(",
           "accuracy": "def classification_accuracy(", "embedding": "def embedding_metrics("}
    assert [name for name, marker in own.items() if marker in text] == [kind]  # no other kind's measure


def test_an_unknown_evaluation_kind_fails_at_render() -> None:
    with pytest.raises(ValidationError, match="eval_metric"):
        _render_evaluation("token_f1")  # before: rendered, and measured a causal-LM loss
