"""Pruning a sweep's runs: the metric a method's runs are compared on while they train, and which runs trail
the others' median at the same step."""

import math
import statistics
from typing import NamedTuple

from hf_train_mcp import methods

PRUNE_MARGIN = 0.10  # a run is pruned when its loss is this much above the others' median at the same step
PRUNE_AFTER = 0.2  # ... and only after this fraction of its steps (early losses are noise)
PRUNE_FLOOR = 0.1  # the margin is at least 10% of this (a loss or reward near 0 makes any gap relative-huge)


class Watched(NamedTuple):
    metric: str
    lower_is_better: bool


def watched(method: str) -> Watched:
    """The training metric a method's runs are compared on while they train: (name, lower is better). GRPO's
    loss says little (it hovers near 0); its mean reward is what improves. A run_script job (method 'script')
    is compared on the loss its log reports."""
    if method not in methods.REGISTRY:
        return Watched("loss", True)
    return Watched("reward", False) if methods.get(method).eval_metric == "reward" else Watched("loss", True)


def loss_at(history: list[list[float]], step: float) -> float | None:
    """A run's value at `step`, interpolated between the points seen (None before its first or past its last)."""
    points = [(s, value) for s, _, value in history if value is not None]
    if not points or step > points[-1][0] or step < points[0][0]:
        return None
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if s0 <= step <= s1:
            return v0 if s1 == s0 else v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return points[-1][1]


def trailing(histories: dict[int, list[list[float]]], active: set[int], *, lower_is_better: bool = True,
             margin: float = PRUNE_MARGIN, after: float = PRUNE_AFTER) -> list[tuple[int, float, float]]:
    """(run, its value, the others' median) for each active run whose latest value is worse than the median of
    the other runs' values at the same step by more than `margin` (relative, at least PRUNE_FLOOR absolute),
    once past `after` of its steps. A run whose value is not a number (diverged) trails at once."""
    sign = 1.0 if lower_is_better else -1.0
    worse = []
    for index in sorted(active):
        history = histories.get(index) or []
        if not history:
            continue
        step, total, value = history[-1]
        if value is not None and not math.isfinite(value):
            worse.append((index, value, math.nan))
            continue
        if value is None or not total or step < after * total:
            continue
        others = [v for other, points in histories.items() if other != index
                  and (v := loss_at(points, step)) is not None and math.isfinite(v)]
        if not others:
            continue
        median = statistics.median(others)
        if sign * (value - median) > margin * max(abs(median), PRUNE_FLOOR) + 1e-9:
            worse.append((index, value, median))
    return worse
