"""A job's local inputs as they lie in the account's private jobs-artifacts bucket: the files of one upload, the
upload (its place, named by its content, and where the job reads it), and what sending it came to. The planner
(jobs/uploads.py) makes them without the Hub; backends/jobs_uploads.py sends them; the ledger keeps them."""

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

# huggingface_hub.constants.HF_JOBS_ARTIFACTS_BUCKET_NAME, named without importing the client (a test holds it)
ARTIFACTS_BUCKET = "jobs-artifacts"
PLACE_ROOT = "hf-train-mcp/inputs"  # inside {namespace}/jobs-artifacts, beside run_script's project folders
MOUNT_ROOT = "/inputs"
CHUNK_BYTES = 1 << 20  # what one read of a file hashes or sends


@dataclass(frozen=True)
class UploadFile:
    name: str  # its path inside the upload's folder (posix)
    source: str  # the local file
    sha256: str
    size: int
    mtime_ns: int  # as hashed: a file changed since is refused, never sent as what was judged
    stamp: tuple[int, ...] = ()  # (device, inode, change time) as hashed: a link swapped in, or any write since

    def same(self, info: os.stat_result) -> bool:
        """Whether `info` (a stat of the file now) is the file as it was hashed: its change time moves on every
        write and every utime(), which no caller can set back."""
        return (info.st_size, info.st_mtime_ns) == (self.size, self.mtime_ns) and (
            not self.stamp or stamp(info) == self.stamp)


@dataclass(frozen=True)
class Upload:
    """One local dataset or model folder, as the job reads it from the bucket."""

    role: str  # "dataset", "model", "teacher model", "base model": what it is to the job, in messages
    ref: str  # the local path as the request names it (resolved)
    place: str  # its folder in the bucket
    reads: str  # the path the job opens inside it ('' : the folder itself)
    digest: str  # sha256 of the data file (one, read by name), else of every 'path\0sha256\n' in order
    count: int
    size: int
    files: tuple[UploadFile, ...] = ()  # empty once recorded: a follow-up mounts the place a job read
    withheld: tuple[str, ...] = field(default=(), compare=False)  # credential files left behind (model folders)
    config: str = field(default="", compare=False)  # a model folder's config.json: a follow-up sizes it by this
    # a dataset's validation facts (planning/hyperparameters.DataFacts): a run resumed on the copy plans by them
    facts: dict[str, Any] | None = field(default=None, compare=False)
    # the column_mapping a dataset's images were found by: a retry with its key plans its content by it
    mapping: dict[str, str] | None = field(default=None, compare=False)

    @property
    def mount(self) -> str:
        return f"{MOUNT_ROOT}/{PurePosixPath(self.place).name}"

    @property
    def job_path(self) -> str:
        return f"{self.mount}/{self.reads}" if self.reads else self.mount

    @property
    def shown(self) -> str:
        """How a card or an answer names it: the local name (never the folders above it) and its content hash."""
        return f"{Path(self.ref).name} (uploaded, sha256 {self.digest})"

    def recorded(self) -> dict[str, Any]:
        """What the ledger keeps (the files' list stays out: the place holds them, named by their content)."""
        return {"role": self.role, "ref": self.ref, "place": self.place, "reads": self.reads, "digest": self.digest,
                "count": self.count, "size": self.size, **({"config": self.config} if self.config else {}),
                **({"facts": self.facts} if self.facts else {}), **({"mapping": self.mapping} if self.mapping else {})}

    @classmethod
    def from_record(cls, entry: dict[str, Any]) -> "Upload":
        """A copy a job read, as the ledger keeps it (what a job mounting it again records in turn)."""
        return cls(**{key: entry[key] for key in ("role", "ref", "place", "reads", "digest", "count", "size")},
                   config=entry.get("config", ""), facts=entry.get("facts"), mapping=entry.get("mapping"))


@dataclass(frozen=True)
class Sent:
    """What one upload came to: where its files are, how much, how much had to travel."""

    bucket: str
    upload: Upload
    new_bytes: int | None  # None: not asked (a dry run without the Hub)

    def summary(self) -> dict[str, Any]:
        where = f"{self.bucket}/{self.upload.place}"
        return {"bucket": self.bucket, "path": self.upload.place, "files": self.upload.count,
                "bytes": self.upload.size, "new_bytes": self.new_bytes,
                "delete": f"hf buckets rm {where}/ --recursive (a follow-up of the job needs it)"}


def shown_bytes(size: float) -> str:
    """A size as an answer or a question says it (decimal units, as the Hub's pages do)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:,.{2 if unit == 'GB' else 1}f} {unit}"
    return f"{int(size)} bytes"


def left_in_bucket(sent: list[Sent]) -> str:
    """What an answer without a job says of the local files this call put in the bucket: where they are, and how
    to delete them."""
    where = "; ".join(f"{s.bucket}/{s.upload.place} ({s.upload.count} file(s), {shown_bytes(s.upload.size)})"
                      for s in sent)
    delete = " and ".join(f"hf buckets rm {s.bucket}/{s.upload.place}/ --recursive" for s in sent)
    return (f"Your local files are in your private bucket: {where}; a new call reuses them without sending them "
            f"again. To delete them: {delete}")


def saying_files(exc: Exception, sent: list[Sent]) -> Exception:
    """An error of a call that put local files in the bucket, with left_in_bucket's sentence after it."""
    if sent:
        exc.args = (f"{str(exc).rstrip('. ')}. {left_in_bucket(sent)}",)
    return exc


def stamp(info: os.stat_result) -> tuple[int, ...]:
    return info.st_dev, info.st_ino, info.st_ctime_ns


def sha256_of(fd: int) -> str:
    """The sha256 of an open file, read from its start."""
    digest = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, CHUNK_BYTES):
        digest.update(chunk)
    return digest.hexdigest()
