"""Fit the time model's constants to the calibration table: `python -m hf_train_mcp.estimate.calibration.fit`.

Minimises the squared log error of every included, measured row, plus a pull of each constant towards its
physical prior (a datasheet-derived efficiency, a plausible launch cost), so that a constant the table barely
constrains stays where the physics puts it instead of chasing one row. Coordinate descent in log space: slow,
dependency-free and plenty for a dozen constants. Prints the fitted `Calibration(...)` for constants.py and the
per-row table.
"""

import argparse
import math
from dataclasses import fields, replace

from hf_train_mcp.estimate import constants as C
from hf_train_mcp.estimate.calibration import load_runs, score, summary, table
from hf_train_mcp.estimate.constants import Calibration

# (name, prior, how far from the prior it may go as a factor, weight of the pull towards the prior)
SCALARS = (
    ("width_half", 1000.0, 4.0, 0.3),
    ("tokens_half", 500.0, 8.0, 0.3),
    ("dequant_bytes", 6.0, 4.0, 0.3),
    ("layer_overhead_s", 0.0002, 10.0, 0.1),
    ("communication_overlap", 0.8, 1.2, 0.3),
    ("pcie_overlap", 0.5, 2.0, 0.3),
    ("multi_gpu_step_s", 0.05, 10.0, 0.1),
    ("shard_layer_latency_s", 0.002, 10.0, 0.1),
    ("internode_gbps", 25.0, 3.0, 0.3),
    ("unsloth_speedup", 2.0, 1.6, 0.5),
    ("decode_bandwidth_share", 0.5, 2.0, 0.3),
    ("decode_step_s", 0.005, 5.0, 0.2),
    ("decode_layer_s", 0.0006, 5.0, 0.2),
    ("vllm_step_s", 0.005, 5.0, 0.2),
    ("vllm_layer_s", 0.00002, 10.0, 0.1),
    ("weight_sync_gbps", 5.0, 5.0, 0.2),
    ("eager_score_bytes", 16.0, 3.0, 0.3),
    ("moe_efficiency", 0.5, 4.0, 0.2),
    ("save_gbps", 1.0, 3.0, 0.3),
    ("emulated_bf16_speedup", 1.0, 3.0, 0.2),
    ("expert_launch_s", 0.00003, 10.0, 0.1),
)
EFFICIENCY_PRIOR = {"T4": 0.30, "L4": 0.35, "A10G": 0.70, "L40S": 0.45, "A100": 0.75, "H100": 0.55, "H200": 0.55,
                    "RTX PRO 6000": 0.45}
EFFICIENCY_SPREAD, EFFICIENCY_WEIGHT = 2.0, 0.3


# The Hugging Face docs' own runs (rows 201-204) are the only ones on Jobs hardware, with the stack our jobs run
# (TRL's sft.py, DDP through accelerate), and the figures a user reads beside our estimate: weighted up.
WEIGHTS = {"hf-docs": 10.0}


def loss(cal: Calibration, runs) -> float:
    scores = score(runs, cal)
    data = sum(WEIGHTS.get(s.run.source, 1.0) * math.log1p(s.error) ** 2
               for s in scores if s.run.included and s.run.measured)
    prior = 0.0
    for name, center, _, weight in SCALARS:
        prior += weight * math.log(getattr(cal, name) / center) ** 2
    for gpu, value in cal.efficiency.items():
        prior += EFFICIENCY_WEIGHT * math.log(value / EFFICIENCY_PRIOR[gpu]) ** 2
    return data + prior


def fit(runs, start: Calibration, rounds: int = 6) -> Calibration:
    cal, best = start, loss(start, runs)
    step = 0.4
    for _ in range(rounds):
        for name, center, spread, _ in SCALARS:
            for direction in (1, -1):
                while True:
                    value = getattr(cal, name) * math.exp(direction * step)
                    if not center / spread <= value <= center * spread:
                        break
                    trial = replace(cal, **{name: value})
                    current = loss(trial, runs)
                    if current >= best:
                        break
                    cal, best = trial, current
        used = {r.flavor().gpu.model for r in runs if r.included}
        for gpu in EFFICIENCY_PRIOR:
            if gpu not in used:
                continue
            for direction in (1, -1):
                while True:
                    value = min(0.95, cal.efficiency[gpu] * math.exp(direction * step))
                    if not EFFICIENCY_PRIOR[gpu] / EFFICIENCY_SPREAD <= value <= EFFICIENCY_PRIOR[gpu] * EFFICIENCY_SPREAD:
                        break
                    trial = replace(cal, efficiency={**cal.efficiency, gpu: value})
                    current = loss(trial, runs)
                    if current >= best:
                        break
                    cal, best = trial, current
        step /= 2
    # the H200 is the H100's compute die with more memory bandwidth: it sustains the same share of the same peak
    return replace(cal, efficiency={**cal.efficiency, "H200": cal.efficiency["H100"]})


def render(cal: Calibration) -> str:
    """The `CALIBRATED = Calibration(...)` block of constants.py."""
    lines = []
    for item in fields(Calibration):
        value = getattr(cal, item.name)
        if isinstance(value, dict):
            text = "{" + ", ".join(f'"{k}": {v:.3f}' for k, v in value.items()) + "}"
        else:
            text = f"{value:.4g}"
        lines.append(f"    {item.name}={text},")
    return "CALIBRATED = Calibration(\n" + "\n".join(lines) + "\n)"


def leave_one_out(runs, start: Calibration, rounds: int = 4) -> list[tuple[str, float]]:
    """Each included measured row predicted by constants fitted without it: the error to expect on a new run."""
    out = []
    for held in (r for r in runs if r.included and r.measured):
        others = [r if r is not held else replace(r, included=False) for r in runs]
        cal = fit(others, start, rounds)
        out.append((held.id, held.predicted(cal) / held.seconds - 1))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--show", action="store_true", help="score the current constants only")
    parser.add_argument("--loo", action="store_true", help="leave-one-out: each row predicted without it")
    args = parser.parse_args()
    runs = load_runs()
    if args.loo:
        errors = leave_one_out(runs, C.CALIBRATED)
        for row, error in errors:
            print(f"{row:>4} {error:+6.0%}")
        absolute = sorted(abs(e) for _, e in errors)
        print(f"leave-one-out: {len(errors)} rows, median |error| {absolute[len(absolute) // 2]:.0%}, "
              f"worst {absolute[-1]:.0%}, within 40%: {sum(a <= 0.4 for a in absolute)}")
        return
    cal = C.CALIBRATED if args.show else fit(runs, C.CALIBRATED, args.rounds)
    scores = score(runs, cal)
    print(table(scores))
    print(summary(scores))
    if not args.show:
        print(render(cal))


if __name__ == "__main__":
    main()
