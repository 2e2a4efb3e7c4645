"""Events on the run's one clock: checkpoints, autovacuum runs, lock waits, faults, crashes.

An event is something with a start (and maybe an end) that happened to one node. Every
source of events (server log, probes, the fault timeline) produces this one type, and the
results folder stores them in events.parquet with `attrs` as a JSON string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


# slots, not frozen: a frozen dataclass sets each field through object.__setattr__,
# which made building an event ~3x slower, and the log parser builds millions of them.
@dataclass(slots=True)
class Event:
    """One thing that happened on one node, in UTC (treated as immutable)."""

    t_start: datetime
    kind: str
    node: str = "primary"
    t_end: datetime | None = None
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.t_start.tzinfo is None:
            raise ValueError("Event.t_start must be timezone-aware (UTC)")
        if self.t_end is not None and self.t_end.tzinfo is None:
            raise ValueError("Event.t_end must be timezone-aware (UTC)")

    def attrs_json(self) -> str:
        return json.dumps(self.attrs, sort_keys=True, default=str)


def attrs_summary(attrs: dict[str, Any], keys: tuple[str, ...]) -> str:
    """`key=value` for each of `keys` the event has (lists comma-joined, values cut to 60
    characters): one line for `pglab logs` and for the report's event tooltips."""
    parts = []
    for key in keys:
        value = attrs.get(key)
        if value is None or value in ([], ""):
            continue
        if isinstance(value, list):
            value = ",".join(map(str, value))
        text = str(value)
        parts.append(f"{key}={text if len(text) <= 60 else text[:57] + '...'}")
    return " ".join(parts)
