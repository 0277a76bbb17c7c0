"""Per-method dataset rules (TRL 1.x formats), column-mapping suggestions, and row-level checks."""

from dataclasses import dataclass, field
from typing import Any

from hf_train_mcp.schemas import DatasetIssue

ROLES = {"system", "user", "assistant", "tool"}
SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "user": "user", "assistant": "assistant",
                  "bot": "assistant", "model": "assistant", "tool": "tool", "function": "tool"}
ACCEPTED = {
    "sft": ("messages", "text", "prompt_completion", "conversational_prompt_completion"),
    "dpo": ("preference", "implicit_preference"),
    "grpo": ("prompt_only", "prompt_completion", "conversational_prompt_completion"),
    "reward": ("preference", "implicit_preference"),
}
NEEDS = {
    "sft": "'messages' (list of {role, content}), 'text', or 'prompt' + 'completion'",
    "dpo": "'prompt' + 'chosen' + 'rejected' (or conversational 'chosen'/'rejected' sharing the prompt turns)",
    "grpo": "'prompt' (string or list of messages), plus a reference column such as 'answer' for accuracy rewards",
    "reward": "'chosen' + 'rejected' (optionally 'prompt')",
}
# target column <- source column names seen in the wild, in order of preference
ALIASES: dict[str, tuple[str, ...]] = {
    "messages": ("conversations", "conversation", "chat", "dialogue", "dialog", "turns"),
    "prompt": ("instruction", "question", "input", "query", "problem", "prompt_text"),
    "completion": ("output", "response", "answer", "target", "completion_text", "solution"),
    "chosen": ("preferred", "winner", "chosen_response", "accepted", "positive", "response_chosen"),
    "rejected": ("dispreferred", "loser", "rejected_response", "negative", "response_rejected"),
}
REFERENCE_COLUMNS = ("answer", "solution", "ground_truth", "reference", "target")
LONG_CHARS = 32_000


def is_conversation(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) for m in value)


def suggest_mapping(method: str, columns: list[str], rows: list[dict]) -> dict[str, str]:
    cols = set(columns)
    first = rows[0] if rows else {}
    mapping: dict[str, str] = {}

    def pick(target: str, *, conversational: bool = False) -> None:
        if target in cols or target in mapping:
            return
        for alias in ALIASES[target]:
            if alias in cols and alias not in mapping.values():
                if conversational and first and not is_conversation(first.get(alias)):
                    continue
                mapping[target] = alias
                return

    if method == "sft":
        if not ({"messages", "text"} & cols or {"prompt", "completion"} <= cols):
            pick("messages", conversational=True)
            if "messages" not in mapping:
                pick("prompt")
                pick("completion")
                if not ({"prompt", "completion"} <= cols | set(mapping)):
                    mapping.pop("prompt", None), mapping.pop("completion", None)
    elif method in ("dpo", "reward"):
        pick("chosen")
        pick("rejected")
        if method == "dpo" or "prompt" not in cols:
            pick("prompt")
    elif method == "grpo":
        if "prompt" not in cols:
            for alias in ("question", "problem", "instruction", "query", "input"):
                if alias in cols:
                    mapping["prompt"] = alias
                    break
    return mapping


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


def detect_format(columns: set[str], first: dict) -> str:
    if "messages" in columns:
        return "messages"
    if {"chosen", "rejected"} <= columns:
        return "preference" if "prompt" in columns else "implicit_preference"
    if {"prompt", "completion"} <= columns:
        return "conversational_prompt_completion" if is_conversation(first.get("prompt")) else "prompt_completion"
    if "text" in columns:
        return "text"
    if "prompt" in columns:
        return "prompt_only"
    return "unknown"


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


def check_rows(method: str, fmt: str, rows: list[dict], offsets: list[int]) -> list[DatasetIssue]:
    """Issues per row; `offsets` are 0-based, the issues' row numbers 1-based (row N is line N of a JSONL file)."""
    checker = Checker(method)
    for row, offset in zip(rows, offsets, strict=True):
        index = offset + 1
        if fmt == "messages":
            checker.messages(index, "messages", row.get("messages"))
        elif fmt == "text":
            checker.text(index, "text", row.get("text"))
        elif fmt in ("prompt_completion", "conversational_prompt_completion"):
            checker.text(index, "prompt", row.get("prompt"))
            checker.text(index, "completion", row.get("completion"))
        elif fmt in ("preference", "implicit_preference"):
            if "prompt" in row:
                checker.text(index, "prompt", row.get("prompt"), required=method == "dpo")
            chosen, rejected = row.get("chosen"), row.get("rejected")
            checker.text(index, "chosen", chosen)
            checker.text(index, "rejected", rejected)
            if chosen is not None and chosen == rejected:
                checker.add("warning", "chosen and rejected are identical: the row teaches nothing", "chosen", index)
            if fmt == "implicit_preference" and method == "dpo" and not is_conversation(chosen):
                checker.add("error", "DPO without a 'prompt' column needs conversational chosen/rejected that share "
                            "the prompt turns; add a 'prompt' column or map one", "prompt", index)
        elif fmt == "prompt_only":
            checker.text(index, "prompt", row.get("prompt"))
    return checker.issues


def method_verdict(method: str, fmt: str, columns: set[str]) -> list[DatasetIssue]:
    issues = []
    if fmt not in ACCEPTED[method]:
        issues.append(DatasetIssue(
            severity="error",
            message=f"{method} needs {NEEDS[method]}; found columns {sorted(columns)} (format '{fmt}')",
        ))
    if method == "grpo" and fmt in ACCEPTED["grpo"]:
        refs = [c for c in REFERENCE_COLUMNS if c in columns]
        if refs:
            issues.append(DatasetIssue(severity="warning", column=refs[0],
                                       message=f"'{refs[0]}' can drive reward_funcs=['accuracy']"))
        else:
            issues.append(DatasetIssue(severity="warning", message="no reference column (answer/solution): "
                                       "only format/length rewards or your reward_code can score completions"))
    return issues
