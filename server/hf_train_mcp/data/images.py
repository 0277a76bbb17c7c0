"""Image data judged without downloading an image: the viewer's image cells ({src, height, width}) as they are,
local images by their files (missing or unreadable ones are warned about), and image folders
(`<folder>/<label>/*.jpg|png`) sampled across their classes."""

import os
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"})
FOLDER_SAMPLE_ROWS = 200


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS


Allowed = Callable[[Path], bool]  # the paths this caller may read (Access.allows_path)
OUTSIDE = "an image path outside the folders callers of this server may use (or a file with other names, a hard link)"


def _everything(_: Path) -> bool:
    return True


def image_folder_classes(path: Path, allowed: Allowed = _everything) -> list[str] | None:
    """The class names of an image folder (its subfolders that hold images, sorted as `datasets` orders them),
    or None when `path` is no image folder. A subfolder that links out of what this caller may read is refused
    before anything in it is looked at (ValueError, naming the link, never its target)."""
    if not path.is_dir():
        return None
    classes = []
    for child in sorted(path.iterdir()):
        if child.name.startswith("."):
            continue
        # a link out is refused before is_dir() follows it: whether its target exists is not the caller's to learn
        if (child.is_symlink() or child.is_dir()) and not allowed(child):
            raise ValueError(f"{child.name!r} in the dataset folder links outside the folders callers of this server "
                             "may read: copy its images into the folder instead")
        if child.is_dir() and any(is_image(f) for f in child.iterdir()):
            classes.append(child.name)
    return classes or None


def sample_image_folder(path: Path, classes: list[str], limit: int,
                        allowed: Allowed = _everything) -> tuple[list[dict], int]:
    """Rows {image: file, label: class} taken round-robin across the classes (a sorted folder's first rows would
    all be one class), and the number of images, counted up to `limit` entries. Every image is one this caller
    may read (a link out, a hard link: ValueError naming the class and how many)."""
    per_class = {c: sorted(str(f) for f in (path / c).iterdir() if is_image(f)) for c in classes}
    total = sum(len(files) for files in per_class.values())
    if total > limit:
        raise ValueError(f"{path}: over {limit} images to count; point dataset at a smaller folder or push it to "
                         "the Hub")
    for name, files in per_class.items():
        outside = sum(not allowed(Path(f)) for f in files)
        if outside:
            raise ValueError(f"class {name!r} holds {outside} image(s) that link outside the folders callers of this "
                             "server may read, or have other names (hard links): copy the images in instead")
    rows: list[dict] = []
    depth = 0
    while len(rows) < FOLDER_SAMPLE_ROWS and any(depth < len(files) for files in per_class.values()):
        rows += [{"image": files[depth], "label": c} for c, files in per_class.items() if depth < len(files)]
        depth += 1
    return rows[:FOLDER_SAMPLE_ROWS], total


def cell_paths(value: Any) -> list[Any]:
    """The file names an image cell holds, however spelled: a path, a {"path"} cell (beside its bytes or not), a
    list of either. A URL is the job's to fetch, never this server's to read."""
    if isinstance(value, list):
        return [path for item in value for path in cell_paths(item)]
    if isinstance(value, dict):
        return [] if value.get("path") is None else [value["path"]]
    return [value] if isinstance(value, str) and not value.startswith(("http://", "https://")) else []


# The keys of a conversation's content part that transformers opens a file from (processing_utils.py: an image
# part's "image", "url", "path", "base64"; a video's "video", "url", "path"; an audio's "audio", "url", "path"; an
# OpenAI {"type": "image_url", "image_url": {"url"}} becomes an image part first), read whatever the part's type
_PART_KEYS = ("image", "url", "path", "base64", "video", "audio", "image_url")


def _part_files(value: Any) -> list[str]:
    """The file names a part's value holds: a string that is no URL, or those inside a {"path"/"url"/...} dict or a
    list (what a loader would be handed once a dataset or a template unpacked it)."""
    if isinstance(value, str):
        return [] if value.startswith(("http://", "https://", "data:")) else [value]
    if isinstance(value, list):
        return [name for item in value for name in _part_files(item)]
    if isinstance(value, dict):
        return [name for key in _PART_KEYS if key in value for name in _part_files(value[key])]
    return []


def part_paths(value: Any) -> list[str]:
    """The files the parts of a conversation name, in any turn's content however deep: every key a processor's
    chat template loads from (transformers' load_image, load_video and load_audio open a local path)."""
    if isinstance(value, list):
        return [path for item in value for path in part_paths(item)]
    if not isinstance(value, dict):
        return []
    return [*_part_files({key: value[key] for key in _PART_KEYS if key in value}), *part_paths(value.get("content"))]


def part_problem(value: Any, base: Path | None, allowed: Allowed) -> str | None:
    """Why a conversation names a file this caller may not have read: a processor opens a part's relative name
    from the job's working folder (load_image's os.path.isfile), validation from the data's folder, so a
    relative name must not climb out of either ('..'), and every name must lie in the allowed folders."""
    names = part_paths(value)
    if any(not os.path.isabs(name) and ".." in PurePath(name).parts for name in names):
        return OUTSIDE
    return path_problem(names, base, allowed)


def image_file(name: str, base: Path | None) -> Path:
    """Where the job reads an image file named in a row: relative names from the data's folder (the template's
    image_path)."""
    return Path(name) if os.path.isabs(name) or base is None else base / name


def path_problem(value: Any, base: Path | None, allowed: Allowed) -> str | None:
    """Why a cell names a file this caller may not have read, if it does (for every row, not only a sample)."""
    for name in cell_paths(value):
        if not isinstance(name, str):
            return f"an image cell's path must be a string, got {type(name).__name__}"
        if not allowed(image_file(name, base).resolve()):
            return OUTSIDE
    return None


def image_cell_problem(value: Any, base: Path | None, allowed: Allowed = _everything) -> tuple[str, str] | None:
    """(severity, text) when an image cell cannot be an image: a viewer cell has its src; a local path (a string,
    or a {"path"} cell) must name a readable image file (relative paths are read from the data file's folder, as
    the job reads them) in a folder this caller may read."""
    if value is None:
        return "error", "null value in 'image': every row needs its image"
    outside = path_problem(value, base, allowed)
    if outside:
        return "error", outside
    if isinstance(value, dict):
        if not (value.get("src") or value.get("path") or value.get("bytes")):
            return "error", "an image cell without src, path or bytes"
        if value.get("bytes") or not isinstance(value.get("path"), str):
            return None
        value = value["path"]  # a file, checked as one
    if not isinstance(value, str):
        return "error", f"'image' must be an image (a file path or the viewer's image), got {type(value).__name__}"
    if value.startswith(("http://", "https://")):
        return None  # fetched by the job, never by this server
    file = image_file(value, base)
    if not file.is_file():
        return "warning", f"missing image file {value!r}: the job fails on the first row that names it"
    try:
        from PIL import Image

        with Image.open(file) as image:
            image.verify()  # the header and structure, without decoding the pixels
    except ImportError:
        return None
    except Exception as exc:  # PIL raises many kinds for a damaged file
        return "warning", f"unreadable image {value!r} ({type(exc).__name__}): remove it or replace it"
    return None
