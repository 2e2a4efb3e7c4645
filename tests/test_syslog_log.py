"""syslog files (log_destination = 'syslog'): tests/samples/serverlog/syslog/, written by
a real PostgreSQL 18 through a real rsyslogd (make_sample.sh), in rsyslog's traditional
format (no year, no zone, whole seconds) and in RFC 3339. Pieces `[SEQ-N]` joined into
one message, `#011` read as a tab, the pid from `postgres[PID]`, the year taken from the
file's modification time and said. Every count is checked against the sample's lines.
No server needed."""

from __future__ import annotations

import os
import re
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from conftest import SAMPLES
from pglab.events import Event
from pglab.serverlog import LogTail, compile_prefix, detect_format, parse_log_file, read_records
from test_log_formats import pglab

SYSLOG = SAMPLES / "serverlog" / "syslog"
TRADITIONAL = SYSLOG / "postgresql.syslog"
RFC3339 = SYSLOG / "postgresql-rfc3339.syslog"
HEROKU = SAMPLES / "serverlog" / "heroku" / "heroku.log"  # make_sample.sh with HEROKU=1
# postgres[PID]: [SEQ-N] text, or Heroku's app[postgres.PID]: [DATABASE] [SEQ-N] text
_PIECE_RE = re.compile(r"postgres[\[.](\d+)\]: (?:\[DATABASE\] )?\[(\d+)-(\d+)\] (.*)")
_HEROKU_METRICS = " app[heroku-postgres]: "  # the add-on's metrics: no server message


def pieces(path: Path) -> list[tuple[int, int, int, str]]:
    """(pid, seq, piece number, text) of each line, as the sample has them."""
    out = []
    for line in path.read_text().splitlines():
        if _HEROKU_METRICS in line:
            continue
        m = _PIECE_RE.search(line)
        assert m is not None, line
        out.append((int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)))
    return out


def firsts(path: Path) -> list[str]:
    """The first piece of every message."""
    return [text for _pid, _seq, n, text in pieces(path) if n == 1]


def dated(tmp_path: Path, source: Path, when: datetime, text: str | None = None) -> Path:
    """A copy of a sample last modified at `when` (the syslog year comes from it)."""
    copy = tmp_path / source.name
    copy.write_text(source.read_text() if text is None else text)
    os.utime(copy, (when.timestamp(), when.timestamp()))
    return copy


NOV_2026 = datetime(2026, 11, 30, tzinfo=timezone.utc)


def kinds(events: list[Event]) -> dict[str, int]:
    return dict(Counter(e.kind for e in events))


def expected_kinds(path: Path) -> dict[str, int]:
    heads = firsts(path)

    def count(pattern: str) -> int:
        return sum(re.search(pattern, text) is not None for text in heads)

    return {
        "checkpoint": count(r"LOG:  checkpoint complete"),
        "autovacuum": count(r"LOG:  automatic (aggressive )?vacuum"),
        "autoanalyze": count(r"LOG:  automatic analyze"),
        "slow-statement": count(r"LOG:  duration: "),
        "lock-wait": count(r"LOG:  process \d+ still waiting"),
        "error": count(r"ERROR:  "),
        "server-start": count(r"LOG:  database system is ready"),
        "server-stop": count(r"LOG:  database system is shut down"),
    }


@pytest.mark.parametrize("sample", [TRADITIONAL, RFC3339], ids=["traditional", "rfc3339"])
def test_every_message_and_event_as_the_lines_say(sample: Path, tmp_path: Path) -> None:
    path = dated(tmp_path, sample, NOV_2026)
    assert detect_format(path.read_bytes()[:4096]) == "syslog"
    records, stats = read_records(path)
    records_list = list(records)
    assert (stats.format, stats.lines, stats.skipped) == ("syslog", 136, 0)
    assert len(records_list) == stats.records == len(firsts(path)) == 35
    # the pid of every message is syslog's, in the order the messages began
    assert [r.pid for r in records_list] == [pid for pid, _s, n, _t in pieces(path) if n == 1]
    events, _ = parse_log_file(path)
    assert kinds(events) == expected_kinds(path) == {
        "checkpoint": 2, "autovacuum": 4, "autoanalyze": 11, "slow-statement": 3,
        "lock-wait": 1, "error": 1, "server-start": 1, "server-stop": 1}
    assert stats.prefix == "%q%u@%d " and stats.prefix_guessed
    whose = {(e.attrs.get("user"), e.attrs.get("database"))
             for e in events if e.kind in ("slow-statement", "lock-wait", "error")}
    assert whose == {("app", "orders")}


def test_heroku_logplex_lines_as_the_lines_say(capsys: pytest.CaptureFixture[str]) -> None:
    """The same server and events as the syslog sample, through rsyslog in the shape
    `heroku logs -p postgres` prints, with Heroku's log_line_prefix, then two of the
    add-on's metric lines."""
    lines = HEROKU.read_text().splitlines()
    metrics = [line for line in lines if _HEROKU_METRICS in line]
    assert len(metrics) == 2 and len(pieces(HEROKU)) + len(metrics) == len(lines)
    assert detect_format(HEROKU.read_bytes()[:4096]) == "heroku"
    records, stats = read_records(HEROKU)
    records_list = list(records)
    assert (stats.format, stats.lines, stats.skipped, stats.other_loggers) == (
        "heroku", len(lines), 0, 2)
    assert stats.prefix == "sql_error_code = %e " and stats.prefix_guessed
    # the pid is PostgreSQL's, from app[postgres.PID], in the order the messages began
    assert [r.pid for r in records_list] == [pid for pid, _s, n, _t in pieces(HEROKU) if n == 1]
    assert len(records_list) == len(firsts(HEROKU)) == 35
    events, _ = parse_log_file(HEROKU)
    assert kinds(events) == expected_kinds(HEROKU) == {
        "checkpoint": 2, "autovacuum": 4, "autoanalyze": 11, "slow-statement": 3,
        "lock-wait": 1, "error": 1, "server-start": 1, "server-stop": 1}
    statements = [e.attrs["statement"] for e in events if e.kind == "slow-statement"]
    assert statements[1] == "SELECT count(*),\n\tsum(balance)\nFROM accounts\nWHERE id <= 100;"
    (error,) = [e for e in events if e.kind == "error"]
    assert (error.attrs["message"], error.attrs["statement"]) == ("division by zero",
                                                                   "SELECT 1/0")
    code, _out, err = pglab(capsys, "logs", str(HEROKU))
    assert code == 0 and (f"{HEROKU}: heroku (detected), log_line_prefix "
                          "'sql_error_code = %e ' (guessed), ") in err
    assert "2 lines of other programs or loggers, 24 events" in err


def test_pieces_are_joined_into_the_statement_postgresql_logged(tmp_path: Path) -> None:
    events, _ = parse_log_file(dated(tmp_path, TRADITIONAL, NOV_2026))
    statements = [e.attrs["statement"] for e in events if e.kind == "slow-statement"]
    by_message: dict[tuple[int, int], list[str]] = {}
    for pid, seq, _n, text in pieces(TRADITIONAL):
        by_message.setdefault((pid, seq), []).append(text)
    # over 900 bytes: cut before a space, the next piece begins with it
    long_parts = next(p for p in by_message.values() if "column_60" in "".join(p))
    assert len(long_parts) == 2 and long_parts[1].startswith(" ")
    long_sql = "".join(long_parts).split("statement: ", 1)[1]
    assert len(long_sql) > 900 and statements[0] == long_sql[:500]
    # one piece per line, the continuation's tab written as #011
    multi = next(p for p in by_message.values() if "sum(balance)" in "".join(p))
    assert [p[:4] for p in multi[1:]] == ["#011", "#011", "#011"]
    assert statements[1] == "SELECT count(*),\n\tsum(balance)\nFROM accounts\nWHERE id <= 100;"
    (error,) = [e for e in events if e.kind == "error"]
    assert (error.attrs["message"], error.attrs["statement"]) == ("division by zero",
                                                                   "SELECT 1/0")
    (wait,) = [e for e in events if e.kind == "lock-wait"]
    assert (wait.attrs["pid"], wait.attrs["holders"]) == (19364, [19360])
    vacuum = next(e for e in events if e.kind == "autovacuum")
    assert vacuum.attrs["table"] == "orders.public.accounts"
    assert vacuum.attrs["tuples_removed"] == 15000  # from the 3rd piece (#011tuples: ...)


def test_the_year_comes_from_the_file_and_is_said(tmp_path: Path) -> None:
    traditional, stats = read_records(dated(tmp_path, TRADITIONAL, NOV_2026))
    times = [r.t for r in traditional]
    assert stats.assumed is not None
    assert "year 2026" in stats.assumed and "UTC" in stats.assumed
    precise, precise_stats = read_records(RFC3339)
    assert precise_stats.assumed is None  # RFC 3339 times carry year and zone
    # the same moments, to the second (rsyslog's traditional format has no fraction)
    assert times == [r.t.replace(microsecond=0) for r in precise]
    # a file written in January: November's lines were the year before
    january = tmp_path / "later"
    january.mkdir()
    records, stats = read_records(dated(january, TRADITIONAL, datetime(2027, 1, 5,
                                                                       tzinfo=timezone.utc)))
    assert {r.t.year for r in records} == {2026} and "year 2026" in str(stats.assumed)


def test_months_that_wrap_go_into_the_next_year(tmp_path: Path) -> None:
    lines = TRADITIONAL.read_text().splitlines(keepends=True)
    half = len(lines) // 2
    text = "".join(line.replace("Nov 23", "Dec 31") for line in lines[:half]) + \
        "".join(line.replace("Nov 23", "Jan  1") for line in lines[half:])
    records, _ = read_records(dated(tmp_path, TRADITIONAL, datetime(
        2027, 1, 1, 12, tzinfo=timezone.utc), text))
    years = [(r.t.month, r.t.year) for r in records]
    assert years[0] == (12, 2026) and years[-1] == (1, 2027)
    assert sorted(set(years)) == [(1, 2027), (12, 2026)]


def test_interleaved_pieces_and_other_programs(tmp_path: Path) -> None:
    """Another process's message between two pieces of one, and lines of other
    programs (a syslog file holds every daemon's): the same events, the others counted."""
    lines = TRADITIONAL.read_text().splitlines(keepends=True)
    # the next line of another process, moved between the lock wait's first two pieces
    detail = next(i for i, line in enumerate(lines) if "DETAIL:  Process holding" in line)
    other = next(i for i in range(detail, len(lines)) if "postgres[19364]" not in lines[i])
    moved = [*lines[:detail], lines[other], *lines[detail:other], *lines[other + 1:]]
    cron = "Nov 23 22:52:24 db1 CRON[4242]: (root) CMD (run-parts /etc/cron.hourly)\n"
    text = "".join([*moved[:10], cron, *moved[10:]])
    assert sorted(text.splitlines(keepends=True)) == sorted([*lines, cron])
    events, stats = parse_log_file(dated(tmp_path, TRADITIONAL, NOV_2026, text))
    (tmp_path / "plain").mkdir()
    plain, _ = parse_log_file(dated(tmp_path / "plain", TRADITIONAL, NOV_2026))
    assert stats.other_loggers == 1 and stats.skipped == 0
    assert sorted((e.kind, e.t_start) for e in events) == sorted(
        (e.kind, e.t_start) for e in plain)
    (wait,) = [e for e in events if e.kind == "lock-wait"]
    assert wait.attrs["holders"] == [19360]  # DETAIL found after the other message


def test_followed_in_pieces_and_with_a_given_prefix() -> None:
    text = RFC3339.read_text()
    tail = LogTail(prefix=compile_prefix("%q%u@%d ", need_time=False))
    events: list[Event] = []
    for start in range(0, len(text), 700):  # pieces that cut lines anywhere
        events += tail.feed(text[start:start + 700])
    events += tail.close()
    assert tail.stats.format == "syslog" and not tail.stats.prefix_guessed
    whole, _ = parse_log_file(RFC3339)
    assert [(e.kind, e.t_start, e.attrs.get("user")) for e in events] == [
        (e.kind, e.t_start, e.attrs.get("user")) for e in whole]
