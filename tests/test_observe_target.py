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


def test_psql_flags_and_the_dsn_make_one_connection_string() -> None:
    """-h, -p, -U, -d as psql reads them: with the DSN argument, instead of it, or
    neither (libpq's environment then fills everything in at connect time)."""
    import pytest
    from psycopg.conninfo import conninfo_to_dict

    from pglab.errors import BadInput
    from pglab.observe.target import connection_string

    def parsed(dsn: str | None, **flags: str) -> dict[str, str]:
        return {k: str(v) for k, v in conninfo_to_dict(connection_string(dsn, **flags)).items()}

    assert connection_string(None) == ""  # the environment and service file suffice
    assert parsed(None, host="db1", port="6432", user="monitor", dbname="app") == {
        "host": "db1", "port": "6432", "user": "monitor", "dbname": "app"}
    # the DSN argument as psql's: a database name, a key=value string or a URI
    assert parsed("app", host="db1") == {"dbname": "app", "host": "db1"}
    assert parsed("host=db1 sslmode=require", user="monitor") == {
        "host": "db1", "sslmode": "require", "user": "monitor"}
    assert parsed("postgresql://monitor@db1:6432/app", host="db1") == {
        "user": "monitor", "host": "db1", "port": "6432", "dbname": "app"}
    # -d may be a whole connection string, as psql's
    assert parsed(None, dbname="service=prod", user="me") == {"service": "prod", "user": "me"}
    # a key given twice with two values: refused, naming both, never the password
    with pytest.raises(BadInput, match=r"^-h gives host=db2 but the DSN gives host=db1: "):
        connection_string("host=db1", host="db2")
    with pytest.raises(BadInput, match="-d gives dbname=b but the DSN gives dbname=a"):
        connection_string("a", dbname="b")
    with pytest.raises(BadInput) as refused:
        connection_string("password=one-S3cret", dbname="password=two-S3cret")
    assert "S3cret" not in str(refused.value)
    with pytest.raises(BadInput, match=r"^-p 'abc': expected a port number like 5432$"):
        connection_string(None, port="abc")
    # a URI libpq cannot read: its message would quote the password's characters
    with pytest.raises(BadInput) as unreadable:
        connection_string("postgres://u:p w@h/db")
    assert "p w" not in str(unreadable.value)
