"""Per-method dataset rules (TRL 1.x formats), column-mapping suggestions, and row-level checks."""

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hf_train_mcp import methods
from hf_train_mcp.data.images import image_cell_problem
from hf_train_mcp.contract.results import DatasetIssue

ROLES = {"system", "user", "assistant", "tool"}
# the columns each format is made of (after mapping), in the order layouts are read when no method says otherwise
FORMAT_COLUMNS: dict[str, tuple[str, ...]] = {
    "vision_messages": ("messages", "images"),
    "messages": ("messages",),
    "vision_preference": ("prompt", "chosen", "rejected", "images"),
    "preference": ("prompt", "chosen", "rejected"),
    "implicit_preference": ("chosen", "rejected"),
    "unpaired_preference": ("prompt", "completion", "label"),
    "image_classification": ("image", "label"),
    "text_classification": ("text", "label"),
    "sentence_triplets": ("anchor", "positive", "negative"),
    "scored_pairs": ("sentence1", "sentence2", "score"),
    "sentence_pairs": ("anchor", "positive"),
    "conversational_prompt_completion": ("prompt", "completion"),
    "prompt_completion": ("prompt", "completion"),
    "text": ("text",),
    "vision_prompt_only": ("prompt", "images"),
    "prompt_only": ("prompt",),
}
# formats whose rows hold images beside their text: read first (the text alone would drop the images)
VISION_FORMATS: dict[str, str] = {"vision_messages": "messages", "vision_preference": "preference",
                                  "vision_prompt_only": "prompt_only"}  # -> the text format beside the images
LONG_CHARS = 32_000
MIN_SHARED_PROMPT_CHARS = 8


def is_conversation(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) for m in value)


def suggest_mapping(method: str, columns: list[str], rows: list[dict]) -> dict[str, str]:
    """target <- source for the first of the method's formats that the columns can make (nothing when one of
    them is already there): the method's aliases name the layouts popular datasets use."""
    spec = methods.get(method)
    cols = set(columns)
    first = rows[0] if rows else {}
    # images first: a conversation column beside an image column is vision data (messages alone would drop them)
    for fmt in sorted(spec.formats, key=lambda f: f not in VISION_FORMATS):
        mapping: dict[str, str] = {}
        for target in FORMAT_COLUMNS[fmt]:
            if target in cols:
                continue
            source = next((alias for alias in spec.aliases.get(target, ()) if alias in cols
                           and alias not in mapping.values()
                           and (target != "messages" or not first or is_conversation(first.get(alias)))), None)
            if source is None:
                break
            mapping[target] = source
        else:
            if _conversational_fits(fmt, first, mapping):
                return mapping
    return {}


def _conversational_fits(fmt: str, first: dict, mapping: dict[str, str]) -> bool:
    """prompt/completion formats say whether the prompt is a conversation: a mapped pair must agree."""
    if fmt not in ("prompt_completion", "conversational_prompt_completion") or not first:
        return True
    prompt = first.get(mapping.get("prompt", "prompt"))
    return is_conversation(prompt) == (fmt == "conversational_prompt_completion")


def _shared_prompt(chosen: Any, rejected: Any) -> bool:
    """Whether chosen and rejected begin alike, so the trainer can cut the prompt off both (TRL's extract_prompt)."""
    if is_conversation(chosen) and is_conversation(rejected):
        return chosen[0] == rejected[0]
    # text: a shared opening long enough to be a prompt ("\n\nHuman: ..."), not two answers that both start "Ye"
    return isinstance(chosen, str) and isinstance(rejected, str) and \
        len(os.path.commonprefix([chosen, rejected])) >= MIN_SHARED_PROMPT_CHARS


def apply_mapping(rows: list[dict], mapping: dict[str, str]) -> list[dict]:
    out = []
    for row in rows:
        new = dict(row)
        for target, source in mapping.items():
            if source in row:
                new.pop(source, None)
                new[target] = row[source]
        out.append(new)
    return out


def candidate_formats(columns: set[str], first: dict) -> list[str]:
    """Every format these (mapped) columns make, in FORMAT_COLUMNS order."""
    found = []
    for fmt, needed in FORMAT_COLUMNS.items():
        if not set(needed) <= columns:
            continue
        if fmt in ("prompt_completion", "conversational_prompt_completion") and \
                is_conversation(first.get("prompt")) != (fmt == "conversational_prompt_completion"):
            continue
        found.append(fmt)
    return found


def detect_format(columns: set[str], first: dict, method: str | None = None) -> str:
    """The format the rows are read as: the first of the method's formats they make (a dataset can hold several:
    UltraFeedback has messages and chosen/rejected), else the first they make at all."""
    found = candidate_formats(columns, first)
    if "preference" in found:
        found.remove("implicit_preference")
    for vision, text in VISION_FORMATS.items():
        if vision in found:  # the images are the point: the text alone would drop them
            found.remove(text)
    preferred = [f for f in (methods.get(method).formats if method else ()) if f in found]
    return (preferred or found or ["unknown"])[0]


@dataclass
class Checker:
    method: str
    issues: list[DatasetIssue] = field(default_factory=list)
    _seen: set = field(default_factory=set)

    def add(self, severity: str, message: str, column: str | None = None, row: int | None = None) -> None:
        # one issue per kind and column: a million bad rows should not become a million issues
        key = (severity, message, column)
        if key in self._seen:
            return
        self._seen.add(key)
        self.issues.append(DatasetIssue(severity=severity, message=message, column=column, row=row))

    def text(self, row: int, column: str, value: Any, *, required: bool = True) -> None:
        if value is None:
            if required:
                self.add("error", f"null value in '{column}'", column, row)
            return
        if is_conversation(value):
            self.messages(row, column, value, need_assistant=False)
            return
        if not isinstance(value, str):
            self.add("error", f"'{column}' must be a string or a list of messages, got {type(value).__name__}",
                     column, row)
            return
        if not value.strip():
            self.add("error" if required else "warning", f"empty string in '{column}'", column, row)
        elif len(value) > LONG_CHARS:
            self.add("warning", f"very long value in '{column}' ({len(value)} chars): it will be truncated at "
                     "max_length", column, row)

    def images(self, row: int, value: Any, base: Path | None, allowed: Callable[[Path], bool]) -> None:
        """A row's images: a list (or one image), each a viewer cell or a readable file."""
        for image in value if isinstance(value, list) else [value]:
            problem = image_cell_problem(image, base, allowed)
            if problem:
                self.add(problem[0], problem[1].replace("'image'", "'images'"), "images", row)

    def label(self, row: int, value: Any) -> None:
        if value is None:
            self.add("error", "null value in 'label': every row needs its class", "label", row)
        elif not isinstance(value, str | int | bool):
            self.add("error", f"'label' must be a class name or id (one per row), got {type(value).__name__}",
                     "label", row)

    def sentence(self, row: int, column: str, value: Any) -> None:
        """One text of an embedding row: a non-empty string (the trainer embeds each column's text as it is)."""
        if isinstance(value, list):
            self.add("error", f"'{column}' holds a list: one text per row (give each {column} its own row, "
                     "repeating the others)", column, row)
        elif value is None or isinstance(value, str) and not value.strip():
            self.add("error", f"{'null value' if value is None else 'empty string'} in '{column}': every row needs "
                     "its text (drop such rows)", column, row)
        elif not isinstance(value, str):
            self.add("error", f"'{column}' must be a string, got {type(value).__name__}", column, row)
        elif len(value) > LONG_CHARS:
            self.add("warning", f"very long value in '{column}' ({len(value)} chars): it will be truncated at "
                     "max_length", column, row)

    def score(self, row: int, value: Any) -> None:
        if value is None:
            self.add("error", "null value in 'score': every pair needs its similarity", "score", row)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            self.add("error", f"'score' must be a number (a similarity such as 0.8), got {type(value).__name__}: "
                     "cast the column to float, or map the column that holds the similarity as score", "score", row)
        elif value != value:  # NaN
            self.add("error", "'score' is NaN: fill it or drop the row", "score", row)

    def messages(self, row: int, column: str, value: Any, *, need_assistant: bool = True) -> None:
        if not isinstance(value, list) or not value:
            self.add("error", f"'{column}' must be a non-empty list of {{role, content}} messages", column, row)
            return
        has_assistant, total = False, 0
        for turn in value:
            if not isinstance(turn, dict):
                self.add("error", f"every message in '{column}' must be an object with role and content", column, row)
                return
            if "role" not in turn and "from" in turn:
                self.add("error", f"'{column}' uses ShareGPT keys from/value: map it as messages and it is "
                         "converted to role/content", column, row)
                return
            role, content = turn.get("role"), turn.get("content")
            if role not in ROLES:
                self.add("error", f"unknown role {role!r} in '{column}' (use system/user/assistant/tool)", column, row)
            if isinstance(content, list):  # TRL's multimodal turns: [{"type": "image"}, {"type": "text", ...}]
                content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict)) or (
                    "<image>" if any(isinstance(p, dict) and p.get("type") == "image" for p in content) else "")
            if not isinstance(content, str):
                self.add("error", f"message content in '{column}' must be a string, got {type(content).__name__}",
                         column, row)
            elif not content.strip() and not turn.get("tool_calls"):
                self.add("error", f"empty message content in '{column}'", column, row)
            else:
                total += len(content)
            has_assistant |= role == "assistant"
        if need_assistant and not has_assistant:
            self.add("error", f"no assistant turn in '{column}': there is nothing to learn from", column, row)
        if total > LONG_CHARS:
            self.add("warning", f"very long conversation in '{column}' ({total} chars): it will be truncated",
                     column, row)


def check_rows(method: str, fmt: str, rows: list[dict], offsets: list[int], *, base: Path | None = None,
               allowed: Callable[[Path], bool] = lambda _: True) -> list[DatasetIssue]:
    """Issues per row; `offsets` are 0-based, the issues' row numbers 1-based (row N is line N of a JSONL file).
    base: the folder relative image paths are read from; allowed: the paths this caller may read."""
    checker = Checker(method)
    spec = methods.get(method)
    kind = VISION_FORMATS.get(fmt, fmt)  # the text beside a row's images is checked as the text format's
    for row, offset in zip(rows, offsets, strict=True):
        index = offset + 1
        if fmt in VISION_FORMATS:
            checker.images(index, row.get("images"), base, allowed)
        if kind == "messages":
            checker.messages(index, "messages", row.get("messages"))
        elif kind == "text":
            checker.text(index, "text", row.get("text"))
        elif kind in ("prompt_completion", "conversational_prompt_completion"):
            checker.text(index, "prompt", row.get("prompt"))
            checker.text(index, "completion", row.get("completion"))
        elif kind in ("preference", "implicit_preference"):
            if "prompt" in row:
                checker.text(index, "prompt", row.get("prompt"), required=spec.prompt_required)
            chosen, rejected = row.get("chosen"), row.get("rejected")
            checker.text(index, "chosen", chosen)
            checker.text(index, "rejected", rejected)
            if chosen is not None and chosen == rejected:
                checker.add("warning", "chosen and rejected are identical: the row teaches nothing", "chosen", index)
            if kind == "implicit_preference" and spec.prompt_required and not _shared_prompt(chosen, rejected):
                checker.add("error", f"{spec.title} without a 'prompt' column needs chosen/rejected that start with "
                            "the same prompt (turns, or text as in Anthropic/hh-rlhf); add a 'prompt' column or map "
                            "one", "prompt", index)
            if "prompt" in row and is_conversation(chosen) and isinstance(row.get("prompt"), str):
                checker.add("warning", "'prompt' is text but chosen/rejected are conversations: the job drops 'prompt' "
                            "and takes the turns chosen and rejected share as the prompt (as TRL does)", "prompt",
                            index)
        elif kind == "unpaired_preference":
            checker.text(index, "prompt", row.get("prompt"))
            checker.text(index, "completion", row.get("completion"))
            if not isinstance(row.get("label"), bool) and row.get("label") not in (0, 1):
                checker.add("error", f"'label' must be true/false (desirable or not), got {row.get('label')!r}",
                            "label", index)
        elif kind == "prompt_only":
            checker.text(index, "prompt", row.get("prompt"))
        elif kind == "text_classification":
            checker.text(index, "text", row.get("text"))
            checker.label(index, row.get("label"))
        elif kind == "image_classification":
            problem = image_cell_problem(row.get("image"), base, allowed)
            if problem:
                checker.add(*problem, "image", index)
            checker.label(index, row.get("label"))
        elif kind in SENTENCE_FORMATS:
            sentence_row(checker, index, kind, row)
    if fmt in CLASS_FORMATS:
        label_notes(checker, [row.get("label") for row in rows])
    if fmt == "scored_pairs":
        score_notes(checker, [row.get("score") for row in rows])
    return checker.issues


SENTENCE_FORMATS = frozenset({"sentence_pairs", "sentence_triplets", "scored_pairs"})  # texts to embed, per row


def sentence_row(checker: "Checker", index: int, fmt: str, row: dict) -> None:
    for column in FORMAT_COLUMNS[fmt]:
        if column == "score":
            checker.score(index, row.get(column))
        else:
            checker.sentence(index, column, row.get(column))
    if fmt != "scored_pairs" and isinstance(row.get("anchor"), str) and row.get("anchor") == row.get("positive"):
        checker.add("warning", "anchor and positive are the same text: the row teaches nothing", "positive", index)
    if fmt == "sentence_triplets" and isinstance(row.get("positive"), str) and row["positive"] == row.get("negative"):
        checker.add("warning", "positive and negative are the same text: the row contradicts itself (drop it, or "
                    "mine another negative)", "negative", index)


def score_notes(checker: "Checker", scores: list[Any]) -> None:
    """Scores outside 0..1 train as they are (CoSENTLoss and Spearman read only their order), which the caller
    may not expect; one score for every row gives nothing to rank."""
    numbers = [v for v in scores if isinstance(v, int | float) and not isinstance(v, bool) and v == v]
    if not numbers:
        return
    low, high = min(numbers), max(numbers)
    if low == high and len(numbers) > 1:
        checker.add("warning", f"every sampled pair has score {low}: CoSENTLoss learns from which pairs score "
                    "higher, and there is nothing to rank (the sample may be sorted by score)", "score")
    elif low < 0 or high > 1:
        checker.add("warning", f"scores range {low}..{high}, outside 0..1: CoSENTLoss and Spearman read only their "
                    "order, so this trains as it is; rescale them (e.g. score / 5 for STS-B) to read them as cosine "
                    "similarities", "score")


CLASS_FORMATS = frozenset({"text_classification", "image_classification"})  # one label per row, the classes the model learns
MANY_CLASSES = 100  # a sample with more distinct labels is likely a free-text or id column
# class names a report lists: every one of ImageNet-1k's (about 25 KB of names); beyond, the count and the first ones
LISTED_LABELS = 1000
DOMINANT_SHARE = 0.8  # one class over this share of the sample: accuracy rewards always answering it


def label_names(labels: list[Any], feature: dict | None = None) -> list[str]:
    """The class names: a ClassLabel's own (its ids index them), else the distinct values seen, sorted."""
    if feature and feature.get("_type") == "ClassLabel" and feature.get("names"):
        return [str(n) for n in feature["names"]]
    return sorted({str(v) for v in labels if v is not None and not isinstance(v, list | dict)})


def label_notes(checker: "Checker", labels: list[Any]) -> None:
    """Warnings about the classes as the sample shows them: too many, only one, or one that dominates."""
    seen = [str(v) for v in labels if v is not None and not isinstance(v, list | dict)]
    distinct = set(seen)
    if len(distinct) > MANY_CLASSES:
        checker.add("warning", f"{len(distinct)} distinct labels in the sample: is 'label' really a class (not a "
                    "free-text or id column)? Map the class column as label", "label")
    elif len(distinct) == 1 and len(seen) > 1:
        checker.add("warning", f"every sampled row has label {seen[0]!r}: a classifier needs at least two classes "
                    "(the sample may be sorted by label; the job reads the whole split)", "label")
    elif seen:
        top = max(distinct, key=seen.count)
        if seen.count(top) / len(seen) > DOMINANT_SHARE:
            checker.add("warning", f"imbalanced classes: {seen.count(top) / len(seen):.0%} of sampled rows are "
                        f"{top!r}; accuracy will look good for a model that always answers it (read macro F1)",
                        "label")


def method_verdict(method: str, fmt: str, columns: set[str]) -> list[DatasetIssue]:
    spec = methods.get(method)
    if fmt not in spec.formats:
        return [DatasetIssue(severity="error", message=f"{method} needs {spec.needs}; found columns "
                             f"{sorted(columns)} (format '{fmt}')")]
    return [DatasetIssue(severity=severity, message=message, column=column)
            for severity, message, column in spec.data_notes(columns)]
