"""Connections for database probes: one per node and sampling thread, reconnecting.

Each node has two sampling threads (see probes/telemetry.py): all its interval probes share one
connection (they run one after another in one thread), and the wait sampler has its own:
two connections per node in all, whatever the number of probes, so telemetry stays out
of max_connections' way.
"""

from __future__ import annotations

import contextlib
import ipaddress
import threading
from typing import Any

import psycopg

from pglab.probes.base import NodeHandle
from pglab.probes.capabilities import Capabilities, telemetry_connection
from pglab.probes.os_probes.common import CLK_TCK, PROC, read_stat


class DbSessions:
    def __init__(self, nodes: list[NodeHandle]) -> None:
        self._handles = {n.name: n for n in nodes if n.connect is not None}
        self._local = threading.local()
        self._all: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        # The server side of telemetry's cost: the backends serving its connections.
        self._backend_cpu_s = 0.0
        self._backends: dict[int, int] = {}  # id(conn) -> its backend's pid

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
        backend = local_backend(conn)
        with self._lock:
            self._all.append(conn)
            if backend is not None:
                self._backends[id(conn)] = backend
        return conn, caps

    def drop(self, node: str) -> None:
        """Forget a broken connection; the next get() reconnects."""
        entry = self._mine().pop(node, None)
        if entry is not None:
            self._close(entry[0])

    def close_all(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            self._close(conn)

    def _close(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            backend = self._backends.pop(id(conn), None)
        if backend is not None:  # read before closing: the backend exits with it
            seconds = process_cpu_s(backend)
            with self._lock:
                self._backend_cpu_s += seconds
        with contextlib.suppress(Exception):
            conn.close()

    @property
    def backend_pids(self) -> frozenset[int]:
        """The pids of the local backends serving telemetry's open connections."""
        with self._lock:
            return frozenset(self._backends.values())

    @property
    def backend_cpu_s(self) -> float:
        """CPU seconds used by the backends of telemetry's connections closed so far."""
        return self._backend_cpu_s


def is_local(conn: psycopg.Connection[Any]) -> bool:
    """Is the server on this machine (a Unix socket or a loopback address)?"""
    host = conn.info.host or ""
    if host.startswith("/"):
        return True
    try:
        return ipaddress.ip_address(conn.info.hostaddr or host).is_loopback
    except ValueError:
        return host == "localhost"


def local_backend(conn: psycopg.Connection[Any]) -> int | None:
    """The pid of the backend serving `conn` when /proc shows it: a server on this machine,
    whether pglab started it or was given its DSN (a pid read from another machine, or
    another pid namespace, could name some other process of this one)."""
    pid = conn.info.backend_pid
    if not is_local(conn):
        return None
    try:
        with open(f"{PROC}/{pid}/comm") as file:
            return pid if file.read().strip() in ("postgres", "postmaster") else None
    except OSError:
        return None


def process_cpu_s(pid: int) -> float:
    """utime+stime of a local process, 0 if it is gone."""
    stat = read_stat(f"{PROC}/{pid}/stat")
    return stat.own_ticks / CLK_TCK if stat is not None else 0.0
