"""Sample rows from local .jsonl/.json/.csv/.parquet files (or folders of them) without loading them whole."""

import csv
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hf_train_mcp.data.images import image_folder_classes, sample_image_folder
from hf_train_mcp.errors import DatasetError, EnvironmentMissing, NotFoundError

EXTENSIONS = (".jsonl", ".json", ".csv", ".parquet")
HEAD_ROWS = 200
SPREAD_ROWS = 100
FULL_SCAN_ROWS = 20_000  # smaller files are checked row by row; larger ones by head + spread sample
CHUNK = 1 << 22
MAX_WALK_ENTRIES = 10_000
ONE_OBJECT_BYTES = 64 << 20  # a .json file not an array tried as one object up to this size (else JSON Lines)


@dataclass
class Sample:
    columns: list[str]
    rows: list[dict]
    offsets: list[int]  # row index of each sampled row
    num_rows: int | None
    features: dict[str, dict] = field(default_factory=dict)  # column -> the viewer's feature type (Hub data)


def data_files(source: str, allowed: Callable[[Path], bool] = lambda _: True) -> list[Path]:
    """The data files `source` names; a folder is walked up to MAX_WALK_ENTRIES entries (never the whole disk).
    What the job would read of the folder and this caller may not (a link out, a hard link) is refused."""
    path = Path(source).expanduser()
    if not path.exists():
        raise NotFoundError(f"{source}: file or folder not found (a Hub dataset id looks like 'owner/name')")
    if path.is_file():
        if path.suffix.lower() not in EXTENSIONS:
            raise DatasetError(f"{source}: unsupported file type; send .jsonl, .json, .csv or .parquet")
        return [path]
    files, seen = [], 0
    for folder, subfolders, names in os.walk(path):  # does not follow symlinked folders (the job's reader may)
        # what datasets never reads unless asked: hidden files and folders, '__special__' folders (data_files.py
        # _is_unrequested_hidden_file_or_is_inside_unrequested_hidden_dir): a notebook's .ipynb_checkpoints, a ._x
        subfolders[:] = sorted(name for name in subfolders if not name.startswith((".", "__")))
        names = [name for name in names if not name.startswith(".")]
        seen += len(subfolders) + len(names)
        if seen > MAX_WALK_ENTRIES:
            raise DatasetError(f"{source}: over {MAX_WALK_ENTRIES} files and folders to search; point dataset at the "
                             "data file or the folder that holds only the data")
        for name in subfolders:
            _check_allowed(Path(folder, name), path, allowed)
        files += [Path(folder, n) for n in names if Path(n).suffix.lower() in EXTENSIONS]
    files = sorted(f for f in files if f.is_file())
    for file in files:
        _check_allowed(file, path, allowed)
    if not files:
        raise DatasetError(f"{source}: no .jsonl/.json/.csv/.parquet files in this folder")
    return files


def _check_allowed(path: Path, top: Path, allowed: Callable[[Path], bool]) -> None:
    if not allowed(path):
        raise DatasetError(f"{path.relative_to(top).as_posix()!r} in the dataset folder links outside the folders "
                           "callers of this server may read, or is a file with other names (a hard link): copy the "
                           "data in instead")


def _line_index(path: Path) -> tuple[int, list[int]]:
    """Number of lines and the cumulative line count at each CHUNK boundary (for locating sampled rows)."""
    counts, total = [0], 0
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            total += block.count(b"\n")
            counts.append(total)
        size = f.tell()
    if size:
        with open(path, "rb") as f:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                total += 1
    return total, counts


def _row_at(path: Path, offset: int, counts: list[int]) -> tuple[int, bytes] | None:
    """The first whole line after byte `offset`, with its 0-based line number."""
    with open(path, "rb") as f:
        chunk_start = (offset // CHUNK) * CHUNK
        f.seek(chunk_start)
        before = f.read(offset - chunk_start).count(b"\n")
        f.readline()  # finish the partial line
        line = f.readline()
    if not line.strip():
        return None
    return counts[offset // CHUNK] + before + 1, line


def _jsonl(path: Path, seed: int) -> Sample:
    total, counts = _line_index(path)
    rows, offsets = [], []

    def add(index: int, raw: bytes) -> None:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            several = " (the job's reader takes each value as a row): put one object on each line" if \
                exc.msg == "Extra data" else ""
            raise DatasetError(f"{path.name} line {index + 1} is not valid JSON ({exc.msg}){several}") from None
        if not isinstance(value, dict):
            raise DatasetError(f"{path.name} line {index + 1} is not a JSON object")
        rows.append(value)
        offsets.append(index)

    head = total if total <= FULL_SCAN_ROWS else HEAD_ROWS
    with open(path, "rb") as f:
        for index, raw in enumerate(f):
            if index >= head:
                break
            if raw.strip():
                add(index, raw)
    size = path.stat().st_size
    if total > head and size:
        rng = random.Random(seed)
        seen = set(offsets)
        for offset in sorted(rng.randrange(size) for _ in range(SPREAD_ROWS)):
            found = _row_at(path, offset, counts)
            if found and found[0] not in seen and found[0] >= HEAD_ROWS:
                seen.add(found[0])
                add(*found)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return Sample(columns, rows, offsets, total)


def _json(path: Path, seed: int) -> Sample:
    """As the job's reader (datasets' json builder) takes a .json file: an array's items are the rows; anything
    else is JSON Lines, a file holding one object being one row (never the list inside it: no `field` is given)."""
    with open(path, "rb") as f:
        array = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")
    if not array and path.stat().st_size <= ONE_OBJECT_BYTES:
        try:
            raw = json.loads(path.read_bytes())
        except json.JSONDecodeError:  # JSON Lines (or not JSON: its lines say where)
            return _jsonl(path, seed)
        if not isinstance(raw, dict):
            raise DatasetError(f"{path.name}: expected a JSON array of objects (or JSON Lines)")
        return Sample(list(raw), [raw], [0], 1)
    if not array:
        return _jsonl(path, seed)
    data = json.loads(path.read_bytes())
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data[:HEAD_ROWS]):
        raise DatasetError(f"{path.name}: expected a JSON array of objects (or JSON Lines)")
    rows = data[:HEAD_ROWS]
    return Sample(list(dict.fromkeys(k for r in rows for k in r)), rows, list(range(len(rows))), len(data))


def _csv(path: Path) -> Sample:
    total, _ = _line_index(path)
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.DictReader(f)
        rows = [dict(r) for _, r in zip(range(HEAD_ROWS), reader, strict=False)]
        columns = list(reader.fieldnames or [])
    return Sample(columns, rows, list(range(len(rows))), max(0, total - 1))


def _parquet(path: Path) -> Sample:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise EnvironmentMissing("reading .parquet needs pyarrow: pip install 'hf-train-mcp[train]'") from None
    pf = pq.ParquetFile(path)
    table = next(pf.iter_batches(batch_size=HEAD_ROWS), None)
    rows = table.to_pylist() if table is not None else []
    return Sample(pf.schema_arrow.names, rows, list(range(len(rows))), pf.metadata.num_rows)


def sample_local(source: str, seed: int = 0, allowed: Callable[[Path], bool] = lambda _: True) -> Sample:
    path = Path(source).expanduser()
    try:
        classes = image_folder_classes(path, allowed)
        if classes is not None:  # <folder>/<label>/*.jpg: what `datasets` reads as an imagefolder
            rows, total = sample_image_folder(path, classes, MAX_WALK_ENTRIES, allowed)
            return Sample(["image", "label"], rows, list(range(len(rows))), total, features={
                "image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": classes}})
    except ValueError as exc:
        raise DatasetError(str(exc)) from None
    files = data_files(source, allowed)
    readers = {".jsonl": lambda p: _jsonl(p, seed), ".json": lambda p: _json(p, seed), ".csv": _csv, ".parquet": _parquet}
    first = readers[files[0].suffix.lower()](files[0])
    total = first.num_rows or 0
    for other in files[1:]:
        extra = readers[other.suffix.lower()](other)
        total += extra.num_rows or 0
    first.num_rows = total
    return first
