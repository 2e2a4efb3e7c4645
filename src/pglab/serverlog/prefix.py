"""A log_line_prefix compiled into a parser of the prefix text of stderr log lines.

Given the server's own log_line_prefix (`pglab logs --prefix`), every field of a line's
prefix is read where the server put it: the time, the pid, the user, the database and
the client, whatever the separators. Without one, `KNOWN_PREFIXES` (the shapes pglab,
Debian and the managed services write) are tried on the first message lines of a log.

Escapes are those of PostgreSQL's log_line_prefix (docs: "What to Log"). A padded
escape (`%-10u`, `%5p`) may carry spaces on either side. `%q` ends the prefix of
processes without a session (background workers print nothing after it), so what
follows it is optional.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from pglab.serverlog.records import TimestampParser

_STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
# PostgreSQL prints a zone abbreviation, or for zones without one a numeric offset
# without colon (`+01`, `-0330`).
_ZONE = r"[A-Za-z]{1,6}|[+-]\d\d(?:\d\d)?"

# escape -> (group name or None, pattern). A field of free text (names) is matched
# lazily: the separators around it in the prefix decide where it ends.
_ESCAPES: dict[str, tuple[str | None, str]] = {
    "m": ("time", rf"(?P<ts>{_STAMP}\.\d{{3}}) (?P<tz>{_ZONE})"),
    "t": ("time", rf"(?P<ts>{_STAMP}) (?P<tz>{_ZONE})"),
    "n": ("time", r"(?P<epoch>\d+\.\d{3})"),
    "p": ("pid", r"\d+"),
    "P": (None, r"\d*"),  # parallel group leader's pid: empty unless a parallel worker
    "u": ("user", r".*?"),
    "d": ("database", r".*?"),
    "a": (None, r".*?"),  # application_name
    "b": (None, r".*?"),  # backend type
    "r": ("client", r"\[local\]|[^\s()]*\(\d+\)|[^\s()]*"),  # host(port), [local] or ""
    "h": ("client", r"\[local\]|[^\s()]*"),
    "i": (None, r".*?"),  # command tag
    "e": (None, r"[0-9A-Z]{5}"),  # SQLSTATE
    "c": (None, r"[0-9a-f]+\.[0-9a-f]+"),  # session id
    "l": (None, r"\d+"),  # line number of the session
    "s": (None, rf"{_STAMP} (?:{_ZONE})"),  # session start: not the message's time
    "v": (None, r"[0-9/]*"),  # virtual transaction id (empty outside a backend)
    "x": (None, r"\d+"),  # transaction id (0 if none)
    "Q": (None, r"-?\d+"),  # query id
    "L": (None, r"[^\s]*"),  # local address (PostgreSQL 18)
}
_ESCAPE_RE = re.compile(r"%(-?\d+)?(.)", re.S)

# The prefixes real deployments write, tried on a log without --prefix (the first wins a
# tie): pglab's own and PostgreSQL's default (%m [%p] ), Debian/Ubuntu's default (and the
# one before PostgreSQL 10), Amazon RDS and Aurora (the sample in
# tests/samples/serverlog/rds), the one pgBadger's documentation asks stderr users for
# (tests/samples/serverlog/pgbadger; with %m too, and without %l), and as Google Cloud
# SQL's and Azure Database for PostgreSQL's logs show them (not checked against those
# services).
KNOWN_PREFIXES = (
    "%m [%p] ",
    "%t [%p] ",
    "%m [%p] %q%u@%d ",
    "%t [%p-%l] %q%u@%d ",
    "%t:%r:%u@%d:[%p]:",
    "%t [%p]: [%l-1] user=%u,db=%d,app=%a,client=%h ",
    "%m [%p]: [%l-1] user=%u,db=%d,app=%a,client=%h ",
    "%t [%p]: user=%u,db=%d,app=%a,client=%h ",
    "%m [%p]: [%l-1] db=%d,user=%u ",
    "%t-%c-",
)


# Prefixes without a time, for lines whose envelope stamps each one: tried after
# KNOWN_PREFIXES on a syslog file's messages, and on Cloud Logging entries' textPayloads
# that carry no time. As syslog users write them; Heroku Postgres' with and without the
# leading space its drained lines show (pgBadger's t/fixtures/logplex.gz); Cloud SQL's
# as its exports show it (pgBadger's t/fixtures/cloudsql.log.gz).
TIMELESS_PREFIXES = (
    "%q%u@%d ",
    "[%l-1] user=%u,db=%d ",
    "sql_error_code = %e ",
    " sql_error_code = %e ",
    "[%p]: [%l-1] db=%d,user=%u ",
    "",
)


@dataclass(frozen=True)
class PrefixFields:
    """What a line's prefix says; fields the prefix has no escape for are None, and so
    are empty ones (background processes have no user, database or client). `t` is None
    only for a prefix without a time escape (syslog, which stamps lines itself)."""

    t: datetime | None
    pid: int | None
    user: str | None
    database: str | None
    client: str | None


def envelope_stamp(t: datetime) -> str:
    """The time a reader writes in front of a line whose envelope carries it (Cloud
    Logging's `timestamp`), for a LinePrefix(text, stamped=True) to read back: as %m,
    with microseconds."""
    return f"{t:%Y-%m-%d %H:%M:%S.%f} UTC "


class LinePrefix:
    """A compiled log_line_prefix. `match(text)` reads the prefix text of one line (the
    line up to its severity word). stamped: each line starts with an envelope_stamp,
    which gives the time (a time escape of the prefix itself is then read as text)."""

    def __init__(self, text: str, stamped: bool = False) -> None:
        self.text = text
        self.stamped = stamped
        pattern, self.has_time = _translate(text, stamped)
        self.regex = re.compile(pattern, re.S)

    def match(self, prefix: str, timestamps: TimestampParser) -> PrefixFields | None:
        m = self.regex.fullmatch(prefix)
        if m is None:
            return None
        groups = m.groupdict()
        t: datetime | None = None
        if self.has_time:
            epoch = groups.get("epoch")
            t = (timestamps.from_epoch(epoch) if epoch
                 else timestamps.parse(groups["ts"], groups["tz"]))
            if t is None:
                return None
        pid = groups.get("pid")
        return PrefixFields(
            t,
            int(pid) if pid else None,
            _field(groups.get("user")),
            _field(groups.get("database")),
            _field(groups.get("client")),
        )


def _field(value: str | None) -> str | None:
    value = value.strip() if value is not None else None
    # A session's first message, before its startup packet is read, prints [unknown]
    # for the user and the database (csvlog and jsonlog leave them out).
    return value if value and value != "[unknown]" else None


def compile_prefix(text: str, need_time: bool = True) -> LinePrefix:
    """The parser for a log_line_prefix; ValueError (one line, for the user) if it has no
    time escape and need_time (a stderr log's lines have no other time; syslog's do)."""
    prefix = _known(text)
    if need_time and not prefix.has_time:
        raise ValueError(
            f"{text!r} has no time escape: pglab needs %m, %t or %n in the prefix "
            "to place messages in time (syslog, Heroku and Cloud Logging files excepted)"
        )
    return prefix


def _translate(text: str, stamped: bool = False) -> tuple[str, bool]:
    parts: list[str] = [rf"(?P<ts>{_STAMP}\.\d{{6}}) (?P<tz>UTC) "] if stamped else []
    seen: set[str] = {"time"} if stamped else set()
    pos = 0
    optional_from: int | None = None
    for m in _ESCAPE_RE.finditer(text):
        parts.append(re.escape(text[pos : m.start()]))
        pos = m.end()
        pad, letter = m.group(1), m.group(2)
        if letter == "%":
            parts.append("%")
            continue
        if letter == "q":
            optional_from = len(parts)
            continue
        if letter not in _ESCAPES:
            # PostgreSQL ignores an escape it does not know (prints nothing for it): the
            # prefix as the server has it must read its lines
            continue
        name, pattern = _ESCAPES[letter]
        if name is not None and name not in seen:
            seen.add(name)
            # the time's pattern names its own parts (stamp and zone, or epoch)
            group = f"(?:{pattern})" if name == "time" else f"(?P<{name}>{pattern})"
        else:
            # a second escape of the same kind (or one pglab does not read): the
            # first one is the field; names inside the time pattern must not repeat
            group = "(?:" + re.sub(r"\?P<\w+>", "?:", pattern) + ")"
        parts.append(f" *{group} *" if pad else group)
    parts.append(re.escape(text[pos:]))
    if optional_from is not None:
        rest = "".join(parts[optional_from:])
        parts[optional_from:] = [f"(?:{rest})?"] if rest else []
    return "".join(parts), "time" in seen


def detect_prefix(
    lines: list[str], candidates: tuple[str, ...] = KNOWN_PREFIXES
) -> LinePrefix | None:
    """The one of `candidates` that reads the most message lines (a severity word and
    ':  ') of a log's start, at least 90% of them; the first in the list on a tie. The
    most, not the first: Debian's `%m [%p] %q%u@%d ` reads background processes' lines
    like `%m [%p] ` does, and only it reads the sessions' lines. None when none does."""
    heads = [line for line in lines if not line.startswith("\t") and ":  " in line]
    if not heads:
        return None
    timestamps = TimestampParser()
    best: LinePrefix | None = None
    best_hits = 0
    for text in candidates:
        prefix = _known(text)
        hits = 0
        for line in heads:
            start = severity_start(line, 0, line.find(":  "))
            if start is not None and prefix.match(line[:start], timestamps) is not None:
                hits += 1
        if hits > best_hits:
            best, best_hits = prefix, hits
    return best if best_hits >= 0.9 * len(heads) else None


# The time in a log_line_prefix: %m / %t (with zone) or %n (epoch).
_PREFIX_TIME_RE = re.compile(
    r"(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?)"
    r"(?: (?P<tz>[A-Za-z]{1,6}|[+-]\d\d(?:\d\d)?)(?![\w]))?"
    r"|(?P<epoch>\d{9,11}\.\d{3})"
)
# The pid: the last [%p] before the severity (a number inside %r's `host(port)` comes
# before it), else pid=%p, else the first free-standing number that is not the port of
# a `host(port)` (a `(%p)` after a space still is one).
_PREFIX_BRACKET_PID_RE = re.compile(r"\[(\d+)\]")
_PREFIX_PID_RE = re.compile(r"pid=(\d+)|(?<![\w.:/-])(?<![\w.:\]]\()(\d{1,9})(?![\w.:/-])")


def guess_fields(prefix: str, timestamps: TimestampParser) -> PrefixFields | None:
    """The fields of a prefix text no known log_line_prefix reads: the time found
    anywhere in it, the pid as the last `[%p]` after it (RDS's `%r` before it prints
    `host(port)`), `pid=%p` or the first free-standing number. None without a time."""
    m = _PREFIX_TIME_RE.search(prefix)
    if m is None:
        return None
    epoch = m.group("epoch")
    t = timestamps.from_epoch(epoch) if epoch else timestamps.parse(m.group("ts"), m.group("tz"))
    if t is None:
        return None
    brackets = _PREFIX_BRACKET_PID_RE.findall(prefix, m.end())
    if brackets:
        return PrefixFields(t, int(brackets[-1]), None, None, None)
    end = m.end()
    pm = _PREFIX_PID_RE.search(prefix, end) or _PREFIX_PID_RE.search(prefix, 0, m.start())
    if pm is None:
        return PrefixFields(t, None, None, None, None)
    return PrefixFields(t, int(pm.group(1) or pm.group(2)), None, None, None)


_compiled: dict[tuple[str, bool], LinePrefix] = {}


def _known(text: str, stamped: bool = False) -> LinePrefix:
    prefix = _compiled.get((text, stamped))
    if prefix is None:
        prefix = _compiled[text, stamped] = LinePrefix(text, stamped)
    return prefix


def stamped_prefix(text: str) -> LinePrefix:
    """The log_line_prefix `text` of lines that start with an envelope_stamp."""
    return _known(text, True)


SEVERITY_WORDS = frozenset(
    {"LOG", "ERROR", "FATAL", "PANIC", "WARNING", "NOTICE", "INFO", "DETAIL", "HINT",
     "CONTEXT", "STATEMENT", "QUERY", "LOCATION", "DEBUG", "DEBUG1", "DEBUG2", "DEBUG3",
     "DEBUG4", "DEBUG5"}
)
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def severity_start(text: str, start: int, colon: int) -> int | None:
    """Where the severity word (or DETAIL/HINT/...) that ends at `colon` begins: a
    prefix need not end with a space (RDS's ends with `]:`), so the word is the
    longest known one the text before the colon ends with. None if there is none."""
    if colon < 0:
        return None
    i = colon
    while i > start and text[i - 1] in _WORD_CHARS:
        i -= 1
    # "…@ORDERS:LOG" is not possible (a ':' separates), but "…]XLOG" would be: trim
    # from the left until the rest is a known word.
    while i < colon:
        if text[i:colon] in SEVERITY_WORDS:
            return i
        i += 1
    return None
