"""run_script's program as the server reads it: inline source, a URL fetched, a local file, a project folder
(hashed, its credentials and clutter left behind), or an image and its command."""

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from hf_train_mcp.access import Access
from hf_train_mcp.errors import AccessError, NotFoundError, TrainError
from hf_train_mcp.contract.requests import ScriptRequest
from hf_train_mcp.user_scripts.urls import fetch_script
from hf_train_mcp.user_scripts.source import credential, folder_left_out, holds_secret, left_out, source_kind

SCANNED_SUFFIXES = (".py", ".yml", ".yaml", ".toml", ".json", ".cfg", ".sh")
SCANNED_MAX_BYTES = 256 * 1024
MAX_FOLDER_FILES = 5000  # a project folder's copy: code and configs, not a dataset
MAX_FOLDER_BYTES = 1 * 2**30


@dataclass(frozen=True)
class Source:
    """What the job runs, as the server read it."""

    text: str  # the script's source ('' for an image's command)
    sha256: str  # of the script, or of the whole folder, or of image + command
    label: str  # what list_jobs shows as its model column
    url: str | None = None
    folder: str | None = None  # resolved
    scanned: str = ""  # text searched for how the output leaves the job (source, the folder's configs)
    withheld: tuple[str, ...] = ()  # a folder's credential files (paths inside it), left behind


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _names(path: Path, relative: PurePosixPath, folder: Path) -> tuple[PurePosixPath, ...]:
    """The paths an entry of the folder is judged by: its own, and a link's target's (its path inside the folder,
    or its absolute path outside): a link is another name for its target, which stays home under any name."""
    if not path.is_symlink():
        return (relative,)
    target = path.resolve()
    inside = target.is_relative_to(folder)
    return relative, PurePosixPath(target.relative_to(folder).as_posix() if inside else target.as_posix())


def _fate(path: Path, relative: PurePosixPath, folder: Path, access: Access) -> str | None:
    """Why a file stays out of the folder's copy ('clutter', 'credentials'), or None when it travels. Over HTTP a
    link out of the folders the operator allowed or a file with other names (a hard link) is refused: either may
    be a file outside them."""
    names = _names(path, relative, folder)
    if any(credential(name) for name in names):
        return "credentials"
    if left_out(relative):
        return "clutter"
    if not access.allows_path(path):
        raise AccessError(f"the folder holds {relative.as_posix()!r}, a link out of the folders you may use or a "
                          f"file with other names (a hard link), which callers over {access.over} may not send: copy "
                          "the file in instead. Nothing was launched.")
    return "credentials" if holds_secret(path) else None


def _folder_fate(path: Path, relative: PurePosixPath, folder: Path, access: Access) -> str | None:
    """Why a folder of the project stays home whole ('clutter', 'credentials'; a link judged by its target too),
    or None."""
    why = next((fate for name in _names(path, relative, folder) if (fate := folder_left_out(name))), None)
    if why is None and not access.allows_path(path):
        raise AccessError(f"the folder holds {relative.as_posix()!r}, a link out of the folders you may use, which "
                          f"callers over {access.over} may not send: copy what it holds in instead. Nothing was "
                          "launched.")
    return why


def _folder_files(folder: Path, access: Access) -> tuple[list[Path], list[str]]:
    """The files a folder's copy holds, within the caps of an upload, and the credentials it leaves behind (paths
    inside the folder; a folder of them as 'name/'). Left-out folders are not walked."""
    files, withheld, size = [], [], 0
    for top, folders, names in os.walk(folder):  # does not follow linked folders (nor does the sync)
        here = PurePosixPath(Path(top).relative_to(folder).as_posix())
        for name in sorted(folders):
            why = _folder_fate(Path(top, name), here / name, folder, access)
            if why:
                folders.remove(name)
                withheld += [f"{(here / name).as_posix()}/"] if why == "credentials" else []
        for name in sorted(names):
            path, relative = Path(top, name), here / name
            if not path.is_file():
                continue
            why = _fate(path, relative, folder, access)
            if why:
                withheld += [relative.as_posix()] if why == "credentials" else []
                continue
            files.append(path)
            size += path.stat().st_size
            if len(files) > MAX_FOLDER_FILES or size > MAX_FOLDER_BYTES:
                raise TrainError(f"the folder holds over {MAX_FOLDER_FILES} files or {MAX_FOLDER_BYTES // 2**30} GiB "
                                 "(its copy is uploaded for each new version): keep code and configs in it, and put "
                                 "data and weights in a dataset, model repo or bucket the script reads. Nothing was "
                                 "launched.")
    return sorted(files), withheld


def _folder_source(req: ScriptRequest, access: Access) -> Source:
    folder = Path(req.folder).expanduser().resolve()
    if not folder.is_dir():
        raise NotFoundError(f"folder {access.shown(req.folder)!r} is not a folder on this machine")
    files, withheld = _folder_files(folder, access)
    digest, scanned = hashlib.sha256(), []
    for path in files:
        data = path.read_bytes()
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + hashlib.sha256(data).digest())
        if path.suffix in SCANNED_SUFFIXES and len(data) <= SCANNED_MAX_BYTES:
            scanned.append(data.decode(errors="replace"))
    text = ""
    if req.script is not None:
        entry = folder / req.script
        if entry not in files or not entry.resolve().is_relative_to(folder):
            raise NotFoundError(f"folder has no {req.script!r}: script is the entry file's path inside the folder")
        text = entry.read_text()
    return Source(text, digest.hexdigest(), f"{folder.name}/{req.script or ''}".rstrip("/"), folder=str(folder),
                  scanned="\n".join(scanned), withheld=tuple(withheld))


def read_source(req: ScriptRequest, access: Access) -> Source:
    """The program as the server reads it: a URL fetched (under script_urls' rules), a local file read."""
    if req.folder:
        return _folder_source(req, access)
    if req.script is None:
        program = json.dumps([req.image, *(req.command or [])])
        return Source("", _digest(program), req.image or "command")
    kind = source_kind(req.script)
    if kind == "url":
        url = req.script.strip()
        text = fetch_script(url, remote=access.remote)
        return Source(text, _digest(text), url, url=url, scanned=text)
    if kind == "path":
        path = Path(req.script).expanduser()
        if not path.is_file():
            raise NotFoundError(f"script {access.shown(req.script)!r} is not a file on this machine")
        text = path.read_text()
        return Source(text, _digest(text), path.name, scanned=text)
    return Source(req.script, _digest(req.script), "inline script", scanned=req.script)


def local_content(req: object, access: Access, source: Source | None = None) -> str | None:
    """The hash of the local folder or file a run_script call names (read again unless `source` is its read):
    a retry with its key is held to it (retries.asked_json). None for anything else, or once it is gone."""
    if not isinstance(req, ScriptRequest) or not (req.folder or (req.script is not None
                                                                 and source_kind(req.script) == "path")):
        return None
    try:
        return (source or read_source(req, access)).sha256
    except TrainError:
        return None
