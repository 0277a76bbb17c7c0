"""Local files a job on the Hub's machines reads (a dataset, an image folder, the images a JSONL names, a model
folder): which files, their sha256, where they go in the account's private jobs-artifacts bucket and where the job
finds them. Planned here, without the Hub (what an upload is: bucket_inputs.py); backends/jobs_uploads.py sends them.

The layout. Each upload is one folder of the bucket, `hf-train-mcp/inputs/<name>-<digest>`, named by the sha256 of
its content (every file's path and sha256), holding the files at their paths relative to the deepest folder that
holds them all (a JSONL and the images it names as `images/cat.jpg` or `../photos/cat.jpg`; an image folder's
`<label>/*`). It is mounted read-only at `/inputs/<name>-<digest>` and the script opens the same relative path
there. So:
- paths inside the data keep their meaning: the job resolves a row's `images/cat.jpg` against the mounted data
  file's folder exactly as validation resolved it against the local one, and `datasets` reads an image folder's
  labels from the same folder names;
- content decides the place: an unchanged upload lands where it already is (a re-submit, every run of a sweep,
  a follow-up: nothing is sent), and two versions of a dataset never share a folder, so a running job never sees
  a file change under it. A file the bucket already holds under an earlier version is copied by its xet hash on
  the Hub's side (backends/jobs_uploads.py), never sent twice.
"""

import hashlib
import os
import re
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from hf_train_mcp.access import Access, is_local
from hf_train_mcp.bucket_inputs import CHUNK_BYTES, PLACE_ROOT, Upload, UploadFile, shown_bytes, stamp
from hf_train_mcp.data.images import cell_paths, image_folder_classes, is_image, part_paths
from hf_train_mcp.data.local import data_files
from hf_train_mcp.data.rows import every_row
from hf_train_mcp.data.validate import CONVERSATIONS
from hf_train_mcp.errors import AccessError, DatasetError, NotFoundError, TrainError
from hf_train_mcp.user_scripts.source import (SECRET_OVERLAP, credential, folder_left_out, known_secrets, left_out,
                                              marks_secret)

MAX_UPLOAD_FILES = 10_000  # one call's uploads together: a dataset of more files belongs on the Hub
MAX_UPLOAD_BYTES = 100 * 10**9
# The upload speed estimate_cost assumes (a home or office uplink; a cloud machine's is faster): said in its answer
UPLOAD_BYTES_PER_S = 20e6
_MAX_CONFIG = 1 << 20  # a model's config.json kept in the ledger (a real one is a few kB)
_SECRET_NOTE = "holds a private key, a cloud or Hugging Face credential (an access token, an AWS key)"


# --- hashing --------------------------------------------------------------------------------------------------
_HASHED: dict[tuple, tuple[str, bool]] = {}  # (path, inode, size, mtime, secrets) -> (sha256, holds a secret)
_HASHED_KEPT = 100_000


def _hashed(path: Path, info: os.stat_result) -> tuple[str, bool]:
    """The file's sha256 and whether it holds a secret (source.holds_secret's rule), in one read; an unchanged
    file (same inode, size, modification and change time) is not read again (a sweep plans each run)."""
    known = known_secrets()  # in the key: a file scanned before the server's token changed is scanned again
    key = (str(path), stamp(info), info.st_size, info.st_mtime_ns, known)
    if key not in _HASHED:
        digest, secret, tail = hashlib.sha256(), False, b""
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK_BYTES):
                digest.update(chunk)
                secret = secret or marks_secret(tail + chunk, known)
                tail = chunk[-SECRET_OVERLAP:]
        if len(_HASHED) >= _HASHED_KEPT:
            _HASHED.clear()
        _HASHED[key] = digest.hexdigest(), secret
    return _HASHED[key]


def _digest(files: list[UploadFile], reads: str) -> str:
    """The content's name: a data file's own sha256, else every file's name and sha256 (a folder's one file
    renamed is another content: the job reads the folder whole)."""
    if len(files) == 1 and files[0].name == reads:
        return files[0].sha256  # what `sha256sum tickets.jsonl` says
    lines = "".join(f"{f.name}\0{f.sha256}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


def _place_name(ref: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(ref).name).strip("-.")[:48]
    return name or "upload"


def _check_caps(count: int, size: int, what: str, per: str = "one call", verb: str = "is") -> None:
    if count > MAX_UPLOAD_FILES:
        raise TrainError(f"{what} {verb} {count:,} files, over the cap of {MAX_UPLOAD_FILES:,} files {per} uploads: "
                         "push it to the Hub (a dataset or model repo) and send its id. Nothing was uploaded or "
                         "launched.")
    if size > MAX_UPLOAD_BYTES:
        raise TrainError(f"{what} {verb} {shown_bytes(size)}, over the cap of {shown_bytes(MAX_UPLOAD_BYTES)} {per} "
                         "uploads: push it to the Hub and send its id. Nothing was uploaded or launched.")


def check_total(uploads: list["Upload"], per: str = "one call") -> None:
    """The caps hold for everything one call (or one sweep, all its runs) uploads together: each distinct place
    still to be planned counts once (a follow-up's recorded copy is already there)."""
    distinct = {u.place: u for u in uploads if u.files}.values()
    if len(distinct) > 1:
        _check_caps(sum(u.count for u in distinct), sum(u.size for u in distinct),
                    f"the local files {'of its runs' if per == 'one sweep' else 'of this call'} together", per, "are")


def _planned(role: str, ref: str, root: Path, paths: list[Path], *, refuse_secrets: bool
             ) -> tuple[list[UploadFile], list[str]]:
    """The files with their hashes (and the credential files among them, refused or left behind)."""
    stats = [(path, path.stat()) for path in paths]
    _check_caps(len(stats), sum(info.st_size for _, info in stats), f"the {role} {Path(ref).name!r}")
    files, withheld = [], []
    for path, info in stats:
        name = Path(os.path.relpath(path, root)).as_posix()
        sha, secret = _hashed(path, info)
        if secret or credential(PurePosixPath(name)):
            if refuse_secrets:
                why = _SECRET_NOTE if secret else "is named like a credentials file"
                raise DatasetError(f"{name!r} of the {role} {why}: it is not sent to a job as data. Move it out (or "
                                   "rename it, if it is data). Nothing was uploaded or launched.")
            withheld.append(name)
            continue
        files.append(UploadFile(name=name, source=str(path), sha256=sha, size=info.st_size,
                                mtime_ns=info.st_mtime_ns, stamp=stamp(info)))
    return files, withheld


def _upload(role: str, ref: str, root: Path, paths: list[Path], reads: str, *, refuse_secrets: bool) -> Upload:
    files, withheld = _planned(role, ref, root, sorted(set(paths)), refuse_secrets=refuse_secrets)
    digest = _digest(files, reads)
    return Upload(role=role, ref=ref, place=f"{PLACE_ROOT}/{_place_name(ref)}-{digest[:16]}", reads=reads,
                  digest=digest, count=len(files), size=sum(f.size for f in files), files=tuple(files),
                  withheld=tuple(withheld))


# --- a model folder -------------------------------------------------------------------------------------------
def _model_files(folder: Path, access: Access) -> tuple[list[Path], list[str]]:
    """Every file the folder's loaders may open (linked folders followed, each once), but its history, caches
    and a training run's checkpoint-* folders (from_pretrained reads none of them); credential folders stay
    home whole (withheld). Over HTTP every file must lie in the allowed folders."""
    paths, withheld, seen = [], [], set()
    for top, folders, names in os.walk(folder, followlinks=True):
        here = PurePosixPath(Path(top).relative_to(folder).as_posix())
        real = os.path.realpath(top)
        if real in seen:
            folders[:] = []
            continue
        seen.add(real)
        for name in sorted(folders):
            why = folder_left_out(here / name)
            if why or (here == PurePosixPath(".") and name.startswith("checkpoint-")):
                folders.remove(name)
                withheld += [f"{(here / name).as_posix()}/"] if why == "credentials" else []
        for name in sorted(names):
            path = Path(top, name)
            if left_out(here / name) and not credential(here / name):
                continue
            if not access.allows_path(path):
                raise AccessError(f"the model folder holds {(here / name).as_posix()!r}, a link out of the folders "
                                  f"you may use or a file with other names (a hard link), which callers over "
                                  f"{access.over} may not send. Nothing was uploaded or launched.")
            if path.is_file():
                paths.append(path)
        if len(paths) > MAX_UPLOAD_FILES:
            _check_caps(len(paths), 0, "the model folder")
    return paths, withheld


def plan_folder(ref: str, role: str, access: Access) -> Upload:
    """A local model or adapter folder, whole (credential files left behind, named in `withheld`)."""
    folder = Path(ref).expanduser().resolve()
    if not folder.is_dir():
        raise NotFoundError(f"{role} {access.shown(ref)!r} is not a folder on this machine (a model folder holds "
                            "config.json or adapter_config.json)")
    paths, withheld = _model_files(folder, access)
    upload = _upload(role, str(folder), folder, paths, "", refuse_secrets=False)
    config = folder / "config.json"
    kept = config.read_text(errors="replace") if config in paths and config.stat().st_size < _MAX_CONFIG else ""
    return replace(upload, withheld=(*withheld, *upload.withheld), config=kept)


# --- a dataset ------------------------------------------------------------------------------------------------
def _read_by_name(value: Any) -> list[Any]:
    """The file names of an image cell the job opens by name: a cell holding its bytes is read from them (the
    template's image_path opens a {"path"} cell only without bytes), its path a bare name of no file here."""
    if isinstance(value, list):
        return [name for item in value for name in _read_by_name(item)]
    return [] if isinstance(value, dict) and value.get("bytes") else cell_paths(value)


def _named_images(files: list[Path], mapping: dict[str, str] | None, base: Path, access: Access) -> list[Path]:
    """Every image file a row names in its image column(s), as the job's image_path resolves it (from the data
    file's folder); a name the job cannot open there (an absolute path, a missing file) is refused now, and one
    outside what the caller may read before anything tells whether it exists."""
    columns = tuple(dict.fromkeys((mapping or {}).get(name, name) for name in ("image", "images")))
    out = []
    for file, index, row in every_row(files, columns):
        for value in row.values():
            for name in _read_by_name(value):
                if not isinstance(name, str):
                    continue
                where = f"{file.name} row {index + 1}"
                if os.path.isabs(name):
                    raise DatasetError(f"{where} names the image {name[:120]!r} by an absolute path, which a job on "
                                       "the Hub's machines cannot open: name images relative to the data file's "
                                       "folder (e.g. 'images/cat.jpg'). Nothing was uploaded or launched.")
                path = Path(os.path.normpath(base / name))
                if not access.allows_path(path):
                    raise AccessError(f"a row names an image outside the folders callers over {access.over} may use "
                                      "(or a hard link). Nothing was uploaded or launched.")
                if not path.is_file():
                    raise DatasetError(f"{where} names the image {name[:120]!r}, which is not a file beside the "
                                       "data: the job would fail on that row. Fix the row or add the image. Nothing "
                                       "was uploaded or launched.")
                out.append(path)
    return out


def _refuse_named_parts(files: list[Path], mapping: dict[str, str] | None, base: Path) -> None:
    """A turn's content part naming a file of this machine ({"type": "image", "path": ...}) is opened by the
    processor's chat template from the job's working folder (transformers' load_image: os.path.isfile), where no
    uploaded copy is: the job would fail on that row, so it is refused now."""
    columns = tuple(dict.fromkeys((mapping or {}).get(name, name) for name in CONVERSATIONS))
    for file, index, row in every_row(files, columns):
        for name in (n for value in row.values() for n in part_paths(value)):
            if isinstance(name, str) and (os.path.isabs(name) or os.path.exists(base / name) or os.path.exists(name)):
                raise DatasetError(f"{file.name} row {index + 1} names the file {name[:120]!r} in a turn's content, "
                                   "which a job on the Hub's machines cannot open: put the images in an `images` "
                                   "column, named relative to the data file's folder (e.g. 'images/cat.jpg'), and "
                                   "leave the turn's part as {\"type\": \"image\"}. Nothing was uploaded or launched.")


def _unreadable(images: list[Path], root: Path) -> None:
    """Every image opened as the job's reader opens it (its header and structure, not its pixels)."""
    try:
        from PIL import Image
    except ImportError:  # a server without the training stack: the job's reader is the judge
        return
    bad = []
    for path in images:
        try:
            with Image.open(path) as image:
                image.verify()
        except Exception as exc:  # PIL raises many kinds for a damaged file
            bad.append(f"{Path(os.path.relpath(path, root)).as_posix()!r} ({type(exc).__name__})")
    if bad:
        raise DatasetError(f"{len(bad)} image(s) cannot be read: {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}"
                           ": remove or replace them, since the job fails on the first. Nothing was uploaded or "
                           "launched.")


def plan_dataset(ref: str, *, mapping: dict[str, str] | None, access: Access) -> Upload:
    """A local dataset as the job reads it: an image folder's every image under its labels, or the data files
    (a file, or a folder's .jsonl/.json/.csv/.parquet) and every image file their rows name."""
    path = Path(ref).expanduser().resolve()
    try:
        classes = image_folder_classes(path, access.allows_path) if path.is_dir() else None
    except ValueError as exc:  # a class folder linking out (validation says it so too: validate.outside_images)
        raise AccessError(f"{exc}. Nothing was uploaded or launched.") from None
    if classes:
        # a hidden file (a Mac's ._cat.jpg) is never read by datasets' image folder loader (data_files.py
        # _is_unrequested_hidden_file_or_is_inside_unrequested_hidden_dir): it stays home, unjudged
        images = [f for c in classes for f in (path / c).iterdir()
                  if is_image(f) and not f.name.startswith(".") and f.is_file()]
        _check_caps(len(images), 0, f"the image folder {path.name!r}")
        outside = [f for f in images if not access.allows_path(f)]
        if outside:
            raise AccessError(f"the image folder holds {len(outside)} image(s) linked from outside the folders "
                              f"callers over {access.over} may use, or hard links. Nothing was uploaded or launched.")
        _unreadable(images, path)
        return _upload("dataset", str(path), path, images, "", refuse_secrets=True)
    files = data_files(str(path), access.allows_path)
    base = path if path.is_dir() else path.parent
    try:
        images = _named_images(files, mapping, base, access)
        _refuse_named_parts(files, mapping, base)
    except ValueError as exc:  # rows the job's reader may read otherwise (rows.py)
        raise DatasetError(f"{exc}. Nothing was uploaded or launched.") from None
    _unreadable(images, base)
    root = Path(os.path.commonpath([str(base), *(str(f.parent) for f in images)]))
    reads = Path(os.path.relpath(path, root)).as_posix()
    upload = _upload("dataset", str(path), root, [*files, *images], "" if reads == "." else reads, refuse_secrets=True)
    return replace(upload, mapping=mapping or None)


# --- what a retry is held to ----------------------------------------------------------------------------------
_NAMED = (("model", "model"), ("dataset", "dataset"), ("teacher_model", "teacher model"))
REFUSED = "refused"  # the digest of files there that cannot be uploaded: no upload's sha256


def named_uploads(arguments: dict[str, Any], access: Access, planned: list[Upload] = (),
                  recorded: list[dict] = ()) -> list[Upload] | None:
    """The uploads of the local paths among a call's `arguments` (its model, dataset, teacher_model), planned from
    the files as they are now (`planned`: those this call planned already; `recorded`: the uploads of the job a
    retry's key names, whose dataset's images were found by the mapping validation completed, which a retry
    never sends). None when one is gone or not this caller's to read: what they held then cannot be told; one
    its upload refuses now has the digest REFUSED."""
    out = []
    for name, role in _NAMED:
        ref = arguments.get(name)
        if not isinstance(ref, str) or not is_local(ref):
            continue
        if not access.may_read(ref):  # never read for this caller (a sweep's retry made no access check)
            return None
        resolved = str(Path(ref).expanduser().resolve())
        known = next((u for u in planned if (u.role, u.ref) == (role, resolved) and u.files), None)
        mapping = next((e["mapping"] for e in recorded if (e["role"], e["ref"]) == (role, resolved)
                        and e.get("mapping")), arguments.get("column_mapping"))
        try:
            out.append(known or (plan_dataset(ref, mapping=mapping, access=access)
                                 if name == "dataset" else plan_folder(ref, role, access)))
        except (NotFoundError, AccessError):
            return None
        except TrainError:  # there, and refused (a credential, an image gone): not the bytes any job read
            out.append(Upload(role=role, ref=resolved, place="", reads="", digest=REFUSED, count=0, size=0))
    return out


def named_content(req: Any, access: Access, planned: list[Upload] = (), recorded: list[dict] = ()) -> str | None:
    """The content of the local files a call names itself (its dataset, model or teacher folder) as they are now:
    a retry with its idempotency key is held to it (retries.asked_json), so an edited dataset makes a new job,
    never the old one passed off as trained on it. None when the call names none, or one is gone or not this
    caller's to read (a retry then is held to its arguments alone)."""
    uploads = named_uploads(dict(req), access, planned, recorded)
    if not uploads:
        return None
    return hashlib.sha256("".join(f"{u.role}\0{u.digest}\n" for u in uploads).encode()).hexdigest()


# --- what a job gets ------------------------------------------------------------------------------------------
def mounted(config: dict[str, Any], uploads: list[Upload]) -> dict[str, Any]:
    """The script's CONFIG reading the mounted copies: every value naming an uploaded path names its copy in the
    job, and the model card names it by its file name and sha256 (never this machine's folders)."""
    by_ref = {u.ref: u for u in uploads}
    out = {key: by_ref[value].job_path if isinstance(value, str) and value in by_ref else value
           for key, value in config.items()}
    card = out.get("card")
    if isinstance(card, dict):
        summary = card.get("summary") or ""
        for upload in uploads:
            summary = summary.replace(upload.ref, upload.shown)
        settings = {k: by_ref[v].shown if isinstance(v, str) and v in by_ref else v
                    for k, v in (card.get("settings") or {}).items()}
        out["card"] = {**card, "summary": summary, "settings": settings}
    return out


def withheld_warnings(uploads: list[Upload]) -> list[str]:
    out = []
    for upload in uploads:
        if upload.withheld:
            shown = ", ".join(upload.withheld[:10]) + (" ..." if len(upload.withheld) > 10 else "")
            out.append(f"left out of the {upload.role}'s upload as credentials: {shown} (a job gets credentials as "
                       "secrets, never as files)")
    return out
