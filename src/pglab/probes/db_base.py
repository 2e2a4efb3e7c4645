"""Shared machinery of database probes: per-node iteration, errors, counter rates."""

from __future__ import annotations

import datetime as dt
import time
import weakref
from abc import abstractmethod
from typing import Any

import psycopg
from psycopg import pq

from pglab.events import Event
from pglab.probes.base import Probe, ProbeContext, ProbeOutput, Sample
from pglab.probes.capabilities import Capabilities
from pglab.probes.dbsessions import DbSessions


class RateTracker:
    """Per-second rates of cumulative counters: each label's last values and their time."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[dict[str, float], float]] = {}

    def rates(self, label: str, values: dict[str, float], mono: float,
              nonzero_only: bool = False) -> dict[str, float]:
        """Rates since the label's previous values; none for a counter that went back
        (a stats reset or a restart) or is new."""
        previous = self._last.get(label)
        self._last[label] = (values, mono)
        if previous is None:
            return {}
        before, then = previous
        seconds = mono - then
        if seconds <= 0 or (nonzero_only and values == before):  # the common case of pg_stat_io
            return {}
        return {metric: (value - before[metric]) / seconds for metric, value in values.items()
                if metric in before and value >= before[metric]
                and not (nonzero_only and value == before[metric])}

    def unchanged(self, label: str, mono: float) -> bool:
        """Note that the label's counters did not move since its last values (what rates
        would conclude with nonzero_only, without building them); False when the label
        has none yet."""
        previous = self._last.get(label)
        if previous is None:
            return False
        self._last[label] = (previous[0], mono)
        return True


class DbProbe(Probe):
    """A probe that reads every node with a database connection."""

    def start(self, ctx: ProbeContext) -> None:
        self.ctx = ctx
        self.rates: dict[str, RateTracker] = {}
        self._failing: set[str] = set()

    def sample(self, now: dt.datetime) -> ProbeOutput:
        """Every node, one after another (the telemetry runner instead samples each node
        on a thread of its own, with sample_node)."""
        out = ProbeOutput()
        for node in self.ctx.db.node_names if self.ctx.db is not None else []:
            part = self.sample_node(node, now)
            out.samples.extend(part.samples)
            out.events.extend(part.events)
        return out

    def sample_node(self, node: str, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        sessions: DbSessions | None = self.ctx.db
        if sessions is None:
            return out
        try:
            conn, caps = sessions.get(node)
            self.read(conn, caps, node, now, out)
            self._failing.discard(node)
        except psycopg.Error as exc:
            sessions.drop(node)
            if node not in self._failing:  # one event per outage, not one per tick
                self._failing.add(node)
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                out.events.append(Event(now, "probe-error", node,
                                        attrs={"probe": self.name, "error": message}))
        return out

    def tracker(self, node: str) -> RateTracker:
        return self.rates.setdefault(node, RateTracker())

    def add_rates(self, out: ProbeOutput, now: dt.datetime, node: str, label: str,
                  counters: dict[str, Any]) -> None:
        values = {metric: float(value) for metric, value in counters.items() if value is not None}
        rates = self.tracker(node).rates(label, values, time.monotonic())
        out.samples.extend(Sample(now, node, self.name, metric, label, rate)
                           for metric, rate in rates.items())

    def add_gauges(self, out: ProbeOutput, now: dt.datetime, node: str, label: str,
                   gauges: dict[str, Any]) -> None:
        for metric, value in gauges.items():
            if value is not None:
                out.samples.append(Sample(now, node, self.name, metric, label, float(value)))

    @abstractmethod
    def read(self, conn: psycopg.Connection[Any], caps: Capabilities, node: str,
             now: dt.datetime, out: ProbeOutput) -> None:
        """Query the node and append samples/events to `out`."""


def select_columns(caps: Capabilities, view: str, mapping: dict[str, str]) -> list[str]:
    """`column AS metric` for the columns of `view` that exist on this server."""
    return [f"{col} AS {metric}" for col, metric in mapping.items() if caps.has(view, col)]


def row_dict(conn: psycopg.Connection[Any], query: str, params: Any = None) -> dict[str, Any]:
    cur = conn.execute(query, params)
    row = cur.fetchone()
    if row is None or cur.description is None:
        return {}
    return {d.name: v for d, v in zip(cur.description, row, strict=True)}


class PreparedRows:
    """A statement run several times a second, through libpq itself: prepared once per
    connection, its rows left as text. psycopg's cursors, result objects and type loaders
    cost pglab four times the CPU libpq does for the same rows, and ten reads a second
    make that the larger part of the wait sampler's cost.

    A connection class with an execute of its own (observe's, which wraps every statement
    in a transaction it rolls back) keeps it: the statement goes through conn.execute."""

    def __init__(self, name: str, sql: str) -> None:
        self._name = name.encode()
        self._sql = sql
        self._ready: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()

    def rows(self, conn: psycopg.Connection[Any]) -> list[tuple[str | None, ...]]:
        if type(conn).execute is not psycopg.Connection.execute:
            return [tuple(None if v is None else str(v) for v in row)
                    for row in conn.execute(self._sql).fetchall()]
        with conn.lock:  # psycopg's own: no other statement of this connection meanwhile
            if conn not in self._ready:
                _check(conn.pgconn.prepare(self._name, self._sql.encode()),
                       pq.ExecStatus.COMMAND_OK)
                self._ready.add(conn)
            result = _check(conn.pgconn.exec_prepared(self._name, None),
                            pq.ExecStatus.TUPLES_OK)
        columns = range(result.nfields)
        return [tuple(None if (v := result.get_value(row, col)) is None else v.decode()
                      for col in columns) for row in range(result.ntuples)]


def _check(result: pq.abc.PGresult, expected: pq.ExecStatus) -> pq.abc.PGresult:
    if result.status != expected:
        message = result.error_message.decode(errors="replace").strip()
        raise psycopg.OperationalError(message or f"libpq: {pq.ExecStatus(result.status).name}")
    return result
