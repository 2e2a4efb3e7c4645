"""Logs of real deployments from pgBadger's test suite (tests/samples/serverlog/
pgbadger-fixtures/, README there): a Google Cloud SQL export whose textPayloads carry no
time, a CloudNativePG pod's output (newest first, with stderr lines in `msg`), Heroku
lines through a log drain, and csvlog rows in a file named `.log`. Every count a test
expects is counted from the file itself here, not written down. No server needed."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLES
from pglab.cli import main
from pglab.events import Event
from pglab.serverlog import LogTail, detect_format, parse_log_file, read_records

FIXTURES = SAMPLES / "serverlog" / "pgbadger-fixtures"
CLOUDSQL = FIXTURES / "cloudsql.log.gz"
CNPG = FIXTURES / "cnpg.log.gz"
LOGPLEX = FIXTURES / "logplex.gz"
CSV_AS_LOG = FIXTURES / "csv_statement_without_duration.log"
CLOUDSQL_PREFIX = "[%p]: [%l-1] db=%d,user=%u "


def pglab(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    captured = capsys.readouterr()
    return int(ended.value.code or 0), captured.out, captured.err


def lines_of(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode().splitlines()


def key(events: list[Event]) -> list[tuple[str, datetime, Any]]:
    return [(e.kind, e.t_start, e.attrs.get("pid")) for e in events]


def rfc3339(text: str) -> datetime:
    whole, _, fraction = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{whole}.{fraction[:6].ljust(6, '0')}+00:00")


# --- Google Cloud SQL: the time is the entry's, not the payload's --------------------

def cloudsql_entries() -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines_of(CLOUDSQL)]


def payload_counts(entries: list[dict[str, Any]]) -> Counter[str]:
    texts = [e["textPayload"] for e in entries]
    return Counter({
        "checkpoint": sum("LOG:  checkpoint complete:" in t for t in texts),
        "autovacuum": sum(re.search(r"LOG:  automatic (aggressive )?vacuum of table", t)
                          is not None for t in texts),
        "autoanalyze": sum("LOG:  automatic analyze of table" in t for t in texts),
        "error": sum(" FATAL:  " in t or " ERROR:  " in t for t in texts),
    })


def test_cloud_sql_payloads_without_a_time_take_the_entrys() -> None:
    entries = cloudsql_entries()
    assert not any(re.match(r"\[\d+\]: \[\d+-1\] db=", e["textPayload"]) is None
                   and not e["textPayload"].startswith("\t") for e in entries)
    assert detect_format(gzip.decompress(CLOUDSQL.read_bytes())[:65536]) == "cloudlogging"
    events, stats = parse_log_file(CLOUDSQL)
    assert (stats.format, stats.skipped, stats.other_loggers) == ("cloudlogging", 0, 0)
    assert (stats.prefix, stats.prefix_guessed) == (CLOUDSQL_PREFIX, True)
    assert stats.time_source == "the entries' timestamp"
    made = Counter(e.kind for e in events)
    expected = payload_counts(entries)
    assert {kind: made[kind] for kind in expected} == expected
    assert expected["checkpoint"] == 12 and expected["autovacuum"] == 15
    # each event ends at the time of the entry that completed it
    completed = {rfc3339(e["timestamp"]) for e in entries
                 if re.search(r"LOG:  (checkpoint complete|automatic )", e["textPayload"])}
    ends = {e.t_end for e in events if e.kind in ("checkpoint", "autovacuum", "autoanalyze")}
    assert ends == completed
    # the payload's own prefix gives pid, user and database
    said = [re.match(r"\[(\d+)\]: \[\d+-1\] db=([^,]*),user=(\S*) FATAL:  ", e["textPayload"])
            for e in entries]
    fatal = [(int(m[1]), m[3] or None, m[2] or None) for m in said if m is not None]
    assert [(e.attrs["pid"], e.attrs["user"], e.attrs["database"]) for e in events
            if e.kind == "error"] == fatal
    assert len(fatal) == 4 and ("cloudsqladmin", "cloudsqladmin") in {f[1:] for f in fatal}


def test_cloud_sql_as_gcloud_array_and_followed(tmp_path: Path) -> None:
    """The same entries as `gcloud logging read --format=json` prints them (a JSON array,
    newest first), and followed an entry at a time, yield the same events."""
    plain, _ = parse_log_file(CLOUDSQL)
    array = tmp_path / "gcloud.json"
    array.write_text(json.dumps(list(reversed(cloudsql_entries()))))
    events, stats = parse_log_file(array)
    assert stats.format == "cloudlogging" and key(events) == key(plain)
    tail = LogTail()
    followed: list[Event] = []
    for line in lines_of(CLOUDSQL):  # an entry at a time, as a followed sink file grows
        followed += tail.feed(line + "\n")
    followed += tail.close()
    assert key(followed) == key(plain) and len(plain) > 50


def test_a_prefix_without_time_is_accepted_for_cloud_logging(
        capsys: pytest.CaptureFixture[str]) -> None:
    plain, _ = parse_log_file(CLOUDSQL)
    code, out, err = pglab(capsys, "logs", "--prefix", CLOUDSQL_PREFIX, str(CLOUDSQL))
    assert code == 0, err
    assert (f"cloudlogging (detected), log_line_prefix {CLOUDSQL_PREFIX!r} (given), times "
            "from the entries' timestamp, 1,343 lines, 67 messages, 0 unreadable") in err
    assert len(out.splitlines()) == 1 + len(plain)
    # a stderr log still needs a time in its prefix: its lines have no other
    code, _, err = pglab(capsys, "logs", "--prefix", CLOUDSQL_PREFIX,
                         str(SAMPLES / "serverlog" / "pg18" / "postgresql.log"))
    assert code == 2 and "has no time escape" in err and len(err.splitlines()) == 1


# --- CloudNativePG: stderr lines in `msg`, other loggers, newest first ----------------

def cnpg_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines_of(CNPG)]


def test_cloudnativepg_stderr_lines_and_other_loggers() -> None:
    objs = cnpg_lines()
    bare = [o for o in objs if o.get("logger") == "postgres" and "record" not in o]
    assert len(bare) == 4  # PostgreSQL's stderr before its logging collector started
    records, stats = read_records(CNPG)
    kept = list(records)
    assert stats.skipped == 0
    assert stats.other_loggers == sum(o.get("logger") != "postgres" for o in objs) == 43
    # every csvlog record, and the stderr lines' two messages with their HINT lines
    assert len(kept) == sum("record" in o for o in objs) + 2
    redirect = [r for r in kept if r.message == "redirecting log output to logging "
                "collector process"]
    assert len(redirect) == 1 and redirect[0].pid == 28
    assert redirect[0].hint == 'Future log output will appear in directory "/controller/log".'


def test_cloudnativepg_ts_as_rfc3339_text(tmp_path: Path) -> None:
    """Current CloudNativePG writes `ts` as RFC 3339 text, older releases (this file) as
    seconds since the epoch. A stderr line whose prefix has no time (`[%p] `) takes its
    time from `ts`, whichever way it is written."""
    objs = cnpg_lines()
    for o in objs:
        if o.get("logger") == "postgres" and "record" not in o:
            o["msg"] = re.sub(r"^\S+ \S+ UTC ", "", o["msg"])  # the prefix's time
    numbers = tmp_path / "cnpg-epoch.log"
    numbers.write_text("".join(json.dumps(o) + "\n" for o in objs))
    for o in objs:
        o["ts"] = datetime.fromtimestamp(o["ts"], timezone.utc).isoformat().replace(
            "+00:00", "Z")
    texts = tmp_path / "cnpg-rfc3339.log"
    texts.write_text("".join(json.dumps(o) + "\n" for o in objs))
    by_number, _ = read_records(numbers)
    by_text, stats = read_records(texts)
    from_number = [(r.t, r.message) for r in by_number]
    assert stats.skipped == 0
    assert [(r.t, r.message) for r in by_text] == from_number
    redirect = [t for t, m in from_number if m.startswith("redirecting log output")]
    assert redirect == [datetime(2022, 11, 27, 18, 48, 18, 944277, timezone.utc)]


def test_cloudnativepg_newest_first_reads_as_oldest_first(tmp_path: Path) -> None:
    objs = cnpg_lines()
    assert objs[0]["ts"] > objs[-1]["ts"]  # the file runs newest first
    events, stats = parse_log_file(CNPG)
    assert stats.format == "jsonlog"
    oldest_first = tmp_path / "cnpg-oldest-first.log"
    oldest_first.write_text("".join(json.dumps(o) + "\n" for o in reversed(objs)))
    forward, _ = parse_log_file(oldest_first)
    assert key(events) == key(forward)
    messages = [o["record"]["message"] for o in objs if "record" in o]
    made = Counter(e.kind for e in events)
    assert made["slow-statement"] == sum(m.startswith("duration: ") for m in messages) == 400
    assert made["checkpoint"] == sum(m.startswith("checkpoint complete") for m in messages)
    assert made["error"] == sum(o["record"]["error_severity"] in ("ERROR", "FATAL")
                                for o in objs if "record" in o) == 5
    # a checkpoint pairs its start with its completion: in log order, not file order
    for checkpoint in (e for e in events if e.kind == "checkpoint"):
        assert checkpoint.t_end is not None and checkpoint.attrs["complete"]
        took = (checkpoint.t_end - checkpoint.t_start).total_seconds()
        assert abs(took - checkpoint.attrs["total_s"]) < 0.01


def test_a_followed_jsonlog_gives_events_as_they_come() -> None:
    """Telling the order waits for no more than a second line: a log followed during a
    run (pglab's own jsonlog, written line by line) gives each event when its line
    comes, not at the end."""
    lines = (SAMPLES / "serverlog" / "pg18" / "postgresql.json").read_text().splitlines(True)
    whole, _ = parse_log_file(SAMPLES / "serverlog" / "pg18" / "postgresql.json")
    tail = LogTail()
    before_close: list[Event] = []
    for line in lines:
        before_close += tail.feed(line)
    assert tail.stats.format == "jsonlog"
    assert key(before_close + tail.close()) == key(whole)
    assert len(before_close) >= len(whole) - 3  # all but those still open at the end


# --- Heroku through a log drain --------------------------------------------------------

def test_heroku_lines_through_a_drain() -> None:
    lines = lines_of(LOGPLEX)
    drained = [line for line in lines if re.match(r"\S+ d\.[0-9a-f-]+ app\[postgres\.", line)]
    assert len(drained) == 6
    events, stats = parse_log_file(LOGPLEX)
    assert (stats.format, stats.skipped) == ("heroku", 0)
    assert (stats.prefix, stats.prefix_guessed) == (" sql_error_code = %e ", True)
    slow = [e for e in events if e.kind == "slow-statement"]
    durations = [float(m) for m in re.findall(r"LOG:  duration: ([0-9.]+) ms", "\n".join(lines))]
    assert sorted(e.attrs["duration_ms"] for e in slow) == sorted(durations)
    assert len(durations) == 4
    drain = next(e for e in slow if e.attrs["pid"] == 5925)
    assert drain.t_end == datetime(2021, 9, 7, 4, 1, 27, tzinfo=timezone.utc)
    assert drain.attrs["statement"].startswith('UPDATE "checkers" SET')
    assert "missions.checker_id = checkers.id" in drain.attrs["statement"]
    # DETAIL lines (after the prefix's leading space) belong to their lock wait
    waits = {e.attrs["pid"]: e for e in events if e.kind == "lock-wait"}
    assert waits[4882].attrs["holders"] == [4821]
    assert waits[4882].attrs["wait_queue"] == [4886, 4882]


# --- csvlog in a file named .log -------------------------------------------------------

def test_csvlog_is_told_by_its_content_not_its_name(tmp_path: Path) -> None:
    events, stats = parse_log_file(CSV_AS_LOG)
    assert (stats.format, stats.skipped) == ("csvlog", 0)
    assert [(e.kind, e.attrs["duration_ms"], e.attrs["user"]) for e in events] == [
        ("slow-statement", 688786.283, "example_user")]
    # a server's own csvlog under names that say otherwise
    real = SAMPLES / "serverlog" / "pg15" / "postgresql.csv"
    plain, _ = parse_log_file(real)
    for name in ("postgresql.log", "postgresql.json", "postgresql"):
        renamed = tmp_path / name
        renamed.write_bytes(real.read_bytes())
        again, renamed_stats = parse_log_file(renamed)
        assert renamed_stats.format == "csvlog" and key(again) == key(plain)
