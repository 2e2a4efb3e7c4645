"""Connections for database probes: one per node and sampling thread, reconnecting.

All interval probes of a node share one connection (they run one after another in one
thread), and the wait sampler has its own: two connections per node in all, whatever the
number of probes, so telemetry stays out of max_connections' way.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import psycopg

from pglab.probes.base import NodeHandle
from pglab.probes.catalog import Capabilities, telemetry_connection


class DbSessions:
    def __init__(self, nodes: list[NodeHandle]) -> None:
        self._handles = {n.name: n for n in nodes if n.connect is not None}
        self._local = threading.local()
        self._all: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()

    @property
    def node_names(self) -> list[str]:
        return list(self._handles)

    def _mine(self) -> dict[str, tuple[psycopg.Connection[Any], Capabilities]]:
        if not hasattr(self._local, "conns"):
            self._local.conns = {}
        conns: dict[str, tuple[psycopg.Connection[Any], Capabilities]] = self._local.conns
        return conns

    def get(self, node: str) -> tuple[psycopg.Connection[Any], Capabilities]:
        """This thread's connection to `node` (opened on first use or after a failure)."""
        mine = self._mine()
        if node in mine and not mine[node][0].closed:
            return mine[node]
        handle = self._handles[node]
        conn = telemetry_connection(handle.connect)
        caps = Capabilities.detect(conn)
        mine[node] = (conn, caps)
        with self._lock:
            self._all.append(conn)
        return conn, caps

    def drop(self, node: str) -> None:
        """Forget a broken connection; the next get() reconnects."""
        entry = self._mine().pop(node, None)
        if entry is not None:
            with contextlib.suppress(Exception):
                entry[0].close()

    def close_all(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()
