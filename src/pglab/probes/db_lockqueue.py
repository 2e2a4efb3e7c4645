"""Names, not just classes: what sessions queue on, and who holds it.

`db.lockqueue` reads, every interval while some lock is not granted, each waiting
session's wanted lock, the row it queues for (the tuple lock a row-lock waiter holds or
wants: relation, page and tuple), and the sessions blocking it (pg_blocking_pids) with
their application, user, state, transaction age, query, normalised (constants -> $n), and
what the holder itself waits on. One `lock-queue` event per (node, relation/row or lock,
holder) from the first interval it is seen to the last, with the most waiters seen and
how often the holder was seen in each wait (a holder stuck in its commit's WAL flush makes
the queue a symptom of the flush); gauges `queued` per relation. An `object-names` event
for each database and relation OID named for the first time (the analysis names the
server log's OIDs with them); a relation of another database than the connection's is
left unnamed, and says so.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg

from pglab.events import Event
from pglab.probes.base import ProbeContext, ProbeOutput, Sample
from pglab.probes.capabilities import Capabilities
from pglab.probes.db_base import DbProbe
from pglab.sqltext import SQUASHING_VERSION, normalise

MAX_WAITERS = 50  # pg_blocking_pids takes the lock manager's locks: bounded per interval

# Names are read here, while the lock is held: the log's lock waits carry only OIDs, and
# the relation may be gone by the time anyone reads them. A relation's OID names it only
# in its own database (or a shared catalog, database 0): regclass in another database
# would name whatever has that OID here, so there the name stays NULL.
_QUERY = f"""
WITH waiting AS (
    SELECT pid, locktype, mode, database, relation, page, tuple, transactionid
    FROM pg_locks WHERE NOT granted AND pid IS NOT NULL LIMIT {MAX_WAITERS}
), here AS (
    SELECT oid FROM pg_database WHERE datname = current_database()
)
SELECT w.pid, w.locktype, w.mode,
       (SELECT c.oid::regclass::text FROM pg_class c
        WHERE c.oid = coalesce(w.relation, t.relation)
          AND coalesce(w.database, t.database) IN (0, (SELECT oid FROM here))) AS relation,
       coalesce(t.page, w.page) AS page, coalesce(t.tuple, w.tuple) AS tuple,
       w.transactionid::text AS xid,
       h.pid AS holder, a.application_name, a.usename, a.state, a.query,
       extract(epoch FROM now() - a.xact_start) AS xact_s, a.backend_type,
       a.wait_event_type, a.wait_event,
       coalesce(w.relation, t.relation) AS relation_oid,
       coalesce(w.database, t.database) AS database_oid, d.datname, current_database()
FROM waiting w
LEFT JOIN pg_locks t ON t.pid = w.pid AND t.locktype = 'tuple'
LEFT JOIN pg_database d ON d.oid = coalesce(w.database, t.database)
CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS h(pid)
LEFT JOIN pg_stat_activity a ON a.pid = h.pid
"""

def normalise_query(query: str | None, limit: int = 300, squash: bool = True) -> str:
    """What the statement is, not its data: constants as $n by PostgreSQL's own parser
    (sqltext.normalise), as pg_stat_statements writes its texts (lists squashed from 18:
    `squash`)."""
    if not query:
        return ""
    text = normalise(query, squash)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_RANK = {"row": 3, "relation": 2, "transaction": 1}


def _roots(pid: int, blocked_by: dict[int, set[int]]) -> set[int]:
    """The blockers at the head of `pid`'s queue: those not waiting themselves."""
    roots: set[int] = set()
    stack, seen = [pid], {pid}
    while stack:
        for holder in blocked_by.get(stack.pop(), ()):
            if holder in seen:
                continue
            seen.add(holder)
            if holder in blocked_by:
                stack.append(holder)
            else:
                roots.add(holder)
    return roots


UNNAMED = "relation "  # how unnamed_relation's text begins (a regclass name is quoted)


def unnamed_relation(relation_oid: Any, datname: str | None, database_oid: Any,
                     here: str | None) -> str:
    """A relation this connection cannot name: its OID, its database by name, and why."""
    where = datname or f"OID {database_oid}"
    why = (f"another database than {here}'s: its names are not readable from here"
           if datname != here else "gone before it could be named")
    return f"relation {relation_oid} of database {where} ({why})"


def _object(locktype: str, relation: str | None, page: Any, tuple_: Any,
            xid: str | None) -> str:
    if relation and tuple_ is not None:
        return f"row ({page},{tuple_}) of {relation}"
    if relation:  # unnamed_relation's text says `relation` already
        return relation if relation.startswith(UNNAMED) else f"relation {relation}"
    if xid:
        return f"transaction {xid}"
    return str(locktype)


class LockQueue(DbProbe):
    name = "db.lockqueue"
    help = ("what sessions queue on (relation, row) and who holds it: the holder's "
            "application, state, transaction age, normalised query; lock-queue events")

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self._open: dict[tuple[str, str, int], dict[str, Any]] = {}
        self._named: set[tuple[str, str, str]] = set()  # (node, kind, key) recorded

    def _remember(self, out: ProbeOutput, now: dt.datetime, node: str, here: str | None,
                  database_oid: Any, datname: str | None, relation_oid: Any,
                  relation: str | None) -> None:
        """An `object-names` event for OIDs named for the first time: the server log's
        lock waits say `relation 16392 of database 16384`, which the analysis names
        with these."""
        new: dict[str, dict[str, str]] = {}
        if database_oid is not None and datname:
            new["databases"] = {str(database_oid): str(datname)}
        if relation_oid is not None and relation and database_oid is not None:
            new["relations"] = {f"{database_oid}/{relation_oid}": str(relation)}
        fresh = {kind: names for kind, names in new.items()
                 if (node, kind, next(iter(names))) not in self._named}
        if not fresh:
            return
        for kind, names in fresh.items():
            self._named.add((node, kind, next(iter(names))))
        out.events.append(Event(now, "object-names", node,
                                attrs={"database": here or "", **fresh}))

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        rows = conn.execute(_QUERY).fetchall()
        # A session queued behind another waiter (the first in line holds the row's tuple
        # lock while it waits) is attributed to the root: a blocker that is not waiting.
        blocked_by: dict[int, set[int]] = {}
        info: dict[int, dict[str, Any]] = {}
        wants: dict[int, tuple[str, str | None, set[str]]] = {}
        for (pid, locktype, mode, named, page, tuple_, xid, holder, app, user, state,
             query, xact_s, backend_type, wait_type, wait, relation_oid, database_oid,
             datname, here) in rows:
            blocked_by.setdefault(int(pid), set()).add(int(holder))
            self._remember(out, now, node, here, database_oid, datname, relation_oid, named)
            relation = named if named is not None or relation_oid is None else (
                unnamed_relation(relation_oid, datname, database_oid, here))
            what = _object(str(locktype), relation, page, tuple_, xid)
            previous = wants.get(int(pid))
            if previous is None or (previous[0].startswith("transaction")
                                    and what.startswith("row")):
                wants[int(pid)] = (what, relation, previous[2] if previous else set())
            wants[int(pid)][2].add(f"{locktype}:{mode}")
            info[int(holder)] = {
                "pid": int(holder), "application": app or "", "user": user or "",
                "state": state or "", "backend_type": backend_type or "",
                "query": normalise_query(query,
                                         squash=caps.version_num >= SQUASHING_VERSION),
                "xact_s": round(float(xact_s), 3) if xact_s is not None else None,
                # an active holder with no wait event is on the CPU
                "wait": f"{wait_type}:{wait}" if wait_type else (
                    "CPU" if state == "active" else "")}
        # One queue per root holder, named by what the sessions it blocks directly want
        # of it (those behind them wait for what it holds too): the most specific thing,
        # a row (the first waiter holds the row's tuple lock and waits for the holder's
        # transaction), else a relation, else the transaction. A LOCK TABLE blocks
        # sessions on its relation; those behind them queue on rows they hold, and the
        # queue is the table's, not a row's.
        by_root: dict[int, dict[str, Any]] = {}
        queued: dict[str, set[int]] = {}
        for pid, (what, relation, modes) in wants.items():
            for root in _roots(pid, blocked_by):
                if root not in info:
                    continue
                entry = by_root.setdefault(root, {"waiters": set(), "modes": set(),
                                                  "objects": {}, "direct": {},
                                                  "holder": info[root]})
                entry["waiters"].add(pid)
                entry["modes"] |= modes
                objects = entry["direct"] if root in blocked_by[pid] else entry["objects"]
                objects[what] = (objects.get(what, (0, relation))[0] + 1, relation)
            queued.setdefault(relation or what, set()).add(pid)
        seen: dict[tuple[str, str, int], dict[str, Any]] = {}
        for root, entry in by_root.items():
            what, (_count, relation) = max((entry["direct"] or entry["objects"]).items(),
                                           key=lambda item: (_RANK.get(item[0].split(" ")[0], 0),
                                                             item[1][0]))
            entry.update(locktype=what.split(" ", 1)[0], relation=relation)
            seen[(node, what, root)] = entry
        for label, pids in queued.items():
            out.samples.append(Sample(now, node, self.name, "queued", label, float(len(pids))))
        for key, entry in seen.items():
            episode = self._open.setdefault(key, {"start": now, "waiters": 0, "xact_s": 0.0,
                                                  "modes": set(), "waits": {}})
            wait = entry["holder"]["wait"]
            if wait:
                episode["waits"][wait] = episode["waits"].get(wait, 0) + 1
            episode["end"] = now
            episode["waiters"] = max(episode["waiters"], len(entry["waiters"]))
            episode["modes"] |= entry["modes"]
            episode["holder"] = entry["holder"]
            episode["locktype"] = entry["locktype"]
            episode["relation"] = entry["relation"]
            xact = entry["holder"]["xact_s"]
            if xact is not None:
                episode["xact_s"] = max(episode["xact_s"], xact)
        for key in [k for k in self._open if k[0] == node and k not in seen]:
            out.events.append(self._event(key, self._open.pop(key), now))

    def _event(self, key: tuple[str, str, int], episode: dict[str, Any],
               now: dt.datetime) -> Event:
        node, what, _holder = key
        holder = dict(episode["holder"])
        holder["xact_s"] = episode["xact_s"]
        holder.pop("wait", None)  # the last interval's; `waits` counts every interval's
        holder["waits"] = episode["waits"]
        return Event(episode["start"], "lock-queue", node, t_end=max(now, episode["end"]),
                     attrs={"object": what, "relation": episode["relation"],
                            "locktype": episode["locktype"],
                            "modes": sorted(episode["modes"]), "waiters": episode["waiters"],
                            "holder": holder})

    def stop(self) -> ProbeOutput:
        now = dt.datetime.now(dt.timezone.utc)
        events = [self._event(key, episode, now) for key, episode in self._open.items()]
        self._open.clear()
        return ProbeOutput(events=events)
