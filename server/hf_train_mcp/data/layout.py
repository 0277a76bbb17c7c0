"""A local dataset folder as the job reads it: `datasets.load_dataset(folder)` follows the folder's own
declarations (README.md's `configs` and `dataset_info`, .huggingface.yaml, the legacy dataset_infos.json: data
files anywhere on the disk, a JSON field, Image features), and picks its builder by the most common extension among
every file of the tree (datasets/load.py LocalDatasetModuleFactory.get_module, infer_module_for_data_files_list).

Over HTTP the checks read .jsonl/.json/.csv/.parquet rows and images, so a folder is accepted only where what
datasets would read is among what they saw: no declarations, no file of another rows format (.txt, .tsv, .arrow,
.zip, ...), an image folder holding no rows file at all, and every entry, however deep and through any link,
inside the folders the operator allowed.
"""

import os
from collections.abc import Callable
from pathlib import Path

MAX_ENTRIES = 10_000  # a dataset folder's files and folders checked one by one
CHECKED = frozenset({".jsonl", ".json", ".csv", ".parquet"})  # the rows formats the path checks read
# The extensions datasets reads rows from (its packaged modules other than the media folders, whose files are read
# as files), and .zip, whose members it reads (datasets/packaged_modules/__init__.py _EXTENSION_TO_MODULE;
# tests/test_http_data_paths.py holds this table to the installed datasets)
ROWS_EXTENSIONS = frozenset({
    ".afa", ".arrow", ".cif", ".conll", ".conllu", ".csv", ".ent", ".eval", ".fa", ".faa", ".fasta", ".fastq", ".ffn",
    ".fna", ".fq", ".frn", ".gb", ".gbk", ".genbank", ".geoparquet", ".gpq", ".h5", ".hdf5", ".json", ".jsonl",
    ".lance", ".md", ".mmcif", ".ndjson", ".parquet", ".pdb", ".tar", ".toml", ".tsfile", ".tsv", ".txt", ".vortex",
    ".xml", ".zip",
})  # fmt: skip
# datasets' FILES_TO_IGNORE (data_files.py): never read as data
_IGNORED = frozenset({"README.md", "config.json", "dataset_info.json", "dataset_dict.json", "dummy_data.zip"})
_DECLARING = (".huggingface.yaml", "dataset_infos.json")  # read by get_module beside README.md's YAML


def _hidden(name: str) -> bool:
    """What datasets' pattern resolution leaves out unless asked: hidden names and '__special__' folders."""
    return name.startswith((".", "__"))


def declarations(folder: Path) -> str | None:
    """Which file of the folder tells datasets what to read (configs with data_files, a JSON field, features),
    if one does."""
    for name in _DECLARING:
        if (folder / name).exists():
            return name
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    from huggingface_hub import DatasetCard  # what datasets reads the card with

    try:
        card = DatasetCard.load(readme).data.to_dict()
    except Exception:  # a front matter datasets could not read either: its job would fail, or read otherwise
        return "README.md"
    return "README.md" if {"configs", "dataset_info"} & set(card) else None


def _suffixes(name: str) -> set[str]:
    """Every extension of a name, as datasets counts them ('a.jsonl.txt' is a .jsonl and a .txt)."""
    return {"." + part.lower() for part in name.split(".")[1:]}


def _unread(name: str, *, images: bool) -> bool:
    """A file datasets may read rows from that the checks do not read: in an image folder any rows file (the
    majority of extensions picks the builder), elsewhere one of another format."""
    if name in _IGNORED:
        return False
    rows = _suffixes(name) & ROWS_EXTENSIONS
    return bool(rows if images else rows - CHECKED)


def layout_problem(folder: Path, allowed: Callable[[Path], bool], *, images: bool) -> str | None:
    """Why datasets could read of this folder something the checks did not see, or None (see the module's doc).
    Entries are named by their path inside the folder, never by where a link leads."""
    declared = declarations(folder)
    if declared:
        return (f"{declared} in the dataset folder declares what datasets reads (configs, data files, features), "
                "which may lie outside the folders callers of this server may read: send the data file itself, or a "
                "folder without such declarations")
    seen, count = set(), 0
    for root, folders, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        folders[:] = [] if real in seen else sorted(name for name in folders if not _hidden(name))
        if real in seen:
            continue
        seen.add(real)
        names = [*folders, *(name for name in files if not _hidden(name))]
        count += len(names)
        if count > MAX_ENTRIES:
            return (f"over {MAX_ENTRIES:,} files and folders to check in the dataset folder: point dataset at the "
                    "data file, or push the data to the Hub")
        for name in sorted(names):
            relative = Path(root, name).relative_to(folder).as_posix()
            if not allowed(Path(root, name)):
                return (f"{relative!r} in the dataset folder links outside the folders callers of this server may "
                        "read, or is a file with other names (a hard link): copy the data in instead")
            if name not in folders and _unread(name, images=images):
                what = "an image folder holds images only" if images else (
                    "only .jsonl, .json, .csv and .parquet files are checked, and datasets picks what it reads by "
                    "the most common extension")
                return (f"{relative!r} in the dataset folder is a rows file the job's reader may read ({what}): "
                        "move it out, or send the data file itself")
    return None
