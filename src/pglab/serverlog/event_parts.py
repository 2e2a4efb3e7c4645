"""What every rule module builds events with: a fast Event constructor and converters."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pglab.events import Event

# MICROSECOND * n is timedelta(microseconds=n) for an int n, about half the instructions
# of the keyword constructor (which parses its arguments and splits floats); with
# n = round(seconds * 1e6) it is timedelta(seconds=seconds) for the 2-3 decimal values
# PostgreSQL prints.
MICROSECOND = timedelta(microseconds=1)


def new_event(
    t_start: datetime, kind: str, node: str, t_end: datetime | None, attrs: dict[str, Any]
) -> Event:
    """Event(t_start, kind, node, t_end, attrs): positional, the cheapest call (a big log
    makes millions of events; see Event for why it has slots and is not frozen)."""
    return Event(t_start, kind, node, t_end, attrs)


def before(t: datetime, seconds: float) -> datetime:
    """t minus a duration PostgreSQL printed in seconds (with at most 6 decimals)."""
    return t - MICROSECOND * round(seconds * 1_000_000)


def int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None else None


def float_or_none(text: str | None) -> float | None:
    return float(text) if text is not None else None


def cut(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[:limit]
