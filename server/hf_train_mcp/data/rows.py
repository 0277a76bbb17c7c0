"""Every row of local data files as the job's reader may see it, for the checks that must see them all (the files
a row names): datasets reads JSON with pyarrow (several objects on one line are several rows; an object file is a
row itself) and CSV with pandas, which read some texts otherwise than Python's json and csv do.

So a JSON file's every value is decoded, however the values are laid out (one per line, several on a line, one
across lines), and every object in it, at any depth, is taken as a row; a CSV file is read only where pandas reads
it the same way (UTF-8, one name per column, as many fields in each row as names, no lone carriage return). What
cannot be read so raises ValueError: the job's reader might read it otherwise.
"""

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hf_train_mcp.errors import EnvironmentMissing

MAX_WHOLE_BYTES = 256 << 20  # a JSON document read whole (datasets reads an array file whole too)
_LONE_CR = re.compile(r"\r(?!\n)")


def every_row(files: list[Path], columns: tuple[str, ...]) -> Iterator[tuple[Path, int, dict]]:
    """(file, 0-based row, its `columns`) for every row the job's reader may see in the files."""
    for path in files:
        reader = {".parquet": _parquet_rows, ".csv": _csv_rows}.get(path.suffix.lower(), _json_rows)
        for index, row in enumerate(reader(path, columns)):
            picked = {c: row[c] for c in columns if c in row}
            if picked:
                yield path, index, picked


def _unique(pairs: list[tuple[str, Any]]) -> dict:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"an object names {sorted({k for k in keys if keys.count(k) > 1})} twice (readers keep "
                         "different ones)")
    return dict(pairs)


_DECODER = json.JSONDecoder(object_pairs_hook=_unique)


def _values(text: str, where: str) -> Iterator[Any]:
    """Every JSON value in `text`, one after another (whitespace between them)."""
    at = 0
    while True:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        if at >= len(text):
            return
        try:
            value, at = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON ({exc.msg})") from None
        yield value


def _objects(value: Any) -> Iterator[dict]:
    """Every object in a value, the value itself first, then those inside it."""
    if isinstance(value, dict):
        yield value
        for inner in value.values():
            yield from _objects(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _objects(inner)


def _json_rows(path: Path, columns: tuple[str, ...]) -> Iterator[dict]:
    """As datasets goes about it: an array file whole; otherwise line by line (JSON Lines), and where a line does
    not end its values (a pretty-printed object), the file whole, as its pandas fallback reads it."""
    try:
        if _starts_array(path):
            yield from _whole(path)
            return
        with open(path, encoding="utf-8-sig") as f:  # strict UTF-8: pyarrow reads nothing else
            for number, line in enumerate(f, 1):
                try:
                    values = list(_values(line, f"{path.name} line {number}"))
                except ValueError:
                    yield from _whole(path)
                    return
                for value in values:
                    yield from _objects(value)
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not UTF-8 text, the only text pyarrow reads") from None


def _starts_array(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


def _whole(path: Path) -> Iterator[dict]:
    if path.stat().st_size > MAX_WHOLE_BYTES:
        raise ValueError(f"{path.name} is not JSON Lines, and is over {MAX_WHOLE_BYTES >> 20} MiB to read whole: "
                         "save it as JSON Lines")
    for value in _values(path.read_bytes().decode("utf-8-sig"), path.name):
        yield from _objects(value)
        yield from _columns(value)


def _columns(value: Any) -> Iterator[dict]:
    """An object file as pandas reads it where pyarrow gives up (datasets' fallback): each key a column, each item
    of its value (a list's, an {index: cell} object's) a row."""
    if isinstance(value, dict):
        for key, cells in value.items():
            for cell in cells.values() if isinstance(cells, dict) else cells if isinstance(cells, list) else ():
                yield {key: cell}


def _csv_rows(path: Path, columns: tuple[str, ...]) -> Iterator[dict]:
    text = path.read_bytes().decode("utf-8-sig")  # strict, as pandas reads it; a BOM is no part of a name
    if _LONE_CR.search(text):
        raise ValueError(f"{path.name} ends a line with a lone carriage return, which pandas and Python's csv read "
                         "into different columns: save it with \\n or \\r\\n line ends")
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, [])
    if len(set(header)) != len(header):
        raise ValueError(f"{path.name} names a column twice in its header (readers keep different ones)")
    for number, fields in enumerate(reader, 2):
        if fields and len(fields) != len(header):
            raise ValueError(f"{path.name} line {number} has {len(fields)} fields for {len(header)} column names "
                             "(pandas then reads the first as an index, and the columns shift)")
        if fields:
            yield dict(zip(header, fields, strict=True))


def _parquet_rows(path: Path, columns: tuple[str, ...]) -> Iterator[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise EnvironmentMissing("reading .parquet needs pyarrow: pip install 'hf-train-mcp[train]'") from None
    pf = pq.ParquetFile(path)
    present = [c for c in columns if c in pf.schema_arrow.names]
    if present:
        for batch in pf.iter_batches(batch_size=256, columns=present):
            yield from batch.to_pylist()
