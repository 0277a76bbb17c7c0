"""Hub datasets through the dataset viewer API (no download), with the user's token for private/gated data.

huggingface_hub has no wrappers for these endpoints, so we call them with its own HTTP session and headers.
"""

import os
from dataclasses import dataclass
from typing import Any

from hf_train_mcp.data.local import Sample
from hf_train_mcp.errors import TrainError, DatasetError, HubError, NotFoundError
from hf_train_mcp.hub import TRANSIENT_STATUS, HubUnreachable, bounded, scrub

DEFAULT_SERVER = "https://datasets-server.huggingface.co"
TIMEOUT_S = 5.0


class ViewerStatus(Exception):
    def __init__(self, response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def viewer_base() -> str:
    return os.environ.get("HF_TRAIN_DATASETS_SERVER", DEFAULT_SERVER).rstrip("/")


@dataclass
class HubSample(Sample):
    config: str | None = None


class Viewer:
    def __init__(self, dataset: str, token: str | None):
        self.dataset = dataset
        self.token = token

    def get(self, path: str, **params: Any) -> dict:
        from huggingface_hub import get_session
        from huggingface_hub.utils import build_hf_headers

        url = f"{viewer_base()}/{path}"
        headers = build_hf_headers(token=self.token or False)

        def read():
            response = get_session().get(url, params={"dataset": self.dataset, **params}, headers=headers,
                                         timeout=TIMEOUT_S)
            # raised so that `bounded` retries it; a 500 is the viewer's definite "not available for this dataset"
            if response.status_code in TRANSIENT_STATUS - {500}:
                raise ViewerStatus(response)
            return response

        try:
            response = bounded(f"reading {self.dataset!r} from the dataset viewer", read, self.token)
        except HubUnreachable as exc:
            raise HubUnreachable(f"{exc}; validate a local copy of the data, or pass skip_validation") from None
        if response.status_code == 200:
            return response.json()
        try:
            detail = str(response.json().get("error", ""))
        except ValueError:
            detail = ""
        detail = scrub(detail, self.token)
        page = f"https://huggingface.co/datasets/{self.dataset}"
        if response.status_code in (401, 403):
            hint = ("it is gated or private: accept its conditions at " + page + " and make sure HF_TOKEN belongs to "
                    "an account with access") if self.token else ("it is gated or private: log in (`hf auth login` or "
                                                                   "HF_TOKEN) with an account that has access")
            raise DatasetError(f"dataset {self.dataset!r} is not accessible ({response.status_code}); {hint}")
        if response.status_code == 404:
            if "config" in detail.lower() or "split" in detail.lower():
                raise NotFoundError(f"dataset {self.dataset!r}: {detail or 'config or split not found'}")
            raise NotFoundError(f"dataset {self.dataset!r} was not found on the Hub: check the id (owner/name), or "
                             "its privacy (a private dataset needs a token with access)")
        if response.status_code in (500, 501) and ("viewer" in detail.lower() or "not supported" in detail.lower()):
            raise DatasetError(f"the dataset viewer is not available for {self.dataset!r} ({detail}); validate a "
                             "local sample instead (download a few rows and pass the file), or skip_validation")
        raise HubError(f"dataset viewer error {response.status_code} for {self.dataset!r}: "
                         f"{detail or 'no detail'}; retry later")

    def choose_config(self, config: str | None, split: str) -> str:
        splits = self.get("splits").get("splits", [])
        configs = list(dict.fromkeys(s["config"] for s in splits))
        if config:
            if configs and config not in configs:
                raise DatasetError(f"dataset {self.dataset!r} has no config {config!r}; choose one of {configs}")
            chosen = config
        elif "default" in configs:
            chosen = "default"
        elif len(configs) == 1:
            chosen = configs[0]
        else:
            raise DatasetError(f"dataset {self.dataset!r} has several configs: pass config= one of {configs}")
        names = [s["split"] for s in splits if s["config"] == chosen]
        if names and split not in names:
            raise DatasetError(f"config {chosen!r} of {self.dataset!r} has no split {split!r}; splits: {names}")
        return chosen

    def num_rows(self, config: str, split: str) -> int | None:
        try:
            size = self.get("size", config=config).get("size", {})
        except TrainError:
            return None
        for entry in size.get("splits", []):
            if entry.get("config") == config and entry.get("split") == split:
                return int(entry["num_rows"])
        return None


def sample_hub(dataset: str, *, config: str | None, split: str, token: str | None) -> HubSample:
    viewer = Viewer(dataset, token)
    validity = viewer.get("is-valid")
    if not (validity.get("preview") or validity.get("viewer")):
        raise DatasetError(f"the dataset viewer is not available for {dataset!r} (no preview); validate a local "
                         "sample instead, or pass skip_validation")
    chosen = viewer.choose_config(config, split)
    first = viewer.get("first-rows", config=chosen, split=split)
    columns = [f["name"] for f in first.get("features", [])]
    features = {f["name"]: f.get("type") or {} for f in first.get("features", [])}
    rows = [r["row"] for r in first.get("rows", [])]
    offsets = [r.get("row_idx", i) for i, r in enumerate(first.get("rows", []))]
    return HubSample(columns, rows, offsets, viewer.num_rows(chosen, split), features=features, config=chosen)
