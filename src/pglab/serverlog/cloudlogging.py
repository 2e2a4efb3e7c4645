"""Google Cloud Logging entries whose textPayload is a line of PostgreSQL's log.

An entry is a LogEntry (https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry):
`{"insertId", "logName", "resource": {"type", "labels"}, "timestamp", "receiveTimestamp",
"severity", "textPayload"}`. Cloud SQL for PostgreSQL writes its server log as entries
of `projects/P/logs/cloudsql.googleapis.com%2Fpostgres.log` (resource type
`cloudsql_database`) with a stderr line in textPayload. An export is one entry per line
(a log sink's files, `gcloud logging read --format=json | jq -c '.[]'`) or one JSON array
(`gcloud logging read --format=json`, which lists the newest entry first). The
textPayloads, oldest first, are read as a stderr log: with --prefix, or the prefix
detected as for any stderr log. Entries without a textPayload (audit logs, jsonPayload)
are counted in ParseStats.other_loggers.

A textPayload need not carry a time: Cloud SQL's own exports show
`[24667]: [1-1] db=D,user=U LOG:  ...` (pgBadger's t/fixtures/cloudsql.log.gz), the time
being the entry's `timestamp`. When the payloads' prefix has no time (a --prefix
without a time escape, or none of KNOWN_PREFIXES and no time found in the first
payloads), each payload line is read with the entry's timestamp in front
(prefix.envelope_stamp) and the prefix given or found among TIMELESS_PREFIXES after it.
"""

from __future__ import annotations

import json
from typing import Any

from pglab.serverlog.decoder_base import RecordsToEvents
from pglab.serverlog.prefix import (
    TIMELESS_PREFIXES,
    LinePrefix,
    detect_prefix,
    envelope_stamp,
    guess_fields,
    severity_start,
    stamped_prefix,
)
from pglab.serverlog.records import LogRecord, ParseStats, TimestampParser, rfc3339_time
from pglab.serverlog.stderr import StderrDecoder

_ENVELOPE_TIME = "the entries' timestamp"


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
        self._timestamps = timestamps
        self._candidates_only = candidates_only
        self._inner: StderrDecoder | None = None
        # payloads read with the entry's timestamp in front, and their own prefix
        self._stamped = False
        self._payload_prefix: str | None = None
        self._pending: list[tuple[str, Any]] = []  # payloads before the choice is made
        self._guessed = True
        if prefix is not None:
            self._start(prefix.text if not prefix.has_time else None, prefix, False)
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
        out += self._flush_pending()
        if self._inner is not None:
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
        payloads: list[tuple[str, Any]] = []
        for entry in entries:
            if not isinstance(entry, dict):
                self._skipped += 1
                continue
            payload = entry.get("textPayload")
            if not isinstance(payload, str):
                self.stats.other_loggers += 1
                continue
            payloads.append((payload, entry.get("timestamp")))
        if self._inner is None:
            self._pending += payloads
            if not eager and not _heads(self._pending):
                # no message line yet to tell whether they carry a time; the first text
                # with one decides (a file's first chunk: hundreds of entries)
                self._sync()
                return []
            return self._flush_pending(eager)
        return self._feed_inner(payloads, eager)

    def _flush_pending(self, eager: bool = False) -> list[LogRecord]:
        if self._inner is None:
            self._choose([text for text, _ in self._pending])
        payloads, self._pending = self._pending, []
        return self._feed_inner(payloads, eager) if payloads or eager else []

    def _feed_inner(self, payloads: list[tuple[str, Any]], eager: bool) -> list[LogRecord]:
        assert self._inner is not None
        texts: list[str] = []
        for payload, stamp in payloads:
            text = _stamped(payload, stamp) if self._stamped else payload
            texts.append(text if text.endswith("\n") else text + "\n")
        records = self._inner.feed("".join(texts), eager) if texts or eager else []
        self._sync()
        return records

    def _choose(self, payloads: list[str]) -> None:
        """Do the payloads carry a time of their own? If not, their prefix among
        TIMELESS_PREFIXES (None: read heuristically after the entry's time)."""
        lines = [line for payload in payloads for line in payload.split("\n")]
        if not _heads([(line, None) for line in lines]) or detect_prefix(lines) is not None \
                or _timed(lines):
            self._start(None, None, True)  # the stderr decoder finds their prefix itself
            return
        found = detect_prefix(lines, TIMELESS_PREFIXES)
        self._start(found.text if found is not None else "", None, True)

    def _start(self, timeless: str | None, given: LinePrefix | None, guessed: bool) -> None:
        """The stderr decoder of the payloads: stamped with the entry's time when
        `timeless` is the payloads' prefix without a time ("": not recognised)."""
        prefix = given
        if timeless is not None:
            self._stamped = True
            self._payload_prefix = timeless or None
            prefix = stamped_prefix(timeless) if timeless else None
            self.stats.time_source = _ENVELOPE_TIME
        self._guessed = guessed
        self._inner = StderrDecoder(self._lines, self._timestamps, self._candidates_only,
                                    prefix)

    def _sync(self) -> None:
        # added as differences: readers add to stats.skipped too (unparsed messages)
        inner = self._lines
        records, skipped = inner.records, self._skipped + inner.skipped
        self.stats.records += records - self._synced[0]
        self.stats.skipped += skipped - self._synced[1]
        self._synced = (records, skipped)
        if self._stamped:  # the payloads' own prefix, not the stamp in front of it
            self.stats.prefix, self.stats.prefix_guessed = self._payload_prefix, self._guessed
        else:
            self.stats.prefix, self.stats.prefix_guessed = inner.prefix, inner.prefix_guessed


def _heads(payloads: list[tuple[str, Any]]) -> int:
    """How many message lines (not continuation lines) the payloads hold."""
    return sum(":  " in text and not text.startswith("\t") for text, _ in payloads)


def _timed(lines: list[str]) -> bool:
    """Do most message lines carry a time in their prefix (one pglab does not know)?"""
    timestamps = TimestampParser()
    heads = timed = 0
    for line in lines:
        colon = line.find(":  ")
        start = severity_start(line, 0, colon) if not line.startswith("\t") else None
        if start is None:
            continue
        heads += 1
        timed += guess_fields(line[:start], timestamps) is not None
    return heads > 0 and timed * 2 > heads


def _stamped(payload: str, stamp: Any) -> str:
    """The payload's lines with the entry's time in front (tab lines go on the line
    before them); unchanged without a readable timestamp (its lines are then skipped
    as lines without a time)."""
    t = rfc3339_time(stamp)
    if t is None:
        return payload
    front = envelope_stamp(t)
    if "\n" not in payload:
        return payload if payload.startswith("\t") else front + payload
    return "\n".join(line if not line or line.startswith("\t") else front + line
                     for line in payload.split("\n"))


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
