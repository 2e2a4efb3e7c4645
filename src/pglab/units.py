"""Durations and sizes as people write them in scenario files ("90s", "2m", "512MB")."""

from __future__ import annotations

import math
import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(B|kB|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?")
_SIZE_UNITS = {
    None: 1,
    "B": 1,
    "kB": 1024,
    "KB": 1024,
    "KiB": 1024,
    "MB": 1024**2,
    "MiB": 1024**2,
    "GB": 1024**3,
    "GiB": 1024**3,
    "TB": 1024**4,
    "TiB": 1024**4,
}

DURATION_HINT = "a duration like '60s', '5m', '1h30m' or a number of seconds"
SIZE_HINT = "a size like '512MB' or '2GB' (units B, kB, MB, GB, TB; 1 kB = 1024 B)"


def parse_duration(value: str | int | float) -> float:
    """Seconds from '90s', '2m', '1h30m', '250ms' or a bare number of seconds."""
    if isinstance(value, bool):
        raise ValueError(DURATION_HINT)
    if isinstance(value, int | float):
        if not 0 <= value < math.inf:  # NaN and infinity too: a run has an end
            raise ValueError(DURATION_HINT)
        return float(value)
    if not isinstance(value, str):  # a list or a table where a duration belongs
        raise ValueError(DURATION_HINT)
    text = value.strip().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    pos = 0
    total = 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            raise ValueError(DURATION_HINT)
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(text) or not math.isfinite(total):
        raise ValueError(DURATION_HINT)
    return total


def parse_size(value: str | int) -> int:
    """Bytes from '512MB', '2GB' or a bare number of bytes (PostgreSQL's 1024-based units)."""
    if isinstance(value, bool):
        raise ValueError(SIZE_HINT)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(SIZE_HINT)
        return value
    if not isinstance(value, str):
        raise ValueError(SIZE_HINT)
    match = _SIZE.fullmatch(value.strip())
    if not match:
        raise ValueError(SIZE_HINT)
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    whole = round(seconds)
    if abs(seconds - whole) > 1e-9:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "",
             f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"


# A decimal number as tools print it (pgbench): sign, digits, point, exponent.
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"


def finite_float(text: str) -> float | None:
    """A float, or None for NaN/inf (pgbench prints those for empty statistics)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
