"""The suite keeps to its own files: each test's Hub downloads land in its own HF_HOME (tmp_path), never in the
developer's ~/.cache/huggingface, where a file that one run downloaded answers a later run's read without a
request (the emulator then counts no GET of it, as it once did for a model's modules.json)."""

from pathlib import Path

import pytest

from tests.emulator import Emulator


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_downloads_a_hub_file_into_its_own_hf_home(hub: Emulator, tmp_path: Path, turn: int) -> None:
    from huggingface_hub import hf_hub_download

    hub.files[("emu-org/isolated", "note.json")] = b'{"same": "bytes every turn"}'
    before = hub.count("GET", r"/emu-org/isolated/resolve/.*/note.json")
    path = Path(hf_hub_download("emu-org/isolated", "note.json"))
    assert path.is_relative_to(tmp_path / "hf-home" / "hub"), path
    assert hub.count("GET", r"/emu-org/isolated/resolve/.*/note.json") == before + 1  # turn 2 asks again
    assert not (Path.home() / ".cache" / "huggingface" / "hub" / "models--emu-org--isolated").exists()
