"""The zoo of real Hub metadata (tests/data/configs, see its README.md), checked folder by folder: every file has a
named source, every config.json is one transformers reads (offline, never running a model's own code), and
transformers builds each model it knows with exactly the parameter total the Hub reports (meta device: no
weights). Where the Hub's count legitimately differs from the built model's, the difference is in COUNTED_AS
with its reason: nothing here is compared within a tolerance."""

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import needs_training
from tests.hub_configs import COUNTED_AS, NEEDS_EXTRA, REMOTE_CODE_ONLY

pytestmark = pytest.mark.zoo
CONFIGS = Path(__file__).parent / "data" / "configs"
FOLDERS = sorted(p.name for p in CONFIGS.iterdir() if p.is_dir())

def _read(folder: str, name: str) -> dict:
    return json.loads((CONFIGS / folder / name).read_text())


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_file_has_a_named_source_and_the_hub_fields(folder: str) -> None:
    provenance = (CONFIGS / folder / "PROVENANCE.md").read_text()
    for path in (CONFIGS / folder).glob("*.json"):
        json.loads(path.read_text())
        assert f"`{path.name}`" in provenance, (folder, path.name)
    info = _read(folder, "model_info.json")
    assert set(info) >= {"pipeline_tag", "library_name", "safetensors"}, folder
    assert info["safetensors"]["total"] == sum(info["safetensors"]["parameters"].values()), folder
    assert f"| {folder.replace('--', '/', 1)} |" in (CONFIGS / "README.md").read_text(), f"{folder}: not in the table"


@needs_training
@pytest.mark.parametrize("folder", FOLDERS)
def test_transformers_reads_each_config_offline_without_remote_code(folder: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if folder in REMOTE_CODE_ONLY:  # what the server must refuse: its config class is the repository's own code
        assert "AutoConfig" in _read(folder, "config.json")["auto_map"]
        with pytest.raises(ValueError, match="trust_remote_code|does not recognize"):
            AutoConfig.from_pretrained(CONFIGS / folder, trust_remote_code=False)
        return
    if folder in NEEDS_EXTRA:  # timm writes no model_type: transformers tells its configs by `pretrained_cfg`
        from transformers import PretrainedConfig

        assert PretrainedConfig.get_config_dict(CONFIGS / folder)[0]["model_type"] == "timm_wrapper"
        pytest.importorskip(NEEDS_EXTRA[folder])
    config = AutoConfig.from_pretrained(CONFIGS / folder, trust_remote_code=False)
    assert config.model_type, folder


def _meta_count(folder: str) -> tuple[str, int]:
    """The parameters transformers 5 builds from the folder's config.json, on the meta device."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(CONFIGS / folder, trust_remote_code=False)
    default = (getattr(config, "architectures", None) or ["AutoModel"])[0]
    name = COUNTED_AS.get(folder, (default,))[0]
    with torch.device("meta"):
        cls = getattr(transformers, name)
        model = cls.from_config(config) if name.startswith("Auto") else cls(config)
    return name, sum(p.numel() for p in model.parameters())


@needs_training
@pytest.mark.parametrize("folder", [f for f in FOLDERS if f not in REMOTE_CODE_ONLY])
def test_transformers_builds_each_model_with_the_hubs_parameter_total(folder: str) -> None:
    if folder in NEEDS_EXTRA:
        pytest.importorskip(NEEDS_EXTRA[folder])
    name, count = _meta_count(folder)
    extra = COUNTED_AS.get(folder, ("", 0, ""))[1]
    assert count + extra == _read(folder, "model_info.json")["safetensors"]["total"], (folder, name, count)


def test_the_dinov2_base_files_hash_to_the_lfs_objects_of_their_public_copy() -> None:
    """nilsrobinet/ReverseImageSearchDemo stores the Hub download in Git LFS: ours are those very objects."""
    folder = CONFIGS / "facebook--dinov2-base"
    assert hashlib.sha256((folder / "config.json").read_bytes()).hexdigest() == (
        "f7ff4cfa73d2f70647dbf6950541ad25d73082d54c2e7e9bded160c7656b2a70")
    assert hashlib.sha256((folder / "preprocessor_config.json").read_bytes()).hexdigest() == (
        "14e780d86fa1861f8751f868d7f45425b5feb55c38ca26f152ca5097ab30f828")


def test_the_exceptions_name_real_folders() -> None:
    """A renamed folder must not leave its exception behind (and silently lose its check)."""
    assert set(COUNTED_AS) | REMOTE_CODE_ONLY | set(NEEDS_EXTRA) <= set(FOLDERS)
    assert all(reason for _, _, reason in COUNTED_AS.values())


@needs_training
@pytest.mark.parametrize("folder", [f for f in FOLDERS if f not in REMOTE_CODE_ONLY and f not in NEEDS_EXTRA])
def test_the_text_shape_the_server_reads_is_the_one_transformers_builds(folder: str) -> None:
    """The server reads config.json without transformers (models/files.py text_config, filling a nested config's
    left-out fields from TEXT_DEFAULTS): its vocabulary, width and depth are transformers' own for every zoo model.
    Gemma 3's text_config leaves vocab_size out (gemma3_text's default, 262,208), which made export_model refuse
    it as "a model without a vocabulary"."""
    from transformers import AutoConfig

    from hf_train_mcp.models.files import text_config

    config = AutoConfig.from_pretrained(CONFIGS / folder, trust_remote_code=False)
    text = config.get_text_config()
    ours = text_config(_read(folder, "config.json"))
    nested = "text_config" in _read(folder, "config.json")  # a flat config's own names are read as they are
    for key in ("vocab_size", "hidden_size", "num_hidden_layers") if nested else ("vocab_size",):
        if isinstance(getattr(text, key, None), int):
            assert ours.get(key) == getattr(text, key), (folder, key, ours.get(key), getattr(text, key))
