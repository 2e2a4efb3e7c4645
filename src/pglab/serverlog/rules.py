"""Turning log records into events: which messages matter and what they mean.

Message formats were checked against the PostgreSQL sources of 13, 14, 16, 17 and 18
(xlog.c LogCheckpointStart/End, vacuumlazy.c and analyze.c, proc.c, deadlock.c, fd.c,
postmaster.c, checkpointer.c, postgres.c, pqcomm.c) and against real 15 and 18 logs
(tests/samples/serverlog). Every pattern tolerates the small differences between those
versions; attrs keys are the same whatever the version (None when a version does not
print a value).

`LOG_TRIGGERS` is the one list of LOG message beginnings that can produce an event. The
stderr reader compiles it into its prefilter, and csvlog/jsonlog use `is_candidate`, so
all three formats pass the same records to `EventExtractor`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pglab.events import Event
from pglab.serverlog.records import LogRecord

STATEMENT_MAX = 500  # characters of SQL kept in attrs
MESSAGE_MAX = 500

# Beginnings (regex fragments) of LOG-level messages some rule below understands.
LOG_TRIGGERS: tuple[str, ...] = (
    r"duration: ",
    r"checkpoint",  # checkpoint starting/complete, checkpoints are occurring too frequently
    r"restartpoint",
    r"automatic ",  # automatic [aggressive ]vacuum/analyze ...
    r"process \d",  # lock waits
    r"temporary file",
    r"could not (?:receive|send) data (?:from|to) client",
    r"unexpected EOF on client connection",
    r"connection to client lost",
    r"terminating any other active server processes",
    r"database system ",
    r"redo (?:starts|done) at",
    r"starting PostgreSQL",
    r"received \w+ shutdown request",
    # "<process kind> (PID n) was terminated by signal ..." / "exited with exit code n"
    r'[\w "\-]{1,64}? \(PID \d',
)
ERROR_SEVERITIES = frozenset({"ERROR", "FATAL", "PANIC"})
LOG_TRIGGER_RE = re.compile("|".join(f"(?:{t})" for t in LOG_TRIGGERS))


def is_candidate(severity: str, message: str) -> bool:
    """Could this record produce an event? (The cheap test every format applies.)"""
    if severity == "LOG":
        return LOG_TRIGGER_RE.match(message) is not None
    return severity in ERROR_SEVERITIES


# --- message patterns -------------------------------------------------------------------

_DURATION_RE = re.compile(
    r"duration: ([\d.]+) ms  (statement|execute|parse|bind|fastpath)([^:]*): (.*)", re.S
)
_CKPT_START_RE = re.compile(r"(checkpoint|restartpoint) starting:(.*)")
_CKPT_DONE_RE = re.compile(
    r"(?P<kind>checkpoint|restartpoint) complete:[^:;]*?:? ?"
    r"wrote (?P<buffers>\d+) buffers \((?P<pct>[\d.]+)%\)"
    r"(?:, wrote (?P<slru>\d+) SLRU buffers)?; "
    r"(?P<added>\d+) (?:WAL|transaction log) file\(s\) added, (?P<removed>\d+) removed, "
    r"(?P<recycled>\d+) recycled; "
    r"write=(?P<write>[\d.]+) s, sync=(?P<sync>[\d.]+) s, total=(?P<total>[\d.]+) s"
    r"(?:; sync files=(?P<files>\d+), longest=(?P<longest>[\d.]+) s, average=(?P<avg>[\d.]+) s)?"
    r"(?:; distance=(?P<distance>\d+) kB, estimate=(?P<estimate>\d+) kB)?"
    r"(?:; lsn=(?P<lsn>[0-9A-Fa-f]+/[0-9A-Fa-f]+), redo lsn=(?P<redo>[0-9A-Fa-f]+/[0-9A-Fa-f]+))?"
)
_TOO_FREQUENT_RE = re.compile(r"checkpoints are occurring too frequently \((\d+) seconds? apart\)")
_AUTOVACUUM_RE = re.compile(
    r"automatic (?P<aggressive>aggressive )?(?P<what>vacuum|analyze)"
    r"(?P<wrap> to prevent wraparound)? of table \"(?P<table>[^\"]*)\""
)
# Numbers in the body of an autovacuum/autoanalyze message. One pass finds the lines
# that carry them (their order differs between versions), then each is read by its own
# pattern. 13 writes "misses", 18 "reads"; 14+ add "I/O timings", 16+ "scanned", 18
# "eagerly scanned", "buffers full" and "delay time". Other lines (cutoffs,
# relfrozenxid, per-index details) are not kept.
_VACUUM_LINE_RE = re.compile(
    r"\n(?:pages|tuples|I/O timings|avg read rate|buffer usage|WAL usage|system usage): "
)
_PAGES_RE = re.compile(r"pages: (\d+) removed, (\d+) remain(?:, (\d+) scanned)?")
_TUPLES_RE = re.compile(r"tuples: (\d+) removed, (\d+) remain, (\d+) are dead")
_IO_TIMINGS_RE = re.compile(r"I/O timings: read: ([\d.]+) ms, write: ([\d.]+) ms")
_RATES_RE = re.compile(r"avg read rate: ([\d.]+) MB/s, avg write rate: ([\d.]+) MB/s")
_BUFFERS_RE = re.compile(r"buffer usage: (\d+) hits, (\d+) (?:misses|reads), (\d+) dirtied")
_WAL_RE = re.compile(
    r"WAL usage: (\d+) records, (\d+) full page images, (\d+) bytes(?:, (\d+) buffers full)?"
)
_CPU_RE = re.compile(r"CPU: user: ([\d.]+) s, system: ([\d.]+) s, elapsed: ([\d.]+) s")
_INDEX_SCANS_RE = re.compile(r": index scans: (\d+)")
_LOCK_RE = re.compile(
    r"process (?P<pid>\d+) (?P<state>still waiting for|acquired|detected deadlock while waiting for"
    r"|failed to acquire) (?P<mode>\S+) on (?P<object>.+?) after (?P<ms>[\d.]+) ms"
)
_HOLDERS_RE = re.compile(r"Process(?:es)? holding the lock: ([^.]*)\. Wait queue: ([^.]*)\.")
_PID_LIST_RE = re.compile(r"\d+")
_DEADLOCK_PID_RE = re.compile(r"Process (\d+)")
_TEMP_FILE_RE = re.compile(r"temporary file: path \"(?P<path>.*)\", size (?P<size>\d+)")
_CHILD_EXIT_RE = re.compile(
    r"(?P<what>.+?) \(PID (?P<pid>\d+)\) (?:was terminated by signal (?P<signal>\d+)"
    r"(?:: (?P<signame>.*))?|exited with exit code (?P<code>\d+)"
    r"|was terminated by exception (?P<exc>0x[0-9A-Fa-f]+))"
)
_VERSION_RE = re.compile(r"starting PostgreSQL (\S+)")
_SHUTDOWN_RE = re.compile(r"received (\w+) shutdown request")
_LSN_RE = re.compile(r"[0-9A-Fa-f]+/[0-9A-Fa-f]+")
_ELAPSED_RE = re.compile(r"elapsed: ([\d.]+) s")
_FAILED_QUERY_PREFIX = "Failed process was running: "

# A crash-restart is announced within this time of the child's exit message.
_CRASH_WINDOW = timedelta(seconds=5)


def _num(text: str | None) -> float | None:
    return float(text) if text is not None else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None


def _cut(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[:limit]


def _pids(text: str) -> list[int]:
    return [int(p) for p in _PID_LIST_RE.findall(text)]


_new_object = object.__new__
_set_attribute = object.__setattr__
# _MICROSECOND * round(ms * 1000) is timedelta(milliseconds=ms) for PostgreSQL's 3-decimal
# durations, and cheaper to make (see formats._MICROSECOND)
_MICROSECOND = timedelta(microseconds=1)


def new_event(
    t_start: datetime, kind: str, node: str, t_end: datetime | None, attrs: dict[str, Any]
) -> Event:
    """Event(t_start, kind, node, t_end, attrs) for times known to be tz-aware.

    A big log makes millions of events: the frozen dataclass's __init__ (one
    object.__setattr__ per field) and its __post_init__ checks cost about twice the
    instructions of filling the instance's __dict__ in one step, as this does. Every
    time given here comes from TimestampParser or datetime.fromisoformat(... + "+00:00")
    (LogRecord.t is tz-aware UTC), so the checks could not fail.
    """
    event = _new_object(Event)
    _set_attribute(
        event,
        "__dict__",
        {"t_start": t_start, "kind": kind, "node": node, "t_end": t_end, "attrs": attrs},
    )
    return event


def slow_statement_event(
    node: str, t_end: datetime, pid: int | None, ms_text: str, phase: str, name: str, sql: str
) -> Event:
    """`duration: <ms_text> ms  <phase><name>: <sql>` logged at t_end (its parts are
    split by _DURATION_RE, or directly by the stderr scanner for one-line messages,
    which builds the same event inline)."""
    ms = float(ms_text)
    return new_event(
        t_end - _MICROSECOND * round(ms * 1000),
        "slow-statement",
        node,
        t_end,
        {
            "duration_ms": ms,
            "phase": phase,
            "prepared": name.strip() or None,
            "statement": sql[:STATEMENT_MAX],  # the same object when shorter
            "pid": pid,
        },
    )


@dataclass
class _PendingCheckpoint:
    t: datetime
    restartpoint: bool
    flags: list[str]


@dataclass
class _PendingLockWait:
    t_start: datetime
    first_seen: datetime
    attrs: dict[str, Any]


@dataclass
class _PendingRecovery:
    t_start: datetime
    attrs: dict[str, Any] = field(default_factory=dict)


class EventExtractor:
    """Stateful: pairs checkpoint start/complete, lock-wait start/end, recovery and
    shutdown phases. Feed records in log order; call `finish()` at the end of the log
    (it emits what is still open, with t_end None). Safe to feed from several rotated
    files in sequence. `unparsed` counts trigger messages whose body was not understood
    (truncated lines, unknown formats).
    """

    def __init__(self, node: str = "primary") -> None:
        self.node = node
        self.unparsed = 0
        self._checkpoint: _PendingCheckpoint | None = None
        self._lock_waits: dict[int, _PendingLockWait] = {}
        self._recovery: _PendingRecovery | None = None
        self._starting: tuple[datetime, str | None] | None = None
        self._stopping: tuple[datetime, str] | None = None
        self._last_crash: datetime | None = None

    # -- public ---------------------------------------------------------------------------

    def feed(self, record: LogRecord) -> list[Event]:
        """Events completed by this record (usually none or one)."""
        return self.feed_many((record,))

    def feed_many(self, records: Iterable[LogRecord]) -> list[Event]:
        """Events completed by these records, in order (the fast way to feed a batch)."""
        out: list[Event] = []
        append = out.append
        log_message = self._log_message
        error_message = self._error_message
        duration_match = _DURATION_RE.match
        slow_statement = slow_statement_event
        node = self.node
        for record in records:
            severity = record[2]
            message = record[3]
            if severity == "LOG":
                # Slow statements dominate busy logs: handled here, without a call.
                if message.startswith("duration: "):
                    m = duration_match(message)
                    if m is None:
                        continue  # bare "duration: N ms" (log_duration), auto_explain plans
                    append(slow_statement(node, record[0], record[1], *m.groups()))
                else:
                    log_message(record, message, out)
            elif severity in ERROR_SEVERITIES:
                error_message(record, message, out)
        return out

    def finish(self) -> list[Event]:
        """Close the log: open checkpoints, lock waits, recovery... become events."""
        out: list[Event] = []
        self._flush_checkpoint(out)
        self._flush_lock_waits(out, outcome=None)
        if self._recovery is not None:
            out.append(self._event(self._recovery.t_start, "recovery", None, self._recovery.attrs))
            self._recovery = None
        if self._starting is not None:
            t, version = self._starting
            out.append(
                self._event(
                    t,
                    "server-start",
                    None,
                    {"version": version, "after_crash": False, "read_only": False},
                )
            )
            self._starting = None
        if self._stopping is not None:
            t, mode = self._stopping
            out.append(self._event(t, "server-stop", None, {"mode": mode}))
            self._stopping = None
        return out

    # -- dispatch -------------------------------------------------------------------------

    def _event(
        self, t_start: datetime, kind: str, t_end: datetime | None, attrs: dict[str, Any]
    ) -> Event:
        return new_event(t_start, kind, self.node, t_end, attrs)

    def _log_message(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        if msg.startswith(("checkpoint ", "checkpoints ", "restartpoint ")):
            self._checkpoint_message(rec, msg, out)
        elif msg.startswith("automatic "):
            self._autovacuum(rec, msg, out)
        elif msg.startswith("process "):
            self._lock_wait(rec, msg, out)
        elif msg.startswith("temporary file"):
            self._temp_file(rec, msg, out)
        elif msg.startswith(
            (
                "could not receive data from client",
                "could not send data to client",
                "unexpected EOF on client",
                "connection to client lost",
            )
        ):
            self._connection_reset(rec, msg, out)
        elif msg.startswith(("database system ", "redo ")):
            self._database_system(rec, msg, out)
        elif msg.startswith("starting PostgreSQL"):
            self._server_starting(rec, msg, out)
        elif msg.startswith("received ") and msg.endswith("shutdown request"):
            self._shutdown_request(rec, msg, out)
        elif msg.startswith("terminating any other active server processes"):
            self._others_terminated(rec, out)
        elif " (PID " in msg:
            self._child_exit(rec, msg, out)

    def _error_message(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        if msg.startswith("deadlock detected"):
            detail = rec.detail or ""
            pids = list(dict.fromkeys(int(p) for p in _DEADLOCK_PID_RE.findall(detail)))
            out.append(
                self._event(
                    rec.t,
                    "deadlock",
                    None,
                    {
                        "pid": rec.pid,
                        "pids": pids,
                        "detail": _cut(rec.detail, 2000),
                        "statement": _cut(rec.statement, STATEMENT_MAX),
                        "sqlstate": rec.sqlstate,
                    },
                )
            )
            return
        if msg.startswith(
            (
                "connection to client lost",
                "could not send data to client",
                "could not receive data from client",
            )
        ):
            self._connection_reset(rec, msg, out)
            return
        if rec.severity == "PANIC":
            self._crash_cleanup(out)
        out.append(
            self._event(
                rec.t,
                "error",
                None,
                {
                    "severity": rec.severity,
                    "sqlstate": rec.sqlstate,
                    "pid": rec.pid,
                    "message": _cut(msg, MESSAGE_MAX),
                    "statement": _cut(rec.statement, STATEMENT_MAX),
                },
            )
        )

    # -- rules ----------------------------------------------------------------------------

    def _checkpoint_message(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        if msg.startswith("checkpoints are occurring too frequently"):
            m = _TOO_FREQUENT_RE.match(msg)
            if m is None:
                self.unparsed += 1
                return
            out.append(
                self._event(
                    rec.t, "checkpoint-too-frequent", None, {"seconds_apart": int(m.group(1))}
                )
            )
            return
        m = _CKPT_START_RE.match(msg)
        if m is not None:
            # A start while another is open: the previous one never completed (crash).
            self._flush_checkpoint(out)
            self._checkpoint = _PendingCheckpoint(
                rec.t, m.group(1) == "restartpoint", m.group(2).split()
            )
            return
        if " complete:" in msg[:25]:
            self._checkpoint_complete(rec, msg, out)
        # other "checkpoint..." messages (e.g. "checkpoint request failed") are ignored

    def _checkpoint_complete(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        m = _CKPT_DONE_RE.match(msg)
        if m is None:
            self.unparsed += 1
            return
        (
            kind,
            buffers,
            pct,
            slru,
            added,
            removed,
            recycled,
            write_text,
            sync,
            total_text,
            files,
            longest,
            avg,
            distance,
            estimate,
            lsn,
            redo,
        ) = m.groups()
        total = float(total_text)
        write = float(write_text)
        restartpoint = kind == "restartpoint"
        pending = self._checkpoint
        if pending is not None and pending.restartpoint == restartpoint:
            t_start, flags = pending.t, pending.flags
            self._checkpoint = None
        else:
            # No starting line (log began mid-checkpoint, or log_checkpoints only on end).
            t_start, flags = rec.t - timedelta(seconds=total), []
        attrs = _checkpoint_attrs(flags, restartpoint)
        attrs.update(
            {
                "complete": True,
                "buffers": int(buffers),
                "buffers_pct": float(pct),
                "slru_buffers": _int(slru),
                "wal_added": int(added),
                "wal_removed": int(removed),
                "wal_recycled": int(recycled),
                "write_s": write,
                "sync_s": float(sync),
                "total_s": total,
                "sync_files": _int(files),
                "longest_s": _num(longest),
                "average_s": _num(avg),
                "distance_kb": _int(distance),
                "estimate_kb": _int(estimate),
                "lsn": lsn,
                "redo_lsn": redo,
                "write_phase_end": (t_start + timedelta(seconds=write)).isoformat(),
            }
        )
        out.append(self._event(t_start, "checkpoint", rec.t, attrs))

    def _flush_checkpoint(self, out: list[Event]) -> None:
        pending = self._checkpoint
        if pending is None:
            return
        self._checkpoint = None
        attrs = _checkpoint_attrs(pending.flags, pending.restartpoint)
        out.append(self._event(pending.t, "checkpoint", None, attrs))

    def _autovacuum(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        m = _AUTOVACUUM_RE.match(msg)
        if m is None:
            return  # e.g. "automatic recovery ..." is not ours
        aggressive, what, wrap, table = m.groups()
        scans = _INDEX_SCANS_RE.match(msg, m.end())
        pages = tuples = timings = rates = buffers = wal = cpu = None
        for line in _VACUUM_LINE_RE.finditer(msg):
            at = line.start() + 1
            first = msg[at]
            if first == "p":
                pages = _PAGES_RE.match(msg, at)
            elif first == "t":
                tuples = _TUPLES_RE.match(msg, at)
            elif first == "I":
                timings = _IO_TIMINGS_RE.match(msg, at)
            elif first == "a":
                rates = _RATES_RE.match(msg, at)
            elif first == "b":
                buffers = _BUFFERS_RE.match(msg, at)
            elif first == "W":
                wal = _WAL_RE.match(msg, at)
            else:
                cpu = _CPU_RE.search(msg, at)
        if cpu is None:  # 13's autoanalyze: "... of table "x" system usage: CPU: ..."
            cpu = _CPU_RE.search(msg, m.end())
        database, _, rest = table.partition(".")
        schema, _, relname = rest.partition(".")
        elapsed = float(cpu[3]) if cpu is not None else None
        attrs: dict[str, Any] = {
            "table": table,
            "database": database,
            "schema": schema,
            "relation": relname,
            "aggressive": aggressive is not None,
            "wraparound": wrap is not None,
            "index_scans": int(scans[1]) if scans is not None else None,
            "pages_removed": int(pages[1]) if pages is not None else None,
            "pages_remain": int(pages[2]) if pages is not None else None,
            "pages_scanned": _int(pages[3]) if pages is not None else None,
            "tuples_removed": int(tuples[1]) if tuples is not None else None,
            "tuples_remain": int(tuples[2]) if tuples is not None else None,
            "tuples_dead_not_removable": int(tuples[3]) if tuples is not None else None,
            "buffer_hits": int(buffers[1]) if buffers is not None else None,
            "buffer_reads": int(buffers[2]) if buffers is not None else None,
            "buffer_dirtied": int(buffers[3]) if buffers is not None else None,
            "read_mb_s": float(rates[1]) if rates is not None else None,
            "write_mb_s": float(rates[2]) if rates is not None else None,
            "read_io_ms": float(timings[1]) if timings is not None else None,
            "write_io_ms": float(timings[2]) if timings is not None else None,
            "wal_records": int(wal[1]) if wal is not None else None,
            "wal_fpi": int(wal[2]) if wal is not None else None,
            "wal_bytes": int(wal[3]) if wal is not None else None,
            "wal_buffers_full": _int(wal[4]) if wal is not None else None,
            "cpu_user_s": float(cpu[1]) if cpu is not None else None,
            "cpu_system_s": float(cpu[2]) if cpu is not None else None,
            "elapsed_s": elapsed,
        }
        if elapsed is None:
            self.unparsed += 1  # truncated message: keep the run, without a duration
            t_start = rec.t
        else:
            t_start = rec.t - timedelta(seconds=elapsed)
        kind = "autovacuum" if what == "vacuum" else "autoanalyze"
        out.append(new_event(t_start, kind, self.node, rec.t, attrs))

    def _lock_wait(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        m = _LOCK_RE.match(msg)
        if m is None:
            return  # "process N avoided deadlock ..." and other process messages
        pid = int(m.group("pid"))
        ms = float(m.group("ms"))
        state = m.group("state")
        holders: list[int] | None = None
        queue: list[int] | None = None
        if rec.detail:
            hm = _HOLDERS_RE.search(rec.detail)
            if hm is not None:
                holders, queue = _pids(hm.group(1)), _pids(hm.group(2))
        pending = self._lock_waits.get(pid)
        if pending is not None and (
            pending.attrs["lock_mode"] != m.group("mode")
            or pending.attrs["lock_object"] != m.group("object")
        ):
            # A new wait by the same process: the old one ended unseen.
            self._close_lock_wait(pid, None, None, out)
            pending = None
        if pending is None:
            pending = _PendingLockWait(
                rec.t - timedelta(milliseconds=ms),
                rec.t,
                {
                    "pid": pid,
                    "lock_mode": m.group("mode"),
                    "lock_object": m.group("object"),
                    "holders": holders or [],
                    "wait_queue": queue or [],
                    "waited_ms": ms,
                    "outcome": None,
                },
            )
            self._lock_waits[pid] = pending
        else:
            pending.attrs["waited_ms"] = ms
            if holders:
                pending.attrs["holders"] = holders
                pending.attrs["wait_queue"] = queue or []
        if state == "still waiting for":
            return
        outcome = {"acquired": "acquired", "failed to acquire": "failed"}.get(state, "deadlock")
        self._close_lock_wait(pid, rec.t, outcome, out)

    def _close_lock_wait(
        self, pid: int, t_end: datetime | None, outcome: str | None, out: list[Event]
    ) -> None:
        pending = self._lock_waits.pop(pid)
        pending.attrs["outcome"] = outcome
        out.append(self._event(pending.t_start, "lock-wait", t_end, pending.attrs))

    def _flush_lock_waits(self, out: list[Event], outcome: str | None) -> None:
        for pid in list(self._lock_waits):
            self._close_lock_wait(pid, None, outcome, out)

    def _temp_file(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        m = _TEMP_FILE_RE.match(msg)
        if m is None:
            self.unparsed += 1
            return
        out.append(
            self._event(
                rec.t,
                "temp-file",
                None,
                {
                    "size_bytes": int(m.group("size")),
                    "path": m.group("path"),
                    "pid": rec.pid,
                    "statement": _cut(rec.statement, STATEMENT_MAX),
                },
            )
        )

    def _connection_reset(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        out.append(
            self._event(
                rec.t,
                "connection-reset",
                None,
                {
                    "pid": rec.pid,
                    "message": _cut(msg, MESSAGE_MAX),
                    "open_transaction": "open transaction" in msg,
                },
            )
        )

    def _child_exit(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        m = _CHILD_EXIT_RE.match(msg)
        if m is None:
            return
        code = _int(m.group("code"))
        # exit code 0/1 is a normal exit (e.g. the logical replication launcher at
        # shutdown, a backend after FATAL); only signals, exceptions and other codes
        # make the postmaster reinitialize.
        if code is not None and code in (0, 1):
            return
        failed = rec.detail or ""
        query = (
            failed[len(_FAILED_QUERY_PREFIX) :] if failed.startswith(_FAILED_QUERY_PREFIX) else None
        )
        self._crash_cleanup(out)
        out.append(
            self._event(
                rec.t,
                "crash",
                None,
                {
                    "what": m.group("what"),
                    "pid": int(m.group("pid")),
                    "signal": _int(m.group("signal")),
                    "signal_name": m.group("signame"),
                    "exit_code": code,
                    "exception": m.group("exc"),
                    "query": _cut(query, STATEMENT_MAX),
                },
            )
        )
        self._last_crash = rec.t

    def _others_terminated(self, rec: LogRecord, out: list[Event]) -> None:
        # Normally right after the child's exit message; alone (log started there, or a
        # PANIC) it is still a crash-restart.
        self._crash_cleanup(out)
        if self._last_crash is None or rec.t - self._last_crash > _CRASH_WINDOW:
            out.append(
                self._event(
                    rec.t,
                    "crash",
                    None,
                    {
                        "what": None,
                        "pid": None,
                        "signal": None,
                        "signal_name": None,
                        "exit_code": None,
                        "exception": None,
                        "query": None,
                    },
                )
            )
            self._last_crash = rec.t

    def _crash_cleanup(self, out: list[Event]) -> None:
        # Every backend is gone: nothing that was pending can still complete.
        self._flush_checkpoint(out)
        self._flush_lock_waits(out, outcome="server-crash")

    def _database_system(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        if msg.startswith("database system is ready to accept"):
            self._ready(rec, msg, out)
        elif msg.startswith("database system is shut down"):
            t_req, mode = self._stopping if self._stopping else (rec.t, None)
            self._stopping = None
            out.append(self._event(t_req, "server-stop", rec.t, {"mode": mode}))
        elif msg.startswith(
            ("database system was interrupted", "database system was not properly shut down")
        ):
            rcv = self._open_recovery(rec)
            if msg.startswith("database system was not properly shut down"):
                rcv.attrs["crash_recovery"] = True
            else:
                rcv.attrs["last_known_up"] = msg.partition(" at ")[2] or None
        elif msg.startswith("redo starts at"):
            rcv = self._open_recovery(rec)
            lsn = _LSN_RE.search(msg)
            rcv.attrs["redo_start_lsn"] = lsn.group(0) if lsn else None
        elif msg.startswith("redo done at") and self._recovery is not None:
            lsn = _LSN_RE.search(msg)
            self._recovery.attrs["redo_done_lsn"] = lsn.group(0) if lsn else None
            elapsed = _ELAPSED_RE.search(msg)  # 15+: "... system usage: ... elapsed: X s"
            self._recovery.attrs["redo_elapsed_s"] = float(elapsed.group(1)) if elapsed else None

    def _open_recovery(self, rec: LogRecord) -> _PendingRecovery:
        if self._recovery is None:
            self._recovery = _PendingRecovery(
                rec.t,
                {
                    "crash_recovery": False,
                    "last_known_up": None,
                    "redo_start_lsn": None,
                    "redo_done_lsn": None,
                    "redo_elapsed_s": None,
                },
            )
        return self._recovery

    def _ready(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        # 13 says "read only", 14+ "read-only"
        read_only = msg.endswith(("read only connections", "read-only connections"))
        after_crash = self._recovery is not None
        if self._recovery is not None:
            rcv = self._recovery
            self._recovery = None
            rcv.attrs["duration_s"] = (rec.t - rcv.t_start).total_seconds()
            out.append(self._event(rcv.t_start, "recovery", rec.t, rcv.attrs))
        t_start, version = self._starting if self._starting else (rec.t, None)
        self._starting = None
        out.append(
            self._event(
                t_start,
                "server-start",
                rec.t,
                {
                    "version": version,
                    "after_crash": after_crash,
                    "read_only": read_only,
                },
            )
        )

    def _server_starting(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        if self._stopping is not None:  # immediate shutdown: no "is shut down" line
            t, mode = self._stopping
            self._stopping = None
            out.append(self._event(t, "server-stop", None, {"mode": mode}))
        m = _VERSION_RE.match(msg)
        self._starting = (rec.t, m.group(1) if m else None)

    def _shutdown_request(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        m = _SHUTDOWN_RE.match(msg)
        if m is not None and self._stopping is None:
            self._stopping = (rec.t, m.group(1))


def _checkpoint_attrs(flags: list[str], restartpoint: bool) -> dict[str, Any]:
    """The stable key set of a checkpoint event; values filled by the complete line."""
    return {
        "flags": flags,
        "restartpoint": restartpoint,
        "complete": False,
        "buffers": None,
        "buffers_pct": None,
        "slru_buffers": None,
        "wal_added": None,
        "wal_removed": None,
        "wal_recycled": None,
        "write_s": None,
        "sync_s": None,
        "total_s": None,
        "sync_files": None,
        "longest_s": None,
        "average_s": None,
        "distance_kb": None,
        "estimate_kb": None,
        "lsn": None,
        "redo_lsn": None,
        "write_phase_end": None,
    }
