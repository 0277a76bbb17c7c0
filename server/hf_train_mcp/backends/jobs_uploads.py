"""Sending planned uploads (jobs/uploads.py) to the account's private jobs-artifacts bucket through
huggingface_hub, and the read-only volumes that mount them into a job.

A file already at its place is not sent (the place is named by content); one the bucket holds elsewhere (an
earlier version of the folder) is copied there by its xet hash on the Hub's side (`batch_bucket_files(copy=...)`:
"This is a server-side operation — no data is downloaded or re-uploaded", huggingface_hub 2.4 hf_api.py); the
rest is uploaded in batches, progress said between them.
"""

import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from hf_train_mcp.errors import AuthError, NotFoundError, TrainError
from hf_train_mcp.hub import bounded
from hf_train_mcp.bucket_inputs import PLACE_ROOT, Sent, Upload, UploadFile, saying_files, sha256_of

log = logging.getLogger(__name__)
BATCH_FILES = 200  # files per batch call: progress is said between batches
BATCH_BYTES = 512 * 2**20
LIST_DEADLINE_S = 120.0
MIN_BYTES_PER_S = 1e6  # a batch's deadline: this slow an uplink still finishes it
Share = Callable[[int, int], None]  # (bytes sent, bytes to send)


def bucket_of(api, namespace: str | None) -> str:
    from huggingface_hub import constants

    return f"{namespace or api.whoami()['name']}/{constants.HF_JOBS_ARTIFACTS_BUCKET_NAME}"


def _private_bucket(api, bucket: str, *, create: bool, token: str | None) -> bool:
    """Whether the bucket exists (made private when missing and `create`); a public one is refused: the user's
    files would be readable by anyone."""
    if create:
        bounded("creating your jobs-artifacts bucket", lambda: api.create_bucket(bucket_id=bucket, exist_ok=True,
                                                                                private=True), token)
    try:
        info = bounded("reading your jobs-artifacts bucket", lambda: api.bucket_info(bucket_id=bucket), token)
    except NotFoundError:
        if create:
            raise
        return False  # a dry run before the first upload: everything would be sent
    if not info.private:
        raise TrainError(f"your bucket {bucket} is public: your files uploaded there would be readable by anyone. "
                         f"Make it private ({api.endpoint}/buckets/{bucket}), then call again. Nothing was uploaded "
                         "or launched.")
    return True


def _files(api, bucket: str, prefix: str, token: str | None) -> list:
    """Every file (huggingface_hub BucketFile: its path and xet hash) the bucket holds under `prefix` (a folder)."""
    from huggingface_hub import BucketFile

    items = bounded("listing your jobs-artifacts bucket", lambda: list(api.list_bucket_tree(
        bucket, prefix=prefix, recursive=True)), token, deadline_s=LIST_DEADLINE_S)
    return [item for item in items if isinstance(item, BucketFile)]


def _listing(api, bucket: str, prefix: str, token: str | None) -> dict[str, str]:
    """path -> xet hash of every file the bucket holds under `prefix` (a folder)."""
    return {item.path: item.xet_hash for item in _files(api, bucket, prefix, token)}


def _travelling(missing: list[UploadFile], held: list) -> int:
    """The bytes a send of `missing` would upload: a file the bucket holds elsewhere (`held`, by its xet hash) is
    copied on the Hub's side, as _send_batch does. Only a file some earlier place holds under its name (another
    version of the folder) is hashed to tell: a dry run or a question does not read every file again."""
    import hf_xet

    names = {item.path.split("/", len(PLACE_ROOT.split("/")) + 1)[-1] for item in held}
    hashes = {item.xet_hash for item in held}
    maybe = [f for f in missing if f.name in names]
    try:
        found = hf_xet.hash_files([f.source for f in maybe]) if maybe else []
    except Exception:  # a file gone or unreadable since it was planned: the send refuses it; count it whole here
        return sum(f.size for f in missing)
    return sum(f.size for f in missing) - sum(f.size for f, info in zip(maybe, found, strict=True)
                                              if info.hash in hashes)


def _unchanged(file: UploadFile) -> bool:
    try:
        return file.same(os.stat(file.source))
    except OSError:
        return False


def _changed(upload: Upload, name: str) -> TrainError:
    return TrainError(f"{name!r} of the {upload.role} changed (or went, or was replaced) after it was checked: the "
                      "job must read the bytes that were validated. Call again to check it anew. Nothing was "
                      "launched.")


class _SentChanged(TrainError):
    """A file written to while its batch was sent: the batch's files are removed from the bucket again."""


def _check_unchanged(upload: Upload, files: list[UploadFile]) -> None:
    changed = [f.name for f in files if not _unchanged(f)]
    if changed:
        raise _changed(upload, changed[0])


def _fd_path(fd: int, source: str) -> str:
    """A name that opens the very file `fd` holds open, whatever its path names now (Linux /proc, BSD/macOS
    /dev/fd); elsewhere the path, checked before and after."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(folder):
            return f"{folder}/{fd}"
    return source


@contextmanager
def _pinned(upload: Upload, files: list[UploadFile]) -> Iterator[dict[str, str]]:
    """Each file opened once and held open while it is hashed for the bucket and sent, named by its descriptor: the
    same file as planned (device, inode, change time) with the planned sha256, so a link swapped in or bytes edited
    after the check (size and modification time kept) are never what is sent. name -> what to send."""
    opened: dict[str, int] = {}
    try:
        for file in files:
            opened[file.name] = fd = os.open(file.source, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            if not file.same(os.fstat(fd)) or sha256_of(fd) != file.sha256:
                raise _changed(upload, file.name)
            os.lseek(fd, 0, os.SEEK_SET)  # /dev/fd/N (BSD, macOS) shares this offset with whoever opens it
        yield {name: _fd_path(fd, file.source) for (name, fd), file in zip(opened.items(), files, strict=True)}
        changed = [file.name for file in files if not file.same(os.fstat(opened[file.name]))]
        if changed:  # written to while it was sent: the caller removes what went
            raise _SentChanged(str(_changed(upload, changed[0])))
    finally:
        for fd in opened.values():
            os.close(fd)


# hf_xet's refusal of its write token: no status attribute huggingface_hub's way, so hub.transient() would take it
# for silence and retry it until the deadline ("Request error: HTTP status client error (403 Forbidden), domain:
# .../xet-write-token")
_XET_REFUSAL = re.compile(r"\((401|403) (?:Unauthorized|Forbidden)\)")


def _writing(bucket: str, call: Callable[[], object]) -> Callable[[], object]:
    """`call` (a batch of the bucket's files), with the storage's refusal said as one, never retried."""
    def run() -> object:
        try:
            return call()
        except Exception as exc:
            found = _XET_REFUSAL.search(str(exc))
            if type(exc).__name__ != "XetAuthenticationError" and not found:
                raise
            raise AuthError(f"the Hub refused your token writing to your bucket {bucket} ("
                            f"{found.group(1) if found else 'not authorized'}): it is read-only or a fine-grained "
                            "token without write access to that namespace's buckets. Use a token with write access "
                            "(https://huggingface.co/settings/tokens), then call again. Nothing was launched."
                            ) from None
    return run


def _batches(files: list[UploadFile]) -> list[list[UploadFile]]:
    out: list[list[UploadFile]] = [[]]
    for file in files:
        if out[-1] and (len(out[-1]) >= BATCH_FILES or sum(f.size for f in out[-1]) + file.size > BATCH_BYTES):
            out.append([])
        out[-1].append(file)
    return [batch for batch in out if batch]


def _copied(api, bucket: str, upload: Upload, files: list[tuple[str, str]], token: str | None) -> bool:
    """Whether the files ((name, xet hash): bytes the bucket holds elsewhere) were copied to their place on the
    Hub's side; a copy refused is no reason to fail the launch: the files are here, and are uploaded instead."""
    copy = [("bucket", bucket, xet_hash, f"{upload.place}/{name}") for name, xet_hash in files]
    try:
        bounded(f"copying files of the {upload.role} inside your bucket",
                _writing(bucket, lambda: api.batch_bucket_files(bucket, copy=copy)), token, deadline_s=LIST_DEADLINE_S)
    except AuthError:
        raise  # the token may not write the bucket: uploading is refused just the same
    except TrainError as exc:
        log.info("copying %d file(s) inside the bucket failed, uploading them instead: %s", len(files), exc)
        return False
    return True


def _send_batch(api, bucket: str, upload: Upload, batch: list[UploadFile], held: dict[str, str],
                token: str | None) -> int:
    """One batch, each file pinned (_pinned): copied when the bucket holds its bytes elsewhere, else uploaded; a
    batch whose files changed while they went is removed again. The bytes uploaded."""
    import hf_xet

    with _pinned(upload, batch) as sources:
        hashes = hf_xet.hash_files([sources[f.name] for f in batch])
        xet = {f.name: info.hash for f, info in zip(batch, hashes, strict=True)}
        known = {xet_hash: path for path, xet_hash in held.items()}
        copied = [f for f in batch if xet[f.name] in known]
        if copied and not _copied(api, bucket, upload, [(f.name, xet[f.name]) for f in copied], token):
            copied = []
        add = [(sources[f.name], f"{upload.place}/{f.name}") for f in batch if f not in copied]
        size = sum(f.size for f in batch if f not in copied)
        if add:
            bounded(f"uploading the {upload.role} to your jobs-artifacts bucket",
                    _writing(bucket, lambda: api.batch_bucket_files(bucket, add=add)), token,
                    deadline_s=LIST_DEADLINE_S + size / MIN_BYTES_PER_S)
    return size


def _send_files(api, bucket: str, upload: Upload, missing: list[UploadFile], held: dict[str, str],
                share: Share | None, token: str | None, went: list[UploadFile]) -> int:
    """Copy what the bucket holds elsewhere, upload the rest, a batch at a time; the bytes uploaded (`went`: the
    files put in place so far). The place never keeps other bytes than its name says: a batch that changed while
    it went is deleted again."""
    _check_unchanged(upload, missing)
    done, sent, total = 0, 0, sum(f.size for f in missing)
    if share and total:
        share(0, total)
    for batch in _batches(missing):
        try:
            sent += _send_batch(api, bucket, upload, batch, held, token)
        except _SentChanged:
            bounded("removing a changed upload", lambda batch=batch: api.batch_bucket_files(
                bucket, delete=[f"{upload.place}/{f.name}" for f in batch]), token)
            raise
        went += batch
        done += sum(f.size for f in batch)
        if share:
            share(done, total)
    return sent


def send(api, uploads: list[Upload], namespace: str | None, *, token: str | None, dry_run: bool = False,
         share: Share | None = None) -> list[Sent]:
    """Put every planned upload in place (dry_run: only say how many bytes would travel, creating nothing). A
    recorded upload (a follow-up's, files unknown here) must still be whole in the bucket."""
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    bucket = bucket_of(api, namespace)
    exists = _private_bucket(api, bucket, create=not dry_run, token=token)
    out, every = [], None  # every upload's files, listed only when one must be sent (its copies' sources)
    everything = None  # the same, with their sizes: what a dry run counts as copied rather than sent
    for upload in uploads:
        held = _listing(api, bucket, upload.place, token) if exists else {}
        present = len(held)
        if not upload.files:  # recorded by the job a follow-up works on
            if present < upload.count:
                raise TrainError(f"the copy of the {upload.role} {upload.shown} that the job read is no longer whole "
                                 f"in your bucket ({bucket}/{upload.place}): name the local {upload.role} in the call "
                                 "(it is uploaded again), or push it to the Hub. Nothing was launched.")
            out.append(Sent(bucket, upload, 0))
            continue
        missing = [f for f in upload.files if f"{upload.place}/{f.name}" not in held]
        if dry_run and missing and exists:  # what would travel: the bucket's other files are copied, not sent
            everything = everything if everything is not None else _files(api, bucket, PLACE_ROOT, token)
            out.append(Sent(bucket, upload, _travelling(missing, everything)))
            continue
        if dry_run or not missing:
            out.append(Sent(bucket, upload, sum(f.size for f in missing)))
            continue
        every = every if every is not None else _listing(api, bucket, PLACE_ROOT, token)
        disable_progress_bars()  # as sync_bucket(quiet=True) does: stdout and stderr are no place for bars here
        went: list[UploadFile] = []
        try:
            out.append(Sent(bucket, upload, _send_files(api, bucket, upload, missing, every, share, token, went)))
        except TrainError as exc:  # what this call put in the bucket stays there: the answer says where
            gone = {f.name for f in missing}
            raise _saying_placed(exc, bucket, out, upload, [f for f in upload.files if f.name not in gone] + went)
        finally:
            enable_progress_bars()
        every = None  # what it sent may be the next upload's to copy
    return out


def _saying_placed(exc: TrainError, bucket: str, done: list[Sent], upload: Upload,
                   placed: list[UploadFile]) -> Exception:
    """An upload that failed part-way, its error saying which of this call's local files lie in the bucket: the
    uploads done before it, and the files of its own place that are there."""
    part = [Sent(bucket, replace(upload, count=len(placed), size=sum(f.size for f in placed)), None)] if placed else []
    return saying_files(exc, [s for s in done if s.upload.files] + part)


def volumes(bucket: str, uploads: list[Upload]) -> list:
    """One read-only bucket volume per uploaded folder (two uploads of one content share it)."""
    from huggingface_hub import Volume

    places = dict.fromkeys((u.place, u.mount) for u in uploads)
    return [Volume(type="bucket", source=bucket, mount_path=mount, path=place, read_only=True)
            for place, mount in places]
