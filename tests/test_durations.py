"""Timeouts as users write them, and as Jobs and its CLI read them back."""

import pytest

from hf_train_mcp.durations import format_duration, header_duration, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [
    ("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("1.5h", 5400), ("5400", 5400), (5400, 5400), ("1d", 86400),
    (" 2H ", 7200), ("45m30s", 2730),
])
def test_parse_duration_reads_what_users_write(text, seconds) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "", "10x", "30", "-5m", "8d", True, "h", "1h-30m"])
def test_parse_duration_refuses_nonsense_and_extremes(text) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_formats_round_trip() -> None:
    assert format_duration(9000) == "2h30m" and parse_duration(format_duration(9000)) == 9000
    assert header_duration(9000) == "150m" and header_duration(7200) == "2h" and header_duration(61) == "2m"
