"""Google Cloud Logging entries whose textPayload is a line of PostgreSQL's log.

An entry is a LogEntry (https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry):
`{"insertId", "logName", "resource": {"type", "labels"}, "timestamp", "receiveTimestamp",
"severity", "textPayload"}`. Cloud SQL for PostgreSQL writes its server log as entries
of `projects/P/logs/cloudsql.googleapis.com%2Fpostgres.log` (resource type
`cloudsql_database`) with a stderr line in textPayload. An export is one entry per line
(a log sink's files, `gcloud logging read --format=json | jq -c '.[]'`) or one JSON array
(`gcloud logging read --format=json`, which lists the newest entry first). The
textPayloads, oldest first, are read as a stderr log: with --prefix, or the prefix
detected as for any stderr log (Cloud SQL's `%m [%p]: [%l-1] db=%d,user=%u ` is one of
KNOWN_PREFIXES). Entries without a textPayload (audit logs, jsonPayload) are counted in
ParseStats.other_loggers.
"""

from __future__ import annotations

import json
from typing import Any

from pglab.serverlog.decoder_base import RecordsToEvents
from pglab.serverlog.prefix import LinePrefix
from pglab.serverlog.records import LogRecord, ParseStats, TimestampParser
from pglab.serverlog.stderr import StderrDecoder


class CloudLoggingDecoder(RecordsToEvents):
    """Entries in, the records of their textPayload lines out. A JSON array is read
    whole at the end (it cannot be parsed before its closing bracket) and put in time
    order; entries one per line are read as they come, in the file's order."""

    def __init__(
        self,
        stats: ParseStats,
        timestamps: TimestampParser,
        candidates_only: bool = True,
        prefix: LinePrefix | None = None,
    ) -> None:
        self.stats = stats
        # the payload lines have stats of their own (lines of text, not of the file)
        self._lines = ParseStats(format="stderr")
        self._inner = StderrDecoder(self._lines, timestamps, candidates_only, prefix)
        self._skipped = 0
        self._synced = (0, 0)  # records and skipped already added to stats
        self._partial = ""
        self._array: list[str] | None = None
        self._started = False

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]:
        if not self._started:
            if not text.strip():
                self._partial += text
                return []
            text, self._partial = self._partial + text, ""
            self._started = True
            if text.lstrip().startswith("["):
                self._array = []
        self.stats.lines += text.count("\n")
        if self._array is not None:
            self._array.append(text)
            return []
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        return self._payloads([self._entry(line) for line in lines if line.strip()], eager)

    def finish(self) -> list[LogRecord]:
        out: list[LogRecord] = []
        if self._array is not None:
            out = self._payloads(self._entries_of_array("".join(self._array)), False)
            self._array = []
        elif self._partial.strip():
            self.stats.lines += 1
            out = self._payloads([self._entry(self._partial)], False)
        self._partial = ""
        out += self._inner.finish()
        self._sync()
        return out

    def _entry(self, line: str) -> Any:
        try:
            return json.loads(line)
        except ValueError:
            return None

    def _entries_of_array(self, text: str) -> list[Any]:
        try:
            entries = json.loads(text)
        except ValueError:
            self._skipped += 1  # the whole array is unreadable: one thing that failed
            return []
        if not isinstance(entries, list):
            return [entries]
        stamps = [_stamp(e) for e in entries]
        if len(stamps) > 1 and stamps[0] > stamps[-1]:
            # newest first (gcloud): reversed before the sort, so that entries of the
            # same time keep the order the server wrote them in
            entries.reverse()
            stamps.reverse()
        order = sorted(range(len(entries)), key=stamps.__getitem__)
        return [entries[i] for i in order]

    def _payloads(self, entries: list[Any], eager: bool) -> list[LogRecord]:
        texts: list[str] = []
        for entry in entries:
            if not isinstance(entry, dict):
                self._skipped += 1
                continue
            payload = entry.get("textPayload")
            if not isinstance(payload, str):
                self.stats.other_loggers += 1
                continue
            texts.append(payload if payload.endswith("\n") else payload + "\n")
        records = self._inner.feed("".join(texts), eager) if texts or eager else []
        self._sync()
        return records

    def _sync(self) -> None:
        # added as differences: readers add to stats.skipped too (unparsed messages)
        inner = self._lines
        records, skipped = inner.records, self._skipped + inner.skipped
        self.stats.records += records - self._synced[0]
        self.stats.skipped += skipped - self._synced[1]
        self._synced = (records, skipped)
        self.stats.prefix, self.stats.prefix_guessed = inner.prefix, inner.prefix_guessed


def _stamp(entry: Any) -> str:
    """An entry's RFC 3339 UTC timestamp, comparable as text: the fraction padded to
    nanoseconds (Cloud Logging writes as many digits as it has)."""
    value = entry.get("timestamp") if isinstance(entry, dict) else None
    if not isinstance(value, str):
        return ""
    whole, dot, rest = value.partition(".")
    if not dot:
        return whole.rstrip("Z") + ".000000000"
    return whole + "." + rest.rstrip("Z")[:9].ljust(9, "0")
