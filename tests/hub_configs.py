"""The real Hub files of tests/data/configs (see its README.md), read by the tests of model families and plans."""

import json
from pathlib import Path

CONFIGS = Path(__file__).parent / "data" / "configs"
# Architectures whose classes live outside transformers (only their files are checked), and those whose classes
# need a package of their own
REMOTE_CODE_ONLY = {"microsoft--Phi-3-vision-128k-instruct"}
NEEDS_EXTRA = {"timm--resnet50.a1_in1k": "timm"}


def folder(repo: str) -> Path:
    return CONFIGS / repo.replace("/", "--")


def config_of(repo: str) -> dict:
    return json.loads((folder(repo) / "config.json").read_text())


def hub_total(repo: str) -> int:
    return json.loads((folder(repo) / "model_info.json").read_text())["safetensors"]["total"]
