"""The backends, one module each behind backends.base.Backend, and the one place that opens them.

Nothing outside this package constructs a backend: callers `open` one by name and ask its traits, never its
name; they price and place its jobs on its own catalog (Backend.catalog) and word what it cannot do in its own
words (Backend.words). A new place to run jobs is one module here plus `register` (before the schemas are
imported: the tools' `backend` parameter is a Literal of NAMES).
"""

import sys

from hf_train_mcp.backends.base import Backend
from hf_train_mcp.backends.hf_jobs import HfJobsBackend
from hf_train_mcp.backends.local import LocalBackend
from hf_train_mcp.errors import NotFoundError

BACKENDS: dict[str, type] = {}
NAMES: tuple[str, ...] = ()
# what a server picks when the caller names no backend: the Hub when it has a token, else this machine
DEFAULT_WITH_TOKEN = HfJobsBackend.name
DEFAULT_WITHOUT_TOKEN = LocalBackend.name


# What every backend class brings (Backend's optional methods, find_all, find_group and gpus, aside)
REQUIRED = (*Backend.__annotations__, "flavor", "catalog", "claims", "command", "submit", "find", "find_keyed",
            "inspect", "logs", "cancel")


def register(cls: type) -> type:
    """Make a backend class known by its `name`. Its traits are class attributes (read without an instance)."""
    global NAMES
    missing = [trait for trait in REQUIRED if not hasattr(cls, trait)]
    if missing:
        raise TypeError(f"backend {getattr(cls, '__name__', cls)!r} lacks {', '.join(missing)} (backends/base.py "
                        "Backend says what each is)")
    built = hasattr(sys.modules.get("hf_train_mcp.contract.results"), "BackendName")
    if built and cls.name not in BACKENDS:
        raise RuntimeError(f"backend {cls.name!r} registered after the schemas were built: their backend "
                           "parameter would refuse it; register it first")
    BACKENDS[cls.name] = cls
    NAMES = tuple(BACKENDS)
    return cls


for _cls in (HfJobsBackend, LocalBackend):
    register(_cls)


def traits(name: str) -> type:
    """The backend class of a name (its traits are class attributes: no instance, no token needed)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; one of {', '.join(NAMES)}") from None


def mounts_uploads(name: str) -> bool:
    """Whether the backend's jobs read a caller's local files as uploaded copies (Backend.upload), since they
    cannot read this machine's."""
    cls = traits(name)
    return not cls.reads_local_paths and callable(getattr(cls, "upload", None))


def open(name: str, *, access, token: str | None) -> Backend:  # noqa: A001 - backends.open reads as what it does
    """The backend of a name, ready to use; one that runs code on this machine only for callers allowed to."""
    check_permission(name, access)
    return traits(name)(token=token)


def check_permission(name: str, access) -> None:
    """Refuse, in the backend's words, a caller who may not reach it (it runs code on this machine, and the
    operator did not allow that)."""
    cls = traits(name)
    if cls.needs_local_jobs_permission:
        access.check_local_jobs(backend=cls.name, instead=cls.words.instead)


def default(*, token: str | None) -> str:
    return DEFAULT_WITH_TOKEN if token else DEFAULT_WITHOUT_TOKEN


def owner_of(job_id: str) -> str:
    """The backend a job id outside the ledger belongs to: the one whose id shape it has."""
    for name, cls in BACKENDS.items():
        if cls.claims(job_id):
            return name
    raise NotFoundError(f"{job_id!r} is not a job id of any backend ({', '.join(NAMES)}): pass a job_id from "
                     "submit_training or list_jobs")


def gpu_backend(name: str) -> str:
    """The argument that sends a job to GPU flavors, said when its hardware has none: this backend's own when it
    chooses flavors from a catalog, else what it names instead."""
    cls = traits(name)
    return f"backend={cls.name!r}" if cls.chooses_flavor else cls.words.instead


def lost_ledger_note() -> str:
    """What a retry finds of the jobs of each backend once the ledger is lost: those that label their submissions
    find them again, the others' are said apart."""
    found = [cls.words.lost_ledger for cls in BACKENDS.values() if cls.labels_submissions and cls.words.lost_ledger]
    lost = [cls.words.lost_ledger for cls in BACKENDS.values() if not cls.labels_submissions and cls.words.lost_ledger]
    return "; ".join(found) + (f" ({'; '.join(lost)})" if lost else "")


def permitted(*, local_jobs: bool) -> tuple[str, ...]:
    """The backends a caller may reach: those that run code on this machine only with the operator's leave."""
    return tuple(name for name, cls in BACKENDS.items() if local_jobs or not cls.needs_local_jobs_permission)


def gpuless_flavors() -> set[str]:
    """The CPU flavors of backends with one hardware of their own (this machine without CUDA)."""
    return {f for cls in BACKENDS.values() if (f := cls.flavor(cuda=False))}


def catalog_flavors() -> set[str]:
    """Every flavor a backend's built-in catalog lists (what a request's `flavor` may name)."""
    return {name for cls in BACKENDS.values() for name in cls.catalog(None, offline=True).flavors}


__all__ = ["Backend", "BACKENDS", "NAMES", "register", "traits", "mounts_uploads", "open", "check_permission", "default", "owner_of",
           "permitted", "gpu_backend", "lost_ledger_note",
           "gpuless_flavors", "catalog_flavors"]
