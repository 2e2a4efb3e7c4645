"""Evidence that names what a DBA acts on: the row or relation a lock queue formed on and
the session holding it (from db.lockqueue's `lock-queue` events)."""

from __future__ import annotations

from typing import Any


def largest_queue(queues: list[tuple[dict[str, Any], float]]) -> dict[str, Any] | None:
    """Of (queue, seconds it was seen), the one that held the most session-seconds: its
    waiters times its seconds (a moment counts as one). Four sessions behind a LOCK TABLE
    for three seconds outweigh four that queued on a hot row for one, just before."""
    best = max(queues, key=lambda q: int(q[0].get("waiters") or 0) * max(q[1], 1.0),
               default=None)
    return best[0] if best else None


def busiest_queue(queues: list[tuple[dict[str, Any], float]]) -> str | None:
    """One evidence line for the largest lock queue (see largest_queue), or None."""
    largest = largest_queue(queues)
    return describe(largest) if largest else None


def describe(attrs: dict[str, Any]) -> str:
    """One evidence line: the object, the queue, and the holder by name."""
    holder = attrs.get("holder") or {}
    who = f"pid {holder.get('pid')}"
    if holder.get("application"):
        who += f" ({holder['application']}"
        who += f", {holder['user']})" if holder.get("user") else ")"
    state = holder.get("state") or "?"
    age = holder.get("xact_s")
    line = (f"{attrs.get('waiters')} session(s) queued on {attrs.get('object')} behind {who}, "
            f"{state}" + (f", its transaction open {float(age):.1f} s" if age else ""))
    if holder.get("query"):
        line += f"; its last statement: {holder['query']}"
    return line
