"""Per-method dataset rules: column-mapping suggestions, the format a layout is read as, and the rows checked
by their format's own check (the formats: data/formats.py)."""

from pathlib import Path

from hf_train_mcp import methods
from hf_train_mcp.data.checks import SAMPLE_NOTES, Checker, DatasetIssue, is_conversation
from hf_train_mcp.data.formats import FORMATS
from hf_train_mcp.data.images import Allowed


def suggest_mapping(method: str, columns: list[str], rows: list[dict]) -> dict[str, str]:
    """target <- source for the first of the method's formats that the columns can make (nothing when one of
    them is already there): the method's aliases name the layouts popular datasets use."""
    spec = methods.get(method)
    cols = set(columns)
    first = rows[0] if rows else {}
    # images first: a conversation column beside an image column is vision data (messages alone would drop them)
    for fmt in sorted(spec.formats, key=lambda f: not FORMATS[f].vision):
        mapping: dict[str, str] = {}
        for target in FORMATS[fmt].columns:
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
    wanted = FORMATS[fmt].conversational_prompt
    if wanted is None or not first:
        return True
    return is_conversation(first.get(mapping.get("prompt", "prompt"))) == wanted


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
    """Every format these (mapped) columns make, in reading order."""
    return [name for name, declared in FORMATS.items() if declared.makes(columns, first)]


def detect_format(columns: set[str], first: dict, method: str | None = None) -> str:
    """The format the rows are read as: the first of the method's formats they make (a dataset can hold several:
    UltraFeedback has messages and chosen/rejected), else the first they make at all. A format another one they
    make hides is not read (the images are the point; a prompt column beats a shared prompt)."""
    found = candidate_formats(columns, first)
    hidden = {name for fmt in found for name in FORMATS[fmt].hides}
    found = [fmt for fmt in found if fmt not in hidden]
    preferred = [f for f in (methods.get(method).formats if method else ()) if f in found]
    return (preferred or found or ["unknown"])[0]


def check_rows(method: str, fmt: str, rows: list[dict], offsets: list[int], *, base: Path | None = None,
               allowed: Allowed = lambda _: True) -> list[DatasetIssue]:
    """Issues per row, by the format's own check, then its label's notes on the whole sample; `offsets` are
    0-based, the issues' row numbers 1-based (row N is line N of a JSONL file). base: the folder relative image
    paths are read from; allowed: the paths this caller may read."""
    checker = Checker(methods.get(method), base=base, allowed=allowed)
    declared = FORMATS[fmt]
    for row, offset in zip(rows, offsets, strict=True):
        declared.check(checker, offset + 1, row)
    if declared.label in SAMPLE_NOTES:
        SAMPLE_NOTES[declared.label](checker, rows)
    return checker.issues


def method_verdict(method: str, fmt: str, columns: set[str]) -> list[DatasetIssue]:
    spec = methods.get(method)
    if fmt not in spec.formats:
        return [DatasetIssue(severity="error", message=f"{method} needs {spec.needs}; found columns "
                             f"{sorted(columns)} (format '{fmt}')")]
    return [DatasetIssue(severity=severity, message=message, column=column)
            for severity, message, column in spec.data_notes(columns)]
