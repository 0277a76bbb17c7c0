"""Trainer logs -> progress, metrics and errors."""

import os
import subprocess
import sys
from pathlib import Path

from hf_train_mcp.jobs.logs import parse_log


def test_our_status_lines_give_progress_and_the_latest_metrics() -> None:
    parsed = parse_log([
        'HFTM_LOG {"step": 10, "total_steps": 40, "epoch": 0.25, "loss": 1.5, "learning_rate": 0.0002}',
        "some warning line",
        'HFTM_LOG {"step": 20, "total_steps": 40, "epoch": 0.5, "loss": 1.2, "eval_loss": 1.3}',
    ])
    assert (parsed.progress.step, parsed.progress.total_steps, parsed.progress.percent) == (20, 40, 50.0)
    assert parsed.metrics == {"loss": 1.2, "learning_rate": 0.0002, "eval_loss": 1.3}


def test_plain_trainer_output_is_understood_too() -> None:
    parsed = parse_log([
        "Map: 100%|██████████| 32/32 [00:00<00:00, 5297.93 examples/s]",
        " 25%|██▌       | 5/20 [00:02<00:06,  2.41it/s]",
        "{'loss': '2.25', 'grad_norm': '1.1', 'learning_rate': '1e-05', 'epoch': '0.25'}",
    ])
    assert (parsed.progress.step, parsed.progress.total_steps, parsed.progress.epoch) == (5, 20, 0.25)
    assert parsed.metrics["loss"] == 2.25 and parsed.metrics["learning_rate"] == 1e-05


def test_a_traceback_gives_its_last_line_and_a_hint() -> None:
    parsed = parse_log([
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "KeyError: 'prompt'",
    ])
    assert parsed.error == "KeyError: 'prompt'" and "validate_dataset" in parsed.hint


def test_our_error_line_wins_over_the_traceback() -> None:
    parsed = parse_log([
        'HFTM_ERROR {"type": "OutOfMemoryError", "message": "CUDA out of memory. Tried to allocate 1 GiB"}',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB",
    ])
    assert parsed.error.startswith("OutOfMemoryError: CUDA out of memory") and parsed.out_of_memory
    assert "qlora" not in parsed.hint  # the advice that fits the job is job_status's to give (estimate.advice)


def test_a_timeout_and_an_auth_failure_get_their_own_hints() -> None:
    assert "longer timeout" in parse_log(['HFTM_ERROR {"type": "Timeout", "message": "job timed out"}']).hint
    auth = parse_log(["huggingface_hub.errors.HfHubHTTPError: 403 Forbidden: you cannot push"])
    assert "write access" in auth.hint


def test_nothing_to_parse_is_fine() -> None:
    parsed = parse_log([])
    assert parsed.error is None and parsed.progress.step is None and parsed.metrics == {}


def test_progress_bars_of_slow_steps_are_read_too() -> None:
    parsed = parse_log([" 25%|██▌       | 30/120 [00:45<02:15, 1.50s/it]"])
    assert (parsed.progress.step, parsed.progress.total_steps, parsed.progress.percent) == (30, 120, 25.0)


def test_a_step_number_with_401_in_it_is_not_taken_for_a_refused_token() -> None:
    parsed = parse_log([
        "{'loss': '1.2', 'step': 401, 'epoch': '0.4'}",
        "checkpoint-403 saved",
        "warning: telemetry endpoint answered 401 Unauthorized, skipping",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ])
    assert parsed.error.startswith("RuntimeError") and parsed.hint is None
    refused = parse_log(["huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: ..."])
    assert "write access" in refused.hint


TQDM_LOOP = """
import time
from tqdm import tqdm
for i in tqdm(range(4), mininterval=0):  # every step redraws, so each dict follows a bar
    time.sleep(0.02)
    if i % 2 == 1:  # what a user's own loop prints beside its bar
        print({'loss': round(0.8765 - i / 10, 4), 'grad_norm': 1.5, 'learning_rate': 1e-05, 'epoch': (i + 1) / 4})
print({'train_runtime': 1.2, 'train_loss': 0.7})
"""


def test_metrics_printed_after_a_tqdm_fragment_on_the_same_line_are_read(tmp_path: Path) -> None:
    """Real tqdm output (stderr, `\\r` updates) with the loop's own dicts on stdout, as a job's log holds them: each
    dict lands after a bar fragment, on the bar's line. Read as the Jobs API hands lines (split at newlines, `\\r`
    kept) and as the local backend does (text mode: `\\r` is a line end too)."""
    log = tmp_path / "job.log"
    with log.open("wb") as out:
        subprocess.run([sys.executable, "-c", TQDM_LOOP], stdout=out, stderr=subprocess.STDOUT, check=True,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    raw = log.read_bytes().decode()
    assert raw.count("s]{'loss': ") == 2 and "\r" in raw  # each dict follows a bar fragment
    for lines in (raw.split("\n"), log.read_text().splitlines()):
        parsed = parse_log(lines)
        assert parsed.metrics == {"loss": 0.5765, "grad_norm": 1.5, "learning_rate": 1e-05, "train_loss": 0.7}
        assert (parsed.progress.step, parsed.progress.total_steps, parsed.progress.epoch) == (4, 4, 1.0)
    # the issue's own line: a bar fragment without a rate, then the dict
    parsed = parse_log(["\r 50%|█████     | 2/4 [00:02<00:02] {'loss': 0.8765, 'epoch': 0.5}"])
    assert parsed.metrics == {"loss": 0.8765} and parsed.progress.epoch == 0.5
