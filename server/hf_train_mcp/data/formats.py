"""The data formats (TRL 1.x's, the classifiers' and sentence-transformers'), one declaration each: the columns a
format is made of, its row check, the text whose tokens are counted, an example row and the shape of its label.

Validation (data/rules.py), token counting (data/tokens.py), the result's list of formats (data/report.py) and
the tiny demo data read this registry. FORMATS is in reading order: when a layout makes several formats and the
method names none of them, the first is what the rows are read as. A method names the formats it reads
(MethodSpec.formats); a new format is one more `declare` here (or from a test: see tests/test_new_method.py).
"""

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from hf_train_mcp.data.checks import Checker, is_conversation

RowCheck = Callable[[Checker, int, dict], None]  # (checker, 1-based row number, row): records the row's issues
TextOf = Callable[[Any], str]  # a cell as the model reads it (turns through the chat template)
CountedText = Callable[[TextOf, dict], str]  # the text of a row whose tokens max_length cuts
LabelShape = Literal["class", "desirable", "score"]  # a class per row, true/false per row, a similarity per pair
MIN_SHARED_PROMPT_CHARS = 8


@dataclass(frozen=True)
class ExampleSeed:
    """What the example rows of every format are made from (hf_train_mcp_demo.tiny draws them)."""

    index: int
    topic: str  # "the sea"
    other_topic: str  # an unrelated one, for negatives
    question: str  # "What is 2 plus 3?"
    answer: str  # "5"


@dataclass(frozen=True)
class DataFormat:
    name: str
    columns: tuple[str, ...]  # after mapping
    check: RowCheck
    counted: CountedText
    example: Callable[[ExampleSeed], dict] | None = None  # a well-formed row (demos and tests train on these)
    label: LabelShape | None = None  # what the sample's labels are told (data/checks.py SAMPLE_NOTES)
    conversational_prompt: bool | None = None  # the prompt is turns (True) or text (False); None: either
    hides: tuple[str, ...] = ()  # formats its columns make too that are read as this one (images would be lost)

    @property
    def vision(self) -> bool:
        """Rows hold images beside their text."""
        return "images" in self.columns

    def makes(self, columns: set[str], first: dict) -> bool:
        """Whether (mapped) columns and their first row make this format."""
        if not set(self.columns) <= columns:
            return False
        return self.conversational_prompt is None or is_conversation(first.get("prompt")) == self.conversational_prompt


FORMATS: dict[str, DataFormat] = {}


def declare(data_format: DataFormat) -> DataFormat:
    """Add a format, read after those declared before it."""
    if data_format.name in FORMATS or data_format.name == "unknown":
        raise ValueError(f"data format {data_format.name!r} is declared twice")
    FORMATS[data_format.name] = data_format
    return data_format


def reads_images(name: str) -> bool:
    return name in FORMATS and FORMATS[name].vision


def has_classes(name: str) -> bool:
    return name in FORMATS and FORMATS[name].label == "class"


# --- what the rows' texts count --------------------------------------------------------------------------------
def prompt_and_completion(text_of: TextOf, row: dict) -> str:
    return text_of(row.get("prompt")) + text_of(row.get("completion"))


def _column(name: str) -> CountedText:
    return lambda text_of, row: text_of(row.get(name))


def _part_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content).replace("<image>", "")


def _turn_texts(text_of: TextOf, row: dict) -> str:
    """The text alone: an image's tokens come from the model's patch grid."""
    return "\n".join(_part_text(m.get("content")) for m in row.get("messages") or [] if isinstance(m, dict))


def _prompt_and_longer_answer(text_of: TextOf, row: dict) -> str:
    return text_of(row.get("prompt")) + max((text_of(row.get(k)) for k in ("chosen", "rejected")), key=len)


def _longest_of(*columns: str) -> CountedText:
    """Each text is its own sequence: the longest is what max_length cuts."""
    return lambda text_of, row: max((text_of(row.get(c)) for c in columns), key=len)


# --- row checks --------------------------------------------------------------------------------------------------
def _with_images(check: RowCheck) -> RowCheck:
    def both(checker: Checker, index: int, row: dict) -> None:
        checker.images(index, row.get("images"))
        check(checker, index, row)
    return both


def _texts(*columns: str) -> RowCheck:
    def check(checker: Checker, index: int, row: dict) -> None:
        for column in columns:
            checker.text(index, column, row.get(column))
    return check


def _messages(checker: Checker, index: int, row: dict) -> None:
    checker.messages(index, "messages", row.get("messages"))


def shared_prompt(chosen: Any, rejected: Any) -> bool:
    """Whether chosen and rejected begin alike, so the trainer can cut the prompt off both (TRL's extract_prompt)."""
    if is_conversation(chosen) and is_conversation(rejected):
        return chosen[0] == rejected[0]
    # text: a shared opening long enough to be a prompt ("\n\nHuman: ..."), not two answers that both start "Ye"
    return isinstance(chosen, str) and isinstance(rejected, str) and \
        len(os.path.commonprefix([chosen, rejected])) >= MIN_SHARED_PROMPT_CHARS


def _pairs(*, implicit: bool) -> RowCheck:
    def check(checker: Checker, index: int, row: dict) -> None:
        spec = checker.spec
        if "prompt" in row:
            checker.text(index, "prompt", row.get("prompt"), required=spec.prompt_required)
        chosen, rejected = row.get("chosen"), row.get("rejected")
        checker.text(index, "chosen", chosen)
        checker.text(index, "rejected", rejected)
        if chosen is not None and chosen == rejected:
            checker.add("warning", "chosen and rejected are identical: the row teaches nothing", "chosen", index)
        if implicit and spec.prompt_required and not shared_prompt(chosen, rejected):
            checker.add("error", f"{spec.title} without a 'prompt' column needs chosen/rejected that start with the "
                        "same prompt (turns, or text as in Anthropic/hh-rlhf); add a 'prompt' column or map one",
                        "prompt", index)
        if "prompt" in row and is_conversation(chosen) and isinstance(row.get("prompt"), str):
            checker.add("warning", "'prompt' is text but chosen/rejected are conversations: the job drops 'prompt' "
                        "and takes the turns chosen and rejected share as the prompt (as TRL does)", "prompt", index)
    return check


def _unpaired(checker: Checker, index: int, row: dict) -> None:
    _texts("prompt", "completion")(checker, index, row)
    if not isinstance(row.get("label"), bool) and row.get("label") not in (0, 1):
        checker.add("error", f"'label' must be true/false (desirable or not), got {row.get('label')!r}", "label",
                    index)


def _text_class(checker: Checker, index: int, row: dict) -> None:
    checker.text(index, "text", row.get("text"))
    checker.label(index, row.get("label"))


def _image_class(checker: Checker, index: int, row: dict) -> None:
    checker.image(index, row.get("image"))
    checker.label(index, row.get("label"))


def _sentences(*columns: str) -> RowCheck:
    """Texts to embed (and a pair's score): each a non-empty string; a row whose texts repeat teaches nothing."""
    def check(checker: Checker, index: int, row: dict) -> None:
        for column in columns:
            if column == "score":
                checker.score(index, row.get(column))
            else:
                checker.sentence(index, column, row.get(column))
        if "anchor" in columns and isinstance(row.get("anchor"), str) and row.get("anchor") == row.get("positive"):
            checker.add("warning", "anchor and positive are the same text: the row teaches nothing", "positive",
                        index)
        if "negative" in columns and isinstance(row.get("positive"), str) and row["positive"] == row.get("negative"):
            checker.add("warning", "positive and negative are the same text: the row contradicts itself (drop it, "
                        "or mine another negative)", "negative", index)
    return check


# --- example rows ------------------------------------------------------------------------------------------------
def _colour(seed: ExampleSeed) -> str:
    return "red" if seed.index % 2 == 0 else "blue"


def _picture(seed: ExampleSeed) -> str:
    return f"images/{_colour(seed)}/{seed.index}.png"  # hf_train_mcp_demo.tiny.write_images draws them


def _messages_example(seed: ExampleSeed) -> dict:
    return {"messages": [{"role": "user", "content": f"Write one sentence about {seed.topic}."},
                         {"role": "assistant", "content": f"Here is a short sentence about {seed.topic}, number "
                                                          f"{seed.index}."}]}


def _preference_example(seed: ExampleSeed) -> dict:
    return {"prompt": f"Say something kind about {seed.topic}.",
            "chosen": f"{seed.topic.capitalize()} is lovely and worth a visit.",
            "rejected": f"I do not care about {seed.topic} at all."}


def _unpaired_example(seed: ExampleSeed) -> dict:
    good = seed.index % 2 == 0
    return {"prompt": f"Say something about {seed.topic}.",
            "completion": f"{seed.topic.capitalize()} is lovely." if good else f"I hate {seed.topic}.", "label": good}


def _text_class_example(seed: ExampleSeed) -> dict:
    good = seed.index % 2 == 0
    return {"text": f"{seed.topic.capitalize()} is lovely, I enjoy it." if good else
            f"I hate {seed.topic}, it is awful.", "label": "positive" if good else "negative"}


def _vision_preference_example(seed: ExampleSeed) -> dict:
    colour, other = ("red", "blue") if seed.index % 2 == 0 else ("blue", "red")
    return {"prompt": [{"role": "user", "content": "What colour is this picture?"}],
            "chosen": [{"role": "assistant", "content": f"It is {colour}."}],
            "rejected": [{"role": "assistant", "content": f"It is {other}."}],
            "images": [_picture(seed)]}


def _note(seed: ExampleSeed, topic: str) -> str:
    return f"A short note on {topic}, number {seed.index}."


def _scored_example(seed: ExampleSeed) -> dict:
    same = seed.index % 2 == 0
    return {"sentence1": f"A short note on {seed.topic}.",
            "sentence2": f"Something about {seed.topic if same else seed.other_topic}, number {seed.index}.",
            "score": 0.9 if same else 0.1}


# --- the formats, in reading order -------------------------------------------------------------------------------
declare(DataFormat(
    "vision_messages", ("messages", "images"), _with_images(_messages), _turn_texts, hides=("messages",),
    example=lambda seed: {"messages": [{"role": "user", "content": "What colour is this picture?"},
                                       {"role": "assistant", "content": f"It is {_colour(seed)}."}],
                          "images": [_picture(seed)]}))
declare(DataFormat("messages", ("messages",), _messages, _column("messages"), example=_messages_example))
declare(DataFormat("vision_preference", ("prompt", "chosen", "rejected", "images"),
                   _with_images(_pairs(implicit=False)), _prompt_and_longer_answer, hides=("preference",),
                   example=_vision_preference_example))
declare(DataFormat("preference", ("prompt", "chosen", "rejected"), _pairs(implicit=False),
                   _prompt_and_longer_answer, hides=("implicit_preference",), example=_preference_example))
declare(DataFormat("implicit_preference", ("chosen", "rejected"), _pairs(implicit=True), _prompt_and_longer_answer))
declare(DataFormat("unpaired_preference", ("prompt", "completion", "label"), _unpaired, prompt_and_completion,
                   label="desirable", example=_unpaired_example))
declare(DataFormat("image_classification", ("image", "label"), _image_class, prompt_and_completion, label="class",
                   example=lambda seed: {"image": _picture(seed), "label": _colour(seed)}))
declare(DataFormat("text_classification", ("text", "label"), _text_class, _column("text"), label="class",
                   example=_text_class_example))
declare(DataFormat("sentence_triplets", ("anchor", "positive", "negative"),
                   _sentences("anchor", "positive", "negative"), _longest_of("anchor", "positive", "negative"),
                   example=lambda seed: {"anchor": f"Tell me about {seed.topic}.", "positive": _note(seed, seed.topic),
                                         "negative": _note(seed, seed.other_topic)}))
declare(DataFormat("scored_pairs", ("sentence1", "sentence2", "score"), _sentences("sentence1", "sentence2", "score"),
                   _longest_of("sentence1", "sentence2"), label="score", example=_scored_example))
declare(DataFormat("sentence_pairs", ("anchor", "positive"), _sentences("anchor", "positive"),
                   _longest_of("anchor", "positive"),
                   example=lambda seed: {"anchor": f"Tell me about {seed.topic}.",
                                         "positive": _note(seed, seed.topic)}))
declare(DataFormat("conversational_prompt_completion", ("prompt", "completion"), _texts("prompt", "completion"),
                   prompt_and_completion, conversational_prompt=True))
declare(DataFormat("prompt_completion", ("prompt", "completion"), _texts("prompt", "completion"),
                   prompt_and_completion, conversational_prompt=False))
declare(DataFormat("text", ("text",), _texts("text"), _column("text")))
declare(DataFormat("vision_prompt_only", ("prompt", "images"), _with_images(_texts("prompt")), prompt_and_completion,
                   hides=("prompt_only",),
                   example=lambda seed: {"prompt": "What colour is this picture? Answer in one word.",
                                         "answer": _colour(seed), "images": [_picture(seed)]}))
declare(DataFormat("prompt_only", ("prompt",), _texts("prompt"), prompt_and_completion,
                   example=lambda seed: {"prompt": seed.question, "answer": seed.answer}))  # answer: accuracy reads it
