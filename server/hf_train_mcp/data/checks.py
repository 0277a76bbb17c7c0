"""What validation finds (DatasetIssue) and the Checker that records it: the checks of one cell (text, turns, a
label, a score, images) that every data format's row check is made of, and the notes on a whole sample."""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from hf_train_mcp.data.images import Allowed, image_cell_problem
from hf_train_mcp.methods.base import MethodSpec

ROLES = {"system", "user", "assistant", "tool"}
LONG_CHARS = 32_000


class DatasetIssue(BaseModel):
    severity: Literal["error", "warning"]
    message: str
    column: str | None = None
    row: int | None = Field(default=None, description="1-based; for JSONL, the line number")


def is_conversation(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) for m in value)


def _everything(_: Path) -> bool:
    return True


@dataclass
class Checker:
    """The issues of a sample read for one method. base: the folder relative image paths are read from;
    allowed: the paths this caller may read."""

    spec: MethodSpec
    base: Path | None = None
    allowed: Allowed = _everything
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

    def image(self, row: int, value: Any) -> None:
        """One image per row (a classifier's): a viewer cell or a readable file."""
        problem = image_cell_problem(value, self.base, self.allowed)
        if problem:
            self.add(*problem, "image", row)

    def images(self, row: int, value: Any) -> None:
        """A row's images: a list (or one image), each a viewer cell or a readable file."""
        for image in value if isinstance(value, list) else [value]:
            problem = image_cell_problem(image, self.base, self.allowed)
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
            total += self._turn(row, column, turn)
            has_assistant |= turn.get("role") == "assistant"
        if need_assistant and not has_assistant:
            self.add("error", f"no assistant turn in '{column}': there is nothing to learn from", column, row)
        if total > LONG_CHARS:
            self.add("warning", f"very long conversation in '{column}' ({total} chars): it will be truncated",
                     column, row)

    def _turn(self, row: int, column: str, turn: dict) -> int:
        """One message's issues; its length in characters (0 when it has no usable content)."""
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
            return len(content)
        return 0


MANY_CLASSES = 100  # a sample with more distinct labels is likely a free-text or id column
# class names a report lists: every one of ImageNet-1k's (about 25 KB of names); beyond, the count and the first ones
LISTED_LABELS = 1000
DOMINANT_SHARE = 0.8  # one class over this share of the sample: accuracy rewards always answering it


def label_names(labels: list[Any], feature: dict | None = None) -> list[str]:
    """The class names: a ClassLabel's own (its ids index them), else the distinct values seen, sorted."""
    if feature and feature.get("_type") == "ClassLabel" and feature.get("names"):
        return [str(n) for n in feature["names"]]
    return sorted({str(v) for v in labels if v is not None and not isinstance(v, list | dict)})


def label_notes(checker: Checker, rows: list[dict]) -> None:
    """Warnings about the classes as the sample shows them: too many, only one, or one that dominates."""
    seen = [str(v) for v in (row.get("label") for row in rows) if v is not None and not isinstance(v, list | dict)]
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


def score_notes(checker: Checker, rows: list[dict]) -> None:
    """Scores outside 0..1 train as they are (CoSENTLoss and Spearman read only their order), which the caller
    may not expect; one score for every row gives nothing to rank."""
    scores = [row.get("score") for row in rows]
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


# what a whole sample is told about its labels, by the label's shape (a format's `label`)
SAMPLE_NOTES: dict[str, Callable[[Checker, list[dict]], None]] = {"class": label_notes, "score": score_notes}
