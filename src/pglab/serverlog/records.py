"""One logical log message in any format, parse statistics, and log timestamps.

PostgreSQL writes times as `2026-11-21 17:03:07.123 UTC` (%m, csvlog, jsonlog) or without
milliseconds (%t), with the zone as an abbreviation (`UTC`, `CET`) or, for zones without
one, a numeric offset (`+01`, `-0330`). Everything is turned into tz-aware UTC here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

UTC = timezone.utc


class LogRecord(NamedTuple):
    """One logical log message (a line plus its DETAIL/HINT/... lines), any format.

    Immutable. A NamedTuple rather than a frozen dataclass: a big log yields millions of
    these, and a tuple is built several times faster.
    """

    t: datetime  # tz-aware, UTC
    pid: int | None
    severity: str
    message: str
    detail: str | None = None
    hint: str | None = None
    context: str | None = None
    statement: str | None = None  # STATEMENT (or QUERY) text
    backend_type: str | None = None  # csvlog/jsonlog only
    sqlstate: str | None = None  # csvlog/jsonlog only
    user: str | None = None  # %u, csvlog/jsonlog's user
    database: str | None = None  # %d, csvlog/jsonlog's database
    client: str | None = None  # %r (host(port)) or %h, csvlog/jsonlog's connection


def attached_fields(attached: dict[str, str]) -> tuple[str | None, str | None, str | None,
                                                     str | None]:
    """A text log's message: its DETAIL, HINT, CONTEXT and STATEMENT lines (a QUERY line
    stands for the statement), in LogRecord's order."""
    return (attached.get("DETAIL"), attached.get("HINT"), attached.get("CONTEXT"),
            attached.get("STATEMENT") or attached.get("QUERY"))


@dataclass
class ParseStats:
    """What a reader saw. `skipped` counts lines/records that could not be read."""

    lines: int = 0
    records: int = 0
    skipped: int = 0
    format: str = "stderr"  # a name of decoders.FORMATS
    format_given: bool = False  # named by the caller (--format), not detected
    unknown_zones: int = 0  # timestamps whose zone name was unknown (taken as UTC)
    # lines of other programs than PostgreSQL: CloudNativePG's other loggers, other
    # programs' lines in a syslog file
    other_loggers: int = 0
    # stderr: the log_line_prefix read with (None: not recognised, read heuristically)
    # and whether it was guessed (not given with --prefix)
    prefix: str | None = None
    prefix_guessed: bool = False
    # what the reader had to assume to place messages in time (syslog: the year), said
    # to the user; None when nothing was
    assumed: str | None = None
    # where the times come from when the lines themselves carry none (Cloud Logging
    # entries: their timestamp), said to the user; None when the lines have them
    time_source: str | None = None
    # messages whose severity is none of PostgreSQL's English words (a server with
    # lc_messages other than C writes `FEHLER`, `ERREUR`...): word -> count
    unknown_severities: dict[str, int] = field(default_factory=dict)

    def add(self, other: ParseStats) -> None:
        self.lines += other.lines
        self.records += other.records
        self.skipped += other.skipped
        self.unknown_zones += other.unknown_zones
        self.other_loggers += other.other_loggers
        for word, count in other.unknown_severities.items():
            self.unknown_severities[word] = self.unknown_severities.get(word, 0) + count

    def count_unknown_severity(self, word: str) -> None:
        # bounded: a garbled column must not grow this without end
        if word in self.unknown_severities or len(self.unknown_severities) < 20:
            self.unknown_severities[word] = self.unknown_severities.get(word, 0) + 1


# Abbreviations PostgreSQL's tz database prints for common zones. Ambiguous ones are
# resolved to their most common meaning (CST = US Central, IST = India).
_ZONE_HOURS: dict[str, float] = {
    "UTC": 0,
    "GMT": 0,
    "UT": 0,
    "Z": 0,
    "WET": 0,
    "WEST": 1,
    "BST": 1,
    "IST": 5.5,
    "CET": 1,
    "CEST": 2,
    "MET": 1,
    "MEST": 2,
    "EET": 2,
    "EEST": 3,
    "MSK": 3,
    "SAST": 2,
    "WAT": 1,
    "CAT": 2,
    "EAT": 3,
    "PKT": 5,
    "HKT": 8,
    "SGT": 8,
    "AWST": 8,
    "JST": 9,
    "KST": 9,
    "ACST": 9.5,
    "ACDT": 10.5,
    "AEST": 10,
    "AEDT": 11,
    "NZST": 12,
    "NZDT": 13,
    "HST": -10,
    "AKST": -9,
    "AKDT": -8,
    "PST": -8,
    "PDT": -7,
    "MST": -7,
    "MDT": -6,
    "CST": -6,
    "CDT": -5,
    "EST": -5,
    "EDT": -4,
    "AST": -4,
    "ADT": -3,
    "NST": -3.5,
    "NDT": -2.5,
}

_OFFSET_RE = re.compile(r"([+-])(\d\d):?(\d\d)?$")


class TimestampParser:
    """Parses PostgreSQL log timestamps to UTC; counts zones it had to guess.

    Zone lookups are cached, so a log in one zone costs one dictionary lookup per
    timestamp on top of `datetime.fromisoformat`.
    """

    def __init__(self) -> None:
        self.unknown_zones = 0
        self._zones: dict[str, tuple[timedelta, bool]] = {}

    @staticmethod
    def _resolve(name: str) -> tuple[timedelta, bool]:
        hours = _ZONE_HOURS.get(name.upper())
        if hours is not None:
            return timedelta(hours=hours), False
        m = _OFFSET_RE.match(name)
        if m:
            delta = timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0))
            return (-delta if m.group(1) == "-" else delta), False
        return timedelta(0), True

    def zone(self, zone: str | None) -> tuple[timedelta, bool]:
        """(UTC offset, unknown?) of a zone as printed in the log; unknown means UTC."""
        key = zone or "UTC"
        cached = self._zones.get(key)
        if cached is None:
            cached = self._resolve(key)
            self._zones[key] = cached
        return cached

    def parse(self, stamp: str, zone: str | None) -> datetime | None:
        """`stamp` is `YYYY-MM-DD HH:MM:SS[.fff]`, `zone` what followed it (or None)."""
        offset, unknown = self.zone(zone)
        if unknown:
            self.unknown_zones += 1
        try:
            # parsing with an explicit +00:00 is several times faster than .replace()
            t = datetime.fromisoformat(stamp + "+00:00")
        except ValueError:
            lenient = _fromisoformat_lenient(stamp)
            if lenient is None:
                return None
            t = lenient
        return t - offset if offset else t

    def parse_text(self, text: str) -> datetime | None:
        """A whole `2026-11-21 17:03:07.123 UTC` field (csvlog, jsonlog)."""
        stamp, _, zone = text.strip().rpartition(" ")
        if not stamp:  # no zone part at all
            return self.parse(zone, None)
        if len(stamp) < 19:  # the space was the date/time separator: no zone
            return self.parse(text.strip(), None)
        return self.parse(stamp, zone)

    @staticmethod
    def from_epoch(text: str) -> datetime | None:
        """%n in log_line_prefix: seconds since the epoch with milliseconds."""
        try:
            return datetime.fromtimestamp(float(text), UTC)
        except (ValueError, OverflowError, OSError):
            return None


def _fromisoformat_lenient(stamp: str) -> datetime | None:
    """Python 3.10 accepts only 3 or 6 fraction digits; pad or cut to 6."""
    whole, dot, fraction = stamp.partition(".")
    if not dot or not fraction.isdigit():
        return None
    try:
        return datetime.fromisoformat(f"{whole}.{fraction[:6].ljust(6, '0')}+00:00")
    except ValueError:
        return None


_RFC3339_RE = re.compile(
    r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|z|[+-]\d\d:\d\d)$")


def rfc3339_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp (`2020-05-02T13:00:20.382318Z`, up to nanoseconds)
    in UTC; None if it has none."""
    m = _RFC3339_RE.match(value) if isinstance(value, str) else None
    if m is None:
        return None
    day, hms, fraction, zone = m.groups()
    offset = "+00:00" if zone in ("Z", "z") else zone
    try:
        t = datetime.fromisoformat(f"{day}T{hms}.{(fraction or '')[:6].ljust(6, '0')}{offset}")
    except ValueError:
        return None
    return t.astimezone(UTC)
