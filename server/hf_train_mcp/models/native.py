"""What transformers has classes for, by model type, so that a job is refused before it would fail loading a model:
the model types it has a config class for (configuration_auto.CONFIG_MAPPING_NAMES), and those it has a
sequence-classification, an image-classification or an image-text-to-text class for (modeling_auto's
MODEL_FOR_*_MAPPING_NAMES). Read from transformers_classes.json, a copy of those tables (transformers itself is no
dependency of the server, and importing it loads torch); tests/test_zoo_tools.py holds the copy to the installed
transformers, and says how to write it again."""

import json
from functools import lru_cache
from pathlib import Path

TABLES = Path(__file__).with_name("transformers_classes.json")


@lru_cache(maxsize=1)
def _tables() -> dict[str, frozenset[str]]:
    data = json.loads(TABLES.read_text())
    return {name: frozenset(values) for name, values in data.items() if isinstance(values, list)}


@lru_cache(maxsize=1)
def transformers_version() -> str:
    """The transformers release the tables were copied from."""
    return str(json.loads(TABLES.read_text())["transformers"])


def knows_model_type(model_type: str) -> bool:
    """Whether transformers has a config class of its own for this model type. A job loads with transformers'
    classes and never runs a repository's code (no trust_remote_code), so a type it does not know fails at load
    (configuration_auto.py AutoConfig.from_pretrained: "The checkpoint you are trying to load has model type ...
    but Transformers does not recognize this architecture")."""
    return model_type in _tables()["model_types"]


def has_class(task: str, model_type: str | None) -> bool | None:
    """Whether transformers has a class of this task ("sequence_classification", "image_classification",
    "image_text_to_text") for the model type; None when the type is none it knows (the model's family decides)."""
    if not model_type or not knows_model_type(model_type):
        return None
    return model_type in _tables()[task]
