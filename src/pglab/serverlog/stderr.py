"""stderr logs: plain text written with a log_line_prefix that has a time escape.

Two scanners: the fast one of stderr_fast for the `%m [%p] ` / `%t [%p] ` prefix shape
(chosen when the first message lines of the log have it) and a general one here for any
prefix with a time escape. The general one reads each line's prefix with a compiled
log_line_prefix (given, or one of prefix.KNOWN_PREFIXES that the log's first message
lines match); failing that, heuristically: the time found anywhere in the prefix, the
pid as the last `[%p]` (RDS's `%r` before it prints `host(port)`), `pid=%p` or the
first free-standing number.

Nothing here raises on bad input: undecodable bytes became U+FFFD before, lines that
look like a message but have no readable time are counted in ParseStats.skipped.
"""

from __future__ import annotations

import re

from pglab.events import Event
from pglab.serverlog import stderr_fast
from pglab.serverlog.extractor import EventExtractor
from pglab.serverlog.prefix import (
    LinePrefix,
    PrefixFields,
    detect_prefix,
    guess_fields,
    severity_start,
)
from pglab.serverlog.records import LogRecord, ParseStats, TimestampParser, attached_fields
from pglab.serverlog.stderr_fast import ATTACHED, SEVERITIES, last_message_start, scan_shaped
from pglab.serverlog.triggers import LOG_TRIGGERS

# ":  " follows the severity word. As the literal start of the pattern it lets the regex
# engine skip through the text fast; the lookbehinds then check which severity it was.
_CANDIDATE_RE = re.compile(
    ":  (?:(?<=LOG:  )(?:" + "|".join(LOG_TRIGGERS) + ")|(?<=ERROR:  )|(?<=FATAL:  )|(?<=PANIC:  ))"
)
_ANY_SEVERITY_RE = re.compile(":  (?:" + "|".join(f"(?<={s}:  )" for s in SEVERITIES) + ")")

class StderrDecoder:
    """Plain-text logs written with a log_line_prefix that has a time (and ideally a
    pid) escape. Continuation lines are tab-indented; DETAIL/HINT/CONTEXT/STATEMENT/
    QUERY/LOCATION lines of the same message follow it with the same prefix.

    The buffer always starts with the newline that ends the line
    before it (a "\n" is put in front of the first text), so every line, the first
    included, is found by its preceding newline.

    candidates_only: only messages that can produce an event become records (fast);
    otherwise every message does, and lines belonging to no message are `skipped`.
    """

    def __init__(
        self,
        stats: ParseStats,
        timestamps: TimestampParser,
        candidates_only: bool = True,
        prefix: LinePrefix | None = None,
    ) -> None:
        self.stats = stats
        self._ts = timestamps
        # the log_line_prefix to read lines with: given (--prefix), or detected on the
        # first text when the fast shape does not fit
        if prefix is not None and not prefix.has_time:
            raise ValueError(f"{prefix.text!r} has no time escape: a stderr log's lines "
                             "have no other time")
        self._line_prefix = prefix
        if prefix is not None:
            stats.prefix, stats.prefix_guessed = prefix.text, False
        self._all = not candidates_only
        self._heads = _ANY_SEVERITY_RE if self._all else _CANDIDATE_RE
        self._shape_re = stderr_fast.ANY_RE if self._all else stderr_fast.CANDIDATE_RE
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
            self._shaped = False if self._line_prefix else stderr_fast.looks_shaped(buf)
            if self._shaped is not None and self._line_prefix is None:
                found = detect_prefix(buf[: 1 << 16].split("\n")[:-1])
                if found is not None and found.text not in _FAST_PREFIXES:
                    # a prefix that extends the fast shape for some lines (Debian's
                    # sessions): the fast regex would drop those lines
                    self._shaped = False
                    self._line_prefix = found
                    self.stats.prefix, self.stats.prefix_guessed = found.text, True
            if self._shaped:
                self.stats.prefix = "%m [%p] " if _has_millis(buf) else "%t [%p] "
                self.stats.prefix_guessed = True
        # Only whole lines are looked at; a partial last line waits for more text.
        safe_end = len(buf) if final else buf.rfind("\n") + 1
        if self._shaped:
            # Messages that may still go on (the last one, unless eager) wait for more text.
            end = safe_end - 1 if eager else last_message_start(buf, safe_end)
            if end <= 0:
                return [], [], 0
            records, events, claimed = scan_shaped(
                buf, end, self._shape_re, self.stats, self._ts, extractor, self._all
            )
        else:
            records, end, claimed = self._scan_generic(buf, safe_end, eager)
            events = extractor.feed_many(records) if extractor is not None else []
        if self._all:
            # every line that starts before `end` and belongs to no message is junk
            self.stats.skipped += max(0, buf.count("\n", 0, end) - claimed)
        return records, events, end

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
            # the prefix need not end with a space (RDS's ends with `]:`)
            word = severity_start(buf, line_start, colon)
            sp = colon if word is None else word
            severity = buf[sp:colon]
            prefix = buf[line_start:sp]
            parsed = self._prefix(prefix) if word is not None else None
            if parsed is None:
                self.stats.skipped += 1  # looks like a message line but has no readable time
                consumed = line_end + 1
                continue
            t, pid = parsed.t, parsed.pid
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
                        *attached_fields(attached),
                        None,
                        None,
                        parsed.user,
                        parsed.database,
                        parsed.client,
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
                start = severity_start(buf, pos, j) if j > 0 else None
                word = buf[start:j] if start is not None else ""
                if start is not None and word in ATTACHED:
                    other = self._prefix(buf[pos:start])
                    if other is None or (pid is not None and other.pid != pid):
                        word = ""
            if word not in ATTACHED:
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

    def _prefix(self, prefix: str) -> PrefixFields | None:
        """The fields of a line's prefix text, or None if it has no readable time."""
        if self._line_prefix is not None:
            return self._line_prefix.match(prefix, self._ts)
        return guess_fields(prefix, self._ts)


def _has_millis(buf: str) -> bool:
    """Does the first message line's time have milliseconds (%m rather than %t)?"""
    for line in buf[: 1 << 16].split("\n"):
        if ":  " in line and not line.startswith("\t"):
            return line[19:20] == "."
    return True


# The prefixes stderr_fast reads (and names when it is used).
_FAST_PREFIXES = ("%m [%p] ", "%t [%p] ")
# Continuation lines of a message: each starts with a tab (whole lines only).
_TAB_LINES_RE = re.compile(r"(?:\t[^\n]*\n)+")
# LogRecord is a NamedTuple; building it from a tuple skips its Python-level __new__.
_new_record = tuple.__new__
