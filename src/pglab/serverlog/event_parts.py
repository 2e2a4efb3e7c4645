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
    """Event(t_start, kind, node, t_end, attrs), built without calling its __init__.

    A big log makes millions of events. The dataclass __init__ and its __post_init__
    are two more Python calls per event; filling the slots of a bare instance costs
    about half (measured: 975M instead of 1036M instructions for a 5 MB log). Skipping
    __post_init__ loses nothing here: every time the parser makes is tz-aware (parsed
    with an explicit +00:00 or made from an epoch in UTC).
    """
    event = _new_object(Event)
    event.t_start = t_start
    event.kind = kind
    event.node = node
    event.t_end = t_end
    event.attrs = attrs
    return event


_new_object = object.__new__


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
