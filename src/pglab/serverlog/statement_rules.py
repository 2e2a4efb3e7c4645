"""Events of one statement or session, without state: slow statements, temporary files,
connection resets and errors (any ERROR/FATAL/PANIC but deadlocks, see lock_rules)."""

from __future__ import annotations

import re
from datetime import datetime

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


def slow_statement_event(
    node: str, t_end: datetime, pid: int | None, ms_text: str, phase: str, name: str, sql: str
) -> Event:
    """`duration: <ms_text> ms  <phase><name>: <sql>` logged at t_end (its parts are
    split by DURATION_RE, or directly by the stderr scanner for one-line messages,
    which builds the same event inline)."""
    ms = float(ms_text)
    return new_event(
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


def temp_file_event(rec: LogRecord, msg: str, node: str) -> Event | None:
    m = _TEMP_FILE_RE.match(msg)
    if m is None:
        return None
    return new_event(
        rec.t,
        "temp-file",
        node,
        None,
        {
            "size_bytes": int(m.group("size")),
            "path": m.group("path"),
            "pid": rec.pid,
            "statement": cut(rec.statement, STATEMENT_MAX),
        },
    )


def connection_reset_event(rec: LogRecord, msg: str, node: str) -> Event:
    return new_event(
        rec.t,
        "connection-reset",
        node,
        None,
        {
            "pid": rec.pid,
            "message": cut(msg, MESSAGE_MAX),
            "open_transaction": "open transaction" in msg,
        },
    )


def error_event(rec: LogRecord, msg: str, node: str) -> Event:
    return new_event(
        rec.t,
        "error",
        node,
        None,
        {
            "severity": rec.severity,
            "sqlstate": rec.sqlstate,
            "pid": rec.pid,
            "message": cut(msg, MESSAGE_MAX),
            "statement": cut(rec.statement, STATEMENT_MAX),
        },
    )
