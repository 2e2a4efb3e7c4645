"""csvlog: one record per CSV row (PostgreSQL docs, "Using CSV-Format Log Output")."""

from __future__ import annotations

import csv
import re

from pglab.serverlog.decoder_base import LineDecoder
from pglab.serverlog.records import LogRecord, ParseStats, TimestampParser
from pglab.serverlog.triggers import KNOWN_SEVERITIES, is_candidate

# Columns (PostgreSQL docs, "Using CSV-Format Log Output"): 0 log_time, 3 process_id,
# 11 error_severity, 12 sql_state_code, 13 message, 14 detail, 15 hint, 16 internal_query,
# 18 context, 19 query, 23 backend_type (13+), then leader_pid and query_id (14+).
_CSV_MIN_FIELDS = 22
_CSV_MAX_RECORD = 1 << 20  # a quoted field this long is a broken quote, not a message
# a line that starts a record: its time, bare or quoted
_CSV_START_RE = re.compile(r'"?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [^,"\n]{1,8})?"?,')


class CsvDecoder(LineDecoder):
    """csvlog: one record per row; quoted fields may hold newlines. Rows are assembled
    from lines by quote parity (a doubled quote inside a field keeps the parity), so a
    record is only parsed once it is whole. A broken quote would swallow the rest of the
    log: an open record is abandoned (skipped) when a line that starts like a new record
    arrives or it grows past 1 MiB."""

    def __init__(
        self, stats: ParseStats, timestamps: TimestampParser, candidates_only: bool = True
    ) -> None:
        super().__init__(stats, timestamps, candidates_only)
        self._open: list[str] = []
        self._open_len = 0
        self._open_quotes = 0

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]:
        return self._rows(self._assemble(self._whole_lines(text)))

    def finish(self) -> list[LogRecord]:
        rows = self._assemble(self._last_line())
        if self._open:
            self.stats.skipped += 1  # unterminated quote at the end of the log
            self._open = []
        return self._rows(rows)

    def _assemble(self, lines: list[str]) -> list[str]:
        rows: list[str] = []
        for raw in lines:
            line = raw[:-1] if raw.endswith("\r") else raw
            quotes = line.count('"')
            if self._open:
                if _CSV_START_RE.match(line) or self._open_len > _CSV_MAX_RECORD:
                    self.stats.skipped += 1  # the open record never closed its quote
                    self._open = []
                else:
                    self._open.append(line)
                    self._open_len += len(line)
                    self._open_quotes += quotes
                    if self._open_quotes % 2 == 0:
                        rows.append("\n".join(self._open))
                        self._open = []
                    continue
            if quotes % 2 == 0:
                if line:
                    rows.append(line)
            else:
                self._open = [line]
                self._open_len = len(line)
                self._open_quotes = quotes
        return rows

    def _rows(self, rows: list[str]) -> list[LogRecord]:
        out: list[LogRecord] = []
        stats = self.stats
        try:
            parsed = list(csv.reader(rows, strict=True))
        except csv.Error:
            parsed = []
            for row in rows:  # find the bad one(s) without losing the rest
                try:
                    parsed.extend(csv.reader([row], strict=True))
                except csv.Error:
                    stats.skipped += 1
        for fields in parsed:
            if len(fields) < _CSV_MIN_FIELDS:
                stats.skipped += 1
                continue
            severity, message = fields[11], fields[13]
            if severity not in KNOWN_SEVERITIES:
                stats.count_unknown_severity(severity)
            if self._candidates_only and not is_candidate(severity, message):
                continue
            t = self._ts.parse_text(fields[0])
            if t is None:
                stats.skipped += 1
                continue
            pid = int(fields[3]) if fields[3].isdigit() else None
            out.append(
                LogRecord(
                    t,
                    pid,
                    severity,
                    message,
                    fields[14] or None,
                    fields[15] or None,
                    fields[18] or None,
                    fields[19] or fields[16] or None,
                    (fields[23] or None) if len(fields) > 23 else None,
                    fields[12] or None,
                    fields[1] or None,
                    fields[2] or None,
                    fields[4] or None,
                )
            )
        stats.records += len(out)
        return out
