"""syslog (log_destination = 'syslog') as rsyslog or journald write it to a file.

A line is `Nov 23 20:19:05 host postgres[PID]: [SEQ-N] text` (rsyslog's traditional
format, Debian's /var/log/syslog, `journalctl -o short`) or the same with an RFC 3339
time (`2026-11-23T20:19:05.123456+00:00`: rsyslog's RSYSLOG_FileFormat, `journalctl -o
short-iso`). PostgreSQL (elog.c, write_syslog) sends one message, its DETAIL/HINT/...
lines included, as pieces numbered SEQ-1, SEQ-2...: one per line, and a line longer than
900 bytes cut before a space, so that the next piece begins with the space. rsyslog
writes control characters as `#` and their octal code: a continuation line's tab is
`#011`. Pieces are joined per pid and SEQ: one that begins with a space goes on the line
before, any other is a line of its own. (A word over 900 bytes is cut inside; its rest
then becomes a line of its own.) Lines without `[SEQ]` (syslog_sequence_numbers off,
or a journal of the server's stderr) join the pid's message when they are a tab line or
a DETAIL/HINT/... line.

The time is the log_line_prefix's when it has one (%m, %t or %n: year, zone,
milliseconds), else syslog's. A traditional syslog time has neither year nor zone: the
year is the one that puts the first line at or before `log_end` (the file's last
modification; now for a followed log) and goes up where the months wrap (December to
January), the zone is taken as UTC, and `ParseStats.assumed` says so. The pid is always
syslog's `postgres[PID]`. Lines of programs whose name does not start with `postgres`
(syslog_ident's default) are counted in `ParseStats.other_loggers`.

Heroku Postgres' logs (`heroku logs -p postgres`, a logplex drain) are this with
`app[postgres.PID]:` for `postgres[PID]:` and the database's attachment name
(`[DATABASE]`, `[HEROKU_POSTGRESQL_RED]`) before the pieces' `[SEQ-N]`; Heroku's
log_line_prefix is `sql_error_code = %e `. The add-on's metric lines
(`app[heroku-postgres]: source=DATABASE sample#...`) are another logger's.
"""

from __future__ import annotations

import re
from collections import deque
from datetime import datetime

from pglab.serverlog.decoder_base import RecordsToEvents
from pglab.serverlog.prefix import (
    KNOWN_PREFIXES,
    TIMELESS_PREFIXES,
    LinePrefix,
    PrefixFields,
    detect_prefix,
    guess_fields,
    severity_start,
)
from pglab.serverlog.records import UTC, LogRecord, ParseStats, TimestampParser, attached_fields
from pglab.serverlog.stderr_fast import ATTACHED
from pglab.serverlog.triggers import KNOWN_SEVERITIES, is_candidate

_MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_LINE_RE = re.compile(
    r"(?:(?P<mon>[A-Z][a-z]{2}) (?P<day>[ 0-9][0-9]) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"|(?P<iso>[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?)"
    r"(?P<offset>Z|[+-][0-9]{2}:?[0-9]{2}))"
    # a log drain's token (`d.UUID`) where a host would be, and no colon after
    # `app[postgres.PID]` in Heroku's drained lines
    r" (?:[^ ]+ )?(?P<ident>[^ \[:]+)\[(?P<proc>[^\]\s]+)\]:? "
    r"(?:\[(?P<tag>[A-Z][A-Z0-9_]*)\] )?"
    r"(?:\[(?P<seq>[0-9]+)(?:-(?P<chunk>[0-9]+))?\] )?(?P<text>.*)"
)
_HEROKU_PROC = "postgres."  # logplex's app[postgres.PID]
_WORD_RE = re.compile(r"([A-Z]+):  ")
# A message whose pid has written nothing for this many pieces of other processes is
# complete (PostgreSQL sends a message's pieces one after another).
_QUIET_PIECES = 64
# Messages whose lines are looked at to recognise the log_line_prefix.
_DETECT_MESSAGES = 200


class _Message:
    __slots__ = ("done", "last", "lines", "pid", "seq", "stamp")

    def __init__(self, pid: int, seq: str | None, stamp: tuple[str, str, str], text: str,
                 piece: int) -> None:
        self.pid = pid
        self.seq = seq
        self.stamp = stamp  # (mon, day, hms) or ("", iso, offset)
        self.lines = [text]
        self.last = piece
        self.done = False


class SyslogDecoder(RecordsToEvents):
    """PostgreSQL's messages in a syslog file. prefix: the inner log_line_prefix (a
    prefix without a time escape is fine here); detected from KNOWN_PREFIXES and
    TIMELESS_PREFIXES when None. log_end: when the log ended (the year of traditional
    syslog times is taken from it); None: now."""

    def __init__(
        self,
        stats: ParseStats,
        timestamps: TimestampParser,
        candidates_only: bool = True,
        prefix: LinePrefix | None = None,
        log_end: datetime | None = None,
    ) -> None:
        self.stats = stats
        self._ts = timestamps
        self._candidates_only = candidates_only
        self._prefix = prefix
        self._prefix_known = prefix is not None
        if prefix is not None:
            stats.prefix, stats.prefix_guessed = prefix.text, False
        self._log_end = log_end
        self._partial = ""
        self._open: dict[int, _Message] = {}
        self._queue: deque[_Message] = deque()
        self._pieces = 0
        self._year: int | None = None
        self._month = 0
        self._stamps: dict[tuple[str, str, str], datetime | None] = {}

    def feed(self, text: str, eager: bool = False) -> list[LogRecord]:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        self.stats.lines += len(lines)
        for line in lines:
            self._piece(line)
        return self._complete(eager)

    def finish(self) -> list[LogRecord]:
        if self._partial:
            self.stats.lines += 1
            self._piece(self._partial)
            self._partial = ""
        return self._complete(True)

    def _piece(self, line: str) -> None:
        m = _LINE_RE.match(line)
        if m is None:
            if line.strip():
                self.stats.skipped += 1
            return
        mon, day, hms, iso, offset, ident, proc, _tag, seq, chunk, text = m.groups()
        if ident.startswith("postgres") and proc.isdigit():
            pid = int(proc)
        elif ident == "app" and proc.startswith(_HEROKU_PROC) and proc[9:].isdigit():
            pid = int(proc[9:])  # Heroku: app[postgres.PID]: [DATABASE] [SEQ-N] ...
        else:  # another program, or Heroku's app[heroku-postgres] metrics
            self.stats.other_loggers += 1
            return
        self._pieces += 1
        if "#011" in text:
            text = text.replace("#011", "\t")
        if text.endswith("\r"):
            text = text[:-1]
        message = self._open.get(pid)
        if message is not None and not message.done:
            if chunk is not None and chunk != "1" and seq == message.seq:
                # a long line cut before a space; not a DETAIL/HINT/... line whose
                # log_line_prefix begins with a space (Heroku's)
                if text.startswith(" ") and not _attached(text):
                    message.lines[-1] += text
                else:
                    message.lines.append(text)
                message.last = self._pieces
                return
            if seq is None and (text.startswith("\t") or _attached(text)):
                message.lines.append(text)
                message.last = self._pieces
                return
            message.done = True
        elif chunk is not None and chunk != "1":
            self.stats.skipped += 1  # the rest of a message whose start is not here
            return
        stamp = (mon, day, hms) if mon is not None else ("", iso, offset)
        message = _Message(pid, seq, stamp, text, self._pieces)
        self._open[pid] = message
        self._queue.append(message)

    def _complete(self, everything: bool) -> list[LogRecord]:
        """The messages known to be complete, in the order they began."""
        queue = self._queue
        if not self._prefix_known:
            if len(queue) < _DETECT_MESSAGES and not everything:
                return []  # more messages first, unless this is all there is
            self._detect_prefix()
        out: list[LogRecord] = []
        while queue:
            message = queue[0]
            if not (message.done or everything
                    or self._pieces - message.last > _QUIET_PIECES):
                break
            queue.popleft()
            if self._open.get(message.pid) is message:
                del self._open[message.pid]
            record = self._record(message)
            if record is not None:
                out.append(record)
        self.stats.records += len(out)
        return out

    def _detect_prefix(self) -> None:
        self._prefix_known = True
        heads = [message.lines[0] for message in list(self._queue)[:_DETECT_MESSAGES]]
        found = detect_prefix(heads, KNOWN_PREFIXES + TIMELESS_PREFIXES)
        if found is not None:
            self._prefix = found
            self.stats.prefix, self.stats.prefix_guessed = found.text, True

    def _record(self, message: _Message) -> LogRecord | None:
        head = message.lines[0]
        colon = head.find(":  ")
        start = severity_start(head, 0, colon)
        if start is None:
            word = _WORD_RE.search(head)
            if word is not None:  # a translated severity (lc_messages not C)
                self.stats.count_unknown_severity(word.group(1))
            else:
                self.stats.skipped += 1
            return None
        severity = head[start:colon]
        text = head[colon + 3:]
        if severity not in KNOWN_SEVERITIES:
            self.stats.skipped += 1  # a DETAIL/HINT/... line whose message is not here
            return None
        if self._candidates_only and not is_candidate(severity, text):
            return None
        fields = self._fields(head[:start])
        t = fields.t if fields is not None and fields.t is not None else None
        if t is None:
            t = self._syslog_time(message.stamp)
            if t is None:
                self.stats.skipped += 1
                return None
        text, attached = _assemble(text, message.lines)
        return LogRecord(
            t,
            message.pid,
            severity,
            text,
            *attached_fields(attached),
            None,
            None,
            fields.user if fields is not None else None,
            fields.database if fields is not None else None,
            fields.client if fields is not None else None,
        )

    def _fields(self, prefix_text: str) -> PrefixFields | None:
        if self._prefix is not None:
            return self._prefix.match(prefix_text, self._ts)
        return guess_fields(prefix_text, self._ts)

    def _syslog_time(self, stamp: tuple[str, str, str]) -> datetime | None:
        if stamp in self._stamps:
            return self._stamps[stamp]
        mon, day, rest = stamp
        t: datetime | None
        if not mon:  # RFC 3339: year and zone are there
            t = self._ts.parse(day, rest)
        else:
            month = _MONTHS.get(mon)
            t = None if month is None else self._traditional(month, int(day), rest)
        if len(self._stamps) > 4096:
            self._stamps.clear()
        self._stamps[stamp] = t
        return t

    def _traditional(self, month: int, day: int, hms: str) -> datetime | None:
        if self._year is None:
            end = self._log_end or datetime.now(UTC)
            self._year = end.year - (1 if month > end.month else 0)
            source = (f"the file's modification time, {end:%B %Y}"
                      if self._log_end is not None else "today's date")
            self.stats.assumed = (f"syslog times have no year and no zone: year "
                                  f"{self._year} assumed ({source}), times taken as UTC")
        elif month < self._month - 6:
            self._year += 1  # December to January
        self._month = month
        try:
            return datetime.fromisoformat(
                f"{self._year:04d}-{month:02d}-{day:02d} {hms}+00:00")
        except ValueError:
            return None  # 29 February of a year that has none: not this year


def _attached(text: str) -> bool:
    """Does this line begin (after a prefix) with DETAIL/HINT/...?"""
    colon = text.find(":  ")
    start = severity_start(text, 0, colon)
    return start is not None and text[start:colon] in ATTACHED


def _assemble(first: str, lines: list[str]) -> tuple[str, dict[str, str]]:
    """The message's text (`first`, then its tab lines) and its DETAIL/HINT/... parts
    (each with its own tab lines), from the message's lines after the first."""
    text = first
    attached: dict[str, str] = {}
    word = ""  # the part being read: "" for the message's own text
    parts = [first]
    for line in lines[1:]:
        if line.startswith("\t"):
            parts.append(line[1:])
            continue
        colon = line.find(":  ")
        start = severity_start(line, 0, colon)
        if start is None or line[start:colon] not in ATTACHED:
            parts.append(line)  # not PostgreSQL's shape: kept as a line of the part
            continue
        if word:
            attached[word] = attached[word] + "\n" + "\n".join(parts) \
                if word in attached else "\n".join(parts)
        else:
            text = "\n".join(parts)
        word, parts = line[start:colon], [line[colon + 3:]]
    if word:
        attached[word] = attached[word] + "\n" + "\n".join(parts) \
            if word in attached else "\n".join(parts)
    else:
        text = "\n".join(parts)
    return text, attached
