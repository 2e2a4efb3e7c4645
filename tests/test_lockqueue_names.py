"""db.lockqueue: query normalisation, root blockers, the evidence line; names read in
their own database only, on a real server (the probe under load is exercised by
tests/test_observe.py's row-lock incident)."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pglab.analysis.names import ObjectNames, busiest_queue, largest_queue
from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.fault_actions import FaultTarget, IdleInTransaction
from pglab.lab.local import LocalServer
from pglab.lab.osuser import server_user
from pglab.probes.base import ProbeOutput
from pglab.probes.capabilities import Capabilities
from pglab.probes.db_lockqueue import LockQueue, _roots, normalise_query


def test_constants_are_replaced_as_pg_stat_statements_does() -> None:
    """By PostgreSQL's parser: a name with a $ in it is no parameter, and the constants
    are numbered after the statement's own parameters, as pg_stat_statements numbers them
    before 18."""
    query = ("UPDATE t SET note = 'it''s 3', n = n + 12.5e3\n  WHERE id IN (1, 2, 3) "
             "AND col2 = -4 AND x$1 = $2")
    assert normalise_query(query, squash=False) == (
        "UPDATE t SET note = $3, n = n + $4 WHERE id IN ($5, $6, $7) AND col2 = $8 AND x$1 = $2")
    # PostgreSQL 18 squashes the list and numbers every parameter anew in order
    # (tests/samples/pg_stat_statements/in-lists-18: `abalance > $1 AND bid = $2 AND aid
    # IN ($3 /*, ... */)` of `abalance > -1 AND bid = $1 AND aid IN (1, 2)`)
    assert normalise_query(query) == ("UPDATE t SET note = $1, n = n + $2 WHERE id IN "
                                      "($3 /*, ... */) AND col2 = $4 AND x$1 = $5")
    assert normalise_query(None) == ""
    assert normalise_query("SELECT " + "a, " * 200, limit=20).endswith("...")


def test_waiters_behind_waiters_count_behind_the_root() -> None:
    # 11 waits on 10 (the row's tuple lock), 10 waits on 5 (its transaction), 5 is idle
    blocked_by = {11: {10}, 10: {5}, 12: {10, 5}}
    assert _roots(11, blocked_by) == {5}
    assert _roots(12, blocked_by) == {5}
    assert _roots(1, {1: {2}, 2: {1}}) == set()  # a deadlock cycle has no root


def test_the_evidence_names_the_row_and_the_holder() -> None:
    line = busiest_queue([
        ({"object": "relation accounts", "waiters": 1, "holder": {"pid": 9}}, 3.0),
        ({"object": "row (0,1) of pgbench_branches", "waiters": 4, "holder": {
            "pid": 77, "application": "nightly-batch", "user": "app",
            "state": "idle in transaction", "xact_s": 3.7,
            "query": "UPDATE pgbench_branches SET bbalance = bbalance WHERE bid = ?"}}, 1.0),
    ])
    assert line == ("4 session(s) queued on row (0,1) of pgbench_branches behind pid 77 "
                    "(nightly-batch, app), idle in transaction, its transaction open 3.7 s; "
                    "its last statement: UPDATE pgbench_branches SET bbalance = bbalance "
                    "WHERE bid = ?")
    assert busiest_queue([]) is None


def test_the_queue_that_held_sessions_longest_is_named() -> None:
    # as a stall of a real run had them (test_observe's LOCK TABLE under pgbench at scale
    # 1): four sessions on the one branch row for a second, then four behind the LOCK
    # TABLE for three; the window's story is the table lock
    row = {"object": "row (0,171) of pgbench_branches", "locktype": "row", "waiters": 4,
           "holder": {"pid": 21197, "application": "pgbench"}}
    table = {"object": "relation pgbench_branches", "locktype": "relation", "waiters": 4,
             "holder": {"pid": 21230, "application": "migration"}}
    assert largest_queue([(row, 1.0), (table, 3.0)]) is table
    assert largest_queue([(row, 1.0), (table, 0.0)]) is row  # a moment counts as a second
    many = {**row, "waiters": 12}
    assert largest_queue([(many, 1.0), (table, 2.0)]) is many


def _blocked(srv: LocalServer, db: str, statement: str) -> threading.Thread:
    """`statement` on a connection of its own, in a thread: it waits for a lock."""
    def run() -> None:
        with srv.connect(db) as conn:
            conn.execute(statement)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _until_waiting(conn: psycopg.Connection[Any], count: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
        if row and row[0] >= count:
            return
        time.sleep(0.05)
    raise AssertionError("the waiters never waited")


@pytest.fixture(scope="module")
def server(pglab_home: Path) -> Iterator[LocalServer]:
    """Two databases, a table of one row in each: pglab's `hot`, shop's `orders`."""
    user = server_user()
    srv = LocalServer("names", runnable_by(find_binaries(), user),
                      pglab_home / "labs" / "lockqueue-names", user)
    srv.initdb(None, None, "C", "UTF8", sync=False)
    srv.start()
    with srv.connect("postgres") as conn:
        conn.execute("CREATE DATABASE pglab")
        conn.execute("CREATE DATABASE shop")
    for db, table in (("pglab", "hot"), ("shop", "orders")):
        with srv.connect(db) as conn:
            conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v int)")
            conn.execute(f"INSERT INTO {table} VALUES (1, 0)")
    yield srv
    srv.stop(discard=True)
    shutil.rmtree(srv.node_dir, ignore_errors=True)


def _read(srv: LocalServer, probe: LockQueue, waiting: int) -> tuple[ProbeOutput, int]:
    """One read of the probe, from pglab, once `waiting` locks wait; and shop's OID."""
    out = ProbeOutput()
    with srv.connect("pglab") as conn:
        _until_waiting(conn, waiting)
        row = conn.execute("SELECT oid FROM pg_database WHERE datname = 'shop'").fetchone()
        probe.start(None)  # type: ignore[arg-type]  # read() needs no context
        probe.read(conn, Capabilities.detect(conn), "primary",
                   dt.datetime.now(dt.timezone.utc), out)
    assert row is not None
    return out, int(str(row[0]))


@pytest.mark.live
def test_a_relation_is_named_in_its_own_database_only(server: LocalServer) -> None:
    """A lock queue in each database; the probe connects to `pglab`. The queue on pglab's
    table is named; the one in `shop` is the relation's OID in the database shop, said to
    be unnamed (regclass there would name whatever has that OID in pglab: the old probe
    printed the bare OID). About 3 s with the server's start."""
    hot = server.connect("pglab", autocommit=False)
    hot.execute("UPDATE hot SET v = v + 1 WHERE id = 1")
    orders = server.connect("shop", autocommit=False)
    orders.execute("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")
    try:
        waiters = [_blocked(server, "pglab", "UPDATE hot SET v = v + 1 WHERE id = 1"),
                   _blocked(server, "shop", "SELECT * FROM orders")]
        probe = LockQueue()
        out, shop_oid = _read(server, probe, 2)
    finally:
        for holder in (hot, orders):
            holder.rollback()
            holder.close()
    for waiter in waiters:
        waiter.join(timeout=10)
    queues = {e.attrs["object"]: e.attrs for e in probe.stop().events}
    assert "row (0,1) of hot" in queues, queues
    (shop,) = [q for q in queues if "shop" in q]
    assert shop.startswith("relation ") and shop.endswith(
        " of database shop (another database than pglab's: its names are not "
        "readable from here)"), shop
    names = ObjectNames.from_events([(e.node, json.loads(json.dumps(e.attrs)))
                                     for e in out.events if e.kind == "object-names"])
    assert names.connected == {"primary": "pglab"}
    assert names.databases["primary"][str(shop_oid)] == "shop"
    assert list(names.relations["primary"].values()) == ["hot"]  # not shop's orders
    relation_oid = shop.split()[1]
    assert names.name(f"relation {relation_oid} of database {shop_oid}", "primary") == (
        f"relation {relation_oid} of database shop (unnamed: another database than "
        "pglab: its names are not readable there)")


@pytest.mark.live
def test_the_idle_in_transaction_fault_is_a_long_holder_a_timeout_ends(
        server: LocalServer) -> None:
    """The fault that makes a long holder in the lab: a psql session locks the row and
    sits idle in its transaction; db.lockqueue sees the queue behind it, and a server
    timeout (what the idle-in-transaction-timeout advice sets) ends it, which the fault
    records. About 2 s."""
    with server.connect("postgres") as conn:
        conn.execute("ALTER DATABASE pglab SET idle_in_transaction_session_timeout = '1s'")
    fault = IdleInTransaction({"table": "hot", "key": "id", "value": 1})
    try:
        began = fault.begin(FaultTarget("primary", server))
        waiter = _blocked(server, "pglab", "UPDATE hot SET v = v + 1 WHERE id = 1")
        probe = LockQueue()
        _read(server, probe, 1)
        waiter.join(timeout=10)  # the timeout ended the holder: the update went through
        assert not waiter.is_alive()
        ended = fault.end(FaultTarget("primary", server))
    finally:
        with server.connect("postgres") as conn:
            conn.execute("ALTER DATABASE pglab RESET idle_in_transaction_session_timeout")
    assert began == {"statement": 'SELECT 1 FROM "hot" WHERE "id" = 1 FOR UPDATE'}
    (queue,) = [e.attrs for e in probe.stop().events]
    # the row's current version: the test before updated it
    assert re.fullmatch(r"row \(0,\d+\) of hot", queue["object"]), queue
    holder = queue["holder"]
    assert (holder["application"], holder["state"]) == ("psql", "idle in transaction")
    assert ended == {"ended_by_server":
                     "terminating connection due to idle-in-transaction timeout"}, ended
