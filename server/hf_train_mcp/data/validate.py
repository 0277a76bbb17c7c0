"""validate_dataset end to end: sample (Hub viewer or local files), map columns, detect, check, count tokens."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hf_train_mcp import methods
from hf_train_mcp.access import STDIO, Access, is_local
from hf_train_mcp.data import rules
from hf_train_mcp.data.checks import LISTED_LABELS, DatasetIssue, is_conversation, label_names
from hf_train_mcp.data.formats import has_classes, reads_images
from hf_train_mcp.models.chat_template import SHAREGPT_ROLES, has_chat_template
from hf_train_mcp.data.images import OUTSIDE, image_folder_classes, part_problem, path_problem, sample_image_folder
from hf_train_mcp.data.layout import layout_problem
from hf_train_mcp.data.local import MAX_WALK_ENTRIES, data_files, sample_local
from hf_train_mcp.data.rows import every_row
from hf_train_mcp.data.tokens import token_stats
from hf_train_mcp.data.viewer import sample_hub
from hf_train_mcp.errors import NotFoundError, TrainError
from hf_train_mcp.data.report import DatasetReport, TokenStats

SAMPLE_CELL_CHARS = 300
CONVERSATIONS = ("messages", "prompt", "chosen", "rejected", "completion")  # turns whose parts may name images
TOKEN_SAMPLE_ROWS = 1000


def _short(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= SAMPLE_CELL_CHARS else value[:SAMPLE_CELL_CHARS] + "…"
    if isinstance(value, list):
        return [_short(v) for v in value[:6]]
    if isinstance(value, dict):
        return {k: _short(v) for k, v in value.items()}
    return value


def validate_dataset(dataset: str, method: str, *, split: str = "train", config: str | None = None,
                     column_mapping: dict[str, str] | None = None, model: str | None = None,
                     max_length: int | None = None, token: str | None = None, access: Access = STDIO,
                     progress: Callable[[str], None] | None = None) -> DatasetReport:
    step = progress or (lambda message: None)
    access.check_ref(dataset, "dataset")
    access.check_ref(model, "model")
    step(f"sampling {dataset}")
    sample, chosen_config = _sample(dataset, config=config, split=split, token=token, access=access)
    columns = sample.columns
    issues: list[DatasetIssue] = []
    suggested = _column_mapping(method, sample, column_mapping, issues)
    rows = rules.apply_mapping(sample.rows, suggested)
    renamed = {source: target for target, source in suggested.items()}
    mapped_columns = {renamed.get(c, c) for c in columns} | set().union(*(r.keys() for r in rows))
    fmt = rules.detect_format(mapped_columns, rows[0] if rows else {}, method)
    if fmt in ("messages", "vision_messages"):  # ShareGPT turns are converted by the script: check them so
        rows = _from_sharegpt(rows)
    issues += rules.method_verdict(method, fmt, mapped_columns)
    issues += _row_issues(dataset, method, fmt, rows, sample.offsets, suggested, access)
    if not sample.rows:
        issues.append(DatasetIssue(severity="error", message="the dataset has no rows"))
    refused = False  # the model cannot train this way: its tokenizer would count rows that will not train
    if model:
        step(f"reading {model}'s config.json")
        found = _model_issues(model, method, token, fmt=fmt, first=rows[0] if rows else None)
        refused, issues = any(i.severity == "error" for i in found), issues + found
    stats, no_stats = None, None
    if model and rows and methods.get(method).inputs == "text" and not refused:  # an image's: its patch grid
        step(f"counting tokens with {model}'s tokenizer")
        stats, no_stats = _token_stats(model, token, rows, fmt, max_length or methods.get(method).max_length,
                                       sample.num_rows, issues)
    report = DatasetReport(
        valid=not any(i.severity == "error" for i in issues),
        dataset=dataset,
        config=chosen_config,
        split=split,
        num_rows=sample.num_rows,
        columns=columns,
        detected_format=fmt,
        issues=issues,
        suggested_column_mapping=suggested or None,
        sample_rows=[_short(r) for r in sample.rows[:3]],
        token_stats=stats,
        labels=_labels(fmt, rows, sample.features.get(suggested.get("label", "label")), issues),  # may add a warning
    )
    report._no_token_stats = no_stats
    return report


def _sample(dataset: str, *, config: str | None, split: str, token: str | None, access: Access):
    """(the sample, the config chosen): local files, or the Hub's viewer."""
    if is_local(dataset):
        return sample_local(dataset, allowed=access.allows_path), None
    sample = sample_hub(dataset, config=config, split=split, token=token)
    return sample, sample.config


def _column_mapping(method: str, sample, given: dict[str, str] | None, issues: list[DatasetIssue]) -> dict[str, str]:
    """The caller's mapping (columns it names that do not exist are an error, and dropped) over the one suggested
    for the method's formats."""
    columns = sample.columns
    mapping = dict(given or {})
    missing = [src for src in mapping.values() if src not in columns]
    if missing:
        issues.append(DatasetIssue(severity="error", message=f"column_mapping names columns that do not exist: "
                                   f"{missing}; columns are {columns}"))
        mapping = {t: s for t, s in mapping.items() if s in columns}
    return {**rules.suggest_mapping(method, [c for c in columns if c not in mapping.values()], sample.rows),
            **mapping}


def _row_issues(dataset: str, method: str, fmt: str | None, rows: list[dict], offsets, mapping: dict[str, str],
                access: Access) -> list[DatasetIssue]:
    """The sample's rows checked for the method, and (over HTTP) every image file any row names."""
    issues: list[DatasetIssue] = []
    if fmt in methods.get(method).formats:
        issues += rules.check_rows(method, fmt, rows, offsets, allowed=access.allows_path,
                                   base=data_folder(dataset) if is_local(dataset) else None)
    if not any(i.message == OUTSIDE for i in issues):  # the sample's own finding says it already
        outside = outside_images(dataset, mapping, access)
        issues += [outside] if outside else []
    return issues


def _model_issues(model: str, method: str, token: str | None, *, fmt: str, first: dict | None
                  ) -> list[DatasetIssue]:
    """What the model named rules out for these rows, as submit_training and estimate_cost decide it from the same
    files: images for a model that reads none as a vision-language model (a text model, a dual encoder such as
    CLIP), a classification or reward head the model has no class for (models/refusals.py); conversations for a
    model without a chat template (models/chat_template.py)."""
    issues = _family_issues(model, method, token, vision=reads_images(fmt),
                            said=reads_images(fmt) or methods.get(method).classifier)
    if first is not None and conversational(fmt, first) and has_chat_template(model, token,
                                                                              local=is_local(model)) is False:
        issues.append(DatasetIssue(severity="warning", message=(
            f"{model} has no chat template (its tokenizer files hold none), and these rows are conversations: "
            "submit_training refuses them with it unless you send chat_template='chatml'; or use the model's "
            "instruct/chat version")))
    return issues


def _family_issues(model: str, method: str, token: str | None, *, vision: bool, said: bool) -> list[DatasetIssue]:
    """said: files that cannot be read are worth a warning (images, or a head: else the job's loading decides)."""
    from hf_train_mcp.models.family import family_of
    from hf_train_mcp.models.refusals import method_refusal
    from hf_train_mcp.models.files import model_files

    try:
        files = model_files(model, token)
        family = family_of(files)
    except Exception as exc:  # unreadable here: the job's own loading decides, and sizing says why
        return [DatasetIssue(severity="warning", message=f"could not read {model}'s config.json ({exc}): whether "
                             "it reads images was not checked")] if said else []
    refusal = method_refusal(family, model, methods.get(method), vision=vision)
    if not refusal:
        return []
    return [DatasetIssue(severity="error", message=refusal.removesuffix(" Nothing was launched.").rstrip("."))]


def conversational(fmt: str, row: dict) -> bool:
    """Whether rows of this format (and this first row) are conversations, which the job renders with the
    model's chat template."""
    return fmt in ("messages", "vision_messages", "conversational_prompt_completion") or any(
        is_conversation(row.get(c)) for c in ("prompt", "chosen", "rejected", "completion"))


def data_folder(dataset: str) -> Path:
    """Where relative image paths of a local dataset are read from (the template's image_path): its folder, or
    the data file's."""
    path = Path(dataset).expanduser().resolve()
    return path if path.is_dir() else path.parent


def outside_images(dataset: str, mapping: dict[str, str] | None, access: Access) -> DatasetIssue | None:
    """Over HTTP, every file the job may open of a local dataset must be one the caller may read: every entry of a
    data folder (layout.py: nor may the folder tell datasets to read elsewhere), and every image file that any row
    names (however spelled: a path, a {"path"} cell, a list of them, a conversation's part), in every row as the
    job's reader may see it (rows.py): a sample is not enough. The one check validation and planning share
    (skip_validation does not skip it); an image folder is listed whole."""
    if not access.remote or not is_local(dataset):
        return None
    path = Path(dataset).expanduser()
    try:
        classes = image_folder_classes(path, access.allows_path)
        if classes:
            sample_image_folder(path, classes, MAX_WALK_ENTRIES, access.allows_path)
        files = [] if classes else data_files(dataset, access.allows_path)
        problem = layout_problem(path, access.allows_path, images=bool(classes)) if path.is_dir() else None
        if problem:
            return DatasetIssue(severity="error", message=problem)
        return _named_outside(files, mapping, data_folder(dataset), access)
    except NotFoundError:  # nothing there to open (validation says so)
        return None
    except (ValueError, TrainError) as exc:  # a link out; too much to check whole; rows read otherwise by the job
        return DatasetIssue(severity="error", message=str(exc))


def _named_outside(files: list[Path], mapping: dict[str, str] | None, base: Path, access: Access
                   ) -> DatasetIssue | None:
    """The first row that names a file outside what the caller may read, as an issue."""
    images = tuple(dict.fromkeys((mapping or {}).get(name, name) for name in ("image", "images")))
    turns = tuple(dict.fromkeys((mapping or {}).get(name, name) for name in CONVERSATIONS))
    for file, index, row in every_row(files, images + turns):
        for column, value in row.items():
            why = (path_problem(value, base, access.allows_path) if column in images
                   else part_problem(value, base, access.allows_path))
            if why:
                return DatasetIssue(severity="error", message=f"{file.name} row {index + 1}: {why}", column=column,
                                    row=index + 1)
    return None


def _from_sharegpt(rows: list[dict]) -> list[dict]:
    """ShareGPT turns ({from, value}) as the script converts them ({role, content})."""
    if not any(is_conversation(r.get("messages")) and "from" in r["messages"][0] for r in rows):
        return rows
    return [{**r, "messages": [{"role": SHAREGPT_ROLES.get(str(m.get("from")).lower(), m.get("from")),
                                "content": m.get("value")} for m in r["messages"]]}
            if is_conversation(r.get("messages")) else r for r in rows]


def _labels(fmt: str, rows: list[dict], feature: dict | None, issues: list[DatasetIssue]) -> list[str] | None:
    """The class names of classification data (a ClassLabel's, else those the sample shows): every one up to
    LISTED_LABELS; past it the first ones, and a warning that says how many there are."""
    if not has_classes(fmt):
        return None
    names = label_names([r.get("label") for r in rows], feature)
    if len(names) > LISTED_LABELS:
        issues.append(DatasetIssue(severity="warning", column="label", message=f"{len(names)} classes: labels "
                                   f"lists the first {LISTED_LABELS} of them; the job trains all {len(names)}"))
    return names[:LISTED_LABELS] or None


def _token_stats(model: str, token: str | None, rows: list[dict], fmt: str, limit: int, num_rows: int | None,
                 issues: list[DatasetIssue]) -> tuple[TokenStats | None, str | None]:
    """Token statistics of the sampled rows with the model's tokenizer, or why there are none; why there are none,
    or how many rows max_length would cut, as warnings."""
    stats, why_not = token_stats(model, token, rows[:TOKEN_SAMPLE_ROWS], fmt, limit, num_rows, local=is_local(model))
    if stats is None:
        note = f"no token statistics with {model}'s tokenizer ({why_not})"
        issues.append(DatasetIssue(severity="warning", message=f"{note}; estimates will assume a typical length"))
        return None, note
    if stats.share_over_max_length > 0.1:
        issues.append(DatasetIssue(severity="warning", message=f"{stats.share_over_max_length:.0%} of sampled rows "
                                   f"exceed max_length={limit} tokens (p95 {stats.p95}): raise max_length or accept "
                                   "truncation"))
    return stats, None


def image_facts(report: Any) -> dict[str, Any]:
    """What a report says of the rows' images, as DataFacts fields: whether the rows hold images beside their text,
    how many a sampled row holds on average (in the column its mapping names `images`), and their mean size."""
    if not reads_images(report.detected_format):
        return {"vision": False, "images_per_row": 0.0, "image_pixels": None}
    column = (report.suggested_column_mapping or {}).get("images", "images")
    cells = [value if isinstance(value, list) else [] if value is None else [value]
             for value in (r[column] for r in report.sample_rows if column in r)]
    counts = [len(cell) for cell in cells]
    # the viewer's image cells say their size ({src, height, width}): no image is downloaded to know it
    sized = [(i["height"], i["width"]) for cell in cells for i in cell if isinstance(i, dict)
             and isinstance(i.get("height"), int | float) and isinstance(i.get("width"), int | float)
             and i["height"] > 0 and i["width"] > 0]
    pixels = (sum(h for h, _ in sized) / len(sized), sum(w for _, w in sized) / len(sized)) if sized else None
    return {"vision": True, "images_per_row": sum(counts) / len(counts) if counts else 0.0, "image_pixels": pixels}
