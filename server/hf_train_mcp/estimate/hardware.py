"""The hardware catalog a plan is priced on: the backend's own (Backend.catalog), the Jobs one unless named."""

from hf_train_mcp import backends
from hf_train_mcp.backends.catalog import Catalog, FlavorInfo  # noqa: F401 - what estimate's callers read
from hf_train_mcp.backends.jobs_hardware import fallback_catalog, live_catalog, reset_cache  # noqa: F401


def get_catalog(token: str | None = None, *, offline: bool = False, backend: str | None = None) -> Catalog:
    """The flavors and prices of `backend`'s catalog (live, cached; its built-in table offline or when the live one
    cannot be read, said in `note`); without a backend, that of the backend which runs on a token (list_hardware)."""
    return backends.traits(backend or backends.DEFAULT_WITH_TOKEN).catalog(token, offline=offline)
