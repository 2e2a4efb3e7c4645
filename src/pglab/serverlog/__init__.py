"""PostgreSQL server-log parser: the logs of PostgreSQL 13-18 to events, in any of the
formats of FORMATS (stderr, csvlog, jsonlog and CloudNativePG's JSON, syslog files, Google
Cloud Logging exports).

Pure, streaming and fast; it never raises on bad text (what it cannot read is counted
in ParseStats.skipped); a compressed file whose data does not decompress raises
DamagedLog, one line naming the file. Event kinds (EVENT_KINDS): checkpoint,
checkpoint-too-frequent, autovacuum, autoanalyze, lock-wait, deadlock, temp-file,
slow-statement, statement-plan,
connection-reset, crash, recovery, server-start, server-stop, error.

    events, stats = parse_log_file(Path("raw/postgresql.log"))       # one file
    events, per_file = parse_log_files([older, newer])                # rotated files
    for event in iter_events([path]): ...                             # bounded memory
    for batch in iter_event_batches([path]): ...                      # fastest
    records, stats = read_records(path)                               # every message
    tail = LogTail(); tail.feed(text) ...; tail.close()               # a growing log

Messages must be in English (lc_messages = 'C'; other severities are counted in
ParseStats.unknown_severities); stderr logs need a log_line_prefix with a time escape
(%m, %t or %n) and preferably the pid (%p); syslog's lines have times of their own.
The prefix is detected (prefix.KNOWN_PREFIXES, then heuristics) or given:
`prefix=compile_prefix(text)`.
"""

from pglab.serverlog.decoders import FORMATS, detect_format
from pglab.serverlog.extractor import EVENT_KINDS, EventExtractor
from pglab.serverlog.prefix import KNOWN_PREFIXES, LinePrefix, compile_prefix
from pglab.serverlog.reader import (
    DamagedLog,
    extract_events,
    iter_event_batches,
    iter_events,
    parse_log_file,
    parse_log_files,
    read_records,
)
from pglab.serverlog.records import LogRecord, ParseStats
from pglab.serverlog.tail import LogTail

__all__ = [
    "EVENT_KINDS",
    "FORMATS",
    "KNOWN_PREFIXES",
    "DamagedLog",
    "EventExtractor",
    "LinePrefix",
    "LogRecord",
    "LogTail",
    "ParseStats",
    "compile_prefix",
    "detect_format",
    "extract_events",
    "iter_event_batches",
    "iter_events",
    "parse_log_file",
    "parse_log_files",
    "read_records",
]
