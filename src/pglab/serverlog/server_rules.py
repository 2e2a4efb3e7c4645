"""The server's own life: start, stop, crash (a child killed, or a PANIC) and crash
recovery. Stateful: a start or stop spans several messages."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pglab.events import Event
from pglab.serverlog.event_parts import cut, int_or_none, new_event
from pglab.serverlog.records import LogRecord
from pglab.serverlog.triggers import STATEMENT_MAX

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


@dataclass
class _PendingRecovery:
    t_start: datetime
    attrs: dict[str, Any] = field(default_factory=dict)


class ServerRules:
    """Start, stop, crash and recovery. `before_crash(out)` is called when every backend
    is gone (a crash): whatever other rules hold open can no longer complete."""

    def __init__(self, node: str, before_crash: Callable[[list[Event]], None]) -> None:
        self.node = node
        self._before_crash = before_crash
        self._recovery: _PendingRecovery | None = None
        self._starting: tuple[datetime, str | None] | None = None
        self._stopping: tuple[datetime, str] | None = None
        self._last_crash: datetime | None = None

    def _event(
        self, t_start: datetime, kind: str, t_end: datetime | None, attrs: dict[str, Any]
    ) -> Event:
        return new_event(t_start, kind, self.node, t_end, attrs)

    def finish(self, out: list[Event]) -> None:
        """End of the log: a recovery, start or stop still under way becomes an event."""
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

    def panic(self, out: list[Event]) -> None:
        """A PANIC takes the server down (its error event is made by the caller)."""
        self._before_crash(out)

    def child_exit(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        """ "<process> (PID n) was terminated by signal ... / exited with exit code n"."""
        m = _CHILD_EXIT_RE.match(msg)
        if m is None:
            return
        code = int_or_none(m.group("code"))
        # exit code 0/1 is a normal exit (e.g. the logical replication launcher at
        # shutdown, a backend after FATAL); only signals, exceptions and other codes
        # make the postmaster reinitialize.
        if code is not None and code in (0, 1):
            return
        failed = rec.detail or ""
        query = (
            failed[len(_FAILED_QUERY_PREFIX) :] if failed.startswith(_FAILED_QUERY_PREFIX) else None
        )
        self._before_crash(out)
        out.append(
            self._event(
                rec.t,
                "crash",
                None,
                {
                    "what": m.group("what"),
                    "pid": int(m.group("pid")),
                    "signal": int_or_none(m.group("signal")),
                    "signal_name": m.group("signame"),
                    "exit_code": code,
                    "exception": m.group("exc"),
                    "query": cut(query, STATEMENT_MAX),
                },
            )
        )
        self._last_crash = rec.t

    def others_terminated(self, rec: LogRecord, out: list[Event]) -> None:
        """ "terminating any other active server processes"."""
        # Normally right after the child's exit message; alone (log started there, or a
        # PANIC) it is still a crash-restart.
        self._before_crash(out)
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

    def database_system(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        """ "database system ...", "redo starts/done at ..." and "starting backup
        recovery ..."."""
        if msg.startswith("database system is ready to accept"):
            self._ready(rec, msg, out)
        elif msg.startswith("database system is shut down"):
            t_req, mode = self._stopping if self._stopping else (rec.t, None)
            self._stopping = None
            out.append(self._event(t_req, "server-stop", rec.t, {"mode": mode}))
        elif msg.startswith(
            ("database system was interrupted", "database system was not properly shut down",
             "database system shutdown was interrupted")
        ):
            rcv = self._open_recovery(rec)
            if msg.startswith("database system was not properly shut down"):
                rcv.attrs["crash_recovery"] = True
                rcv.attrs["after_crash"] = True
            elif msg.startswith(("database system was interrupted while in recovery",
                                 "database system shutdown was interrupted")):
                # a standby (or a server stopping) went down uncleanly; a standby's
                # recovery after its crash is archive recovery, so no "not properly
                # shut down" line follows
                rcv.attrs["after_crash"] = True
                rcv.attrs["last_known_up"] = msg.rpartition(" at ")[2].removeprefix(
                    "log time ") or None
            else:
                # "was interrupted; last known up at": a crashed primary (the "not
                # properly shut down" line follows) or the first start of a copied data
                # directory (a base backup: "starting backup recovery" follows on 15+)
                rcv.attrs["last_known_up"] = msg.partition(" at ")[2] or None
        elif msg.startswith("starting backup recovery"):
            self._open_recovery(rec).attrs["from_backup"] = True
        elif msg.startswith("redo starts at"):
            rcv = self._open_recovery(rec)
            lsn = _LSN_RE.search(msg)
            rcv.attrs["redo_start_lsn"] = lsn.group(0) if lsn else None
        elif msg.startswith("redo done at") and self._recovery is not None:
            lsn = _LSN_RE.search(msg)
            self._recovery.attrs["redo_done_lsn"] = lsn.group(0) if lsn else None
            elapsed = _ELAPSED_RE.search(msg)  # 15+: "... system usage: ... elapsed: X s"
            self._recovery.attrs["redo_elapsed_s"] = float(elapsed.group(1)) if elapsed else None

    def starting(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        """ "starting PostgreSQL <version> ..."."""
        if self._stopping is not None:  # immediate shutdown: no "is shut down" line
            t, mode = self._stopping
            self._stopping = None
            out.append(self._event(t, "server-stop", None, {"mode": mode}))
        m = _VERSION_RE.match(msg)
        self._starting = (rec.t, m.group(1) if m else None)

    def shutdown_request(self, rec: LogRecord, msg: str) -> None:
        """ "received <mode> shutdown request"."""
        m = _SHUTDOWN_RE.match(msg)
        if m is not None and self._stopping is None:
            self._stopping = (rec.t, m.group(1))

    def _open_recovery(self, rec: LogRecord) -> _PendingRecovery:
        if self._recovery is None:
            self._recovery = _PendingRecovery(
                rec.t,
                {
                    "crash_recovery": False,
                    "after_crash": False,
                    "from_backup": False,
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
        # a recovery that began from a base backup (a standby's first start) is no crash
        after_crash = self._recovery is not None and bool(self._recovery.attrs["after_crash"])
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
                {"version": version, "after_crash": after_crash, "read_only": read_only},
            )
        )
