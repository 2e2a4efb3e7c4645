"""Server-log parser: real PostgreSQL 15 and 18 logs in three formats, version-specific
message formats from the sources (13-18), garbled input, tailing. No server needed."""

from __future__ import annotations

import gc
import json
import random
import re
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import pglab.serverlog.reader as reader_module
import pglab.serverlog.stderr_fast as stderr_fast_module
from pglab.events import Event
from pglab.serverlog import (
    LogTail,
    ParseStats,
    detect_format,
    extract_events,
    iter_event_batches,
    parse_log_file,
    parse_log_files,
    read_records,
)

SAMPLES = Path(__file__).resolve().parent / "samples" / "serverlog"
VERSIONS = ["pg15", "pg18"]
FILES = {"stderr": "postgresql.log", "csvlog": "postgresql.csv", "jsonlog": "postgresql.json"}
UTC = timezone.utc

# Every kind the sample scripts provoke (make_samples.sh), in each version.
EXPECTED_KINDS = {
    "checkpoint",
    "checkpoint-too-frequent",
    "autovacuum",
    "autoanalyze",
    "lock-wait",
    "deadlock",
    "temp-file",
    "slow-statement",
    "connection-reset",
    "crash",
    "recovery",
    "server-start",
    "server-stop",
    "error",
}


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# what only csvlog/jsonlog carry: the samples' stderr prefix (%m [%p] ) has no %u or %d
CSV_JSON_ONLY = frozenset({"sqlstate", "user", "database"})


def comparable(events: list[Event]) -> list[tuple[Any, ...]]:
    """Events minus what only csvlog/jsonlog carry (the SQLSTATE, user and database)."""
    return [
        (e.t_start, e.kind, e.t_end, e.node,
         {k: v for k, v in e.attrs.items() if k not in CSV_JSON_ONLY})
        for e in events
    ]


def parse_sample(version: str, fmt: str) -> tuple[list[Event], ParseStats]:
    return parse_log_file(SAMPLES / version / FILES[fmt])


def one(events: list[Event], kind: str, **attrs: Any) -> Event:
    found = [
        e for e in events if e.kind == kind and all(e.attrs.get(k) == v for k, v in attrs.items())
    ]
    assert len(found) == 1, (kind, attrs, found)
    return found[0]


# --- the real samples -----------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_three_formats_give_the_same_events(version: str) -> None:
    results = {fmt: parse_sample(version, fmt) for fmt in FILES}
    for fmt, (_events, stats) in results.items():
        assert stats.format == fmt
        assert stats.skipped == 0
        assert stats.unknown_zones == 0
    kinds = {fmt: Counter(e.kind for e in events) for fmt, (events, _) in results.items()}
    assert kinds["stderr"] == kinds["csvlog"] == kinds["jsonlog"]
    assert set(kinds["stderr"]) == EXPECTED_KINDS
    # not only the counts: times and attrs agree too
    stderr = comparable(results["stderr"][0])
    assert stderr == comparable(results["csvlog"][0]) == comparable(results["jsonlog"][0])


@pytest.mark.parametrize("version", VERSIONS)
def test_every_message_is_read_in_every_format(version: str) -> None:
    counts = set()
    for name in FILES.values():
        records, stats = read_records(SAMPLES / version / name)
        assert len(list(records)) == stats.records
        assert stats.skipped == 0
        counts.add(stats.records)
    assert len(counts) == 1  # stderr groups DETAIL/STATEMENT/tab lines like csv/json do


def test_sample_counts() -> None:
    events, _ = parse_sample("pg15", "stderr")
    kinds = Counter(e.kind for e in events)
    assert kinds["checkpoint"] == 12
    assert kinds["autovacuum"] == 13
    assert kinds["autoanalyze"] == 22
    assert kinds["crash"] == 1
    assert kinds["recovery"] == 1
    assert kinds["server-start"] == 2  # first start, and ready again after the crash
    assert kinds["server-stop"] == 1


def test_checkpoint_pg18_exact() -> None:
    # 18:37:06.771 +01  checkpoint starting: time
    # 18:37:08.481 +01  checkpoint complete: wrote 17 buffers (0.8%), wrote 1 SLRU buffers;
    #   0 WAL file(s) added, 0 removed, 0 recycled; write=1.706 s, sync=0.002 s,
    #   total=1.710 s; sync files=15, longest=0.001 s, average=0.001 s; distance=94 kB,
    #   estimate=18879 kB; lsn=0/FB417C0, redo lsn=0/FB41730
    events, _ = parse_sample("pg18", "stderr")
    ckpt = one(events, "checkpoint", flags=["time"])
    assert ckpt.t_start == utc("2026-11-21 17:37:06.771")  # the log is in +01
    assert ckpt.t_end == utc("2026-11-21 17:37:08.481")
    assert ckpt.node == "primary"
    assert ckpt.attrs == {
        "flags": ["time"],
        "restartpoint": False,
        "complete": True,
        "buffers": 17,
        "buffers_pct": 0.8,
        "slru_buffers": 1,
        "wal_added": 0,
        "wal_removed": 0,
        "wal_recycled": 0,
        "write_s": 1.706,
        "sync_s": 0.002,
        "total_s": 1.71,
        "sync_files": 15,
        "longest_s": 0.001,
        "average_s": 0.001,
        "distance_kb": 94,
        "estimate_kb": 18879,
        "lsn": "0/FB417C0",
        "redo_lsn": "0/FB41730",
        "write_phase_end": "2026-11-21T17:37:08.477000+00:00",
    }


def test_checkpoint_pg15_exact() -> None:
    # 17:36:16.849 UTC  checkpoint starting: time
    # 17:36:18.558 UTC  checkpoint complete: wrote 18 buffers (0.9%); 0 WAL file(s) added,
    #   0 removed, 0 recycled; write=1.706 s, sync=0.002 s, total=1.710 s; sync files=15,
    #   longest=0.001 s, average=0.001 s; distance=92 kB, estimate=24726 kB
    events, _ = parse_sample("pg15", "stderr")
    ckpt = one(events, "checkpoint", flags=["time"])
    assert (ckpt.t_start, ckpt.t_end) == (
        utc("2026-11-21 17:36:16.849"),
        utc("2026-11-21 17:36:18.558"),
    )
    assert ckpt.attrs["buffers"] == 18
    assert ckpt.attrs["buffers_pct"] == 0.9
    assert ckpt.attrs["slru_buffers"] is None  # 18+
    assert ckpt.attrs["lsn"] is None and ckpt.attrs["redo_lsn"] is None  # 16+
    assert (ckpt.attrs["distance_kb"], ckpt.attrs["estimate_kb"]) == (92, 24726)
    flags = Counter(" ".join(e.attrs["flags"]) for e in events if e.kind == "checkpoint")
    assert flags == {
        "wal": 7,
        "immediate force wait": 2,
        "time": 1,
        "end-of-recovery immediate wait": 1,
        "shutdown immediate": 1,
    }


def test_lock_wait_paired_with_holder() -> None:
    # 17:35:39.150  process 9952 still waiting for ShareLock on transaction 6118 after
    #               100.106 ms / DETAIL: Process holding the lock: 9949. Wait queue: 9952.
    # 17:35:39.447  process 9952 acquired ShareLock on transaction 6118 after 396.698 ms
    #               CONTEXT: while updating tuple (0,1) in relation "pgbench_accounts"
    events, _ = parse_sample("pg15", "stderr")
    wait = one(events, "lock-wait", pid=9952)
    # the length the server measured, to the end; the first message agrees within 1 ms
    assert wait.t_start == utc("2026-11-21 17:35:39.447") - timedelta(milliseconds=396.698)
    assert abs(wait.t_start - (utc("2026-11-21 17:35:39.150")
                               - timedelta(milliseconds=100.106))) < timedelta(milliseconds=1)
    assert wait.t_end == utc("2026-11-21 17:35:39.447")
    assert wait.attrs == {
        "pid": 9952,
        "lock_mode": "ShareLock",
        "lock_object": "transaction 6118",
        "holders": [9949],
        "wait_queue": [9952],
        "waited_ms": 396.698,
        "outcome": "acquired",
        "relation": "pgbench_accounts",
        "statement": "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 1",
    }
    # the deadlock victim's wait ends with the deadlock, not an acquisition
    victim = one(events, "lock-wait", outcome="deadlock")
    deadlock = one(events, "deadlock")
    assert victim.t_end == deadlock.t_start
    assert victim.attrs["pid"] == deadlock.attrs["pid"]
    assert sorted(deadlock.attrs["pids"]) == sorted([victim.attrs["pid"], *victim.attrs["holders"]])
    assert "blocked by process" in deadlock.attrs["detail"]


@pytest.mark.parametrize(
    ("version", "what", "killed_at", "ready_at"),
    [
        ("pg15", "server process", "2026-11-21 17:36:19.850", "2026-11-21 17:36:19.925"),
        ("pg18", "client backend", "2026-11-21 17:37:09.765", "2026-11-21 17:37:09.852"),
    ],
)
def test_crash_and_recovery(version: str, what: str, killed_at: str, ready_at: str) -> None:
    events, _ = parse_sample(version, "stderr")
    crash = one(events, "crash")
    assert crash.t_start == utc(killed_at)
    assert crash.attrs["what"] == what  # 18 names the backend type
    assert (crash.attrs["signal"], crash.attrs["signal_name"]) == (9, "Killed")
    assert crash.attrs["query"] == "SELECT pg_sleep(30)"
    recovery = one(events, "recovery")
    assert recovery.t_start > crash.t_start  # "database system was interrupted"
    assert recovery.t_end == utc(ready_at)
    assert recovery.attrs["crash_recovery"] is True
    assert recovery.attrs["duration_s"] == pytest.approx(
        (recovery.t_end - recovery.t_start).total_seconds()
    )
    assert 0 < recovery.attrs["duration_s"] < 1
    assert recovery.attrs["redo_start_lsn"] and recovery.attrs["redo_done_lsn"]
    assert recovery.attrs["redo_elapsed_s"] == 0.0  # 15+ print it with "redo done"
    after = one(events, "server-start", after_crash=True)
    assert after.t_end == recovery.t_end
    first = one(events, "server-start", after_crash=False)
    assert first.attrs["version"] == ("15.18" if version == "pg15" else "18.6")
    stop = one(events, "server-stop")
    assert stop.attrs["mode"] == "fast"
    # the end-of-recovery checkpoint completes after the crash, like every other
    assert all(e.t_end is not None for e in events if e.kind == "checkpoint")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_standby_from_a_base_backup_starts_without_a_crash(version: str) -> None:
    """A standby's first start recovers from its base backup ("database system was
    interrupted; last known up at"), which is no crash; its walreceiver's SIGKILL later
    is one ("interrupted while in recovery")."""
    events, _ = parse_log_file(SAMPLES / "standby" / f"{version}.log")
    first, second = [e for e in events if e.kind == "recovery"]
    assert (first.attrs["from_backup"], first.attrs["after_crash"]) == (True, False)
    assert (second.attrs["from_backup"], second.attrs["after_crash"]) == (False, True)
    assert second.attrs["last_known_up"].endswith("UTC")
    starts = [e for e in events if e.kind == "server-start"]
    assert [e.attrs["after_crash"] for e in starts] == [False, True]
    assert all(e.attrs["read_only"] for e in starts)
    assert one(events, "crash").attrs["what"] == "WAL receiver process"


def test_other_kinds_from_the_samples() -> None:
    events, _ = parse_sample("pg18", "jsonlog")
    slow = [e for e in events if e.kind == "slow-statement"]
    sleep = next(e for e in slow if e.attrs["statement"] == "SELECT pg_sleep(0.1)")
    assert sleep.t_end is not None
    assert (sleep.t_end - sleep.t_start).total_seconds() * 1000 == pytest.approx(
        sleep.attrs["duration_ms"], abs=0.01
    )
    assert sleep.attrs["phase"] == "statement"
    prepared = [e for e in slow if e.attrs["phase"] == "execute"]
    assert prepared and prepared[0].attrs["prepared"] == "P_0"
    temp = [e for e in events if e.kind == "temp-file"]
    assert any(
        e.attrs["size_bytes"] == 1400000 and e.attrs["statement"].startswith("SELECT count(*)")
        for e in temp
    )
    reset = one(events, "connection-reset")
    assert reset.attrs["open_transaction"] is True
    errors = [e for e in events if e.kind == "error"]
    assert {(e.attrs["severity"], e.attrs["message"]) for e in errors} >= {
        ("ERROR", "division by zero"),
        ("FATAL", 'database "nosuchdb" does not exist'),
    }
    assert one(events, "error", message="division by zero").attrs["sqlstate"] == "22012"
    vacuum = next(
        e
        for e in events
        if e.kind == "autovacuum" and e.attrs["table"] == "postgres.public.pgbench_accounts"
    )
    assert vacuum.attrs["buffer_reads"] is not None  # 18 says "reads", 13-17 "misses"
    assert vacuum.attrs["wal_buffers_full"] == 0  # 18 only
    assert vacuum.t_end is not None
    assert (vacuum.t_end - vacuum.t_start).total_seconds() == vacuum.attrs["elapsed_s"]


def test_timezone_offset_is_converted() -> None:
    records, _ = read_records(SAMPLES / "pg18" / "postgresql.log")
    first = next(iter(records))
    assert first.t == utc("2026-11-21 17:36:22.130")  # printed as 18:36:22.130 +01
    assert first.t.tzinfo is not None and first.t.utcoffset() == timedelta(0)


# --- message formats per version (from the PostgreSQL sources) --------------------------

PREFIX = "2026-01-02 03:04:05.678 UTC [42] "


def events_of(*lines: str) -> list[Event]:
    text = "".join(
        PREFIX + line + "\n" if not line.startswith("\t") else line + "\n" for line in lines
    )
    records, _ = read_records(text.splitlines(keepends=True), fmt="stderr")
    return extract_events(records)


def test_checkpoint_formats_13_to_17() -> None:
    tail = (
        "0 WAL file(s) added, 1 removed, 2 recycled; write=0.100 s, sync=0.020 s, "
        "total=0.130 s; sync files=3, longest=0.010 s, average=0.005 s; "
        "distance=100 kB, estimate=200 kB"
    )
    v13 = events_of(f"LOG:  checkpoint complete: wrote 5 buffers (0.1%); {tail}")[0]
    assert v13.t_start == utc("2026-01-02 03:04:05.548")  # no starting line: end - total
    assert v13.attrs["flags"] == [] and v13.attrs["lsn"] is None
    assert (v13.attrs["wal_removed"], v13.attrs["wal_recycled"]) == (1, 2)
    v16 = events_of(
        "LOG:  checkpoint starting: immediate force wait",
        f"LOG:  checkpoint complete: wrote 5 buffers (0.1%); {tail}; "
        "lsn=0/1000028, redo lsn=0/1000000",
    )
    assert len(v16) == 1
    assert v16[0].attrs["redo_lsn"] == "0/1000000"
    assert v16[0].attrs["flags"] == ["immediate", "force", "wait"]
    rp = events_of(
        "LOG:  restartpoint starting: time",
        f"LOG:  restartpoint complete: wrote 5 buffers (0.1%); {tail}",
    )
    assert len(rp) == 1 and rp[0].attrs["restartpoint"] is True
    too = events_of("LOG:  checkpoints are occurring too frequently (1 second apart)")
    assert too[0].kind == "checkpoint-too-frequent" and too[0].attrs["seconds_apart"] == 1


def test_unfinished_checkpoint_is_kept_open() -> None:
    events = events_of(
        "LOG:  checkpoint starting: time",
        "LOG:  server process (PID 7) was terminated by signal 6: Aborted",
        "LOG:  checkpoint starting: end-of-recovery immediate wait",
    )
    kinds = [e.kind for e in events]
    assert kinds == ["checkpoint", "crash", "checkpoint"]
    assert events[0].t_end is None and events[0].attrs["complete"] is False
    assert events[2].attrs["flags"] == ["end-of-recovery", "immediate", "wait"]


def test_autovacuum_13_and_14_formats() -> None:
    v13 = events_of(
        'LOG:  automatic aggressive vacuum to prevent wraparound of table "db.public.t": '
        "index scans: 0",
        "\tpages: 0 removed, 45 remain, 0 skipped due to pins, 0 skipped frozen",
        "\ttuples: 10 removed, 900 remain, 3 are dead but not yet removable, oldest xmin: 1",
        "\tbuffer usage: 120 hits, 4 misses, 5 dirtied",
        "\tavg read rate: 1.000 MB/s, avg write rate: 2.000 MB/s",
        "\tsystem usage: CPU: user: 0.01 s, system: 0.00 s, elapsed: 0.50 s",
        "\tWAL usage: 7 records, 1 full page images, 900 bytes",
        'LOG:  automatic analyze of table "db.public.t" system usage: CPU: user: 0.01 s, '
        "system: 0.00 s, elapsed: 0.25 s",
    )
    vac, ana = v13
    assert (vac.kind, ana.kind) == ("autovacuum", "autoanalyze")
    assert vac.attrs["aggressive"] and vac.attrs["wraparound"]
    assert (vac.attrs["pages_remain"], vac.attrs["pages_scanned"]) == (45, None)
    assert (vac.attrs["buffer_hits"], vac.attrs["buffer_reads"]) == (120, 4)
    assert vac.attrs["wal_bytes"] == 900
    assert vac.t_start == utc("2026-01-02 03:04:05.178")
    assert ana.attrs["elapsed_s"] == 0.25
    assert ana.attrs["relation"] == "t" and ana.attrs["schema"] == "public"
    v14 = events_of(
        'LOG:  automatic vacuum of table "db.public.t": index scans: 1',
        "\tpages: 0 removed, 45 remain, 0 skipped due to pins, 0 skipped frozen",
        "\ttuples: 10 removed, 900 remain, 3 are dead but not yet removable, oldest xmin: 1",
        "\tindex scan needed: 2 pages from table (4.44% of total) had 10 dead item "
        "identifiers removed",
        '\tindex "t_pkey": pages: 5 in total, 0 newly deleted, 0 currently deleted, 0 reusable',
        "\tI/O timings: read: 1.500 ms, write: 0.250 ms",
        "\tavg read rate: 1.000 MB/s, avg write rate: 2.000 MB/s",
        "\tbuffer usage: 120 hits, 4 misses, 5 dirtied",
        "\tWAL usage: 7 records, 1 full page images, 900 bytes",
        "\tsystem usage: CPU: user: 0.01 s, system: 0.00 s, elapsed: 0.50 s",
    )[0]
    assert v14.attrs["index_scans"] == 1
    assert (v14.attrs["read_io_ms"], v14.attrs["write_io_ms"]) == (1.5, 0.25)
    assert not v14.attrs["aggressive"]


def test_other_messages_13_to_18() -> None:
    events = events_of(
        "LOG:  could not receive data from client: Connection reset by peer",
        "LOG:  could not send data to client: Broken pipe",
        "FATAL:  connection to client lost",
        'LOG:  temporary file: path "base/pgsql_tmp/pgsql_tmp42.0", size 1048576',
        "STATEMENT:  SELECT * FROM t ORDER BY 1",
        "LOG:  duration: 1500.250 ms  bind S_1: SELECT 1",
        "LOG:  duration: 12.000 ms",  # log_duration alone: not a statement
        "LOG:  checkpointer process (PID 9) exited with exit code 2",
        'LOG:  background worker "logical replication launcher" (PID 10) exited with '
        "exit code 1",  # normal at shutdown
        'PANIC:  could not write to file "pg_wal/xlogtemp.42": No space left on device',
        "LOG:  received immediate shutdown request",
        "LOG:  starting PostgreSQL 13.16 on x86_64-pc-linux-gnu",
        "LOG:  database system is ready to accept read only connections",
    )
    kinds = [e.kind for e in events]
    assert kinds == [
        "connection-reset",
        "connection-reset",
        "connection-reset",
        "temp-file",
        "slow-statement",
        "crash",
        "error",
        "server-stop",
        "server-start",
    ]
    assert events[3].attrs["statement"] == "SELECT * FROM t ORDER BY 1"
    assert events[4].attrs["phase"] == "bind" and events[4].attrs["duration_ms"] == 1500.25
    assert events[5].attrs["what"] == "checkpointer process"
    assert events[5].attrs["exit_code"] == 2
    assert events[6].attrs["severity"] == "PANIC"
    assert events[7].attrs["mode"] == "immediate" and events[7].t_end is None
    assert events[8].attrs["read_only"] is True and events[8].attrs["version"] == "13.16"


def test_lock_wait_never_acquired() -> None:
    events = events_of(
        "LOG:  process 42 still waiting for AccessExclusiveLock on relation 16384 of "
        "database 5 after 1000.123 ms",
        "DETAIL:  Processes holding the lock: 7, 8. Wait queue: 42, 43.",
    )
    (wait,) = events
    assert wait.t_end is None and wait.attrs["outcome"] is None
    assert wait.attrs["holders"] == [7, 8] and wait.attrs["wait_queue"] == [42, 43]
    assert wait.attrs["lock_object"] == "relation 16384 of database 5"


# --- other prefixes, rotation, chunking, tailing -----------------------------------------


def test_pgbadger_style_prefix_with_line_numbers() -> None:
    """`%t [%p]: [%l-1] user=%u,db=%d `: no milliseconds, and %l differs on DETAIL lines."""
    line_re = re.compile(r"^(\S+ \S+)\.\d{3} (\S+) \[(\d+)\] ")
    counter = Counter[str]()
    lines = []
    for line in (SAMPLES / "pg15" / "postgresql.log").read_text().splitlines():
        m = line_re.match(line)
        if m is None:
            lines.append(line + "\n")
            continue
        counter[m.group(3)] += 1
        prefix = (
            f"{m.group(1)} {m.group(2)} [{m.group(3)}]: "
            f"[{counter[m.group(3)]}-1] user=postgres,db=postgres "
        )
        lines.append(prefix + line[m.end() :] + "\n")
    records, stats = read_records(lines)
    events = extract_events(records)
    original, _ = parse_sample("pg15", "stderr")
    assert Counter(e.kind for e in events) == Counter(e.kind for e in original)
    assert stats.skipped == 0
    wait = one(events, "lock-wait", pid=9952)
    assert wait.attrs["holders"] == [9949]  # DETAIL attached despite the other %l
    assert wait.t_end == utc("2026-11-21 17:35:39")


def test_small_chunks_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for fmt in FILES:
        expected = comparable(parse_sample("pg18", fmt)[0])
        monkeypatch.setattr(reader_module, "CHUNK_BYTES", 97)
        assert comparable(parse_sample("pg18", fmt)[0]) == expected
        monkeypatch.undo()


@pytest.mark.parametrize("version", VERSIONS)
def test_general_stderr_scanner_agrees(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The general scanner (any prefix) and the fast one (`%m [%p] `) read alike."""
    expected = comparable(parse_sample(version, "stderr")[0])
    records_fast = list(read_records(SAMPLES / version / FILES["stderr"])[0])
    monkeypatch.setattr(stderr_fast_module, "looks_shaped", lambda buf: False)
    assert comparable(parse_sample(version, "stderr")[0]) == expected
    assert list(read_records(SAMPLES / version / FILES["stderr"])[0]) == records_fast


def test_event_batches_and_stats() -> None:
    stats: list[ParseStats] = []
    batches = list(
        iter_event_batches([SAMPLES / "pg18" / FILES["jsonlog"]], "standby1", None, stats)
    )
    events = [e for batch in batches for e in batch]
    assert comparable(events) == comparable(
        [
            Event(e.t_start, e.kind, "standby1", e.t_end, e.attrs)
            for e in parse_sample("pg18", "jsonlog")[0]
        ]
    )
    assert stats[0].format == "jsonlog" and stats[0].records == 131


@pytest.mark.parametrize("fmt", list(FILES))
def test_tail_in_random_pieces(fmt: str) -> None:
    path = SAMPLES / "pg15" / FILES[fmt]
    expected = comparable(parse_log_file(path)[0])
    text = path.read_text()
    rnd = random.Random(7)
    tail = LogTail()
    got: list[Event] = []
    pos = 0
    while pos < len(text):
        step = rnd.randint(1, 3000)
        got.extend(tail.feed(text[pos : pos + step]))
        pos += step
    got.extend(tail.close())
    assert tail.stats.format == fmt
    assert comparable(got) == expected


def test_tail_holds_the_last_message_until_flushed() -> None:
    tail = LogTail()
    assert tail.feed(PREFIX + "LOG:  checkpoint starting: time\n") == []
    assert tail.feed(PREFIX + "LOG:  checkpoint complete: wrote 1 buffers (0.0%); 0 WAL ") == []
    done = tail.feed(
        "file(s) added, 0 removed, 0 recycled; write=0.001 s, sync=0.001 s, "
        "total=0.002 s; sync files=1, longest=0.001 s, average=0.001 s; "
        "distance=1 kB, estimate=1 kB\n"
    )
    assert done == []  # a DETAIL line could still follow
    assert [e.kind for e in tail.flush()] == ["checkpoint"]
    assert tail.feed(PREFIX + "LOG:  checkpoint starting: wal\n") == []
    assert [(e.kind, e.t_end) for e in tail.close()] == [("checkpoint", None)]


def test_rotated_files_keep_state(tmp_path: Path) -> None:
    lines = (SAMPLES / "pg15" / "postgresql.log").read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "checkpoint starting: time" in line) + 1
    first, second = tmp_path / "postgresql-1.log", tmp_path / "postgresql-2.log"
    first.write_text("".join(lines[:cut]))
    second.write_text("".join(lines[cut:]))
    events, stats = parse_log_files([first, second])
    assert len(stats) == 2
    assert comparable(events) == comparable(parse_sample("pg15", "stderr")[0])


def test_detect_format() -> None:
    for fmt, name in FILES.items():
        head = (SAMPLES / "pg15" / name).read_bytes()[:4096]
        assert detect_format(head) == fmt
        assert detect_format(b"", name) == fmt
    assert detect_format(b"garbage\n", "x.log") == "stderr"


def test_unknown_format_name() -> None:
    with pytest.raises(ValueError, match="unknown log format"):
        read_records([], fmt="eventlog")


# --- garbled input: counted, never raised ------------------------------------------------


def test_garbled_stderr(tmp_path: Path) -> None:
    good = (SAMPLES / "pg15" / "postgresql.log").read_bytes()
    lines = good.splitlines(keepends=True)
    junk = [
        b"\x00\xff\xfe binary \x80\x81 junk\n",
        b"LOG:  checkpoint starting: time\n",  # no prefix: no time
        b"2026-11-21 17:35:3",  # a line cut short, then the next line
        b"\n",
        b"2026-11-21 99:99:99.000 UTC [1] LOG:  checkpoint starting: time\n",
        b"2026-11-21 17:35:32.300 XYZT [1] LOG:  duration: 1.0 ms  statement: x\n",
        b"2026-11-21 17:35:32.301 UTC [1] LOG:  checkpoint complete: wrote 1 buf\n",
    ]
    mangled = b"".join(lines[:10]) + b"".join(junk) + b"".join(lines[10:])
    mangled += b'2026-11-21 17:40:00.000 UTC [1] LOG:  automatic vacuum of table "a.b.c"'
    path = tmp_path / "garbled.log"
    path.write_bytes(mangled)
    events, stats = parse_log_file(path)
    original, _ = parse_sample("pg15", "stderr")
    kinds = Counter(e.kind for e in events)
    assert kinds["slow-statement"] == Counter(e.kind for e in original)["slow-statement"] + 1
    assert kinds["checkpoint"] >= Counter(e.kind for e in original)["checkpoint"]
    assert stats.unknown_zones == 1  # XYZT: taken as UTC, counted
    # no time (1), impossible time (1), truncated checkpoint (1), truncated autovacuum (1)
    assert stats.skipped >= 3
    assert stats.lines == mangled.count(b"\n") + 1


def test_garbled_csv(tmp_path: Path) -> None:
    text = (SAMPLES / "pg15" / "postgresql.csv").read_text()
    rows = text.split("\n2026-")
    # an unterminated quote in the middle, a short row, NUL bytes, a truncated last row
    rows[5] = rows[5][:60]
    rows[9] = "11-21 17:35:33.000 UTC,only,three"
    rows[12] = rows[12].replace(",LOG,", ",LOG\x00,", 1)
    broken = "\n2026-".join(rows)[:-40]
    path = tmp_path / "garbled.csv"
    path.write_text(broken)
    events, stats = parse_log_file(path)
    assert stats.format == "csvlog"
    assert stats.skipped >= 3
    assert len(events) > 80  # the rest is still read


def test_garbled_json(tmp_path: Path) -> None:
    lines = (SAMPLES / "pg15" / "postgresql.json").read_text().splitlines()
    lines[3] = lines[3][:50]  # cut
    lines[4] = "[1, 2, 3]"  # not an object
    lines[5] = '{"timestamp": 5, "message": null}'  # wrong types
    lines[6] = lines[6].replace('"UTC"', '"Mars/Olympus"').replace(" UTC", " MARS")
    path = tmp_path / "garbled.json"
    path.write_text("\n".join(lines) + "\n\x00\x01\n")
    events, stats = parse_log_file(path)
    assert stats.skipped == 4
    assert stats.unknown_zones == 1
    assert len(events) > 80


def test_all_records_mode_counts_junk_lines() -> None:
    lines = [
        PREFIX + "LOG:  checkpoint starting: time\n",
        "what is this\n",
        "\tan orphan continuation\n",
        PREFIX + "WARNING:  something\n",
    ]
    records, stats = read_records(lines)
    assert [r.severity for r in records] == ["LOG", "WARNING"]
    assert stats.skipped == 2


# --- the fast paths build exactly what the plain constructors build ----------------------


@pytest.mark.parametrize("fmt", list(FILES))
def test_events_are_plain_events(fmt: str) -> None:
    """The fast paths build plain Events: equal to Event(...), tz-aware, slotted."""
    events, _ = parse_sample("pg18", fmt)
    assert events
    for e in events:
        assert type(e) is Event
        assert e == Event(e.t_start, e.kind, e.node, e.t_end, e.attrs)
        assert e.t_start.tzinfo is not None
        with pytest.raises(AttributeError):  # slots: no attribute beyond the fields
            e.extra = "x"  # type: ignore[attr-defined]


def test_slow_statement_start_is_end_minus_duration() -> None:
    """t_start = t_end - timedelta(milliseconds=duration_ms), to the microsecond."""
    for version in VERSIONS:
        for fmt in FILES:
            events, _ = parse_sample(version, fmt)
            slow = [e for e in events if e.kind == "slow-statement"]
            assert slow
            for e in slow:
                assert e.t_end is not None
                assert e.t_start == e.t_end - timedelta(milliseconds=e.attrs["duration_ms"])


# --- the fast paths must not lose events ------------------------------------------------

# A message of each format's sample that produces no event, put in front of every message:
# most lines of a real log are like it, and the prefilters must skip them, not their
# neighbours.
NOISE_MARK = "listening on Unix socket"
STDERR_HEAD_RE = re.compile(r"\S+ \S+ \S+ \[\d+\] (?!DETAIL|HINT|CONTEXT|STATEMENT|QUERY)\w+:  ")
CSV_ROW_START_RE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
JSON_START_RE = re.compile(r"\{")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("fmt", list(FILES))
def test_prefilter_keeps_events_among_other_lines(version: str, fmt: str, tmp_path: Path) -> None:
    sample = SAMPLES / version / FILES[fmt]
    lines = sample.read_text().splitlines(keepends=True)
    noise = next(line for line in lines if NOISE_MARK in line)
    message_start = {"stderr": STDERR_HEAD_RE, "csvlog": CSV_ROW_START_RE, "jsonlog": JSON_START_RE}
    noisy: list[str] = []
    for line in lines:
        if message_start[fmt].match(line):
            noisy.extend([noise] * 3)
        noisy.append(line)
    path = tmp_path / sample.name
    path.write_text("".join(noisy))
    expected, expected_stats = parse_log_file(sample)
    events, stats = parse_log_file(path)
    assert comparable(events) == comparable(expected)
    assert stats.skipped == 0
    assert stats.lines > 3 * expected_stats.records  # the noise was there, and read past
    all_records, _ = read_records(path)
    assert sum(NOISE_MARK in r.message for r in all_records) > 3 * expected_stats.records


def test_slow_statements_the_fast_path_does_not_take() -> None:
    """The stderr fast path reads one-line durations with 3 decimals; other durations
    (log_duration variants, a DETAIL with parameters) go through the rules, alike."""
    events = events_of(
        "LOG:  duration: 12.5 ms  statement: SELECT 1",
        "LOG:  duration: 1234.567 ms  execute P_1: SELECT $1",
        "DETAIL:  parameters: $1 = '7'",
        "LOG:  duration: 0.042 ms  bind <unnamed>: SELECT 2",
        "LOG:  duration: 3.000 ms",  # log_duration alone: no statement, no event
    )
    slow = [e for e in events if e.kind == "slow-statement"]
    assert [e.attrs["duration_ms"] for e in slow] == [12.5, 1234.567, 0.042]
    assert [e.attrs["phase"] for e in slow] == ["statement", "execute", "bind"]
    assert [e.attrs["prepared"] for e in slow] == [None, "P_1", "<unnamed>"]
    for e in slow:
        assert e.t_end == utc("2026-01-02 03:04:05.678")
        assert e.t_start == e.t_end - timedelta(milliseconds=e.attrs["duration_ms"])
        assert e.attrs["pid"] == 42


def test_zone_other_than_utc_keeps_detail_lines() -> None:
    """The fast scanner matches `UTC` as a literal; other zones take the general group,
    and their DETAIL lines must still attach (same prefix, same zone)."""
    for zone, hours in (("UTC", 0), ("CET", 1), ("-03", -3)):
        text = "".join(
            f"2026-01-02 03:04:05.678 {zone} [42] {line}\n"
            for line in (
                "LOG:  process 42 still waiting for ShareLock on transaction 7 after 100.500 ms",
                "DETAIL:  Process holding the lock: 41. Wait queue: 42.",
                "LOG:  process 42 acquired ShareLock on transaction 7 after 200.250 ms",
                "LOG:  duration: 201.000 ms  statement: UPDATE t SET v = 1",
            )
        )
        records, stats = read_records(text.splitlines(keepends=True), fmt="stderr")
        events = extract_events(records)
        assert stats.unknown_zones == 0
        wait = one(events, "lock-wait", pid=42)
        assert wait.attrs["holders"] == [41] and wait.attrs["outcome"] == "acquired"
        t = utc("2026-01-02 03:04:05.678") - timedelta(hours=hours)
        assert wait.t_end == t
        assert one(events, "slow-statement").t_end == t


@pytest.mark.parametrize("enabled", [True, False])
def test_event_batches_leave_the_garbage_collector_as_found(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        if enabled:
            gc.enable()
        else:
            gc.disable()
        for _batch in iter_event_batches([SAMPLES / "pg15" / FILES["stderr"]]):
            assert gc.isenabled() == enabled  # the caller's code runs as it set it
        assert gc.isenabled() == enabled
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def test_pglab_logs_prints_the_events_of_each_format() -> None:
    from conftest import run_cli

    for name in ("postgresql.log", "postgresql.csv", "postgresql.json"):
        path = SAMPLES / "pg18" / name
        table = run_cli("logs", "--kind", "checkpoint", str(path), env={"COLUMNS": "200"})
        assert table.returncode == 0, table.stderr
        # the details column: key=value of the kind's main attributes
        assert "checkpoint" in table.stdout and "buffers=" in table.stdout, table.stdout
        lines = run_cli("logs", "--json", str(path)).stdout.splitlines()
        kinds = Counter(json.loads(line)["kind"] for line in lines)
        assert kinds["checkpoint"] >= 1 and kinds["server-start"] >= 1, kinds
