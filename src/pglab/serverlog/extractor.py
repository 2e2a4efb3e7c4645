"""Turning log records into events: which rule family a message goes to.

Message formats were checked against the PostgreSQL sources of 13, 14, 16, 17 and 18
(xlog.c LogCheckpointStart/End, vacuumlazy.c and analyze.c, proc.c, deadlock.c, fd.c,
postmaster.c, checkpointer.c, postgres.c, pqcomm.c) and against real 15 and 18 logs
(tests/samples/serverlog). Every pattern tolerates the small differences between those
versions; attrs keys are the same whatever the version (None when a version does not
print a value). The rules live by event family: checkpoint_rules, vacuum_rules,
lock_rules, server_rules (start, stop, crash, recovery) and statement_rules (slow
statements, temporary files, connection resets, errors), plan_rules (auto_explain).
"""

from __future__ import annotations

from collections.abc import Iterable

from pglab.events import Event
from pglab.serverlog.checkpoint_rules import CheckpointRules
from pglab.serverlog.lock_rules import LockRules, deadlock_event
from pglab.serverlog.plan_rules import plan_event
from pglab.serverlog.records import LogRecord
from pglab.serverlog.server_rules import ServerRules
from pglab.serverlog.statement_rules import (
    CONNECTION_LOST,
    DURATION_RE,
    connection_reset_event,
    error_event,
    slow_statement_event,
    temp_file_event,
)
from pglab.serverlog.triggers import ERROR_SEVERITIES
from pglab.serverlog.vacuum_rules import autovacuum_event

# Every kind of event the rules make (what `pglab logs --kind` accepts).
EVENT_KINDS = (
    "checkpoint",
    "checkpoint-too-frequent",
    "autovacuum",
    "autoanalyze",
    "lock-wait",
    "deadlock",
    "temp-file",
    "slow-statement",
    "statement-plan",
    "connection-reset",
    "crash",
    "recovery",
    "server-start",
    "server-stop",
    "error",
)

# At ERROR level only these connection messages (a LOG one may also be an EOF).
_CONNECTION_LOST_ERRORS = tuple(p for p in CONNECTION_LOST if not p.startswith("unexpected"))


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
        self._checkpoints = CheckpointRules(node)
        self._locks = LockRules(node)
        self._server = ServerRules(node, before_crash=self._crash_cleanup)

    def feed(self, record: LogRecord) -> list[Event]:
        """Events completed by this record (usually none or one)."""
        return self.feed_many((record,))

    def feed_many(self, records: Iterable[LogRecord]) -> list[Event]:
        """Events completed by these records, in order (the fast way to feed a batch)."""
        out: list[Event] = []
        append = out.append
        log_message = self._log_message
        error_message = self._error_message
        duration_match = DURATION_RE.match
        slow_statement = slow_statement_event
        node = self.node
        for record in records:
            severity = record[2]
            message = record[3]
            if severity == "LOG":
                # Slow statements dominate busy logs: handled here, without a call.
                if message.startswith("duration: "):
                    m = duration_match(message)
                    if m is None:  # an auto_explain plan, or a bare "duration: N ms"
                        self._plan(record, message, out)
                        continue
                    append(slow_statement(node, record[0], record[1], *m.groups(), rec=record))
                else:
                    log_message(record, message, out)
            elif severity in ERROR_SEVERITIES:
                error_message(record, message, out)
        return out

    def feed_into(self, record: LogRecord, out: list[Event]) -> None:
        """Appends the events this record completes to out."""
        severity = record[2]
        message = record[3]
        if severity == "LOG":
            if message.startswith("duration: "):
                m = DURATION_RE.match(message)
                if m is not None:
                    out.append(slow_statement_event(
                        self.node, record[0], record[1], *m.groups(), rec=record
                    ))
                else:
                    self._plan(record, message, out)
            else:
                self._log_message(record, message, out)
        elif severity in ERROR_SEVERITIES:
            self._error_message(record, message, out)

    def finish(self) -> list[Event]:
        """Close the log: open checkpoints, lock waits, recovery... become events."""
        out: list[Event] = []
        self._checkpoints.flush(out)
        self._locks.flush(out, outcome=None)
        self._server.finish(out)
        return out

    def _plan(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        made = plan_event(rec, msg, self.node)
        if made is not None:
            out.append(made[0])
            if not made[1]:
                self.unparsed += 1  # cut: kept, without a plan_id

    def _log_message(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        if msg.startswith(("checkpoint ", "checkpoints ", "restartpoint ")):
            if not self._checkpoints.message(rec, msg, out):
                self.unparsed += 1
        elif msg.startswith("automatic "):
            made = autovacuum_event(rec, msg, self.node)
            if made is not None:
                out.append(made[0])
                if not made[1]:
                    self.unparsed += 1  # truncated: kept, without a duration
        elif msg.startswith("process "):
            self._locks.message(rec, msg, out)
        elif msg.startswith("temporary file"):
            event = temp_file_event(rec, msg, self.node)
            if event is None:
                self.unparsed += 1
            else:
                out.append(event)
        elif msg.startswith(CONNECTION_LOST):
            out.append(connection_reset_event(rec, msg, self.node))
        elif msg.startswith(("database system ", "redo ", "starting backup recovery")):
            self._server.database_system(rec, msg, out)
        elif msg.startswith("starting PostgreSQL"):
            self._server.starting(rec, msg, out)
        elif msg.startswith("received ") and msg.endswith("shutdown request"):
            self._server.shutdown_request(rec, msg)
        elif msg.startswith("terminating any other active server processes"):
            self._server.others_terminated(rec, out)
        elif " (PID " in msg:
            self._server.child_exit(rec, msg, out)

    def _error_message(self, rec: LogRecord, msg: str, out: list[Event]) -> None:
        if msg.startswith("deadlock detected"):
            out.append(deadlock_event(rec, self.node))
        elif msg.startswith(_CONNECTION_LOST_ERRORS):
            out.append(connection_reset_event(rec, msg, self.node))
        else:
            if rec.severity == "PANIC":
                self._server.panic(out)
            out.append(error_event(rec, msg, self.node))

    def _crash_cleanup(self, out: list[Event]) -> None:
        # Every backend is gone: nothing that was pending can still complete.
        self._checkpoints.flush(out)
        self._locks.flush(out, outcome="server-crash")
