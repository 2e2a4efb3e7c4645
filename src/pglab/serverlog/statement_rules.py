"""Events of one statement or session, without state: slow statements, temporary files,
connection resets and errors (any ERROR/FATAL/PANIC but deadlocks, see lock_rules)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pglab.events import Event
from pglab.serverlog.event_parts import MICROSECOND, cut, new_event
from pglab.serverlog.records import LogRecord
from pglab.serverlog.triggers import MESSAGE_MAX, STATEMENT_MAX

DURATION_RE = re.compile(
    r"duration: ([\d.]+) ms  (statement|execute|parse|bind|fastpath)([^:]*): (.*)", re.S
)
_TEMP_FILE_RE = re.compile(r"temporary file: path \"(?P<path>.*)\", size (?P<size>\d+)")
CONNECTION_LOST = (
    "could not receive data from client",
    "could not send data to client",
    "unexpected EOF on client",
    "connection to client lost",
)


def add_session(attrs: dict[str, Any], rec: LogRecord) -> dict[str, Any]:
    """The user and database of the session that logged rec, when the log says (csvlog,
    jsonlog, a log_line_prefix with %u / %d): whose statement, whose lock wait. Absent
    rather than None otherwise, so logs without them make the same events as before."""
    if rec.user is not None:
        attrs["user"] = rec.user
    if rec.database is not None:
        attrs["database"] = rec.database
    return attrs


def slow_statement_event(
    node: str,
    t_end: datetime,
    pid: int | None,
    ms_text: str,
    phase: str,
    name: str,
    sql: str,
    *,
    rec: LogRecord | None = None,
) -> Event:
    """`duration: <ms_text> ms  <phase><name>: <sql>` logged at t_end (its parts are
    split by DURATION_RE, or directly by the stderr scanner for one-line messages,
    which builds the same event inline). rec: the record, for its user and database."""
    ms = float(ms_text)
    event = new_event(
        t_end - MICROSECOND * round(ms * 1000),
        "slow-statement",
        node,
        t_end,
        {
            "duration_ms": ms,
            "phase": phase,
            "prepared": name.strip() or None,
            "statement": sql[:STATEMENT_MAX],  # the same object when shorter
            "pid": pid,
        },
    )
    if rec is not None:
        add_session(event.attrs, rec)
    return event


def temp_file_event(rec: LogRecord, msg: str, node: str) -> Event | None:
    m = _TEMP_FILE_RE.match(msg)
    if m is None:
        return None
    return new_event(
        rec.t,
        "temp-file",
        node,
        None,
        add_session({
            "size_bytes": int(m.group("size")),
            "path": m.group("path"),
            "pid": rec.pid,
            "statement": cut(rec.statement, STATEMENT_MAX),
        }, rec),
    )


def connection_reset_event(rec: LogRecord, msg: str, node: str) -> Event:
    return new_event(
        rec.t,
        "connection-reset",
        node,
        None,
        add_session({
            "pid": rec.pid,
            "message": cut(msg, MESSAGE_MAX),
            "open_transaction": "open transaction" in msg,
        }, rec),
    )


def error_event(rec: LogRecord, msg: str, node: str) -> Event:
    return new_event(
        rec.t,
        "error",
        node,
        None,
        add_session({
            "severity": rec.severity,
            "sqlstate": rec.sqlstate,
            "pid": rec.pid,
            "message": cut(msg, MESSAGE_MAX),
            "statement": cut(rec.statement, STATEMENT_MAX),
        }, rec),
    )
