"""jsonlog (PostgreSQL 15+): one JSON object per line; and CloudNativePG's pod output.

CloudNativePG (https://cloudnative-pg.io/documentation/current/logging) writes a pod's
stdout as JSON lines of its own (zap's `level`, `ts`, `msg`, `logger`): the `postgres`
logger's records carry PostgreSQL's csvlog columns under `record`, every value a
string; the lines PostgreSQL wrote to stderr before its logging collector started are
`postgres` records whose `msg` is the stderr line itself, with no `record`; every other
logger (the instance manager, `wal-archive`, `pgaudit`...) and the lines without a
logger are another program's.

A file whose records run newest first (a log viewer's export) is read whole and put
oldest first: events pair a start with its end in log order.
"""

from __future__ import annotations

import json
from datetime import datetime
from itertools import pairwise
from typing import Any

from pglab.serverlog.decoder_base import LineDecoder
from pglab.serverlog.prefix import guess_fields, severity_start
from pglab.serverlog.records import UTC, LogRecord, ParseStats, TimestampParser, rfc3339_time
from pglab.serverlog.stderr_fast import ATTACHED
from pglab.serverlog.triggers import KNOWN_SEVERITIES, is_candidate

# At most this many of the first lines tell whether a file runs oldest or newest first
# (those of the first text fed: a file's first chunk, a followed log's first write).
_ORDER_LINES = 200


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) and value else None


class JsonDecoder(LineDecoder):
    """jsonlog (PostgreSQL 15+): one JSON object per line."""

    def __init__(
        self, stats: ParseStats, timestamps: TimestampParser, candidates_only: bool = True
    ) -> None:
        super().__init__(stats, timestamps, candidates_only)
        # None until the order is known; then the lines of a newest-first file, kept
        # to be read in reverse at the end ([] for a file in log order)
        self._newest_first: list[str] | None = None
        self._ordered = False
        self._waiting: list[str] = []  # lines read before the order is known
        # the last stderr line's message (CloudNativePG's `msg`): its pid, and its
        # record if it was kept, for the DETAIL/HINT/... lines that follow it
        self._line_head: tuple[int | None, LogRecord | None] | None = None

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]:
        return self._in_order(self._whole_lines(text), eager)

    def finish(self) -> list[LogRecord]:
        out = self._in_order(self._last_line(), True)
        if self._newest_first:
            kept, self._newest_first = self._newest_first, []
            kept.reverse()
            out += self._lines(kept)
        return out

    def _in_order(self, lines: list[str], everything: bool) -> list[LogRecord]:
        if self._ordered:
            if self._newest_first:
                self._newest_first += lines
                return []
            return self._lines(lines)
        self._waiting += lines
        if not everything and sum(1 for line in self._waiting if line.strip()) < 2:
            return []  # one line tells no order (a followed log's first write)
        lines, self._waiting = self._waiting, []
        self._ordered = True
        if _runs_backwards(lines[:_ORDER_LINES]):
            self._newest_first = lines
            return []
        return self._lines(lines)

    def _lines(self, lines: list[str]) -> list[LogRecord]:
        out: list[LogRecord] = []
        stats = self.stats
        for line in lines:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                stats.skipped += 1
                continue
            if not isinstance(obj, dict):
                stats.skipped += 1
                continue
            if "msg" in obj and ("logger" in obj or "level" in obj):
                # CloudNativePG's stdout envelope (zap's level, ts, msg): the postgres
                # logger's csvlog records under `record`, or its stderr lines (written
                # before the logging collector starts) in `msg`
                if obj.get("logger") != "postgres":
                    stats.other_loggers += 1  # the instance manager, pgaudit, ...
                    continue
                record = obj.get("record")
                if isinstance(record, dict):
                    obj = _from_cloudnativepg(record)
                else:
                    self._stderr_line(obj, out)
                    continue
            severity = obj.get("error_severity")
            message = obj.get("message")
            stamp = obj.get("timestamp")
            if not (
                isinstance(severity, str) and isinstance(message, str) and isinstance(stamp, str)
            ):
                stats.skipped += 1
                continue
            if severity not in KNOWN_SEVERITIES:
                stats.count_unknown_severity(severity)
            if self._candidates_only and not is_candidate(severity, message):
                continue
            t = self._ts.parse_text(stamp)
            if t is None:
                stats.skipped += 1
                continue
            pid = obj.get("pid")
            out.append(
                LogRecord(
                    t,
                    pid if isinstance(pid, int) else None,
                    severity,
                    message,
                    _opt_str(obj, "detail"),
                    _opt_str(obj, "hint"),
                    _opt_str(obj, "context"),
                    _opt_str(obj, "statement") or _opt_str(obj, "internal_query"),
                    _opt_str(obj, "backend_type"),
                    _opt_str(obj, "state_code"),
                    _opt_str(obj, "user"),
                    _opt_str(obj, "dbname"),
                    _client(obj),
                )
            )
        stats.records += len(out)
        return out

    def _stderr_line(self, obj: dict[str, Any], out: list[LogRecord]) -> None:
        """A stderr line of PostgreSQL's in CloudNativePG's `msg`: a message of its own,
        or a DETAIL/HINT/... line of the message of the line before it. Its time is the
        line's log_line_prefix's, else the envelope's `ts`."""
        text = obj.get("msg")
        colon = text.find(":  ") if isinstance(text, str) else -1
        start = severity_start(text, 0, colon) if isinstance(text, str) else None
        if not isinstance(text, str) or start is None:
            self.stats.skipped += 1
            self._line_head = None
            return
        word, body = text[start:colon], text[colon + 3:]
        fields = guess_fields(text[:start], self._ts)
        pid = fields.pid if fields is not None else None
        if word in ATTACHED:
            head = self._line_head
            if head is None or head[0] != pid:
                self.stats.skipped += 1  # its message is not here
            elif head[1] is not None and out and out[-1] is head[1]:
                out[-1] = _attach(head[1], word, body)
                self._line_head = (pid, out[-1])
            elif head[1] is not None:
                self.stats.skipped += 1  # its message went out already: not added to it
            return
        self._line_head = (pid, None)
        if word not in KNOWN_SEVERITIES:
            self.stats.count_unknown_severity(word)
            return
        if self._candidates_only and not is_candidate(word, body):
            return
        t = fields.t if fields is not None else _epoch(obj.get("ts"))
        if t is None:
            self.stats.skipped += 1
            return
        record = LogRecord(t, pid, word, body)
        out.append(record)
        self._line_head = (pid, record)


def _attach(record: LogRecord, word: str, text: str) -> LogRecord:
    """The record with a DETAIL/HINT/CONTEXT/STATEMENT/QUERY line's text added (a
    LOCATION line is not kept)."""
    def joined(before: str | None) -> str:
        return f"{before}\n{text}" if before else text

    if word == "DETAIL":
        return record._replace(detail=joined(record.detail))
    if word == "HINT":
        return record._replace(hint=joined(record.hint))
    if word == "CONTEXT":
        return record._replace(context=joined(record.context))
    if word in ("STATEMENT", "QUERY"):
        return record._replace(statement=joined(record.statement))
    return record


def _epoch(value: object) -> datetime | None:
    """CloudNativePG's `ts`: RFC 3339 text in current releases, seconds since the epoch
    (a number) in older ones."""
    if isinstance(value, str):
        return rfc3339_time(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _runs_backwards(lines: list[str]) -> bool:
    """Do these lines' times go down, all but a few times (a newest-first export)? A
    log written by the server may go down now and then (processes stamp a message
    before they write it), never nearly always."""
    stamps = TimestampParser()
    times: list[datetime] = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        t = _epoch(obj.get("ts"))
        if t is None:
            record = obj.get("record")
            text = (record.get("log_time") if isinstance(record, dict)
                    else obj.get("timestamp"))
            t = stamps.parse_text(text) if isinstance(text, str) else None
        if t is not None:
            times.append(t)
    down = sum(a > b for a, b in pairwise(times))
    up = sum(a < b for a, b in pairwise(times))
    return down >= 2 and down >= 9 * up


# CloudNativePG puts PostgreSQL's csvlog columns under `record`, every value a string
# (https://cloudnative-pg.io/documentation/current/logging): to jsonlog's names.
_CNPG_NAMES = {"log_time": "timestamp", "error_severity": "error_severity",
               "message": "message", "detail": "detail", "hint": "hint",
               "context": "context", "query": "statement", "internal_query": "internal_query",
               "backend_type": "backend_type", "sql_state_code": "state_code",
               "connection_from": "connection_from", "user_name": "user", "database_name": "dbname"}


def _from_cloudnativepg(record: dict[str, object]) -> dict[str, object]:
    obj = {name: record[key] for key, name in _CNPG_NAMES.items() if key in record}
    pid = record.get("process_id")
    if isinstance(pid, str) and pid.isdigit():
        obj["pid"] = int(pid)
    elif isinstance(pid, int):
        obj["pid"] = pid
    return obj


def _client(obj: dict[str, object]) -> str | None:
    """jsonlog's remote_host and remote_port as %r prints them: host(port)."""
    host = obj.get("remote_host")
    if not isinstance(host, str) or not host:
        return _opt_str(obj, "connection_from")  # CloudNativePG's csvlog column
    port = obj.get("remote_port")
    return f"{host}({port})" if isinstance(port, int) else host
