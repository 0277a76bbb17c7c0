"""The backends, one module each behind backends.base.Backend; callers ask their traits, never their names."""

from hf_train_mcp.backends.base import Backend
from hf_train_mcp.backends.hf_jobs import HfJobsBackend
from hf_train_mcp.backends.local import LocalBackend

BACKENDS: dict[str, type] = {cls.name: cls for cls in (HfJobsBackend, LocalBackend)}
NAMES = tuple(BACKENDS)


def traits(name: str) -> type:
    """The backend class of a name (its traits are class attributes: no instance, no token needed)."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; one of {', '.join(NAMES)}") from None


def owner_of(job_id: str) -> str:
    """The backend a job id outside the ledger belongs to (the most specific claim first)."""
    ordered = sorted(BACKENDS.items(), key=lambda item: not item[1].runs_here)
    return next(name for name, cls in ordered if cls.claims(job_id))


def on_this_machine() -> str:
    return next(name for name, cls in BACKENDS.items() if cls.runs_here)


def on_the_hub() -> str:
    return next(name for name, cls in BACKENDS.items() if not cls.runs_here)


__all__ = ["Backend", "BACKENDS", "NAMES", "traits", "owner_of", "on_this_machine", "on_the_hub"]
