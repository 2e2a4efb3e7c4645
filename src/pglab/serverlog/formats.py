"""Readers for the three server-log formats: text in, LogRecords out.

Each reader is an incremental decoder: `feed(text)` returns the records completed by
the text, holding back what may be incomplete (a partial last line, a stderr message
whose DETAIL lines may follow, a csv record inside an open quote); `finish()` returns
the rest. The same decoders serve whole files (fed in large chunks) and live tails.

Speed (stderr): text is scanned chunk by chunk by one compiled regex that only matches
the lines that can produce an event (`rules.LOG_TRIGGERS`, plus every ERROR/FATAL/
PANIC); other lines never reach Python code, and timestamps are parsed only for the
lines that matched. With the usual `%m [%p] ` prefix the regex also captures time, pid,
severity, the tab-indented continuation and the DETAIL/HINT/... lines of the message,
so findall() hands over plain tuples; other prefixes take a general, slower path.

Nothing here raises on bad input: undecodable bytes become U+FFFD, lines that look like
a message but have no readable time, csv records with broken quotes and invalid JSON
are counted in ParseStats.skipped.
"""

from __future__ import annotations

import csv
import json
import re
from datetime import datetime, timedelta
from typing import Any, Protocol

from pglab.events import Event
from pglab.serverlog.records import LogRecord, ParseStats, TimestampParser
from pglab.serverlog.rules import (
    LOG_TRIGGERS,
    STATEMENT_MAX,
    EventExtractor,
    is_candidate,
)

FORMATS = ("stderr", "csvlog", "jsonlog")

_ATTACHED = frozenset({"DETAIL", "HINT", "CONTEXT", "STATEMENT", "QUERY", "LOCATION"})
_SEVERITIES = (
    "LOG",
    "ERROR",
    "FATAL",
    "PANIC",
    "WARNING",
    "NOTICE",
    "INFO",
    "DEBUG",
    "DEBUG1",
    "DEBUG2",
    "DEBUG3",
    "DEBUG4",
    "DEBUG5",
)

# ":  " follows the severity word. As the literal start of the pattern it lets the regex
# engine skip through the text fast; the lookbehinds then check which severity it was.
_CANDIDATE_RE = re.compile(
    ":  (?:(?<=LOG:  )(?:" + "|".join(LOG_TRIGGERS) + ")|(?<=ERROR:  )|(?<=FATAL:  )|(?<=PANIC:  ))"
)
_ANY_SEVERITY_RE = re.compile(":  (?:" + "|".join(f"(?<={s}:  )" for s in _SEVERITIES) + ")")

# The time in a log_line_prefix: %m / %t (with zone) or %n (epoch).
_PREFIX_TIME_RE = re.compile(
    r"(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?)"
    r"(?: (?P<tz>[A-Za-z]{1,6}|[+-]\d\d(?::?\d\d)?)(?![\w:]))?"
    r"|(?P<epoch>\d{9,11}\.\d{3})"
)
# The pid: [%p] (pglab's `%m [%p] `, pgBadger's recommended prefixes), pid=%p, or the
# first free-standing number.
_PREFIX_PID_RE = re.compile(r"\[(\d+)\]|pid=(\d+)|(?<![\w.:/-])(\d{1,9})(?![\w.:/-])")


class Decoder(Protocol):
    stats: ParseStats

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]: ...

    def finish(self) -> list[LogRecord]: ...

    def feed_events(self, text: str, extractor: EventExtractor) -> list[Event]: ...

    def finish_events(self, extractor: EventExtractor) -> list[Event]: ...


class _RecordsToEvents:
    """feed_events/finish_events for decoders without a faster way: records, then rules."""

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]:
        raise NotImplementedError

    def finish(self) -> list[LogRecord]:
        raise NotImplementedError

    def feed_events(self, text: str, extractor: EventExtractor) -> list[Event]:
        return extractor.feed_many(self.feed(text))

    def finish_events(self, extractor: EventExtractor) -> list[Event]:
        return extractor.feed_many(self.finish())


def make_decoder(
    fmt: str, stats: ParseStats, timestamps: TimestampParser, candidates_only: bool
) -> Decoder:
    if fmt == "stderr":
        return StderrDecoder(stats, timestamps, candidates_only)
    if fmt == "csvlog":
        return CsvDecoder(stats, timestamps, candidates_only)
    if fmt == "jsonlog":
        return JsonDecoder(stats, timestamps, candidates_only)
    raise ValueError(f"unknown log format {fmt!r} (one of {', '.join(FORMATS)})")


# --- format detection ------------------------------------------------------------------

_STAMP = rb"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?"
_CSV_LINE_RE = re.compile(_STAMP + rb"(?: [^,\s]{1,8})?,")
_STDERR_LINE_RE = re.compile(rb"[^\n]{0,40}?(?:" + _STAMP + rb"|\d{9,11}\.\d{3})")


def detect_format(head: bytes, name: str = "") -> str:
    """Guess the format from the first bytes of a log (content first, then the name)."""
    votes = {"stderr": 0, "csvlog": 0, "jsonlog": 0}
    for raw in head.split(b"\n")[:50]:
        line = raw.strip(b"\r\t \xef\xbb\xbf")  # BOM, stray whitespace
        if not line:
            continue
        if line.startswith(b"{"):
            votes["jsonlog"] += 1
        elif _CSV_LINE_RE.match(line):
            votes["csvlog"] += 1
        elif _STDERR_LINE_RE.match(line):
            votes["stderr"] += 1
    best = max(votes, key=lambda k: votes[k])
    if votes[best] > 0:
        return best
    lower = name.lower().removesuffix(".gz")
    if lower.endswith(".csv"):
        return "csvlog"
    if lower.endswith(".json"):
        return "jsonlog"
    return "stderr"


# --- stderr ----------------------------------------------------------------------------

# The usual prefix shape, `%m [%p] ` (pglab's own) or `%t [%p] `: time, zone, [pid].
# [0-9] rather than \d: for str patterns \d is any Unicode digit, tested by a function
# call per character, which made a tenth of the scan.
_SHAPE_HEAD = (
    r"([0-9]{4}-[0-9][0-9]-[0-9][0-9][ T][0-9][0-9]:[0-9][0-9]:[0-9][0-9](?:\.[0-9]{1,6})?)"
    r" ([^ \[\n]{1,12}) \[([0-9]+)\] "
)
# For that shape one regex reads a whole message: anchored on the newline before its
# first line, it captures time, zone, pid, severity, the message with its tab-indented
# lines, and the block of DETAIL/HINT/... lines that carry the same prefix (a
# backreference to the time and pid), each with their own tab lines. findall() then
# returns plain tuples: no per-line Python code, no match objects.
_SHAPE_TAIL = (
    r":  ([^\n]*(?:\n\t[^\n]*)*)"
    r"((?:\n\1 \2 \[\3\] (?:DETAIL|HINT|CONTEXT|STATEMENT|QUERY|LOCATION):  [^\n]*"
    r"(?:\n\t[^\n]*)*)*)"
)
# A one-line slow statement (the bulk of many logs) is split by the regex itself:
# groups 4-7 = milliseconds, phase, prepared name, SQL. "One-line": the next line is
# neither a tab continuation nor a line with the same prefix (DETAIL: parameters ...);
# otherwise the message takes the general alternative (groups 8-10).
_SHAPE_DURATION = (
    r"LOG:  duration: ([0-9.]+) ms  (statement|execute|parse|bind|fastpath)([^:\n]*): ([^\n]*)"
    r"(?=\n(?!\t|\1 \2 \[\3\] ))"
)
_SHAPE_CANDIDATE_RE = re.compile(
    "\n"
    + _SHAPE_HEAD
    + "(?:"
    + _SHAPE_DURATION
    + "|(LOG(?=:  (?:"
    + "|".join(LOG_TRIGGERS)
    + "))|ERROR|FATAL|PANIC)"
    + _SHAPE_TAIL
    + ")"
)
_SHAPE_ANY_RE = re.compile(
    "\n"
    + _SHAPE_HEAD
    + "(?:"
    + _SHAPE_DURATION
    + "|("
    + "|".join(_SEVERITIES)
    + ")"
    + _SHAPE_TAIL
    + ")"
)
_SHAPE_LINE_RE = re.compile(_SHAPE_HEAD + r"[A-Z0-9]+:  ")
_SHAPE_ATTACHED_RE = re.compile(_SHAPE_HEAD + "(?:" + "|".join(sorted(_ATTACHED)) + "):  ")
_NO_OFFSET = timedelta(0)
# `t - _MICROSECOND * round(ms * 1000)` is t - timedelta(milliseconds=ms) for the
# 3-decimal durations PostgreSQL prints (round() then gives exactly the microseconds
# timedelta would), with a quarter fewer instructions: the constructor parses its
# arguments and splits floats.
_MICROSECOND = timedelta(microseconds=1)


def _looks_shaped(buf: str) -> bool | None:
    """Do the message lines at the start of buf use the `<time> <zone> [<pid>] ` prefix?
    None when there is no message line yet to judge by."""
    heads = shaped = 0
    for line in buf[: 1 << 16].split("\n")[:-1]:
        if line.startswith("\t") or ":  " not in line:
            continue
        heads += 1
        if _SHAPE_LINE_RE.match(line):
            shaped += 1
    if heads == 0:
        return None
    return shaped >= 0.9 * heads


def _split_attached(block: str, head: str) -> dict[str, str]:
    """ "\n<prefix>DETAIL:  a\n\tb\n<prefix>HINT:  c" -> {"DETAIL": "a\nb", "HINT": "c"}"""
    attached: dict[str, str] = {}
    for part in block.split(head)[1:]:
        word, _, text = part.partition(":  ")
        text = text.replace("\n\t", "\n")
        attached[word] = attached[word] + "\n" + text if word in attached else text
    return attached


class StderrDecoder:
    """Plain-text logs written with a log_line_prefix that has a time (and ideally a
    pid) escape. Continuation lines are tab-indented; DETAIL/HINT/CONTEXT/STATEMENT/
    QUERY/LOCATION lines of the same message follow it with the same prefix.

    Two scanners: a fast one for the `%m [%p] ` / `%t [%p] ` prefix shape (chosen when
    the first message lines of the log have it) and a general one for any prefix with a
    time escape (found anywhere in the prefix; the pid as `[%p]`, `pid=%p` or the first
    free-standing number). The buffer always starts with the newline that ends the line
    before it (a "\n" is put in front of the first text), so every line, the first
    included, is found by its preceding newline.

    candidates_only: only messages that can produce an event become records (fast);
    otherwise every message does, and lines belonging to no message are `skipped`.
    """

    def __init__(
        self, stats: ParseStats, timestamps: TimestampParser, candidates_only: bool = True
    ) -> None:
        self.stats = stats
        self._ts = timestamps
        self._all = not candidates_only
        self._heads = _ANY_SEVERITY_RE if self._all else _CANDIDATE_RE
        self._shape_re = _SHAPE_ANY_RE if self._all else _SHAPE_CANDIDATE_RE
        self._shaped: bool | None = None
        self._buf = "\n"

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]:
        """eager: treat a message whose lines are all there as complete even if it is
        the last thing in the buffer (tailing a live log, where a message arrives in one
        write); otherwise wait for the next line before deciding."""
        return self._feed(text, eager, None)[0]

    def finish(self) -> list[LogRecord]:
        return self._finish(None)[0]

    def feed_events(self, text: str, extractor: EventExtractor) -> list[Event]:
        """Like feed, straight to events: one-line slow statements skip the record."""
        return self._feed(text, False, extractor)[1]

    def finish_events(self, extractor: EventExtractor) -> list[Event]:
        return self._finish(extractor)[1]

    def _feed(
        self, text: str, eager: bool, extractor: EventExtractor | None
    ) -> tuple[list[LogRecord], list[Event]]:
        self.stats.lines += text.count("\n")
        buf = self._buf + text
        records, events, keep = self._scan(buf, False, eager, extractor)
        self._buf = buf[keep:]
        return records, events

    def _finish(self, extractor: EventExtractor | None) -> tuple[list[LogRecord], list[Event]]:
        buf, self._buf = self._buf, "\n"
        if len(buf) > 1 and not buf.endswith("\n"):
            self.stats.lines += 1  # a last line without newline (truncated file)
            buf += "\n"
        records, events, _ = self._scan(buf, True, True, extractor)
        return records, events

    def _scan(
        self, buf: str, final: bool, eager: bool, extractor: EventExtractor | None
    ) -> tuple[list[LogRecord], list[Event], int]:
        """Records (and events, given an extractor) in buf; and where the text to keep
        for next time starts (the newline before the first line not consumed)."""
        if self._shaped is None:
            self._shaped = _looks_shaped(buf)
        # Only whole lines are looked at; a partial last line waits for more text.
        safe_end = len(buf) if final else buf.rfind("\n") + 1
        if self._shaped:
            records, events, end, claimed = self._scan_shaped(buf, safe_end, eager, extractor)
        else:
            records, end, claimed = self._scan_generic(buf, safe_end, eager)
            events = extractor.feed_many(records) if extractor is not None else []
        if self._all:
            # every line that starts before `end` and belongs to no message is junk
            self.stats.skipped += max(0, buf.count("\n", 0, end) - claimed)
        return records, events, end

    def _scan_shaped(
        self, buf: str, safe_end: int, eager: bool, extractor: EventExtractor | None
    ) -> tuple[list[LogRecord], list[Event], int, int]:
        """Records (or, given an extractor, events) of the complete messages in buf."""
        # Messages that may still go on (the last one, unless eager) wait for more text.
        end = safe_end - 1 if eager else self._last_message_start(buf, safe_end)
        if end <= 0:
            return [], [], 0, 0
        records: list[LogRecord] = []
        add_record = records.append
        events: list[Event] = []
        add_event = events.append
        node = extractor.node if extractor is not None else ""
        fromiso = datetime.fromisoformat
        new_record = _new_record
        new_object = _new_object
        set_attribute = _set_attribute
        event_type = Event
        statement_max = STATEMENT_MAX
        microsecond = _MICROSECOND
        record_type = LogRecord
        timestamps = self._ts
        zone_seen: str | None = None
        offset, zone_unknown = _NO_OFFSET, False
        claimed = 0
        skipped = 0
        count_lines = self._all
        found = self._shape_re.findall(buf, 0, end)
        # One iteration per message: the hot loop of a big log.
        for stamp, zone, pid, ms, phase, name, sql, sev, text, block in found:
            if zone != zone_seen:
                zone_seen = zone
                offset, zone_unknown = timestamps.zone(zone)
            if zone_unknown:
                timestamps.unknown_zones += 1
            try:
                # an explicit +00:00 parses several times faster than .replace(tzinfo)
                t = fromiso(stamp + "+00:00")
            except ValueError:
                parsed = timestamps.parse(stamp, None)
                if parsed is None:
                    skipped += 1
                    continue
                t = parsed
            if offset:
                t -= offset
            if ms:  # a one-line slow statement
                if extractor is not None:
                    # slow_statement_event, inlined: this is most events of a busy log
                    duration = float(ms)
                    event = new_object(event_type)
                    set_attribute(
                        event,
                        "__dict__",
                        {
                            "t_start": t - microsecond * round(duration * 1000),
                            "kind": "slow-statement",
                            "node": node,
                            "t_end": t,
                            "attrs": {
                                "duration_ms": duration,
                                "phase": phase,
                                "prepared": name.strip() or None,
                                "statement": sql[:statement_max],  # the same object when shorter
                                "pid": int(pid),
                            },
                        },
                    )
                    add_event(event)
                    continue
                claimed += 1
                severity, message = "LOG", f"duration: {ms} ms  {phase}{name}: {sql}"
            else:
                if count_lines:
                    claimed += 1 + text.count("\n") + block.count("\n")
                severity = sev
                message = text.replace("\n\t", "\n") if "\n" in text else text
            if block:
                attached = _split_attached(block, f"\n{stamp} {zone} [{pid}] ")
                record = new_record(
                    record_type,
                    (
                        t,
                        int(pid),
                        severity,
                        message,
                        attached.get("DETAIL"),
                        attached.get("HINT"),
                        attached.get("CONTEXT"),
                        attached.get("STATEMENT") or attached.get("QUERY"),
                        None,
                        None,
                    ),
                )
            else:
                record = new_record(
                    record_type,
                    (t, int(pid), severity, message, None, None, None, None, None, None),
                )
            if extractor is not None:
                events.extend(extractor.feed(record))
            add_record(record)
        # every message found is a record, whether it was kept or went straight to an event
        self.stats.records += len(found) - skipped
        self.stats.skipped += skipped
        return records, events, end, claimed

    @staticmethod
    def _last_message_start(buf: str, safe_end: int) -> int:
        """The newline before the last line (below safe_end) that starts a message: all
        messages before it are complete; it may go on in text not yet read."""
        line_end = safe_end - 1
        while line_end > 0:
            newline = buf.rfind("\n", 0, line_end)
            if newline < 0:
                return 0
            start = newline + 1
            if not buf.startswith("\t", start) and not _SHAPE_ATTACHED_RE.match(buf, start):
                return newline
            line_end = newline
        return 0

    def _scan_generic(
        self, buf: str, safe_end: int, eager: bool
    ) -> tuple[list[LogRecord], int, int]:
        out: list[LogRecord] = []
        claimed = 0
        consumed = 0
        for m in self._heads.finditer(buf, 0, safe_end):
            colon = m.start()
            if colon < consumed:
                continue  # inside a message already read (DETAIL text, SQL...)
            line_start = buf.rfind("\n", 0, colon) + 1
            if buf.startswith("\t", line_start) or buf.find(":  ", line_start, colon) >= 0:
                continue  # continuation text, or not the severity position of its line
            line_end = buf.find("\n", colon)
            sp = buf.rfind(" ", line_start, colon)
            severity = buf[sp + 1 : colon]
            prefix = buf[line_start : sp + 1]
            parsed = self._prefix(prefix)
            if parsed is None:
                self.stats.skipped += 1  # looks like a message line but has no readable time
                consumed = line_end + 1
                continue
            t, pid = parsed
            more = self._gather(
                buf, line_end + 1, prefix, pid, safe_end, eager, buf[colon + 3 : line_end]
            )
            if more is None:
                self.stats.records += len(out)
                return out, line_start - 1, claimed  # the rest may be in the next text
            pos, message, attached, nlines = more
            consumed = pos
            claimed += nlines
            out.append(
                _new_record(
                    LogRecord,
                    (
                        t,
                        pid,
                        severity,
                        message,
                        attached.get("DETAIL"),
                        attached.get("HINT"),
                        attached.get("CONTEXT"),
                        attached.get("STATEMENT") or attached.get("QUERY"),
                        None,
                        None,
                    ),
                )
            )
        self.stats.records += len(out)
        return out, max(safe_end - 1, 0), claimed

    def _gather(
        self,
        buf: str,
        pos: int,
        prefix: str,
        pid: int | None,
        safe_end: int,
        eager: bool,
        message: str,
    ) -> tuple[int, str, dict[str, str], int] | None:
        """The rest of a message whose first line ends before `pos`: its tab-indented
        lines, then its DETAIL/HINT/... lines (each with their own tab lines), which
        carry the same prefix or at least the same pid (prefixes with %l differ).
        Returns (end, message, attached, lines used) or None if the text may not hold
        all of it yet."""
        nlines = 1
        tabs = _TAB_LINES_RE.match(buf, pos, safe_end)
        if tabs is not None:  # one regex for the whole block (autovacuum: a dozen lines)
            block = tabs.group()
            message = message + "\n" + block[1:-1].replace("\n\t", "\n")
            nlines += block.count("\n")
            pos = tabs.end()
        attached: dict[str, str] = {}
        while True:
            if pos >= safe_end:
                if not eager:
                    return None  # nothing after it yet: ends here, or more to come?
                break
            e = buf.find("\n", pos)
            if buf.startswith(prefix, pos):  # same prefix text: the usual case
                k = pos + len(prefix)
                j = buf.find(":  ", k, e)
                word = buf[k:j] if j > 0 else ""
            else:
                j = buf.find(":  ", pos, e)
                sp = buf.rfind(" ", pos, j) + 1 if j > 0 else pos
                word = buf[sp:j] if j > 0 else ""
                if word in _ATTACHED:
                    other = self._prefix(buf[pos:sp])
                    if other is None or (pid is not None and other[1] != pid):
                        word = ""
            if word not in _ATTACHED:
                break
            text = buf[j + 3 : e]
            pos = e + 1
            nlines += 1
            tabs = _TAB_LINES_RE.match(buf, pos, safe_end)
            if tabs is not None:
                block = tabs.group()
                text = text + "\n" + block[1:-1].replace("\n\t", "\n")
                nlines += block.count("\n")
                pos = tabs.end()
            attached[word] = attached[word] + "\n" + text if word in attached else text
        return pos, message, attached, nlines

    def _prefix(self, prefix: str) -> tuple[datetime, int | None] | None:
        """(time, pid) from any log_line_prefix, or None if it has no readable time."""
        m = _PREFIX_TIME_RE.search(prefix)
        if m is None:
            return None
        epoch = m.group("epoch")
        t = self._ts.from_epoch(epoch) if epoch else self._ts.parse(m.group("ts"), m.group("tz"))
        if t is None:
            return None
        end = m.end()
        pm = _PREFIX_PID_RE.search(prefix, end) or _PREFIX_PID_RE.search(prefix, 0, m.start())
        if pm is None:
            return t, None
        return t, int(pm.group(1) or pm.group(2) or pm.group(3))


# Continuation lines of a message: each starts with a tab (whole lines only).
_TAB_LINES_RE = re.compile(r"(?:\t[^\n]*\n)+")
# LogRecord is a NamedTuple; building it from a tuple skips its Python-level __new__,
# which matters with millions of records.
_new_record = tuple.__new__
# Events are built the way rules.new_event builds them (see there why).
_new_object = object.__new__
_set_attribute = object.__setattr__


# --- csvlog ----------------------------------------------------------------------------

# Columns (PostgreSQL docs, "Using CSV-Format Log Output"): 0 log_time, 3 process_id,
# 11 error_severity, 12 sql_state_code, 13 message, 14 detail, 15 hint, 16 internal_query,
# 18 context, 19 query, 23 backend_type (13+), then leader_pid and query_id (14+).
_CSV_MIN_FIELDS = 22
_CSV_MAX_RECORD = 1 << 20  # a quoted field this long is a broken quote, not a message
_CSV_START_RE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [^,\"\n]{1,8})?,")


class CsvDecoder(_RecordsToEvents):
    """csvlog: one record per row; quoted fields may hold newlines. Rows are assembled
    from lines by quote parity (a doubled quote inside a field keeps the parity), so a
    record is only parsed once it is whole. A broken quote would swallow the rest of the
    log: an open record is abandoned (skipped) when a line that starts like a new record
    arrives or it grows past 1 MiB."""

    def __init__(
        self, stats: ParseStats, timestamps: TimestampParser, candidates_only: bool = True
    ) -> None:
        self.stats = stats
        self._ts = timestamps
        self._candidates_only = candidates_only
        self._partial = ""
        self._open: list[str] = []
        self._open_len = 0
        self._open_quotes = 0

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        self.stats.lines += len(lines)
        return self._rows(self._assemble(lines))

    def finish(self) -> list[LogRecord]:
        rows: list[str] = []
        if self._partial:
            self.stats.lines += 1
            rows = self._assemble([self._partial])
            self._partial = ""
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
                )
            )
        stats.records += len(out)
        return out


# --- jsonlog ---------------------------------------------------------------------------


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if isinstance(value, str) and value else None


class JsonDecoder(_RecordsToEvents):
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
            severity = obj.get("error_severity")
            message = obj.get("message")
            stamp = obj.get("timestamp")
            if not (
                isinstance(severity, str) and isinstance(message, str) and isinstance(stamp, str)
            ):
                stats.skipped += 1
                continue
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
                )
            )
        stats.records += len(out)
        return out
