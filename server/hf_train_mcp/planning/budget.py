"""A job's timeout and the most it can bill: the worst case (timeout x price) held to the caller's max_cost_usd and
the operator's cap before anything is posted, and the timeout a training run or a follow-up job gets."""

import math
import os

from hf_train_mcp.durations import MAX_TIMEOUT_S, format_duration
from hf_train_mcp.errors import BudgetError, TrainError
from hf_train_mcp.estimate.cost import FlavorEstimate
from hf_train_mcp.contract.requests import Request


def short_timeout(timeout: int, estimate: "FlavorEstimate | None") -> str | None:
    """The warning for a caller's timeout shorter than the estimated run, if it is."""
    needed = estimate.train_seconds + estimate.overhead_seconds if estimate else 0
    if not estimate or timeout >= needed:
        return None
    return (f"timeout {format_duration(timeout)} is below the estimated {format_duration(needed)}: the job will "
            f"likely be killed; {estimate.recommended_timeout} is recommended")


def operator_cap() -> float | None:
    """The operator's budget per submission (HF_TRAIN_MAX_COST_USD); an unreadable value refuses everything."""
    raw = os.environ.get("HF_TRAIN_MAX_COST_USD", "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise BudgetError(f"this server's HF_TRAIN_MAX_COST_USD={raw!r} is not an amount of dollars, so no paid job "
                         "can be checked against it; the operator must fix it (e.g. HF_TRAIN_MAX_COST_USD=50)")
    return value


def worst_case_usd(timeout_seconds: int, usd_per_hour: float) -> float:
    """The bill if the job runs until its timeout: Jobs bill started minutes."""
    return math.ceil(timeout_seconds / 60) * usd_per_hour / 60


def _fits(cost: float, budget: float) -> bool:
    """cost <= budget to a thousandth of a cent (18 min x $0.80/h is $0.24, not $0.24000000000000002)."""
    return round(cost, 5) <= round(budget, 5)


def largest_timeout(budget: float, usd_per_hour: float) -> int:
    """The longest timeout, in whole minutes, whose worst case fits the budget."""
    fits = (int(budget / usd_per_hour * 60) + 1) * 60  # one over, then down: float division errs both ways
    while fits > 0 and not _fits(worst_case_usd(fits, usd_per_hour), budget):
        fits -= 60
    return fits


def check_timeout_bound(timeout: int, estimate: FlavorEstimate | None) -> None:
    """The server's own timeout obeys the bound a caller's does (a caller's over it is refused when parsed)."""
    if timeout <= MAX_TIMEOUT_S:
        return
    needed = f" (the run is estimated at {format_duration(estimate.train_seconds)})" if estimate else ""
    raise TrainError(f"this run would need a timeout of {format_duration(timeout)}{needed}, over the "
                     f"{MAX_TIMEOUT_S // 86400}-day limit of one job: lower max_steps or epochs, pick a faster "
                     "(multi-GPU) flavor, or train in parts of under 7 days with resume_from. Nothing was submitted.")


def within_budget(req: Request, flavor: str, price: float | None, timeout: int,
                   estimate: FlavorEstimate | None, warnings: list[str]) -> int:
    """The timeout, checked so that its worst case fits the caller's max_cost_usd and the operator's cap.

    Without a caller timeout, a recommended timeout over budget is shortened to the budget when the estimated
    run still fits in it; otherwise the submission is refused with the largest timeout that fits.
    """
    check_timeout_bound(timeout, estimate)
    limits = [(v, name) for v, name in ((req.max_cost_usd, "max_cost_usd"),
                                        (operator_cap(), "this server's cap HF_TRAIN_MAX_COST_USD")) if v is not None]
    if price is None:  # a paid flavor the hardware list does not price: no cap or question could judge it
        against = " against " + ", ".join(f"{name} (${v:.2f})" for v, name in limits) if limits else ""
        raise BudgetError(f"the price of {flavor} is unknown (its hardware catalog does not list it), so its worst "
                         f"case cannot be checked{against}; pick a flavor that list_hardware prices. Nothing was "
                         "submitted.")
    if not limits or price == 0:
        return timeout
    budget, name = min(limits)
    worst = worst_case_usd(timeout, price)
    if _fits(worst, budget):
        return timeout
    fits = largest_timeout(budget, price)
    needed = int(estimate.train_seconds + estimate.overhead_seconds) if estimate else None
    if req.timeout is None and needed and fits >= max(needed, 60):
        warnings.append(f"timeout shortened to {format_duration(fits)} so the worst case fits {name} "
                        f"(${budget:.2f}); the run is estimated at {format_duration(needed)}, so the margin is thin")
        return fits
    head = (f"the worst case ${worst:.2f} (timeout {format_duration(timeout)} x ${price:.2f}/h on {flavor}) is over "
            f"{name} (${budget:.2f}); nothing was submitted. ")
    if fits < 60:
        raise BudgetError(head + f"Not even one minute of {flavor} fits: raise the budget or use a cheaper flavor.")
    advice = (f"The largest timeout that fits is {format_duration(fits)}")
    if needed and fits < needed:
        advice += (f", shorter than the ~{format_duration(needed)} this run is estimated to take: lower max_steps or "
                   "epochs, use a cheaper flavor, or raise the budget.")
    else:
        advice += f": send timeout='{format_duration(fits)}', or raise the budget."
    raise BudgetError(head + advice)


def chosen_timeout(requested: int | None, estimate: "FlavorEstimate | None", default_s: int,
                   warnings: list[str]) -> int:
    """A job's timeout: the caller's (warned when short or thin), else the estimate's recommendation, else the
    backend's default. A training run and a follow-up job choose alike."""
    if requested is not None:
        short = short_timeout(requested, estimate)
        if short:
            warnings.append(short)
        elif estimate and requested < estimate.recommended_timeout_seconds:
            warnings.append(f"timeout {format_duration(requested)} leaves little margin; "
                            f"{estimate.recommended_timeout} is recommended")
        return requested
    return estimate.recommended_timeout_seconds if estimate is not None else default_s
