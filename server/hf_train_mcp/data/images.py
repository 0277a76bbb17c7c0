"""Image data judged without downloading an image: the viewer's image cells ({src, height, width}) as they are,
local images by their files (missing or unreadable ones are warned about), and image folders
(`<folder>/<label>/*.jpg|png`) sampled across their classes."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif"})
FOLDER_SAMPLE_ROWS = 200


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS


def image_folder_classes(path: Path) -> list[str] | None:
    """The class names of an image folder (its subfolders that hold images, sorted as `datasets` orders them),
    or None when `path` is no image folder."""
    if not path.is_dir():
        return None
    classes = []
    for child in sorted(path.iterdir()):
        if child.is_dir() and not child.name.startswith(".") and any(is_image(f) for f in child.iterdir()):
            classes.append(child.name)
    return classes or None


def sample_image_folder(path: Path, classes: list[str], limit: int) -> tuple[list[dict], int]:
    """Rows {image: file, label: class} taken round-robin across the classes (a sorted folder's first rows would
    all be one class), and the number of images, counted up to `limit` entries."""
    per_class = {c: sorted(str(f) for f in (path / c).iterdir() if is_image(f)) for c in classes}
    total = sum(len(files) for files in per_class.values())
    if total > limit:
        raise ValueError(f"{path}: over {limit} images to count; point dataset at a smaller folder or push it to "
                         "the Hub")
    rows: list[dict] = []
    depth = 0
    while len(rows) < FOLDER_SAMPLE_ROWS and any(depth < len(files) for files in per_class.values()):
        rows += [{"image": files[depth], "label": c} for c, files in per_class.items() if depth < len(files)]
        depth += 1
    return rows[:FOLDER_SAMPLE_ROWS], total


def image_cell_problem(value: Any, base: Path | None,
                       allowed: Callable[[Path], bool] = lambda _: True) -> tuple[str, str] | None:
    """(severity, text) when an image cell cannot be an image: a viewer cell has its src; a local path must name
    a readable image file (relative paths are read from the data file's folder, as the job reads them) in a
    folder this caller may read."""
    if value is None:
        return "error", "null value in 'image': every row needs its image"
    if isinstance(value, dict):
        return None if value.get("src") or value.get("path") or value.get("bytes") else (
            "error", "an image cell without src, path or bytes")
    if not isinstance(value, str):
        return "error", f"'image' must be an image (a file path or the viewer's image), got {type(value).__name__}"
    if value.startswith(("http://", "https://")):
        return None  # fetched by the job, never by this server
    file = Path(value) if os.path.isabs(value) or base is None else base / value
    if not allowed(file.resolve()):
        return "error", "an image path outside the folders callers of this server may use"
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

