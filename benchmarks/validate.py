"""validate_dataset speed: a 1,000,000-row local JSONL (target <= 5 s) and a Hub dataset via the emulator.

Run: python benchmarks/validate.py
"""

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_train_mcp.data.validate import validate_dataset  # noqa: E402
from tests.emulator import Emulator, ViewerDataset  # noqa: E402

ROWS = 1_000_000


def make_jsonl(path: Path) -> None:
    with open(path, "w") as f:
        for i in range(ROWS):
            f.write(json.dumps({"messages": [{"role": "user", "content": f"Question number {i}?"},
                                             {"role": "assistant", "content": f"Answer number {i}."}]}) + "\n")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.jsonl"
        make_jsonl(path)
        size_mb = path.stat().st_size / 1e6
        times = []
        for _ in range(3):
            started = time.perf_counter()
            report = validate_dataset(str(path), "sft")
            times.append(time.perf_counter() - started)
        assert report.valid and report.num_rows == ROWS
        print(f"local JSONL  {ROWS:,} rows, {size_mb:.0f} MB: best {min(times):.2f} s, worst {max(times):.2f} s "
              "(target <= 5 s)")

    emu = Emulator().start()
    try:
        rows = [{"prompt": f"p{i}", "chosen": "a", "rejected": "b"} for i in range(100)]
        emu.datasets["org/prefs"] = ViewerDataset({"default": {"train": rows * 50}})
        os.environ["HF_TRAIN_DATASETS_SERVER"] = emu.url
        times = []
        for _ in range(5):
            started = time.perf_counter()
            report = validate_dataset("org/prefs", "dpo", token=None)
            times.append(time.perf_counter() - started)
        assert report.valid and report.num_rows == 5000
        print(f"Hub dataset (emulated viewer, 4 requests): best {min(times) * 1000:.0f} ms, "
              f"worst {max(times) * 1000:.0f} ms")
    finally:
        emu.stop()


if __name__ == "__main__":
    main()
