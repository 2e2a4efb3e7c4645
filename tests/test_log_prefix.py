"""stderr logs with managed services' log_line_prefix and `--prefix`: real PostgreSQL 18
logs (tests/samples/serverlog/rds/, made by its make_sample.sh) with RDS's
'%t:%r:%u@%d:[%p]:' and with a prefix of many escapes; the one-line messages for logs
pglab cannot read and for a bad --prefix. No server needed."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pglab.events import Event
from pglab.serverlog import (
    KNOWN_PREFIXES,
    LogTail,
    compile_prefix,
    parse_log_file,
    read_records,
)
from pglab.serverlog.records import TimestampParser

RDS = Path(__file__).resolve().parent / "samples" / "serverlog" / "rds"
RDS_PREFIX = "%t:%r:%u@%d:[%p]:"
ESCAPES_PREFIX = "%m|%n|%c|%l|%v|%x|%e|%b|%h|%a|%-8u|%d|[%p]|%q%i|"

# What make_sample.sh provoked, as the server logged it in rds/postgresql.log.
RDS_KINDS = {
    "checkpoint": 2,  # CHECKPOINT, then the shutdown checkpoint
    "lock-wait": 1,
    "autovacuum": 4,  # orders' accounts, and three of template1's catalogs
    "autoanalyze": 11,
    "slow-statement": 3,  # log_min_duration_statement = 0 for app in orders
    "server-start": 1,
    "server-stop": 1,
}
STATEMENT_PIDS = [26608, 26610, 26613]
WAITER, HOLDER, CHECKPOINTER, POSTMASTER = 26640, 26637, 26592, 26588


def kinds(events: list[Event]) -> dict[str, int]:
    return dict(Counter(e.kind for e in events))


def rds_checks(events: list[Event], sessions: bool = True) -> None:
    """sessions: the prefix has %u and %d, so session events say whose they are."""
    assert kinds(events) == RDS_KINDS
    statements = [e for e in events if e.kind == "slow-statement"]
    assert sorted(e.attrs["pid"] for e in statements) == STATEMENT_PIDS
    whose = [(e.attrs.get("user"), e.attrs.get("database"))
             for e in events if e.kind in ("slow-statement", "lock-wait")]
    assert whose == [("app", "orders") if sessions else (None, None)] * 4
    assert [e.attrs["statement"] for e in statements][1] == "SELECT pg_sleep(0.2)"
    (wait,) = [e for e in events if e.kind == "lock-wait"]
    assert wait.attrs["pid"] == WAITER and wait.attrs["holders"] == [HOLDER]
    assert wait.attrs["waited_ms"] == pytest.approx(1101.633)
    # %t has no milliseconds: whole seconds, in UTC
    checkpoint = next(e for e in events if e.kind == "checkpoint")
    assert checkpoint.t_start == datetime(2026, 11, 23, 20, 19, 5, tzinfo=timezone.utc)
    assert checkpoint.attrs["flags"] == ["immediate", "force", "wait"]


def test_the_rds_prefix_is_recognised_and_named() -> None:
    events, stats = parse_log_file(RDS / "postgresql.log")
    rds_checks(events)
    assert (stats.lines, stats.records, stats.skipped) == (129, 30, 0)
    assert stats.prefix == RDS_PREFIX and stats.prefix_guessed


def test_the_rds_prefix_given_reads_the_same() -> None:
    events, stats = parse_log_file(RDS / "postgresql.log", prefix=compile_prefix(RDS_PREFIX))
    rds_checks(events)
    assert stats.prefix == RDS_PREFIX and not stats.prefix_guessed


def test_every_message_has_its_pid_user_database_and_client() -> None:
    records, stats = read_records(RDS / "postgresql.log")
    records_list = list(records)
    # every message (34 lines with a severity, not DETAIL/CONTEXT/STATEMENT lines);
    # parse_log_file's 30 are those that can make an event
    assert len(records_list) == stats.records == 34
    sessions = [r for r in records_list if r.user is not None]
    # 3 statements and the lock wait's two messages; background processes print
    # an empty %r, %u and %d
    assert len(sessions) == 5
    assert {(r.user, r.database) for r in sessions} == {("app", "orders")}
    assert [r.client for r in sessions[:3]] == [
        "127.0.0.1(39032)", "127.0.0.1(39046)", "127.0.0.1(39060)"]
    assert [r.pid for r in sessions] == [*STATEMENT_PIDS, WAITER, WAITER]
    # the port of %r is never taken for the pid
    assert all(r.pid not in (39032, 39046, 39060, 32960) for r in records_list)
    assert Counter(r.pid for r in records_list if r.user is None) == {
        POSTMASTER: 8, CHECKPOINTER: 5, 26594: 1, 26618: 2, 26619: 12, 26623: 1}
    wait = sessions[3]
    assert wait.detail == "Process holding the lock: 26637. Wait queue: 26640."
    assert wait.statement == "UPDATE accounts SET balance = 1 WHERE id = 1"


def test_an_unknown_prefix_with_a_bracketed_pid_after_host_port(tmp_path: Path) -> None:
    """Not one of KNOWN_PREFIXES: read heuristically, the pid being the last [%p] before
    the severity, not the port in %r's host(port)."""
    text = (RDS / "postgresql.log").read_text()
    # '%t:%r:%a:[%p]:' as the same server would print it
    text = re.sub(r"^([^\t][^\n]*?:)(?:app@orders|@):\[", r"\1psql:[", text, flags=re.M)
    assert "UTC:127.0.0.1(39032):psql:[26608]:LOG:  duration" in text
    log = tmp_path / "other.log"
    log.write_text(text)
    events, stats = parse_log_file(log)
    rds_checks(events, sessions=False)
    assert stats.prefix is None and stats.skipped == 0
    given, given_stats = parse_log_file(log, prefix=compile_prefix("%t:%r:%a:[%p]:"))
    rds_checks(given, sessions=False)
    assert given_stats.records == stats.records == 30


def test_a_prefix_of_many_escapes_given_with_prefix() -> None:
    path = RDS / "escapes.log"
    records, stats = read_records(path, prefix=compile_prefix(ESCAPES_PREFIX))
    got = list(records)
    assert (stats.lines, stats.records, stats.skipped) == (15, 15, 0)
    # %m's milliseconds (the first time escape; %n after it is only matched)
    assert got[0].t == datetime(2026, 11, 23, 20, 19, 5, 952000, tzinfo=timezone.utc)
    (statement,) = [r for r in got if r.user is not None]
    # %-8u's padding is not part of the name; %h is the host alone
    assert (statement.pid, statement.user, statement.database, statement.client) == (
        26669, "app", "orders", "127.0.0.1")
    assert {r.pid for r in got} == {26655, 26661, 26669, 26659}
    events, _ = parse_log_file(path, prefix=compile_prefix(ESCAPES_PREFIX))
    assert kinds(events) == {"server-start": 1, "slow-statement": 1, "checkpoint": 2,
                             "server-stop": 1}
    (slow,) = [e for e in events if e.kind == "slow-statement"]
    assert (slow.attrs["pid"], slow.attrs["user"], slow.attrs["database"]) == (
        26669, "app", "orders")


def test_a_followed_log_reads_with_its_prefix() -> None:
    text = (RDS / "postgresql.log").read_text()
    for prefix in (None, compile_prefix(RDS_PREFIX)):
        tail = LogTail(prefix=prefix)
        events: list[Event] = []
        for start in range(0, len(text), 700):
            events += tail.feed(text[start : start + 700])
        events += tail.close()
        rds_checks(events)


def test_prefix_compilation() -> None:
    ts = TimestampParser()
    for text in KNOWN_PREFIXES:
        compile_prefix(text)
    debian = compile_prefix("%m [%p] %q%u@%d ")
    fields = debian.match("2026-11-23 10:15:01.250 CET [77] app@orders ", ts)
    assert fields is not None
    assert (fields.pid, fields.user, fields.database) == (77, "app", "orders")
    assert fields.t == datetime(2026, 11, 23, 9, 15, 1, 250000, tzinfo=timezone.utc)
    background = debian.match("2026-11-23 10:15:01.250 CET [78] ", ts)  # stops at %q
    assert background is not None and background.user is None
    epoch = compile_prefix("%n 100%% [%p] ").match("1795465145.952 100% [5] ", ts)
    assert epoch is not None and epoch.pid == 5
    assert epoch.t == datetime(2026, 11, 23, 20, 19, 5, 952000, tzinfo=timezone.utc)
    # PostgreSQL prints nothing for an escape it does not know: neither is expected here
    unknown = compile_prefix("%m%y [%p] ").match("2026-11-23 10:15:01.250 CET [78] ", ts)
    assert unknown is not None and unknown.pid == 78
    local = compile_prefix(RDS_PREFIX).match("2026-11-23 10:15:01 UTC:[local]:a@b:[9]:", ts)
    assert local is not None and local.client == "[local]" and local.pid == 9


@pytest.mark.parametrize(("prefix", "expected"), [
    ("%u@%d [%p] ", "'%u@%d [%p] ' has no time escape: pglab needs %m, %t or %n"),
    ("%s [%p] ", "has no time escape"),  # the session's start is not the message's time
])
def test_a_bad_prefix_is_one_line(prefix: str, expected: str) -> None:
    from conftest import run_cli

    result = run_cli("logs", "--prefix", prefix, str(RDS / "postgresql.log"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("pglab: --prefix: ") and expected in result.stderr
    with pytest.raises(ValueError, match=re.escape(expected)):
        compile_prefix(prefix)


def test_observe_log_prefix_is_checked_first() -> None:
    from conftest import run_cli

    result = run_cli("observe", "host=/nonexistent", "--log-prefix", "%m [%p] ")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "--log-prefix: it is the prefix of --log's lines; give --log too" in result.stderr
    bad = run_cli("observe", "host=/nonexistent", "--log", str(RDS / "postgresql.log"),
                  "--log-prefix", "[%p] ")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert bad.stderr.startswith("pglab: --log-prefix: '[%p] ' has no time escape")


def test_pglab_logs_names_the_prefix_it_guessed() -> None:
    from conftest import run_cli

    result = run_cli("logs", str(RDS / "postgresql.log"))
    assert result.returncode == 0
    assert (f"postgresql.log: stderr (detected), log_line_prefix '{RDS_PREFIX}' (guessed), "
            "129 lines, 30 messages, 0 unreadable, 23 events\n") in result.stderr
    assert result.stderr.splitlines()[-1].startswith("23 events from 2026-11-23 ")
    # whose statements and lock waits, in the details column
    assert "user=app database=orders" in result.stdout
    given = run_cli("logs", "--prefix", RDS_PREFIX, str(RDS / "postgresql.log"))
    assert f"'{RDS_PREFIX}' (given)" in given.stderr


def test_a_log_without_a_recognised_prefix_says_so_in_one_line(tmp_path: Path) -> None:
    from conftest import run_cli

    bare = tmp_path / "bare.log"  # the messages without any prefix (no time)
    bare.write_text(re.sub(r"^[^\t][^\n]*?:\[\d+\]:", "", (RDS / "postgresql.log").read_text(),
                           flags=re.M))
    plain = tmp_path / "plain.log"  # lines, but nothing like a message
    plain.write_text("".join(f"line {i} of something else\n" for i in range(40)))
    for path, lines, unreadable in ((bare, 129, 30), (plain, 40, 0)):
        result = run_cli("logs", str(path))
        assert result.returncode == 0
        warning = (f"{path}: {lines} lines, but no message with a recognised "
                   "log_line_prefix; try --prefix with the server's log_line_prefix "
                   "(SHOW log_line_prefix), e.g. --prefix '%t:%r:%u@%d:[%p]:', or --format "
                   "(stderr, csvlog, jsonlog, syslog, heroku, cloudlogging)\n")
        assert warning in result.stderr
        assert f"0 messages, {unreadable} unreadable" in result.stderr
    wrong = run_cli("logs", "--prefix", "%m [%p] ", str(RDS / "postgresql.log"))
    assert ("postgresql.log: 129 lines, but none read with --prefix '%m [%p] '; check it "
            "against the server's log_line_prefix (SHOW log_line_prefix)\n") in wrong.stderr


def test_debians_prefix_keeps_the_sessions_lines(tmp_path: Path) -> None:
    """Debian's '%m [%p] %q%u@%d ' prints `user@db ` after the pid only for sessions: a
    log where most lines are background processes' still reads the sessions' lines
    (the fast `%m [%p] ` scanner would miss them)."""
    pg18 = Path(__file__).resolve().parent / "samples" / "serverlog" / "pg18"
    original, _ = parse_log_file(pg18 / "postgresql.log")
    text = (pg18 / "postgresql.log").read_text()
    sessions = set(re.findall(r"\[(\d+)\] LOG:  duration", text))
    assert len(sessions) == 11
    debian = re.sub(r"^(\S+ \S+ \S+ \[(\d+)\] )",
                    lambda m: m.group(1) + ("app@orders " if m.group(2) in sessions else ""),
                    text, flags=re.M)
    log = tmp_path / "debian.log"
    log.write_text(debian)
    events, stats = parse_log_file(log)
    assert stats.prefix == "%m [%p] %q%u@%d " and stats.prefix_guessed
    assert kinds(events) == kinds(original)
    assert Counter(e.kind for e in events)["slow-statement"] == 13
    records, _ = read_records(log)
    assert {r.user for r in records} == {None, "app"}


def test_csvlog_and_jsonlog_events_say_whose_they_are() -> None:
    """csvlog's and jsonlog's user and database columns reach the session events too."""
    pg18 = Path(__file__).resolve().parent / "samples" / "serverlog" / "pg18"
    for name in ("postgresql.csv", "postgresql.json"):
        events, _ = parse_log_file(pg18 / name)
        whose = Counter((e.kind, e.attrs.get("user"), e.attrs.get("database")) for e in events
                        if e.kind in ("slow-statement", "lock-wait", "error"))
        assert whose == {("slow-statement", "postgres", "postgres"): 13,
                         ("lock-wait", "postgres", "postgres"): 4,
                         ("error", "postgres", "postgres"): 2,
                         ("error", "postgres", "nosuchdb"): 1,  # the login to a missing db
                         ("error", None, None): 1}


@pytest.mark.parametrize(("line", "pid"), [
    ("2026-11-23 10:15:01 UTC:10.0.1.23(53124):app@orders:[12345]:LOG:  checkpoint "
     "starting: time", 12345),
    ("2026-11-23 10:15:01 UTC (123) LOG:  checkpoint starting: time", 123),
    # %r's port is never the pid, even when no other number is there
    ("2026-11-23 10:15:01 UTC 10.0.1.23(53124) LOG:  checkpoint starting: time", None),
])
def test_the_heuristic_pid_is_never_the_client_port(line: str, pid: int | None) -> None:
    records, stats = read_records([line])
    assert [r.pid for r in records] == [pid]
    assert stats.skipped == 0


def test_observe_follows_a_log_with_its_prefix(tmp_path: Path) -> None:
    """`pglab observe --log FILE --log-prefix ...`: the followed file is read with it."""
    from datetime import timezone as tz

    from pglab.observe.logsource import FileSource, ObservedLog

    log = tmp_path / "followed.log"
    log.write_text("")
    probe = ObservedLog(FileSource(log), prefix=compile_prefix("%t:%r:%a:[%p]:"))
    text = re.sub(r"^([^\t][^\n]*?:)(?:app@orders|@):\[", r"\1psql:[",
                  (RDS / "postgresql.log").read_text(), flags=re.M)
    events: list[Event] = []
    now = datetime.now(tz.utc)
    for start in range(0, len(text), 2000):  # the server appends as it goes
        with log.open("a") as handle:
            handle.write(text[start : start + 2000])
        events += probe.sample(now).events
    events += probe.stop().events
    rds_checks(events, sessions=False)
    assert probe.tail.stats.prefix == "%t:%r:%a:[%p]:" and probe.tail.stats.skipped == 0


PGBADGER = Path(__file__).resolve().parent / "samples" / "serverlog" / "pgbadger"


def test_pgbadgers_prefix_is_recognised_with_its_sessions() -> None:
    """A real PostgreSQL 15 log (pgbadger/make_sample.sh) with the prefix pgBadger's
    documentation asks for and log_connections on: the prefix is named, each session's
    user and database are read ([unknown] before the startup packet is none), and the
    lock wait names its table and statement from the message's CONTEXT and STATEMENT."""
    path = PGBADGER / "postgresql.log"
    events, stats = parse_log_file(path)
    assert stats.prefix == "%t [%p]: [%l-1] user=%u,db=%d,app=%a,client=%h "
    assert stats.prefix_guessed and stats.skipped == 0 and stats.lines == 57
    assert kinds(events) == {"server-start": 1, "slow-statement": 4, "temp-file": 1,
                             "lock-wait": 1, "error": 1, "checkpoint": 2, "server-stop": 1}
    records, _ = read_records(path)
    every = list(records)
    assert len(every) == 51  # messages: the 57 lines less 6 of DETAIL, CONTEXT, STATEMENT
    received = next(r for r in every if r.pid == 13954)  # "connection received: ..."
    assert (received.user, received.database, received.client) == (None, None, "127.0.0.1")
    (wait,) = [e for e in events if e.kind == "lock-wait"]
    assert wait.attrs["relation"] == "accounts"
    assert wait.attrs["statement"] == "UPDATE accounts SET balance = 1 WHERE id = 1"
    assert (wait.attrs["user"], wait.attrs["database"], wait.attrs["holders"]) == (
        "report", "orders", [13952])
    # %t has whole seconds: the wait lasts what the server measured (710.913 ms) up to
    # the second its end was logged in
    assert wait.t_end == datetime(2026, 11, 26, 10, 6, 1, tzinfo=timezone.utc)
    assert wait.t_end - wait.t_start == timedelta(microseconds=710913)
    (fatal,) = [e for e in events if e.kind == "error"]
    assert (fatal.attrs["user"], fatal.attrs["database"]) == ("app", "nosuchdb")
