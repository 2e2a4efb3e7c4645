"""Which statements the server ran: pg_stat_statements, per statement, every interval.

`db.statements` reads pg_stat_statements without its texts every interval and writes,
per statement (`label` = queryid), per-second rates of `calls`, `exec_ms`, `rows`,
`shared_blks_hit`, `shared_blks_read`, `shared_blks_dirtied`, `temp_blks_written` and
`wal_bytes` (13+), only for statements that ran in the interval. Its text is read once,
when a statement first runs (a `statement-text` event: queryid, the normalised text as
pg_stat_statements keeps it, the database, and on 16+ the relations and outline of its
generic plan, and the statement that makes each index it uses as it was then; an
`index-dropped` event when such an index is gone at a later read, `index-made` when it
is back). The view's entries come and go: a reset of all of them
(pg_stat_statements_info.stats_reset, 14+), an entry evicted to make room (`dealloc`,
14+) or reset alone and made anew (its counters lower than at the last read, or its
`stats_since` later, 17+) is counted from zero, never read as a negative delta, and said
in a `statements-reset` event. A server
without the extension, without it in shared_preload_libraries, or without query ids in
pg_stat_activity is said once per node (`statements-missing`), and the rest of telemetry
runs.

The counters are kept per entry (queryid, user, database, top level or not), as the view
keys them, and summed per queryid once each entry's delta is known.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from pglab.events import Event
from pglab.probes.base import ProbeContext, ProbeOutput, Sample
from pglab.probes.capabilities import Capabilities
from pglab.probes.db_base import DbProbe
from pglab.serverlog.plan_rules import outline_of

# metric -> the view's column (None: the column of older versions, decided per server)
COUNTERS: dict[str, str] = {
    "calls": "calls",
    "exec_ms": "total_exec_time",  # total_time before 13
    "rows": "rows",
    "shared_blks_hit": "shared_blks_hit",
    "shared_blks_read": "shared_blks_read",
    "shared_blks_dirtied": "shared_blks_dirtied",
    "temp_blks_written": "temp_blks_written",
    "wal_bytes": "wal_bytes",  # 13+
}
TEXT_LIMIT = 2000  # characters of a statement's text kept in its event
HIDDEN_TEXT = "<insufficient privilege>"  # pg_stat_statements' text of others' statements


@dataclass(frozen=True)
class Entry:
    """One row of pg_stat_statements: its counters, and when it was made (17+)."""

    counters: dict[str, float]
    since: str | None = None


@dataclass
class Deltas:
    """What an interval added, per entry, and what happened to the entries."""

    by_entry: dict[str, dict[str, float]] = field(default_factory=dict)
    remade: int = 0  # entries counted from zero: made anew since the last read
    evicted: int = 0  # entries gone since the last read (no reset of all)


def entry_deltas(previous: dict[str, Entry], current: dict[str, Entry],
                 reset: bool) -> Deltas:
    """Each current entry's counts since `previous` (pure).

    Every read sees every entry, so an entry absent from the last read, or whose
    counters went back or whose stats_since moved, was made after that read: all its
    counts are the interval's. After a reset of all entries (`reset`) so are every
    entry's."""
    out = Deltas()
    for key, entry in current.items():
        before = None if reset else previous.get(key)
        counters = entry.counters
        if before is not None and (
                before.since != entry.since
                or any(counters.get(m, 0.0) < v for m, v in before.counters.items())):
            out.remade += 1
            before = None
        if before is None:
            delta = dict(counters)
        else:
            delta = {m: v - before.counters.get(m, 0.0) for m, v in counters.items()}
        if any(v > 0 for v in delta.values()):
            out.by_entry[key] = delta
    if not reset:
        out.evicted = sum(1 for key in previous if key not in current)
    return out


@dataclass(frozen=True)
class ViewRead:
    """One read of the view: its entries by key, and pg_stat_statements_info's reset
    time and evictions (None before 14)."""

    entries: dict[str, Entry]
    stats_reset: str | None
    dealloc: int | None


def parse_rows(rows: list[tuple[Any, ...]]) -> ViewRead:
    """The probe's query's rows (key, stats_since, stats_reset, dealloc, then COUNTERS in
    order) as entries (pure)."""
    entries: dict[str, Entry] = {}
    stats_reset: str | None = None
    dealloc: int | None = None
    for row in rows:
        key, since, reset_at, evictions = row[0], row[1], row[2], row[3]
        stats_reset = str(reset_at) if reset_at is not None else None
        dealloc = int(evictions) if evictions is not None else None
        entries[str(key)] = Entry({metric: float(value or 0) for metric, value in
                                   zip(COUNTERS, row[4:], strict=False)},
                                  str(since) if since is not None else None)
    return ViewRead(entries, stats_reset, dealloc)


def queryid_of(key: str) -> str:
    return key.split("/", 1)[0]


def per_statement(deltas: Deltas) -> dict[str, dict[str, float]]:
    """Entries' deltas summed per queryid (one statement run by several users or at top
    level and nested is one statement)."""
    out: dict[str, dict[str, float]] = {}
    for key, delta in deltas.by_entry.items():
        mine = out.setdefault(queryid_of(key), {})
        for metric, value in delta.items():
            mine[metric] = mine.get(metric, 0.0) + value
    return out


_PLANNABLE = re.compile(r"^\s*(select|insert|update|delete|merge|with|values|table)\b",
                       re.IGNORECASE)


def plan_relations(conn: psycopg.Connection[Any], query: str) -> tuple[list[str], list[str]]:
    """The tables and indexes a statement's generic plan reads, and the plan's outline
    (serverlog.plan_rules.outline_of, as auto_explain's plans are outlined: the plan the
    statement had when it first ran, which a plan logged later is compared with), from
    EXPLAIN (GENERIC_PLAN), 16+: planned with its $n parameters, never run; its relations
    named in this database. Nothing for an older server, a utility statement, a plan
    refused."""
    if conn.info.server_version < 160000 or not _PLANNABLE.match(query):
        return [], []
    try:
        row = conn.execute(f"EXPLAIN (GENERIC_PLAN, COSTS OFF, FORMAT JSON) {query}"
                           ).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        raise  # the role may not read the tables: the caller says so once
    except psycopg.Error:  # a lock not granted in time, a text cut, a dropped table
        return [], []
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in ("Relation Name", "Index Name"):
                name = node.get(key)
                if isinstance(name, str) and name not in found:
                    found.append(name)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    document = row[0] if row else None
    walk(document)
    top = document[0] if isinstance(document, list) and document else {}
    plan = top.get("Plan") if isinstance(top, dict) else None
    return found, outline_of(plan) if isinstance(plan, dict) else []


# The statement that makes each index again as it is: a constraint's index (a primary
# key, a unique or exclusion constraint) by ALTER TABLE ... ADD CONSTRAINT, which makes
# the constraint with it (a bare unique index would not: no constraint, another plan's
# name for it); any other index by its CREATE INDEX. Names as the plan gives them
# (unqualified, on the search path); those that are not indexes (the tables) drop out.
_INDEX_DEFINITIONS = (
    "SELECT c.relname, i.indrelid::regclass::text, COALESCE("
    "'ALTER TABLE ' || i.indrelid::regclass::text || ' ADD CONSTRAINT ' "
    "|| quote_ident(k.conname) || ' ' || pg_get_constraintdef(k.oid), "
    "pg_get_indexdef(i.indexrelid)) "
    "FROM unnest(%s::text[]) AS n(name) "
    "JOIN pg_class c ON c.oid = to_regclass(quote_ident(n.name)) "
    "JOIN pg_index i ON i.indexrelid = c.oid "
    "LEFT JOIN pg_constraint k ON k.conindid = i.indexrelid AND k.conrelid = i.indrelid "
    "AND k.contype IN ('p', 'u', 'x')")


_INDEXES_GONE = ("SELECT n.name FROM unnest(%s::text[]) AS n(name) "
                 "WHERE to_regclass(quote_ident(n.name)) IS NULL")


def index_definitions(conn: psycopg.Connection[Any], names: list[str]
                      ) -> dict[str, dict[str, str]]:
    """The indexes among a plan's relations: name -> its table and the statement that
    makes it as it is now (what the advice remakes if it is dropped later in the run);
    {} when the catalog cannot say (an index dropped meanwhile)."""
    if not names:
        return {}
    try:
        rows = conn.execute(_INDEX_DEFINITIONS, [names]).fetchall()
    except psycopg.Error:
        return {}
    return {str(name): {"table": str(table), "make": str(make)}
            for name, table, make in rows}


@dataclass
class _NodeState:
    schema: str | None = None
    query: str | None = None  # the read, for this server's columns
    entries: dict[str, Entry] | None = None  # None until the first read
    mono: float = 0.0
    stats_reset: str | None = None
    dealloc: int | None = None
    named: set[str] = field(default_factory=set)  # queryids whose text was recorded
    hidden_said: bool = False
    unplannable: bool = False  # EXPLAIN refused for privileges: not tried again
    indexes: dict[str, str] = field(default_factory=dict)  # recorded index -> its table
    dropped: set[str] = field(default_factory=set)  # of those, the ones not there now


class StatementStats(DbProbe):
    name = "db.statements"
    help = ("pg_stat_statements per statement (label: queryid), per second: calls, exec_ms, "
            "rows, shared blocks hit/read/dirtied, temp blocks written, WAL bytes; its text "
            "once (statement-text events); resets and evictions detected")

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self._state: dict[str, _NodeState] = {}
        self._missing_said: set[tuple[str, str]] = set()

    def _missing(self, out: ProbeOutput, now: dt.datetime, node: str, what: str,
                 why: str) -> None:
        """Said once per node and thing missing."""
        if (node, what) in self._missing_said:
            return
        self._missing_said.add((node, what))
        out.events.append(Event(now, "statements-missing", node,
                                attrs={"what": what, "why": why}))

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        state = self._state.get(node)
        if state is None:
            state = self._state[node] = self._prepare(conn, caps, node, now, out)
        if state.query is None:
            return
        try:
            rows = conn.execute(state.query).fetchall()
        except psycopg.errors.ObjectNotInPrerequisiteState:
            state.query = None
            self._missing(out, now, node, "pg_stat_statements",
                          "pg_stat_statements is installed but not in "
                          "shared_preload_libraries: statements are not recorded")
            return
        mono = time.monotonic()
        read = parse_rows(rows)
        current = read.entries
        # no rows (nothing run since a reset): the view's info as it was last seen
        stats_reset = read.stats_reset if rows else state.stats_reset
        dealloc = read.dealloc if rows else state.dealloc
        previous, seconds = state.entries, mono - state.mono
        reset = previous is not None and stats_reset != state.stats_reset
        evicted_by_server = (dealloc - state.dealloc if dealloc is not None
                             and state.dealloc is not None and not reset else 0)
        state.entries, state.mono = current, mono
        state.stats_reset, state.dealloc = stats_reset, dealloc
        self.add_gauges(out, now, node, "", {"entries": len(current)})
        if previous is None or seconds <= 0:
            return  # the first read is the baseline
        deltas = entry_deltas(previous, current, reset)
        if reset or deltas.remade or deltas.evicted or evicted_by_server > 0:
            out.events.append(Event(now, "statements-reset", node, attrs={
                "reset_all": reset, "stats_reset": stats_reset,
                # pg_stat_statements_info.dealloc counts rounds of eviction (each drops
                # about 5% of the entries), not entries
                "deallocations": evicted_by_server, "entries_gone": deltas.evicted,
                "counted_from_zero": deltas.remade}))
        statements = per_statement(deltas)
        for queryid, delta in statements.items():
            for metric, value in delta.items():
                out.samples.append(Sample(now, node, self.name, metric, queryid,
                                          value / seconds))
        unnamed = [q for q in statements if q not in state.named]
        if unnamed:
            self._texts(conn, state, node, now, out, unnamed)
        if state.indexes:
            self._dropped(conn, state, node, now, out)

    def _dropped(self, conn: psycopg.Connection[Any], state: _NodeState, node: str,
                 now: dt.datetime, out: ProbeOutput) -> None:
        """An `index-dropped` event when an index a plan used is no longer there, and an
        `index-made` one when it is back: a plan that stops using an index then says
        whether the index went, or the planner chose another way (statistics, settings)."""
        try:
            rows = conn.execute(_INDEXES_GONE, [sorted(state.indexes)]).fetchall()
        except psycopg.Error:
            return
        gone = {str(row[0]) for row in rows}
        for name in sorted(gone ^ state.dropped):
            kind = "index-dropped" if name in gone else "index-made"
            out.events.append(Event(now, kind, node, attrs={
                "index": name, "table": state.indexes[name]}))
        state.dropped = gone

    def _prepare(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
                 now: dt.datetime, out: ProbeOutput) -> _NodeState:
        """Where the view is and which of its columns this server has; what is missing
        said once."""
        state = _NodeState()
        if caps.version_num >= 140000:
            setting = conn.execute("SELECT current_setting('compute_query_id', true)"
                                   ).fetchone()
            if setting and setting[0] == "off":
                self._missing(out, now, node, "query_id",
                              "compute_query_id = off: wait samples carry no query_id, so "
                              "stalls cannot name their statements")
        else:
            self._missing(out, now, node, "query_id",
                          f"PostgreSQL {caps.version_num // 10000} has no query_id in "
                          "pg_stat_activity (14+): stalls cannot name their statements")
        row = conn.execute(
            "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
            "ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'").fetchone()
        if row is None:
            self._missing(out, now, node, "pg_stat_statements",
                          f"the extension pg_stat_statements is not installed in database "
                          f"{conn.info.dbname}: statements are not recorded")
            return state
        state.schema = str(row[0])
        schema = sql.Identifier(state.schema).as_string(conn)
        columns = {str(r[0]) for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0",
            [f"{schema}.pg_stat_statements"]).fetchall()}
        picked = []
        for metric, wanted in COUNTERS.items():
            column = ("total_time" if metric == "exec_ms" and wanted not in columns
                      else wanted)
            picked.append(f"s.{column}" if column in columns else "NULL")
        toplevel = "s.toplevel" if "toplevel" in columns else "true"
        since = "s.stats_since::text" if "stats_since" in columns else "NULL"
        has_info = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                [f"{schema}.pg_stat_statements_info"]).fetchone()
        info = ((f"(SELECT stats_reset::text FROM {schema}.pg_stat_statements_info)",
                 f"(SELECT dealloc FROM {schema}.pg_stat_statements_info)")
                if has_info and has_info[0] else ("NULL", "NULL"))
        # pglab's own statements: its sessions set pg_stat_statements.track = none where
        # they may (a superuser); a role that may not is left out by its user id.
        tracked = conn.execute("SELECT current_setting('pg_stat_statements.track', true)"
                               ).fetchone()
        own = ""
        if not (tracked and tracked[0] == "none"):
            own = "AND s.userid <> (SELECT oid FROM pg_roles WHERE rolname = current_user)"
            self._missing(out, now, node, "statements of pglab's role",
                          f"statements of role {conn.info.user} are left out: pglab's own "
                          "queries run under it, and only a superuser may turn their "
                          "tracking off (pg_stat_statements.track = none)")
        state.query = (
            f"SELECT s.queryid::text || '/' || s.userid || '/' || s.dbid || '/' || "
            f"{toplevel}, {since}, {info[0]}, {info[1]}, {', '.join(picked)} "
            f"FROM {schema}.pg_stat_statements(false) s "
            f"WHERE s.queryid IS NOT NULL {own}")
        return state

    def _texts(self, conn: psycopg.Connection[Any], state: _NodeState, node: str,
               now: dt.datetime, out: ProbeOutput, queryids: list[str]) -> None:
        """A `statement-text` event per statement that first ran (the texts file is read
        only then: it is the view's costly part)."""
        schema = sql.Identifier(state.schema or "public").as_string(conn)
        rows = conn.execute(
            f"SELECT DISTINCT ON (s.queryid) s.queryid::text, s.query, d.datname "
            f"FROM {schema}.pg_stat_statements(true) s "
            "LEFT JOIN pg_database d ON d.oid = s.dbid "
            "WHERE s.queryid = ANY(%s::bigint[]) ORDER BY s.queryid, s.calls DESC",
            [[int(q) for q in queryids]]).fetchall()
        state.named.update(queryids)  # one try each: an entry evicted meanwhile stays unnamed
        for queryid, text, datname in rows:
            state.named.add(str(queryid))
            query = str(text or "")
            hidden = query == HIDDEN_TEXT
            if hidden and not state.hidden_said:
                state.hidden_said = True
                self._missing(out, now, node, "statement text",
                              "texts of other users' statements are hidden from this role "
                              "(grant pg_read_all_stats): they are named by queryid only")
            relations: list[str] = []
            outline: list[str] = []
            if not hidden and datname == conn.info.dbname and not state.unplannable:
                try:
                    relations, outline = plan_relations(conn, query)
                except psycopg.errors.InsufficientPrivilege:
                    state.unplannable = True
                    self._missing(out, now, node, "relations",
                                  f"role {conn.info.user} may not plan the statements (no "
                                  "privileges on their tables): they are not named by "
                                  "table")
            indexes = index_definitions(conn, relations)
            state.indexes.update({name: made["table"] for name, made in indexes.items()})
            out.events.append(Event(now, "statement-text", node, attrs={
                "queryid": str(queryid), "database": datname,
                "query": "" if hidden else " ".join(query.split())[:TEXT_LIMIT],
                **({"relations": relations} if relations else {}),
                **({"indexes": indexes} if indexes else {}),
                **({"plan": outline} if outline else {}),
                **({"hidden": True} if hidden else {})}))
