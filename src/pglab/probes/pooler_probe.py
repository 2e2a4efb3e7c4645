"""PgBouncer's own view: clients waiting for a server connection, and for how long.

Through a pooler, a backlog forms in PgBouncer rather than in PostgreSQL: the server sees
only pool_size busy sessions while hundreds of clients queue. SHOW POOLS on the admin
console tells that queue (cl_waiting) and the oldest wait (maxwait).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import psycopg

from pglab.events import Event
from pglab.probes.base import Probe, ProbeContext, ProbeOutput, Sample

NODE = "pgbouncer"
GAUGES = ("cl_active", "cl_waiting", "sv_active", "sv_idle", "sv_used")


class PoolerPools(Probe):
    name = "pooler.pools"
    help = ("PgBouncer SHOW POOLS per database: clients active and waiting, server "
            "connections active/idle/used, longest client wait (maxwait_ms)")

    def start(self, ctx: ProbeContext) -> None:
        self.connect = ctx.pooler
        self.conn: Any = None
        self.failed = False

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        if self.connect is None:
            return out
        try:
            if self.conn is None:
                self.conn = self.connect()
            cur = self.conn.execute("SHOW POOLS")
            columns = [c.name for c in cur.description or []]
            rows = [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]
            self.failed = False
        except psycopg.Error as exc:
            self.conn = None
            if not self.failed:
                self.failed = True
                out.events.append(Event(now, "probe-error", NODE, attrs={
                    "probe": self.name, "error": str(exc).strip().splitlines()[0]}))
            return out
        for row in rows:
            database = str(row.get("database"))
            if database == "pgbouncer":
                continue  # the admin console itself
            for gauge in GAUGES:
                if row.get(gauge) is not None:
                    out.samples.append(Sample(now, NODE, self.name, gauge, database,
                                              float(row[gauge])))
            wait_ms = float(row.get("maxwait") or 0) * 1000 + float(
                row.get("maxwait_us") or 0) / 1000
            out.samples.append(Sample(now, NODE, self.name, "maxwait_ms", database, wait_ms))
        return out

    def stop(self) -> ProbeOutput:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        return ProbeOutput()
