"""The real Hub files of tests/data/configs (see its README.md), read by the tests of model families and plans."""

import json
from pathlib import Path

CONFIGS = Path(__file__).parent / "data" / "configs"


def folder(repo: str) -> Path:
    return CONFIGS / repo.replace("/", "--")


def config_of(repo: str) -> dict:
    return json.loads((folder(repo) / "config.json").read_text())


def hub_total(repo: str) -> int:
    return json.loads((folder(repo) / "model_info.json").read_text())["safetensors"]["total"]
