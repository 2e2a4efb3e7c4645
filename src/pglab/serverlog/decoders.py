"""The server-log formats (the registry FORMATS): telling them apart, a decoder for each.

Each decoder is incremental: `feed(text)` returns the records completed by the text,
holding back what may be incomplete (a partial last line, a stderr message whose DETAIL
lines may follow, a csv record inside an open quote, syslog pieces of one message);
`finish()` returns the rest. The
same decoders serve whole files (fed in large chunks) and live tails.

Nothing here raises on bad input: undecodable bytes become U+FFFD, lines that look like
a message but have no readable time, csv records with broken quotes and invalid JSON
are counted in ParseStats.skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from pglab.serverlog.cloudlogging import CloudLoggingDecoder
from pglab.serverlog.csvlog import CsvDecoder
from pglab.serverlog.decoder_base import Decoder
from pglab.serverlog.jsonlog import JsonDecoder
from pglab.serverlog.prefix import LinePrefix
from pglab.serverlog.records import ParseStats, TimestampParser
from pglab.serverlog.stderr import StderrDecoder
from pglab.serverlog.syslog import SyslogDecoder


@dataclass(frozen=True)
class DecoderArgs:
    """What a decoder may need. prefix: the log_line_prefix of stderr lines (stderr,
    syslog, cloudlogging; csvlog and jsonlog carry their fields in columns). log_end:
    when the log ended (syslog takes the year of its times from it; None: now)."""

    stats: ParseStats
    timestamps: TimestampParser
    candidates_only: bool
    prefix: LinePrefix | None
    log_end: datetime | None


@dataclass(frozen=True)
class LogFormat:
    name: str
    description: str  # for --format's help, `pglab logs` and docs/LOGS.md
    decoder: Callable[[DecoderArgs], Decoder]


# The format registry: what --format accepts and detect_format can answer.
FORMATS: dict[str, LogFormat] = {f.name: f for f in (
    LogFormat("stderr", "plain text with a log_line_prefix (log_destination = 'stderr')",
              lambda a: StderrDecoder(a.stats, a.timestamps, a.candidates_only, a.prefix)),
    LogFormat("csvlog", "CSV, one record per row (log_destination = 'csvlog')",
              lambda a: CsvDecoder(a.stats, a.timestamps, a.candidates_only)),
    LogFormat("jsonlog", "one JSON object per line (PostgreSQL 15+), and CloudNativePG's "
              "pod output",
              lambda a: JsonDecoder(a.stats, a.timestamps, a.candidates_only)),
    LogFormat("syslog", "a syslog file (log_destination = 'syslog'; rsyslog, journalctl)",
              lambda a: SyslogDecoder(a.stats, a.timestamps, a.candidates_only, a.prefix,
                                      a.log_end)),
    LogFormat("heroku", "Heroku Postgres' logs as `heroku logs -p postgres` prints them "
              "(logplex: app[postgres.PID]: [DATABASE] [SEQ-N] ...), or through a log drain",
              lambda a: SyslogDecoder(a.stats, a.timestamps, a.candidates_only, a.prefix,
                                      a.log_end)),
    LogFormat("cloudlogging", "Google Cloud Logging entries with the line in textPayload "
              "(Cloud SQL), one per line or a JSON array",
              lambda a: CloudLoggingDecoder(a.stats, a.timestamps, a.candidates_only,
                                            a.prefix)),
)}


# formats whose records carry a time of their own (a log_line_prefix needs none): the
# syslog line's, the Cloud Logging entry's timestamp
STAMPED_FORMATS = ("syslog", "heroku", "cloudlogging")
# formats whose messages are stderr lines with a log_line_prefix
LINE_FORMATS = ("stderr", "syslog", "heroku", "cloudlogging")


def unknown_format(fmt: str) -> str:
    """The one-line complaint about a format name not in FORMATS."""
    return f"unknown log format {fmt!r} (one of {', '.join(FORMATS)})"


def make_decoder(
    fmt: str,
    stats: ParseStats,
    timestamps: TimestampParser,
    candidates_only: bool,
    prefix: LinePrefix | None = None,
    log_end: datetime | None = None,
) -> Decoder:
    """A decoder of format `fmt` (a name of FORMATS); see DecoderArgs for the rest."""
    known = FORMATS.get(fmt)
    if known is None:
        raise ValueError(unknown_format(fmt))
    return known.decoder(DecoderArgs(stats, timestamps, candidates_only, prefix, log_end))


# --- format detection ------------------------------------------------------------------

_STAMP = rb"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?"
# csvlog's first column, the time: bare as PostgreSQL writes it, or quoted as tools that
# rewrite a csvlog do (pgBadger's t/fixtures/csv_statement_without_duration.log)
_CSV_LINE_RE = re.compile(rb'(?:"' + _STAMP + rb'(?: [^,\s"]{1,8})?"|' + _STAMP
                          + rb'(?: [^,\s]{1,8})?),')
_STDERR_LINE_RE = re.compile(rb"[^\n]{0,40}?(?:" + _STAMP + rb"|\d{9,11}\.\d{3})")
# `Nov 23 20:19:05 host postgres[12]: ` or an RFC 3339 time before the host
_SYSLOG_LINE_RE = re.compile(
    rb"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?"
    rb"(?:Z|[+-]\d\d:?\d\d)) (?:[^ ]+ )?[^ \[:]+\[\d+\]: "
)
# logplex's `TIME app[postgres.PID]: `; through a log drain `TIME d.UUID app[...] `
_HEROKU_LINE_RE = re.compile(
    rb"\d{4}-\d\d-\d\dT[^ ]+ (?:[^ ]+ )?app\[(?:postgres\.\d+|heroku-postgres)\]:? ")
# a Cloud Logging entry: these keys are in every one
_CLOUD_RE = re.compile(rb'"(?:textPayload|logName|insertId)"\s*:')


def detect_format(head: bytes, name: str = "") -> str:
    """Guess the format from the first bytes of a log (content first, then the name)."""
    if head.lstrip(b"\r\n\t \xef\xbb\xbf").startswith(b"[") and _CLOUD_RE.search(head):
        return "cloudlogging"  # a JSON array of entries (gcloud logging read)
    votes = dict.fromkeys(FORMATS, 0)
    for raw in head.split(b"\n")[:50]:
        line = raw.strip(b"\r\t \xef\xbb\xbf")  # BOM, stray whitespace
        if not line:
            continue
        if line.startswith(b"{"):
            votes["cloudlogging" if _CLOUD_RE.search(line) else "jsonlog"] += 1
        elif _HEROKU_LINE_RE.match(line):
            votes["heroku"] += 1
        elif _SYSLOG_LINE_RE.match(line):
            votes["syslog"] += 1
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
