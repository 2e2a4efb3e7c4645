"""Cumulative statistics views as per-second rates, with names that hold across versions.

Metric names are pglab's, stable from PostgreSQL 13 to 18: `checkpoints_requested`
whether it came from pg_stat_bgwriter.checkpoints_req (up to 16) or
pg_stat_checkpointer.num_requested (17+).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import psycopg

from pglab.probes.base import ProbeContext, ProbeOutput, Sample
from pglab.probes.capabilities import Capabilities
from pglab.probes.db_base import DbProbe, row_dict, select_columns

DATABASE_COUNTERS = (
    "xact_commit", "xact_rollback", "blks_read", "blks_hit", "tup_returned", "tup_fetched",
    "tup_inserted", "tup_updated", "tup_deleted", "conflicts", "temp_files", "temp_bytes",
    "deadlocks", "blk_read_time", "blk_write_time", "active_time",
    "idle_in_transaction_time", "sessions",
)

CHECKPOINTER_COLUMNS = {  # pg_stat_checkpointer (17+)
    "num_timed": "checkpoints_timed",
    "num_requested": "checkpoints_requested",
    "num_done": "checkpoints_done",
    "restartpoints_timed": "restartpoints_timed",
    "restartpoints_req": "restartpoints_requested",
    "restartpoints_done": "restartpoints_done",
    "write_time": "checkpoint_write_time_ms",
    "sync_time": "checkpoint_sync_time_ms",
    "buffers_written": "buffers_checkpoint",
    "slru_written": "slru_checkpoint",
}
BGWRITER_COLUMNS = {  # pg_stat_bgwriter; checkpoint columns only up to 16
    "checkpoints_timed": "checkpoints_timed",
    "checkpoints_req": "checkpoints_requested",
    "checkpoint_write_time": "checkpoint_write_time_ms",
    "checkpoint_sync_time": "checkpoint_sync_time_ms",
    "buffers_checkpoint": "buffers_checkpoint",
    "buffers_clean": "buffers_clean",
    "maxwritten_clean": "maxwritten_clean",
    "buffers_backend": "buffers_backend",
    "buffers_backend_fsync": "buffers_backend_fsync",
    "buffers_alloc": "buffers_alloc",
}
WAL_COLUMNS = {  # pg_stat_wal (14+); write/sync columns gone in 18 (see pg_stat_io 'wal')
    "wal_records": "wal_records",
    "wal_fpi": "wal_fpi",
    "wal_bytes": "wal_bytes",
    "wal_buffers_full": "wal_buffers_full",
    "wal_write": "wal_write",
    "wal_sync": "wal_sync",
    "wal_write_time": "wal_write_time_ms",
    "wal_sync_time": "wal_sync_time_ms",
}
IO_COUNTERS = ("reads", "writes", "extends", "fsyncs", "writebacks", "hits", "evictions",
               "read_time", "write_time", "fsync_time", "writeback_time", "extend_time")


class DatabaseStats(DbProbe):
    name = "db.database"
    help = "pg_stat_database of the benchmark database: commits, blocks, tuples, temp, deadlocks"

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        cols = [c for c in DATABASE_COUNTERS if caps.has("pg_stat_database", c)]
        row = row_dict(conn, f"SELECT numbackends, {', '.join(cols)} FROM pg_stat_database "
                             "WHERE datname = current_database()")
        if not row:
            return
        self.add_gauges(out, now, node, "", {"numbackends": row.pop("numbackends")})
        self.add_rates(out, now, node, "", row)


class CheckpointerStats(DbProbe):
    name = "db.checkpointer"
    help = "checkpoints (timed/requested), write/sync time, buffers by checkpointer/bgwriter"

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        # Both views in one statement (their column names do not overlap): each statement
        # costs the observed server a transaction.
        views, cols = [], []
        if caps.has("pg_stat_checkpointer"):
            views.append("pg_stat_checkpointer")
            cols += select_columns(caps, "pg_stat_checkpointer", CHECKPOINTER_COLUMNS)
        bgwriter = select_columns(caps, "pg_stat_bgwriter", BGWRITER_COLUMNS)
        if bgwriter:
            views.append("pg_stat_bgwriter")
            cols += bgwriter
        if cols:
            self.add_rates(out, now, node, "", row_dict(
                conn, f"SELECT {', '.join(cols)} FROM {', '.join(views)}"))


class WalStats(DbProbe):
    name = "db.wal"
    help = "WAL generated (bytes, records, full-page images), buffers full, write/sync (<=17)"

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        # The LSN moves on every version and on standbys too: WAL rate without pg_stat_wal.
        cols = ["CASE WHEN pg_is_in_recovery() "
                "THEN pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0') "
                "ELSE pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0') END AS wal_lsn_bytes",
                *select_columns(caps, "pg_stat_wal", WAL_COLUMNS)]
        view = " FROM pg_stat_wal" if len(cols) > 1 else ""  # one statement, not two
        counters = row_dict(conn, f"SELECT {', '.join(cols)}{view}")
        if counters.get("wal_lsn_bytes") is not None:
            counters["wal_lsn_bytes"] = float(counters["wal_lsn_bytes"])
        else:
            counters.pop("wal_lsn_bytes", None)
        self.add_rates(out, now, node, "", counters)


class IoStats(DbProbe):
    name = "db.io"
    help = "pg_stat_io (16+) by backend type/object/context: reads, writes, fsyncs, bytes, time"

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self._rows: dict[str, dict[str, tuple[Any, ...]]] = {}  # node -> label -> last row

    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        if not caps.has("pg_stat_io"):
            return
        cols = [c for c in IO_COUNTERS if caps.has("pg_stat_io", c)]
        if caps.has("pg_stat_io", "write_bytes"):  # 18: bytes per operation kind
            cols += ["read_bytes", "write_bytes", "extend_bytes"]
        elif caps.has("pg_stat_io", "op_bytes"):  # 16, 17: one op size for all
            cols += ["reads * op_bytes AS read_bytes", "writes * op_bytes AS write_bytes",
                     "extends * op_bytes AS extend_bytes"]
        cur = conn.execute(f"SELECT backend_type, object, context, {', '.join(cols)} "
                           "FROM pg_stat_io")
        names = [d.name for d in cur.description or []][3:]
        tracker, mono = self.tracker(node), time.monotonic()
        last = self._rows.setdefault(node, {})
        for row in cur.fetchall():
            label = f"{row[0]}/{row[1]}/{row[2]}"
            # Most of the ~80 combinations never move: a row as it was a second ago is
            # only noted, not turned into rates (two thirds of this probe's CPU).
            if last.get(label) == row and tracker.unchanged(label, mono):
                continue
            last[label] = row
            values = {n: float(v) for n, v in zip(names, row[3:], strict=True) if v is not None}
            rates = tracker.rates(label, values, mono, nonzero_only=True)
            out.samples.extend(Sample(now, node, self.name, metric, label, rate)
                               for metric, rate in rates.items())
