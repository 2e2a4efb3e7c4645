"""What the server's processes are doing right now: waits, locks, vacuums, replication."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

import psycopg

from pglab.events import Event
from pglab.probes.base import ProbeContext, ProbeOutput, Sample
from pglab.probes.capabilities import OWN_APPS_SQL, Capabilities, canonical_wait
from pglab.probes.db_base import DbProbe, PreparedRows, row_dict
from pglab.probes.wal_clock import WalClock
from pglab.sqltext import SQUASHING_VERSION, normalise

# Waiting for work is not a wait worth counting: a background process in its main loop
# (Activity) and a client session with nothing to do are idle, not samples. A client
# backend's query_id (14+, with compute_query_id) groups its samples by statement too.
# A statement has no query_id until it is parsed and analysed, and a wait for a table's
# lock comes within that analysis (the table is locked as its name is resolved): such a
# backend is grouped by its text instead, normalised here by PostgreSQL's own parser
# (sqltext.normalise: constants as $n, as pg_stat_statements writes them), so that the
# samples of one statement are one label, not one per execution.
_WAITS_QUERY = f"""
SELECT coalesce(backend_type, 'unknown'), wait_event_type, wait_event, {{query_id}},
       {{text}}, count(*)
FROM pg_stat_activity
WHERE pid <> pg_backend_pid()
  AND coalesce(application_name, '') <> ALL({OWN_APPS_SQL})
  AND coalesce(state, '') <> 'idle'
  AND coalesce(wait_event_type, '') <> 'Activity'
GROUP BY 1, 2, 3, 4, 5
"""
TEXT_CHARS = 200  # of a statement without query_id: enough to tell statements apart

_WAITS_BY_STATEMENT = _WAITS_QUERY.format(
    query_id="CASE WHEN backend_type = 'client backend' THEN query_id END",
    text=("CASE WHEN backend_type = 'client backend' AND query_id IS NULL "
          f"THEN left(query, {TEXT_CHARS}) END"))
_WAITS_ONLY = _WAITS_QUERY.format(query_id="NULL::bigint", text="NULL::text")
STATEMENT_WAITS = "db.statement_waits"  # the samples' source: a client backend per query_id
TEXT_LABEL = "text:"  # the label of a statement known by its sampled text
HIDDEN = "<insufficient privilege>"  # the query of another role's session, to some roles
CLIENT_BACKEND = "client backend"


@functools.lru_cache(maxsize=1024)  # a queue's waiters repeat their texts every sample
def normalised(text: str, squash: bool) -> str:
    return normalise(text, squash)


class WaitSampler(DbProbe):
    """Samples are counts of processes per (wait, backend type) at one instant; client
    backends also per (wait, query_id) under the source `db.statement_waits`, so that
    readers of db.waits see what they always did."""

    name = "db.waits"
    help = ("pg_stat_activity sampled at wait_sampling_hz: processes by wait event and backend "
            "type; 'CPU' = active with no wait; idle sessions are not samples; client "
            "backends by query_id too (db.statement_waits)")
    cadence = "fast"

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self._by_statement = PreparedRows("pglab_waits_by_statement", _WAITS_BY_STATEMENT)
        self._only = PreparedRows("pglab_waits", _WAITS_ONLY)

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        # before 14 no query_id: statements are not sampled (db.statements says so once)
        by_query = caps.has("pg_stat_activity", "query_id")
        squash = caps.version_num >= SQUASHING_VERSION  # texts as its pg_stat_statements
        rows = (self._by_statement if by_query else self._only).rows(conn)
        by_backend: dict[tuple[str, str], int] = {}
        by_statement: dict[tuple[str, str], int] = {}
        total = 0
        for backend_type, wait_type, wait_event, query_id, text, counted in rows:
            wait = canonical_wait(wait_type, wait_event)
            key = (wait, str(backend_type))
            count = int(counted or 0)
            by_backend[key] = by_backend.get(key, 0) + count
            total += count
            if by_query and backend_type == CLIENT_BACKEND:
                # "" for a backend with neither (its text hidden from the role, or none)
                label = (query_id if query_id is not None
                         else TEXT_LABEL + normalised(text, squash) if text and text != HIDDEN
                         else "")
                statement = (wait, label)
                by_statement[statement] = by_statement.get(statement, 0) + count
        for (wait, backend_type), count in by_backend.items():
            out.samples.append(Sample(now, node, self.name, wait, backend_type, float(count)))
        for (wait, query_id), count in by_statement.items():
            out.samples.append(Sample(now, node, STATEMENT_WAITS, wait, query_id, float(count)))
        # A sample with nothing busy is still a sample: it tells the share's denominator.
        out.samples.append(Sample(now, node, self.name, "sampled", "", float(total)))


class LockWaits(DbProbe):
    name = "db.locks"
    help = "ungranted locks by type, blocked backends, longest current lock wait"

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        if caps.has("pg_locks", "waitstart"):  # 14+
            longest = "extract(epoch FROM max(now() - waitstart) FILTER (WHERE NOT granted))"
        else:
            longest = "NULL::float8"
        # one statement a second, not two: each costs the observed server a transaction
        row = row_dict(conn, f"""
            SELECT count(*) FILTER (WHERE NOT granted) AS ungranted_locks,
                   count(DISTINCT pid) FILTER (WHERE NOT granted) AS blocked_backends,
                   coalesce({longest}, 0) AS longest_wait_s,
                   (SELECT json_object_agg(locktype, n) FROM (
                      SELECT locktype, count(*) AS n FROM pg_locks WHERE NOT granted
                      GROUP BY 1) AS t) AS by_type
            FROM pg_locks""")
        by_type = row.pop("by_type", None) or {}
        self.add_gauges(out, now, node, "", row)
        for locktype, count in by_type.items():
            out.samples.append(Sample(now, node, self.name, "ungranted_by_type", str(locktype),
                                      float(count)))


class BackendStates(DbProbe):
    name = "db.backends"
    help = "processes by backend type and state; connections used vs max_connections"

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        rows = conn.execute(
            "SELECT coalesce(backend_type, 'unknown'), coalesce(state, ''), count(*), "
            "current_setting('max_connections')::int "
            f"FROM pg_stat_activity WHERE coalesce(application_name, '') <> ALL({OWN_APPS_SQL}) "
            "GROUP BY 1, 2",
        ).fetchall()
        clients = 0
        limit = rows[0][3] if rows else None  # on every row: one statement, not two
        for backend_type, state, count, _ in rows:
            label = f"{backend_type}/{state}" if state else str(backend_type)
            out.samples.append(Sample(now, node, self.name, "backends", label, float(count)))
            if backend_type == "client backend":
                clients += int(count)
        self.add_gauges(out, now, node, "", {"client_backends": clients,
                                             "max_connections": limit})


class VacuumProgress(DbProbe):
    """Running vacuums per table; each vacuum seen becomes an event when it ends."""

    name = "db.vacuum"
    help = "running (auto)vacuum workers, per-table heap scan progress; vacuum events"

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self._running: dict[tuple[str, int, int], dict[str, Any]] = {}

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        # The workers' count with the progress rows (as JSON): one statement, not two.
        workers, vacuums = conn.execute("""
            SELECT (SELECT count(*) FROM pg_stat_activity
                    WHERE backend_type = 'autovacuum worker'),
                   (SELECT coalesce(json_agg(json_build_array(
                        p.pid, p.relid,
                        -- an OID names a relation only in its own database
                        coalesce(c.relname, p.relid::text || ' of database ' || p.datname),
                        p.phase,
                        p.heap_blks_total, p.heap_blks_scanned, p.heap_blks_vacuumed,
                        a.backend_type = 'autovacuum worker')), '[]')
                    FROM pg_stat_progress_vacuum p
                    LEFT JOIN pg_class c ON c.oid = p.relid
                         AND p.datname = current_database()
                    LEFT JOIN pg_stat_activity a ON a.pid = p.pid)""").fetchone() or (None, [])
        rows = list(vacuums)
        self.add_gauges(out, now, node, "", {"autovacuum_workers": workers,
                                             "vacuums_running": len(rows)})
        seen = set()
        for pid, relid, table, phase, total, scanned, vacuumed, auto in rows:
            key = (node, int(pid), int(relid))
            seen.add(key)
            info = self._running.setdefault(
                key, {"start": now, "table": str(table), "autovacuum": bool(auto), "phases": []})
            if phase not in info["phases"]:
                info["phases"].append(str(phase))
            if total:
                self.add_gauges(out, now, node, str(table), {
                    "heap_scanned_pct": 100.0 * float(scanned) / float(total),
                    "heap_vacuumed_pct": 100.0 * float(vacuumed) / float(total),
                })
        for key in [k for k in self._running if k[0] == node and k not in seen]:
            info = self._running.pop(key)
            out.events.append(Event(info["start"], "vacuum", node, t_end=now, attrs={
                "table": info["table"], "autovacuum": info["autovacuum"],
                "phases": info["phases"], "pid": key[1], "source": "pg_stat_progress_vacuum"}))


class Replication(DbProbe):
    name = "db.replication"
    help = ("per standby: sent/write/flush/replay lag in bytes and seconds, sync state, the "
            "seconds behind that grow while it is silent; on a standby: receiver status and "
            "replay delay")

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self._sync_state: dict[tuple[str, str], str] = {}
        self._wal_clocks: dict[str, WalClock] = {}

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        in_recovery = row_dict(conn, "SELECT pg_is_in_recovery() AS r").get("r")
        if in_recovery:
            row = row_dict(conn, """
                SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())
                         AS replay_backlog_bytes,
                       extract(epoch FROM now() - pg_last_xact_replay_timestamp())
                         AS replay_delay_s,
                       (SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming')
                         AS receiver_streaming""")
            self.add_gauges(out, now, node, "", row)
            return
        # reply_time is the standby's clock; the seconds behind come from the primary's
        reply_age = ("extract(epoch FROM now() - reply_time)"
                     if caps.has("pg_stat_replication", "reply_time") else "NULL")
        written = row_dict(conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') AS w")
        rows = conn.execute(f"""
            SELECT application_name, state, sync_state,
                   pg_wal_lsn_diff(pg_current_wal_lsn(), sent_lsn),
                   pg_wal_lsn_diff(pg_current_wal_lsn(), write_lsn),
                   pg_wal_lsn_diff(pg_current_wal_lsn(), flush_lsn),
                   pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn),
                   extract(epoch FROM write_lag), extract(epoch FROM flush_lag),
                   extract(epoch FROM replay_lag), {reply_age},
                   pg_wal_lsn_diff(flush_lsn, '0/0'), pg_wal_lsn_diff(replay_lsn, '0/0')
            FROM pg_stat_replication""").fetchall()
        clock = self._wal_clocks.setdefault(node, WalClock())
        now_s = now.timestamp()
        clock.add(now_s, float(written["w"]))
        for app, state, sync_state, *lags, reply_age_s, flushed, replayed in rows:
            names = ("sent_lag_bytes", "write_lag_bytes", "flush_lag_bytes", "replay_lag_bytes",
                     "write_lag_s", "flush_lag_s", "replay_lag_s")
            gauges = dict(zip(names, lags, strict=True))
            gauges["reply_age_s"] = reply_age_s
            for metric, confirmed, measured in (("flush_behind_s", flushed, "flush_lag_s"),
                                                ("replay_behind_s", replayed, "replay_lag_s")):
                if confirmed is not None:  # NULL until the standby's first reply
                    gauges[metric] = max(float(gauges[measured] or 0.0),
                                         clock.behind_s(now_s, float(confirmed)))
            self.add_gauges(out, now, node, str(app), gauges)
            key = (node, str(app))
            current_state = f"{state}/{sync_state}"
            if self._sync_state.get(key) != current_state:
                out.events.append(Event(now, "replication-state", node, attrs={
                    "standby": str(app), "state": str(state), "sync_state": str(sync_state),
                    "previous": self._sync_state.get(key)}))
                self._sync_state[key] = current_state
