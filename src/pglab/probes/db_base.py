"""Shared machinery of database probes: per-node iteration, errors, counter rates."""

from __future__ import annotations

import datetime as dt
import time
from abc import abstractmethod
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any

import psycopg

from pglab.events import Event
from pglab.probes.base import Probe, ProbeContext, ProbeOutput, Sample
from pglab.probes.catalog import Capabilities
from pglab.probes.dbsessions import DbSessions

# How long a tick waits for a node's read; one that takes longer is dropped and the node
# skipped until the read returns (a paused standby must not stall the primary's samples).
NODE_WAIT_S = 0.5


class RateTracker:
    """Per-second rates of cumulative counters, by (label, metric)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[float, float]] = {}

    def rate(self, label: str, metric: str, value: float, mono: float) -> float | None:
        key = (label, metric)
        previous = self._last.get(key)
        self._last[key] = (value, mono)
        if previous is None:
            return None
        delta_t = mono - previous[1]
        delta_v = value - previous[0]
        if delta_t <= 0 or delta_v < 0:  # a stats reset or a restart: start again
            return None
        return delta_v / delta_t


class DbProbe(Probe):
    """A probe that reads every node with a database connection."""

    def start(self, ctx: ProbeContext) -> None:
        self.ctx = ctx
        self.rates: dict[str, RateTracker] = {}
        self._failing: set[str] = set()

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        sessions = self.ctx.db
        if sessions is None:
            return out
        # every node at once, each on its own worker (see dbsessions.py)
        pending = [(node, future) for node in sessions.node_names
                   if (future := sessions.run(node, partial(self._read_node, sessions, node,
                                                             now))) is not None]
        deadline = time.monotonic() + NODE_WAIT_S
        for _node, future in pending:
            try:
                part = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                continue  # not answering: skipped until its read returns
            out.samples.extend(part.samples)
            out.events.extend(part.events)
        return out

    def _read_node(self, sessions: DbSessions, node: str, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
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
                  counters: dict[str, Any], skip_zero: bool = False) -> None:
        mono = time.monotonic()
        tracker = self.tracker(node)
        for metric, value in counters.items():
            if value is None:
                continue
            rate = tracker.rate(label, metric, float(value), mono)
            if rate is None or (skip_zero and rate == 0):
                continue
            out.samples.append(Sample(now, node, self.name, metric, label, rate))

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
