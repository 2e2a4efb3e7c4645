"""The pure parts of db.lockqueue: query normalisation, root blockers, the evidence line
(the live probe is exercised by tests/test_observe.py's row-lock incident)."""

from __future__ import annotations

from pglab.analysis.names import busiest_queue, largest_queue
from pglab.probes.db_lockqueue import _roots, normalise_query


def test_literals_are_replaced() -> None:
    query = ("UPDATE t SET note = 'it''s 3', n = n + 12.5e3\n  WHERE id IN (1, 2, 3) "
             "AND col2 = -4 AND x$1 = $2")
    assert normalise_query(query) == ("UPDATE t SET note = ?, n = n + ? WHERE id IN (?, ...) "
                                      "AND col2 = ? AND x$1 = $2")
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
