"""Connections for database probes: one per node and sampling thread, reconnecting.

All interval probes of a node share one connection (they run one after another in one
thread), and the wait sampler has its own: two connections per node in all, whatever the
number of probes, so telemetry stays out of max_connections' way.

Each sampling thread reads each node on a worker thread of its own (run()): a node that
stops answering (a paused standby: SIGSTOP leaves its socket open and silent, so no
timeout of the server's applies) then blocks only its own samples, not the primary's.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import psycopg

from pglab.probes.base import NodeHandle
from pglab.probes.catalog import Capabilities, telemetry_connection

T = TypeVar("T")
Job = tuple[Callable[[], Any], "Future[Any]"]


def _work(jobs: queue.SimpleQueue[Job | None]) -> None:
    while (job := jobs.get()) is not None:
        fn, future = job
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)


class DbSessions:
    def __init__(self, nodes: list[NodeHandle]) -> None:
        self._handles = {n.name: n for n in nodes if n.connect is not None}
        self._local = threading.local()
        self._all: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        # (sampling thread, node) -> the worker's job queue and its job in progress
        self._workers: dict[tuple[int, str], queue.SimpleQueue[Job | None]] = {}
        self._busy: dict[tuple[int, str], Future[Any]] = {}

    def run(self, node: str, fn: Callable[[], T]) -> Future[T] | None:
        """fn on the calling thread's worker for `node`; None while that worker is still
        busy with the previous call (a node that stopped answering)."""
        key = (threading.get_ident(), node)
        with self._lock:
            busy = self._busy.get(key)
            if busy is not None and not busy.done():
                return None
            jobs = self._workers.get(key)
            if jobs is None:
                jobs = self._workers[key] = queue.SimpleQueue()
                # a daemon: a worker stuck on a silent server must not hold up the exit
                threading.Thread(target=_work, args=(jobs,), daemon=True,
                                 name=f"pglab-db-{node}").start()
            future: Future[T] = Future()
            self._busy[key] = future
            jobs.put((fn, future))
        return future

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
            for jobs in self._workers.values():
                jobs.put(None)
            self._workers.clear()
            self._busy.clear()
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()
