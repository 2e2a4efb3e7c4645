"""The three server-log formats: telling them apart, and a decoder for each.

Each decoder is incremental: `feed(text)` returns the records completed by the text,
holding back what may be incomplete (a partial last line, a stderr message whose DETAIL
lines may follow, a csv record inside an open quote); `finish()` returns the rest. The
same decoders serve whole files (fed in large chunks) and live tails.

Nothing here raises on bad input: undecodable bytes become U+FFFD, lines that look like
a message but have no readable time, csv records with broken quotes and invalid JSON
are counted in ParseStats.skipped.
"""

from __future__ import annotations

import re

from pglab.serverlog.csvlog import CsvDecoder
from pglab.serverlog.decoder_base import Decoder
from pglab.serverlog.jsonlog import JsonDecoder
from pglab.serverlog.prefix import LinePrefix
from pglab.serverlog.records import ParseStats, TimestampParser
from pglab.serverlog.stderr import StderrDecoder

FORMATS = ("stderr", "csvlog", "jsonlog")


def make_decoder(
    fmt: str,
    stats: ParseStats,
    timestamps: TimestampParser,
    candidates_only: bool,
    prefix: LinePrefix | None = None,
) -> Decoder:
    """prefix: the log_line_prefix of a stderr log (ignored by csvlog and jsonlog, which
    carry their fields in columns)."""
    if fmt == "stderr":
        return StderrDecoder(stats, timestamps, candidates_only, prefix)
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
