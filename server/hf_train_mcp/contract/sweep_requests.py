"""What submit_sweep and compare_runs take: a grid of submit_training runs over a shared base, and the runs
(a sweep's or listed jobs) to rank on one metric."""

import json
from itertools import product
from typing import Annotated, Any

from pydantic import Field, ValidationError, model_validator

from hf_train_mcp import methods
from hf_train_mcp.contract.job_requests import JobIdText
from hf_train_mcp.contract.readable import readable
from hf_train_mcp.contract.request_fields import DryRun, IdempotencyKey, Request, lift_options
from hf_train_mcp.contract.training_requests import TrainingRequest


# what a sweep sets itself on every run: a grid or base may not
SWEEP_OWNED = frozenset({"dry_run", "idempotency_key"})
NOT_GRIDDED = frozenset({"backend", "project", "run_name"})  # one sweep: one place, one Trackio project
# what changes what a loss means: runs that differ in these cannot be pruned against each other (a method's own
# such options say so where they are declared: Option.changes_loss)
PRUNE_INCOMPARABLE = frozenset({"method", "model", "dataset", "dataset_config", "dataset_split", "column_mapping",
                                *(o.name for o in methods.options().values() if o.changes_loss)})
SWEEP_RUNS_MAX = 64


class SweepRequest(Request):
    base: Annotated[dict[str, Any], Field(description="submit_training arguments")]
    grid: Annotated[dict[str, Annotated[list[Any], Field(min_length=1, max_length=16)]], Field(
        min_length=1, max_length=8, description='e.g. {"learning_rate": [1e-4, 2e-4]}')]
    max_runs: Annotated[int, Field(ge=1, le=SWEEP_RUNS_MAX)] = 8
    max_parallel: Annotated[int, Field(ge=1, le=16)] = 2
    max_cost_usd: Annotated[float, Field(gt=0, description="for the whole sweep")] | None = None
    prune: Annotated[bool, Field(description="cancel runs 10% behind the median loss")] \
        = False
    dry_run: DryRun = False
    idempotency_key: IdempotencyKey | None = None

    @model_validator(mode="before")
    @classmethod
    def _flat_options(cls, data: Any) -> Any:
        """The base's `options` as flat parameters (what the runs' params, pruning and the ledger name); a grid
        names an option itself."""
        if not isinstance(data, dict):
            return data
        if isinstance(data.get("grid"), dict) and "options" in data["grid"]:
            raise ValueError('a grid varies one method option by name: name the option itself, e.g. {"beta": '
                             '[0.1, 0.2]}, not options')
        if isinstance(data.get("base"), dict):
            data = {**data, "base": lift_options(data["base"], list(methods.options()))}
        return data

    @model_validator(mode="after")
    def _runs(self) -> "SweepRequest":
        owned = sorted((set(self.base) | set(self.grid)) & SWEEP_OWNED)
        if owned:
            raise ValueError(f"{', '.join(owned)}: set on submit_sweep itself, not in base or grid")
        unknown = sorted((set(self.base) | set(self.grid)) - set(TrainingRequest.model_fields))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} {'is not a parameter' if len(unknown) == 1 else 'are not parameters'}"
                             " of submit_training")
        fixed = sorted(set(self.grid) & NOT_GRIDDED)
        if fixed:
            raise ValueError(f"{', '.join(fixed)} cannot vary within a sweep: put it in base")
        incomparable = sorted(set(self.grid) & PRUNE_INCOMPARABLE) if self.prune else []
        if incomparable:
            raise ValueError(f"prune compares the runs' losses step by step, and {', '.join(incomparable)} changes "
                             "what the loss measures: drop prune, or keep that parameter out of the grid")
        both = sorted(set(self.base) & set(self.grid))
        if both:
            raise ValueError(f"{', '.join(both)} is in both base and grid: keep it in one")
        repeated = sorted(name for name, values in self.grid.items()
                          if len({json.dumps(v) for v in values}) < len(values))
        if repeated:
            raise ValueError(f"grid values repeat for {', '.join(repeated)}: each run must differ")
        count = 1
        for values in self.grid.values():
            count *= len(values)
        if count > self.max_runs:
            raise ValueError(f"the grid makes {count} runs, over max_runs={self.max_runs}: drop values or raise "
                             f"max_runs (at most {SWEEP_RUNS_MAX})")
        for params in self.combinations():
            try:
                TrainingRequest(**self.base, **params)
            except ValidationError as exc:
                raise ValueError(f"the run with {params}: {readable(exc)}") from None
        return self

    def combinations(self) -> list[dict[str, Any]]:
        return [dict(zip(self.grid, combination)) for combination in product(*self.grid.values())]


class CompareRequest(Request):
    sweep_id: Annotated[str, Field(pattern=r"^sweep-[0-9a-f]{6,32}$")] | None = None
    job_ids: Annotated[list[JobIdText], Field(min_length=1, max_length=64)] | None = None
    metric: Annotated[str, Field(pattern=r"^[A-Za-z0-9_./\-]{1,64}$",
                                 description="default eval_loss, else loss")] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "CompareRequest":
        if (self.sweep_id is None) == (self.job_ids is None):
            raise ValueError("send sweep_id (from submit_sweep) or job_ids, one of the two")
        return self
