"""The throughput of a server without a client: commits, rollbacks and statements.

`db.throughput` reads, every interval, pg_stat_database's xact_commit and xact_rollback of
every database (label: the database) and, where pg_stat_statements is installed, the calls
and execution time of top-level statements per database (statements of the role pglab
connects as left out): `commits`, `rollbacks`, `statement_calls` per second and
`statement_mean_ms` (execution time per call over the interval).

pglab's own statements end with ROLLBACK (observe/target.py), so `commits` are the
application's alone; `rollbacks` of the database pglab connects to have pglab's own
subtracted, from the counter. A backend reports its counts at most once a second (an idle
one later still), so on PostgreSQL 15 and later pglab's connection reports its own at once
(pg_stat_force_next_flush) before the counters are read, holding the connection so that no
statement of its other samplers comes between: the difference is exact. Before 15 (or if
refused), the difference lags by up to a second of pglab's statements, and is never let go
back, so that the lag neither shows as the application's rollbacks nor hides one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from typing import Any

import psycopg
from psycopg import sql

from pglab.probes.base import ProbeContext, ProbeOutput, Sample
from pglab.probes.capabilities import Capabilities
from pglab.probes.db_base import DbProbe


class Throughput(DbProbe):
    name = "db.throughput"
    help = ("observe: commits and rollbacks per database (pg_stat_database), statement calls "
            "and mean execution time (pg_stat_statements, when installed)")

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.pgss: dict[str, str | None] = {}  # node -> pg_stat_statements' schema
        # node -> (xact_rollback read, less pglab's own statements; never back but on a
        # stats reset)
        self._net: dict[str, tuple[float, float]] = {}
        self._flush: dict[str, bool] = {}  # node -> pg_stat_force_next_flush() works

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        mono = time.monotonic()
        mine = conn.info.dbname
        with getattr(conn, "guard", None) or contextlib.nullcontext():
            if self._flush.setdefault(node, conn.info.server_version >= 150000):
                try:
                    conn.execute("SELECT pg_stat_force_next_flush()")
                except psycopg.errors.InsufficientPrivilege:
                    self._flush[node] = False
            own = self.ctx.db.statements(node) if hasattr(self.ctx.db, "statements") else 0
            rows = conn.execute("SELECT datname, xact_commit, xact_rollback "
                                "FROM pg_stat_database WHERE datname IS NOT NULL").fetchall()
        tracker = self.tracker(node)
        for datname, commits, rollbacks in rows:
            counters = {"commits": float(commits), "rollbacks": float(rollbacks)}
            if datname == mine:
                net = float(rollbacks) - own
                raw, kept = self._net.get(node, (float(rollbacks), net))
                kept = net if float(rollbacks) < raw else max(kept, net)
                self._net[node] = (float(rollbacks), kept)
                counters["rollbacks"] = kept
            rates = tracker.rates(str(datname), counters, mono)
            out.samples.extend(Sample(now, node, self.name, metric, str(datname), value)
                               for metric, value in rates.items())
        self._statements(conn, node, now, out, mono)

    def _statements(self, conn: psycopg.Connection[Any], node: str, now: dt.datetime,
                    out: ProbeOutput, mono: float) -> None:
        if node not in self.pgss:
            row = conn.execute(
                "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n "
                "ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'").fetchone()
            self.pgss[node] = str(row[0]) if row else None
        schema = self.pgss[node]
        if schema is None:
            return
        toplevel = "toplevel AND " if conn.info.server_version >= 140000 else ""
        exec_time = ("total_exec_time" if conn.info.server_version >= 130000
                     else "total_time")
        qualified = sql.Identifier(schema).as_string(conn)
        try:
            rows = conn.execute(
                f"SELECT d.datname, sum(s.calls), sum(s.{exec_time}) "
                f"FROM {qualified}.pg_stat_statements(false) s "
                "JOIN pg_database d ON d.oid = s.dbid "
                f"WHERE {toplevel}s.userid <> (SELECT oid FROM pg_roles "
                "WHERE rolname = current_user) GROUP BY 1").fetchall()
        except psycopg.errors.ObjectNotInPrerequisiteState:  # not in shared_preload_libraries
            self.pgss[node] = None
            return
        tracker = self.tracker(node)
        for datname, calls, total_ms in rows:
            rates = tracker.rates(f"pgss:{datname}", {"calls": float(calls or 0),
                                                      "ms": float(total_ms or 0)}, mono)
            if "calls" not in rates:
                continue
            out.samples.append(Sample(now, node, self.name, "statement_calls", str(datname),
                                      rates["calls"]))
            if "ms" in rates:
                out.samples.append(Sample(now, node, self.name, "statement_time_ms",
                                          str(datname), rates["ms"]))
            if rates["calls"] > 0 and "ms" in rates:
                out.samples.append(Sample(now, node, self.name, "statement_mean_ms",
                                          str(datname), rates["ms"] / rates["calls"]))
