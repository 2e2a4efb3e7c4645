"""The fast stderr scanner, for the usual prefix `%m [%p] ` (pglab's own) or `%t [%p] `.

One compiled regex reads a whole message: anchored on the newline before its first line,
it captures time, zone, pid, severity, the message with its tab-indented lines, and the
block of DETAIL/HINT/... lines that carry the same prefix (a backreference to the time
and pid), each with their own tab lines. findall() then returns plain tuples: no
per-line Python code, no match objects. Only lines that can produce an event match
(`triggers.LOG_TRIGGERS`, plus every ERROR/FATAL/PANIC), so the others never reach
Python code, and timestamps are parsed only for the lines that matched.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from pglab.events import Event
from pglab.serverlog.event_parts import MICROSECOND
from pglab.serverlog.extractor import EventExtractor
from pglab.serverlog.records import LogRecord, ParseStats, TimestampParser, attached_fields
from pglab.serverlog.triggers import LOG_TRIGGERS, STATEMENT_MAX

ATTACHED = frozenset({"DETAIL", "HINT", "CONTEXT", "STATEMENT", "QUERY", "LOCATION"})
SEVERITIES = (
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

# Time, zone, [pid]. [0-9] rather than \d: for str patterns \d is any Unicode digit,
# tested by a function call per character, which made a tenth of the scan. The zone
# `UTC` (the usual one) is matched as a literal and leaves its group empty: one string
# less to make per line. `(?:...|)` rather than `(?:...)?`: an optional group is a
# REPEAT in the regex engine, which sets up a repeat context on every line.
_HEAD = (
    r"([0-9]{4}-[0-9][0-9]-[0-9][0-9][ T][0-9][0-9]:[0-9][0-9]:[0-9][0-9](?:\.[0-9]{1,6}|))"
    r" (?:UTC|([^ \[\n]{1,12})) \[([0-9]+)\] "
)
# The same prefix again (a DETAIL line of the message, or the next message of the process)
_SAME_PREFIX = r"\1 (?:UTC|\2) \[\3\] "
_TAIL = (
    r":  ([^\n]*(?:\n\t[^\n]*)*)"
    r"((?:\n" + _SAME_PREFIX + r"(?:DETAIL|HINT|CONTEXT|STATEMENT|QUERY|LOCATION):  [^\n]*"
    r"(?:\n\t[^\n]*)*)*)"
)
# A one-line slow statement (the bulk of many logs) is split by the regex itself:
# groups 4-8 = the whole milliseconds and their 3 decimals (PostgreSQL prints 3),
# phase, prepared name, SQL.
# "One-line": the next line is neither a tab continuation nor a line with the same
# prefix (DETAIL: parameters ...); otherwise the message takes the general alternative
# (groups 9-11) and goes through the rules like any record.
_DURATION = (
    r"LOG:  duration: ([0-9]+)\.([0-9]{3}) ms  (statement|execute|parse|bind|fastpath)([^:\n]*)"
    r": ([^\n]*)(?=\n(?!\t|" + _SAME_PREFIX + "))"
)
CANDIDATE_RE = re.compile(
    "\n"
    + _HEAD
    + "(?:"
    + _DURATION
    + "|(LOG(?=:  (?:"
    + "|".join(LOG_TRIGGERS)
    + "))|ERROR|FATAL|PANIC)"
    + _TAIL
    + ")"
)
ANY_RE = re.compile(
    "\n" + _HEAD + "(?:" + _DURATION + "|(" + "|".join(SEVERITIES) + ")" + _TAIL + ")"
)
_LINE_RE = re.compile(_HEAD + r"[A-Z0-9]+:  ")
_ATTACHED_RE = re.compile(_HEAD + "(?:" + "|".join(sorted(ATTACHED)) + "):  ")
# LogRecord is a NamedTuple; building it from a tuple skips its Python-level __new__,
# which matters with millions of records.
_new_record = tuple.__new__

# A slow statement starts its duration before the line's time. timedelta arithmetic
# on ints is costly (MICROSECOND * n makes a dozen Python ints: 2.4k instructions, the
# dearest step of a slow statement), so the duration's whole milliseconds are looked up
# here (few distinct values: durations are mostly under a few seconds) and its three
# decimals in _FRACTION, each as (timedelta, microseconds); the result is the same
# exact microsecond arithmetic, and the duration in ms the same correctly rounded float.
_WHOLE_MS: dict[str, tuple[timedelta, int]] = {}
_WHOLE_MS_MAX = 1 << 16  # bounds the memory a log of very varied durations can take
_FRACTION = {f"{n:03d}": (MICROSECOND * n, n) for n in range(1000)}


def looks_shaped(buf: str) -> bool | None:
    """Do the message lines at the start of buf use the `<time> <zone> [<pid>] ` prefix?
    None when there is no message line yet to judge by."""
    heads = shaped = 0
    for line in buf[: 1 << 16].split("\n")[:-1]:
        if line.startswith("\t") or ":  " not in line:
            continue
        heads += 1
        if _LINE_RE.match(line):
            shaped += 1
    if heads == 0:
        return None
    return shaped >= 0.9 * heads


def last_message_start(buf: str, safe_end: int) -> int:
    """The newline before the last line (below safe_end) that starts a message: all
    messages before it are complete; it may go on in text not yet read."""
    line_end = safe_end - 1
    while line_end > 0:
        newline = buf.rfind("\n", 0, line_end)
        if newline < 0:
            return 0
        start = newline + 1
        if not buf.startswith("\t", start) and not _ATTACHED_RE.match(buf, start):
            return newline
        line_end = newline
    return 0


def _split_attached(block: str, head: str) -> dict[str, str]:
    """ "\n<prefix>DETAIL:  a\n\tb\n<prefix>HINT:  c" -> {"DETAIL": "a\nb", "HINT": "c"}"""
    attached: dict[str, str] = {}
    for part in block.split(head)[1:]:
        word, _, text = part.partition(":  ")
        text = text.replace("\n\t", "\n")
        attached[word] = attached[word] + "\n" + text if word in attached else text
    return attached


def scan_shaped(
    buf: str,
    end: int,
    pattern: re.Pattern[str],
    stats: ParseStats,
    timestamps: TimestampParser,
    extractor: EventExtractor | None,
    count_lines: bool,
) -> tuple[list[LogRecord], list[Event], int]:
    """The messages in buf[:end] (all complete) that `pattern` (CANDIDATE_RE or ANY_RE)
    matches: as records, or, given an extractor, as events. Also returns how many lines
    they span (only counted if count_lines)."""
    records: list[LogRecord] = []
    events: list[Event] = []
    add_event = events.append
    # with an extractor, records go straight to it and are not kept
    feed_into = extractor.feed_into if extractor is not None else None
    node = extractor.node if extractor is not None else ""
    fromiso = datetime.fromisoformat
    new_record = _new_record
    event_type = Event
    new_object = object.__new__
    statement_max = STATEMENT_MAX
    whole_ms = _WHOLE_MS
    fraction = _FRACTION
    record_type = LogRecord
    zone_seen = ""
    offset, zone_unknown = timestamps.zone("")
    claimed = 0
    skipped = 0
    found = pattern.findall(buf, 0, end)
    # One iteration per message: the hot loop of a big log.
    for stamp, zone, pid, ms_whole, ms_fraction, phase, name, sql, sev, text, block in found:
        if zone is not zone_seen and zone != zone_seen:  # "" (UTC) is one object
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
        if ms_whole:  # a one-line slow statement
            if feed_into is not None:
                # statement_rules.slow_statement_event, inlined: most events of a busy log.
                whole = whole_ms.get(ms_whole)
                if whole is None:
                    if len(whole_ms) >= _WHOLE_MS_MAX:
                        whole_ms.clear()
                    micros = int(ms_whole) * 1000
                    whole = whole_ms[ms_whole] = (MICROSECOND * micros, micros)
                part = fraction[ms_fraction]
                # event_parts.new_event, inlined: the slots filled directly
                event = new_object(event_type)
                event.t_start = t - whole[0] - part[0]
                event.kind = "slow-statement"
                event.node = node
                event.t_end = t
                event.attrs = {
                    # float(ms_text) exactly, as in slow_statement_event: both are
                    # correctly rounded
                    "duration_ms": (whole[1] + part[1]) / 1000,
                    "phase": phase,
                    "prepared": (name.strip() or None) if name else None,
                    "statement": sql[:statement_max],  # the same object when shorter
                    "pid": int(pid),
                }
                add_event(event)
                continue
            claimed += 1
            severity = "LOG"
            message = f"duration: {ms_whole}.{ms_fraction} ms  {phase}{name}: {sql}"
        else:
            if count_lines:
                claimed += 1 + text.count("\n") + block.count("\n")
            severity = sev
            message = text.replace("\n\t", "\n") if "\n" in text else text
        if block:
            attached = _split_attached(block, f"\n{stamp} {zone or 'UTC'} [{pid}] ")
            record = new_record(
                record_type,
                (
                    t,
                    int(pid),
                    severity,
                    message,
                    *attached_fields(attached),
                    None,
                    None,
                    None,
                    None,
                    None,
                ),
            )
        else:
            record = new_record(
                record_type,
                (t, int(pid), severity, message, None, None, None, None, None, None, None,
                 None, None),
            )
        if feed_into is not None:
            feed_into(record, events)
        else:
            records.append(record)
    # every message found is a record, whether it was kept or went straight to an event
    stats.records += len(found) - skipped
    stats.skipped += skipped
    return records, events, claimed
