"""Lock waits (log_lock_waits: "still waiting" paired with "acquired", or never
acquired) and deadlocks."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pglab.events import Event
from pglab.serverlog.event_parts import MICROSECOND, cut, new_event
from pglab.serverlog.records import LogRecord
from pglab.serverlog.statement_rules import add_session
from pglab.serverlog.triggers import STATEMENT_MAX

_LOCK_RE = re.compile(
    r"process (\d+) (still waiting for|acquired|detected deadlock while waiting for"
    r"|failed to acquire) (\S+) on (.+?) after ([\d.]+) ms"
)
_HOLDERS_RE = re.compile(r"Process(?:es)? holding the lock: ([^.]*)\. Wait queue: ([^.]*)\.")
_PID_LIST_RE = re.compile(r"\d+")
_DEADLOCK_PID_RE = re.compile(r"Process (\d+)")
# The row a wait is for, in the message's CONTEXT: "while updating tuple (0,1) in relation
# "accounts"" (also locking, deleting, inserting index tuple, checking uniqueness...).
# A wait on a transaction is a wait for a row it changed: this names the table.
_RELATION_RE = re.compile(r"\bwhile [^\n]*? in relation \"([^\"\n]+)\"")
_OUTCOMES = {
    "still waiting for": None,
    "acquired": "acquired",
    "failed to acquire": "failed",
    "detected deadlock while waiting for": "deadlock",
}


def _pids(text: str) -> list[int]:
    return [int(p) for p in _PID_LIST_RE.findall(text)]


class _PendingLockWait:
    __slots__ = ("attrs", "lock_object", "mode", "t_start")

    def __init__(self, t_start: datetime, mode: str, lock_object: str, attrs: dict[str, Any]):
        self.t_start = t_start
        self.mode = mode
        self.lock_object = lock_object
        self.attrs = attrs


class LockRules:
    """Pairs each process's lock wait with how it ended (one wait per process at a time)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._waits: dict[int, _PendingLockWait] = {}

    def message(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        """A LOG message starting "process "."""
        m = _LOCK_RE.match(msg)
        if m is None:
            return  # "process N avoided deadlock ..." and other process messages
        pid_text, state, mode, lock_object, ms_text = m.groups()
        pid = int(pid_text)
        ms = float(ms_text)
        holders: list[int] | None = None
        queue: list[int] | None = None
        relation = _RELATION_RE.search(rec.context or "")
        detail = rec.detail
        if detail:
            hm = _HOLDERS_RE.search(detail)
            if hm is not None:
                holders, queue = _pids(hm.group(1)), _pids(hm.group(2))
        pending = self._waits.get(pid)
        if pending is not None and (pending.mode != mode or pending.lock_object != lock_object):
            # A new wait by the same process: the old one ended unseen.
            self._close(pid, None, None, out)
            pending = None
        if pending is None:
            pending = _PendingLockWait(
                rec.t - MICROSECOND * round(ms * 1000),
                mode,
                lock_object,
                add_session(
                    {
                        "pid": pid,
                        "lock_mode": mode,
                        "lock_object": lock_object,
                        "holders": holders or [],
                        "wait_queue": queue or [],
                        "waited_ms": ms,
                        "outcome": None,
                    },
                    rec,
                ),
            )
            if relation is not None:
                pending.attrs["relation"] = relation.group(1)
            if rec.statement:
                pending.attrs["statement"] = cut(rec.statement, STATEMENT_MAX)
            self._waits[pid] = pending
        else:
            pending.attrs["waited_ms"] = ms
            if holders:
                pending.attrs["holders"] = holders
                pending.attrs["wait_queue"] = queue or []
        outcome = _OUTCOMES[state]
        if outcome is not None:
            self._close(pid, rec.t, outcome, out)

    def flush(self, out: list[Event], outcome: str | None) -> None:
        """Every open wait becomes an event without an end (outcome: why)."""
        for pid in list(self._waits):
            self._close(pid, None, outcome, out)

    def _close(
        self, pid: int, t_end: datetime | None, outcome: str | None, out: list[Event]
    ) -> None:
        pending = self._waits.pop(pid)
        pending.attrs["outcome"] = outcome
        t_start = pending.t_start
        if t_end is not None:
            # The wait's length as the server measured it at its end: with a prefix of
            # whole seconds (%t) the first message's time may be up to a second off.
            t_start = t_end - MICROSECOND * round(float(pending.attrs["waited_ms"]) * 1000)
        out.append(new_event(t_start, "lock-wait", self.node, t_end, pending.attrs))


def deadlock_event(rec: LogRecord, node: str) -> Event:
    """ERROR "deadlock detected": the processes involved are in its DETAIL."""
    detail = rec.detail or ""
    pids = list(dict.fromkeys(int(p) for p in _DEADLOCK_PID_RE.findall(detail)))
    return new_event(
        rec.t,
        "deadlock",
        node,
        None,
        {
            "pid": rec.pid,
            "pids": pids,
            "detail": cut(rec.detail, 2000),
            "statement": cut(rec.statement, STATEMENT_MAX),
            "sqlstate": rec.sqlstate,
        },
    )
