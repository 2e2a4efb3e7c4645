"""What a server has, read from its catalogs: views, columns, wait-event names.

Probes ask this, not the version number, which view and column to read: PostgreSQL 17
moved checkpoint counters to pg_stat_checkpointer, 18 moved WAL write/sync counters to
pg_stat_io, and a fork or a patched build may differ from its version's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

TELEMETRY_APP = "pglab-telemetry"
OBSERVER_APP = "pglab"  # `pglab observe` sessions on a server pglab did not start
OWN_APPS = [TELEMETRY_APP, OBSERVER_APP]  # sessions the samplers leave out
# The same as an SQL literal, for the queries run ten times a second: a parameter is
# adapted by psycopg on every call (a quarter of the wait sample's client CPU).
OWN_APPS_SQL = "ARRAY[" + ", ".join(f"'{app}'" for app in OWN_APPS) + "]"

VIEWS = (
    "pg_stat_activity",
    "pg_stat_bgwriter",
    "pg_stat_checkpointer",
    "pg_stat_wal",
    "pg_stat_io",
    "pg_stat_database",
    "pg_stat_replication",
    "pg_stat_wal_receiver",
    "pg_stat_progress_vacuum",
    "pg_locks",
    "pg_wait_events",
)


@dataclass(frozen=True)
class Capabilities:
    version_num: int
    in_recovery: bool
    columns: dict[str, frozenset[str]]  # view -> its columns; absent views are absent

    def has(self, view: str, column: str | None = None) -> bool:
        cols = self.columns.get(view)
        if cols is None:
            return False
        return column is None or column in cols

    @classmethod
    def detect(cls, conn: psycopg.Connection[Any]) -> Capabilities:
        rows = conn.execute(
            "SELECT c.relname, a.attname FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'pg_catalog' "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
            "WHERE c.relname = ANY(%s)",
            [list(VIEWS)],
        ).fetchall()
        columns: dict[str, set[str]] = {}
        for view, column in rows:
            columns.setdefault(str(view), set()).add(str(column))
        version = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        recovery = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return cls(
            version_num=int(version[0]) if version else 0,
            in_recovery=bool(recovery and recovery[0]),
            columns={view: frozenset(cols) for view, cols in columns.items()},
        )


def canonical_wait(wait_type: str | None, wait_event: str | None) -> str:
    """One name per wait across versions: 'IO:WalInitWrite', 'Lock:transactionid', 'CPU'.

    PostgreSQL 17 renamed the IO waits spelled WAL* to Wal* (WALWrite -> WalWrite); the
    LWLock WALWrite kept its name. Older names are mapped to the newer spelling.
    """
    if not wait_type:
        return "CPU"
    event = wait_event or ""
    if wait_type == "IO" and event.startswith("WAL"):
        event = "Wal" + event[3:]
    return f"{wait_type}:{event}"


def telemetry_connection(connect: Any) -> psycopg.Connection[Any]:
    """A connection for probes: labelled, and unable to hang the sampler."""
    conn: psycopg.Connection[Any] = connect()
    _session_set(conn, f"SET application_name = '{TELEMETRY_APP}'")
    _session_set(conn, "SET statement_timeout = '2s'")
    _session_set(conn, "SET lock_timeout = '500ms'")
    # Keep the probes' own queries out of the server log being analysed (a superuser
    # only: on an existing server the log may show probe queries) ...
    _session_set(conn, "SET log_min_duration_statement = -1")
    _session_set(conn, "SET log_statement = 'none'")
    # ... and out of pg_stat_statements (db.statements leaves out its role otherwise)
    _session_set(conn, "SET pg_stat_statements.track = 'none'")
    return conn


def _session_set(conn: psycopg.Connection[Any], statement: str) -> bool:
    """Run a SET as a statement of its own, outside any transaction block, so that it
    holds for the session: a connection that wraps each statement in a transaction it
    rolls back (observe's read-only one) would undo it. Whether the server took it."""
    result = conn.pgconn.exec_(statement.encode())
    return result.status == psycopg.pq.ExecStatus.COMMAND_OK
