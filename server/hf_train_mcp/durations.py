"""Job timeouts: parse what users type ("90m", "2h", "1h30m", 5400) and print them back compactly."""

import math
import os
import re
from datetime import UTC, datetime

_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
MAX_TIMEOUT_S = 7 * 86400  # the longest job this server starts, whoever chose the timeout
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def parse_duration(value: str | int | float) -> int:
    """Seconds in `value`; raises ValueError with the accepted forms when it cannot be read."""
    if isinstance(value, bool):
        raise ValueError("a timeout is a duration, not a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        elif text and _PART.sub("", text) == "" and re.fullmatch(r"(\d+(?:\.\d+)?[dhms])+", text):
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text))
        else:
            raise ValueError(f"cannot read timeout {value!r}: send e.g. '90m', '2h', '1h30m' or a number of seconds")
    if not math.isfinite(seconds) or seconds < 60:
        raise ValueError(f"timeout {value!r} is under a minute: send e.g. '30m' or more")
    if seconds > MAX_TIMEOUT_S:
        raise ValueError(f"timeout {value!r} is over 7 days: split the run and resume from a checkpoint")
    return int(math.ceil(seconds))


def format_duration(seconds: float) -> str:
    """'2h30m' style text that Jobs (and parse_duration) read back as the same number of minutes."""
    minutes = int(math.ceil(seconds / 60))
    hours, minutes = divmod(minutes, 60)
    if hours and minutes:
        return f"{hours}h{minutes}m"
    return f"{hours}h" if hours else f"{minutes}m"



def header_duration(seconds: int) -> str:
    """One number and one unit ("3h", "150m"): the form `hf jobs` reads from a script's [tool.hf-jobs] table."""
    minutes = int(math.ceil(seconds / 60))
    return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


def minutes_since(iso: str | None) -> float | None:
    """Minutes from a ledger time stamp to now (None without one)."""
    if not iso:
        return None
    started = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (datetime.now(UTC) - started).total_seconds() / 60


def seconds_from_env(name: str, default: float, *, least: float = 0.1) -> float:
    """A polling interval an environment variable may set (tests look faster); a value that is no number is
    ignored, and none is shorter than `least`."""
    try:
        return max(least, float(os.environ.get(name, default)))
    except ValueError:
        return default
