"""Evidence that names what a DBA acts on: the row or relation a lock queue formed on and
the session holding it (from db.lockqueue's `lock-queue` events); the relations and
databases the server log gives as OIDs (from its `object-names` events)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


def largest_queue(queues: list[tuple[dict[str, Any], float]]) -> dict[str, Any] | None:
    """Of (queue, seconds it was seen), the one that held the most session-seconds: its
    waiters times its seconds (a moment counts as one). Four sessions behind a LOCK TABLE
    for three seconds outweigh four that queued on a hot row for one, just before."""
    best = max(queues, key=lambda q: int(q[0].get("waiters") or 0) * max(q[1], 1.0),
               default=None)
    return best[0] if best else None


def queued_tables(queues: list[tuple[dict[str, Any], float]]) -> list[str]:
    """The tables whose rows or locks the queues formed on, most session-seconds first."""
    held: dict[str, float] = {}
    for queue, seconds in queues:
        if queue.get("relation"):
            weight = int(queue.get("waiters") or 0) * max(seconds, 1.0)
            held[str(queue["relation"])] = held.get(str(queue["relation"]), 0.0) + weight
    return sorted(held, key=lambda name: held[name], reverse=True)


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


@dataclass(frozen=True)
class ObjectNames:
    """OIDs named by db.lockqueue at sampling time (`object-names` events), per node: the
    server log's lock waits say `relation 16392 of database 16384`, which names nothing
    a DBA can act on."""

    databases: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> oid -> name
    relations: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> "db/rel"
    connected: dict[str, str] = field(default_factory=dict)  # node -> the probe's database

    @staticmethod
    def from_events(events: list[tuple[str, dict[str, Any]]]) -> ObjectNames:
        """From (node, attrs) of the run's `object-names` events."""
        names = ObjectNames()
        for node, attrs in events:
            for kind, into in (("databases", names.databases),
                               ("relations", names.relations)):
                found = attrs.get(kind)
                if isinstance(found, dict):
                    into.setdefault(node, {}).update({str(k): str(v) for k, v in found.items()})
            if attrs.get("database"):
                names.connected[node] = str(attrs["database"])
        return names

    def name(self, text: str, node: str) -> str:
        """`text` with each `relation R of database D` named; where an OID cannot be
        named, why (another database than the probe's, not seen, no names recorded)."""
        def one(match: re.Match[str]) -> str:
            relation, database = match.group(1), match.group(2)
            dbname = self.databases.get(node, {}).get(database)
            where = dbname or database
            named = self.relations.get(node, {}).get(f"{database}/{relation}")
            if named:
                return f"relation {named} of database {where}"
            connected = self.connected.get(node)
            if connected is None:
                why = "no names recorded in this run"
            elif dbname is not None and dbname != connected:
                why = f"another database than {connected}: its names are not readable there"
            else:
                why = "not seen by db.lockqueue"
            return f"relation {relation} of database {where} (unnamed: {why})"
        return _RELATION_OID.sub(one, text)


_RELATION_OID = re.compile(r"relation (\d+) of database (\d+)")
