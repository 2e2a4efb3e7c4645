"""What every rule module builds events with: a fast Event constructor and converters."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pglab.events import Event

_new_object = object.__new__
_set_attribute = object.__setattr__
# MICROSECOND * n is timedelta(microseconds=n) for an int n, about half the instructions
# of the keyword constructor (which parses its arguments and splits floats); with
# n = round(seconds * 1e6) it is timedelta(seconds=seconds) for the 2-3 decimal values
# PostgreSQL prints.
MICROSECOND = timedelta(microseconds=1)


def new_event(
    t_start: datetime, kind: str, node: str, t_end: datetime | None, attrs: dict[str, Any]
) -> Event:
    """Event(t_start, kind, node, t_end, attrs) for times known to be tz-aware.

    A big log makes millions of events: the frozen dataclass's __init__ (one
    object.__setattr__ per field) and its __post_init__ checks cost about twice the
    instructions of filling the instance's __dict__ in one step, as this does. Every
    time given here comes from TimestampParser or datetime.fromisoformat(... + "+00:00")
    (LogRecord.t is tz-aware UTC), so the checks could not fail.
    """
    event = _new_object(Event)
    _set_attribute(
        event,
        "__dict__",
        {"t_start": t_start, "kind": kind, "node": node, "t_end": t_end, "attrs": attrs},
    )
    return event


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
