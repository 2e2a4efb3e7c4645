"""jsonlog (PostgreSQL 15+): one JSON object per line."""

from __future__ import annotations

import json
from typing import Any

from pglab.serverlog.decoder_base import RecordsToEvents
from pglab.serverlog.records import LogRecord, ParseStats, TimestampParser
from pglab.serverlog.triggers import KNOWN_SEVERITIES, is_candidate


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) and value else None


class JsonDecoder(RecordsToEvents):
    """jsonlog (PostgreSQL 15+): one JSON object per line."""

    def __init__(
        self, stats: ParseStats, timestamps: TimestampParser, candidates_only: bool = True
    ) -> None:
        self.stats = stats
        self._ts = timestamps
        self._candidates_only = candidates_only
        self._partial = ""

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        self.stats.lines += len(lines)
        return self._lines(lines)

    def finish(self) -> list[LogRecord]:
        if not self._partial:
            return []
        self.stats.lines += 1
        lines, self._partial = [self._partial], ""
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
            if "logger" in obj and "msg" in obj:  # CloudNativePG's stdout envelope
                if obj.get("logger") != "postgres" or not isinstance(obj["record"], dict):
                    stats.other_loggers += 1  # the instance manager, pgaudit, ...
                    continue
                obj = _from_cloudnativepg(obj["record"])
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
