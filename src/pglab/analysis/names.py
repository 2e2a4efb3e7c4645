"""Evidence that names what a DBA acts on: the row or relation a lock queue formed on and
the session holding it (from db.lockqueue's `lock-queue` events)."""

from __future__ import annotations

from typing import Any


def busiest_queue(queues: list[dict[str, Any]]) -> str | None:
    """One evidence line for the lock queue that held the most sessions, or None."""
    if not queues:
        return None
    return describe(max(queues, key=lambda q: int(q.get("waiters") or 0)))


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
