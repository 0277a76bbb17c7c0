"""What validate_dataset returns: the report of a dataset read for a method (the tool contract re-exports it)."""

from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr

from hf_train_mcp.data.checks import DatasetIssue
from hf_train_mcp.data.formats import FORMATS

# every declared format, and "unknown" when the columns make none
DetectedFormat = Literal[(*FORMATS, "unknown")]  # type: ignore[valid-type]


class TokenStats(BaseModel):
    tokenizer: str
    sampled_rows: int
    p50: int
    p95: int
    max: int
    mean: float
    share_over_max_length: float
    max_length: int
    estimated_total_tokens: int | None = None


class DatasetReport(BaseModel):
    valid: bool
    dataset: str
    config: str | None = None
    split: str
    num_rows: int | None = None
    columns: list[str]
    detected_format: DetectedFormat
    issues: list[DatasetIssue]
    suggested_column_mapping: dict[str, str] | None = None
    sample_rows: list[dict[str, Any]] = Field(default_factory=list)
    token_stats: TokenStats | None = None
    labels: list[str] | None = None  # class names, when the rows have classes
    # why token_stats is None, for the submission's own warning (not part of the tool's result)
    _no_token_stats: str | None = PrivateAttr(default=None)

    @property
    def no_token_stats(self) -> str | None:
        return self._no_token_stats


__all__ = ["DatasetIssue", "DatasetReport", "TokenStats", "DetectedFormat"]
