"""The pure parts of observe/target.py: what pglab says before observing (the live
connection, privileges and DSN checks are in tests/test_observe.py)."""

from __future__ import annotations

from pglab.observe.target import ObservedNode, sql_log_problem


def test_a_log_that_sql_cannot_read_is_said_with_what_to_give() -> None:
    """--log sql on a server without a log file of its own (Debian's logging_collector =
    off, syslog only), or a role without the functions: why, before observing."""
    def node(**facts: object) -> ObservedNode:
        return ObservedNode("primary", "host=x", lambda: None,  # type: ignore[arg-type,return-value]
                            facts={"current_user": "watcher", "logging_collector": "on",
                                   "log_destination": "stderr", **facts})

    debian = sql_log_problem(node(logging_collector="off", rolsuper=True))
    assert debian is not None and debian.startswith(
        "the server writes no log file of its own (logging_collector = off")
    assert "--log FILE" in debian
    syslog = sql_log_problem(node(log_destination="syslog", rolsuper=True))
    assert syslog == ("the server logs only to syslog (log_destination): give --log with "
                      "syslog's file or the event log's export")
    assert sql_log_problem(node(log_destination="stderr, jsonlog", rolsuper=True)) is None
    assert sql_log_problem(node(ls_logdir=True, read_file=False)) is not None
    assert sql_log_problem(node(ls_logdir=True, read_file=True)) is None
