"""Autovacuum and autoanalyze runs: one multi-line LOG message each, read into numbers.

The lines that carry numbers differ between versions (their order too): 13 writes
"misses", 18 "reads"; 14+ add "I/O timings", 16+ "scanned", 18 "eagerly scanned",
"buffers full" and "delay time". Each known line is found and read by its own pattern
(its label, after a newline, is a literal prefix the regex engine scans for quickly);
other lines (cutoffs, relfrozenxid, per-index details) are not kept.
"""

from __future__ import annotations

import re
from typing import Any

from pglab.events import Event
from pglab.serverlog.event_parts import before, new_event
from pglab.serverlog.records import LogRecord

_AUTOVACUUM_RE = re.compile(
    r"automatic (aggressive )?(vacuum|analyze)( to prevent wraparound)? of table \"([^\"]*)\""
    r"(?:: index scans: (\d+))?"
)
_PAGES_RE = re.compile(r"\npages: (\d+) removed, (\d+) remain(?:, (\d+) scanned)?")
_TUPLES_RE = re.compile(r"\ntuples: (\d+) removed, (\d+) remain, (\d+) are dead")
_IO_TIMINGS_RE = re.compile(r"\nI/O timings: read: ([\d.]+) ms, write: ([\d.]+) ms")
_RATES_RE = re.compile(r"\navg read rate: ([\d.]+) MB/s, avg write rate: ([\d.]+) MB/s")
_BUFFERS_RE = re.compile(r"\nbuffer usage: (\d+) hits, (\d+) (?:misses|reads), (\d+) dirtied")
_WAL_RE = re.compile(
    r"\nWAL usage: (\d+) records, (\d+) full page images, (\d+) bytes(?:, (\d+) buffers full)?"
)
# on its own "system usage:" line, or (13's autoanalyze) at the end of the first line
_CPU_RE = re.compile(r"CPU: user: ([\d.]+) s, system: ([\d.]+) s, elapsed: ([\d.]+) s")


def autovacuum_event(rec: LogRecord, msg: str, node: str) -> tuple[Event, bool] | None:
    """(event, complete) for an "automatic vacuum/analyze of table" message; None if
    the message is another "automatic ..." one. Not complete: the CPU line (and with it
    the duration) is missing, as in a truncated message; the event starts at its end."""
    m = _AUTOVACUUM_RE.match(msg)
    if m is None:
        return None  # e.g. "automatic recovery ..." is not ours
    aggressive, what, wrap, table, scans = m.groups()
    start = m.end()
    pages_removed = pages_remain = pages_scanned = None
    pages = _PAGES_RE.search(msg, start)
    if pages is not None:
        removed, remain, scanned = pages.groups()
        pages_removed, pages_remain = int(removed), int(remain)
        pages_scanned = int(scanned) if scanned is not None else None
    tuples_removed = tuples_remain = tuples_dead = None
    tuples = _TUPLES_RE.search(msg, start)
    if tuples is not None:
        tuples_removed, tuples_remain, tuples_dead = map(int, tuples.groups())
    buffer_hits = buffer_reads = buffer_dirtied = None
    buffers = _BUFFERS_RE.search(msg, start)
    if buffers is not None:
        buffer_hits, buffer_reads, buffer_dirtied = map(int, buffers.groups())
    read_mb_s = write_mb_s = None
    rates = _RATES_RE.search(msg, start)
    if rates is not None:
        read_mb_s, write_mb_s = map(float, rates.groups())
    read_io_ms = write_io_ms = None
    timings = _IO_TIMINGS_RE.search(msg, start)
    if timings is not None:
        read_io_ms, write_io_ms = map(float, timings.groups())
    wal_records = wal_fpi = wal_bytes = wal_buffers_full = None
    wal = _WAL_RE.search(msg, start)
    if wal is not None:
        records, fpi, nbytes, full = wal.groups()
        wal_records, wal_fpi, wal_bytes = int(records), int(fpi), int(nbytes)
        wal_buffers_full = int(full) if full is not None else None
    cpu_user_s = cpu_system_s = elapsed = None
    cpu = _CPU_RE.search(msg, start)
    if cpu is not None:
        cpu_user_s, cpu_system_s, elapsed = map(float, cpu.groups())
    database, _, rest = table.partition(".")
    schema, _, relname = rest.partition(".")
    attrs: dict[str, Any] = {
        "table": table,
        "database": database,
        "schema": schema,
        "relation": relname,
        "aggressive": aggressive is not None,
        "wraparound": wrap is not None,
        "index_scans": int(scans) if scans is not None else None,
        "pages_removed": pages_removed,
        "pages_remain": pages_remain,
        "pages_scanned": pages_scanned,
        "tuples_removed": tuples_removed,
        "tuples_remain": tuples_remain,
        "tuples_dead_not_removable": tuples_dead,
        "buffer_hits": buffer_hits,
        "buffer_reads": buffer_reads,
        "buffer_dirtied": buffer_dirtied,
        "read_mb_s": read_mb_s,
        "write_mb_s": write_mb_s,
        "read_io_ms": read_io_ms,
        "write_io_ms": write_io_ms,
        "wal_records": wal_records,
        "wal_fpi": wal_fpi,
        "wal_bytes": wal_bytes,
        "wal_buffers_full": wal_buffers_full,
        "cpu_user_s": cpu_user_s,
        "cpu_system_s": cpu_system_s,
        "elapsed_s": elapsed,
    }
    kind = "autovacuum" if what == "vacuum" else "autoanalyze"
    if elapsed is None:  # truncated message: keep the run, without a duration
        return new_event(rec.t, kind, node, rec.t, attrs), False
    return new_event(before(rec.t, elapsed), kind, node, rec.t, attrs), True
