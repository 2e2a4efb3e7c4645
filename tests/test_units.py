from __future__ import annotations

import pytest

from pglab.units import format_duration, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60s", 60), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("90", 90), (12, 12),
     ("1m30s", 90), ("2.5s", 2.5)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "5x", "1m x", "-3s", "five", True, -1])
def test_bad_durations(text: str | int) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_sizes() -> None:
    assert parse_size("512MB") == 512 * 1024**2
    assert parse_size("2GB") == 2 * 1024**3
    assert parse_size(4096) == 4096
    with pytest.raises(ValueError, match="size"):
        parse_size("lots")


def test_format_duration() -> None:
    assert format_duration(90) == "1m30s"
    assert format_duration(0.25) == "250ms"
    assert format_duration(3600) == "1h"
