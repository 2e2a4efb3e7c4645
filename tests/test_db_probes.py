"""Database probes against real servers: PostgreSQL 18 (wheel) and 15 (Debian's package)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import psycopg
import pytest

from pglab.errors import Interrupted
from pglab.events import Event
from pglab.lab.binaries import PgBinaries, find_binaries, runnable_by
from pglab.lab.local import LocalServer
from pglab.lab.osuser import server_user
from pglab.probes import make_probes
from pglab.probes.base import NodeHandle, Probe, ProbeContext, ProbeOutput, Sample
from pglab.probes.capabilities import canonical_wait
from pglab.probes.db_base import PreparedRows
from pglab.probes.dbsessions import DbSessions
from pglab.probes.serverlog_probe import ServerLogEvents
from pglab.probes.sink import FLUSH_EVERY_S, TelemetrySink, consolidate
from pglab.probes.telemetry import TelemetryRunner


@pytest.fixture(params=["embedded", "15"], scope="module")
def server(request: pytest.FixtureRequest, pglab_home: Path) -> Iterator[LocalServer]:
    user = server_user()
    # 15: Debian's package, installed by the pg15_bin fixture as root (as in CI)
    bins: PgBinaries = find_binaries(None if request.param == "embedded"
                                     else request.getfixturevalue("pg15_bin"))
    bins = runnable_by(bins, user)
    srv = LocalServer("primary", bins, pglab_home / "labs" / f"probes-{request.param}", user)
    srv.initdb(None, None, "C", "UTF8", sync=False)
    srv.start()
    with srv.connect("postgres") as conn:
        conn.execute("CREATE DATABASE pglab")
    with srv.connect() as conn:
        conn.execute("CREATE TABLE hot (id int PRIMARY KEY, v int)")
        conn.execute("INSERT INTO hot VALUES (1, 0)")
        # log_lock_waits reports a wait after deadlock_timeout: make the test quick
        conn.execute("ALTER SYSTEM SET deadlock_timeout = '200ms'")
        conn.execute("SELECT pg_reload_conf()")
    yield srv
    srv.stop(discard=True)  # deleted next: no shutdown checkpoint
    shutil.rmtree(srv.node_dir)


def _context(srv: LocalServer, given_by_dsn: bool = False) -> ProbeContext:
    """The node as a lab hands it to telemetry; `given_by_dsn`: as a server known only by
    its connection (no data directory, no postmaster), like a run's `target = "dsn"`."""
    nodes = [NodeHandle("primary", srv.connect, srv.data_dir,
                        lambda: srv.process.pid if srv.process else None, srv.log_dir)]
    if given_by_dsn:
        nodes = [NodeHandle("primary", srv.connect, None, lambda: None)]
    return ProbeContext(nodes, lambda: None, time.time, DbSessions(nodes))


def test_wait_names_are_canonical_across_versions() -> None:
    assert canonical_wait("IO", "WALInitWrite") == "IO:WalInitWrite"
    assert canonical_wait("IO", "WalInitWrite") == "IO:WalInitWrite"
    assert canonical_wait("LWLock", "WALWrite") == "LWLock:WALWrite"
    assert canonical_wait(None, None) == "CPU"


def test_sink_writes_without_holding_up_the_samplers(tmp_path: Path) -> None:
    sink = TelemetrySink(tmp_path)
    now = dt.datetime.now(dt.timezone.utc)
    batch = ProbeOutput(samples=[Sample(now, "primary", "db.waits", "CPU", "client backend", 2.0)],
                        events=[Event(now, "checkpoint", "primary", attrs={"flags": ["wal"]})])
    with sink._io_lock:  # the file writer stuck in the filesystem (a journal commit)
        started = time.monotonic()
        sink.write(batch)
        assert time.monotonic() - started < 0.1  # the sampler goes on at once
    # a crash keeps what was sampled: it is in the files within a fraction of a second
    time.sleep(3 * FLUSH_EVERY_S)
    assert "db.waits,CPU,client backend,2.0" in (sink.dir / "samples.csv").read_text()
    assert '"checkpoint"' in (sink.dir / "events.jsonl").read_text()
    sink.write(batch)
    sink.close()  # writes what is still queued
    assert (sink.dir / "samples.csv").read_text().count("db.waits") == 2
    assert sink.sample_count == 2 and sink.event_count == 2


def test_a_signal_during_a_probes_start_stops_the_run(tmp_path: Path) -> None:
    """A probe that cannot start is reported and the run goes on, but a Ctrl-C that lands
    in a probe's start() is no failure of that probe: it must reach the runner."""
    class Interrupting(Probe):
        name, help = "test.interrupting", "raises what the SIGINT handler raises"

        def start(self, ctx: ProbeContext) -> None:
            raise Interrupted("SIGINT")

        def sample(self, now: dt.datetime) -> ProbeOutput:
            return ProbeOutput()

    sink = TelemetrySink(tmp_path)
    runner = TelemetryRunner([Interrupting()], ProbeContext([], lambda: None, time.time), sink)
    with pytest.raises(Interrupted):
        runner.start()
    runner.stop()
    sink.close()


# cpu_exclusive: it counts what a 10 Hz sampler saw in 2.5 s. Beside a cpu_exclusive test, at
# a fifth of the CPU, this process's sampler got 16 samples in the block (6.4 a second).
@pytest.mark.cpu_exclusive
def test_lock_wait_and_checkpoint_are_seen(server: LocalServer, tmp_path: Path) -> None:
    ctx = _context(server, given_by_dsn=True)  # its backends are local all the same
    sink = TelemetrySink(tmp_path)
    runner = TelemetryRunner(make_probes(), ctx, sink)
    holder = server.connect(autocommit=False)
    holder.execute("UPDATE hot SET v = v + 1 WHERE id = 1")  # holds the row lock
    blocked_for = 2.5
    runner.start()
    try:
        def blocked_update() -> None:
            with server.connect() as conn:
                conn.execute("UPDATE hot SET v = v + 1 WHERE id = 1")

        waiter = threading.Thread(target=blocked_update)
        waiter.start()
        time.sleep(blocked_for)
        blocked_until = time.time()
        holder.rollback()
        waiter.join(timeout=10)
        with server.connect() as conn:
            conn.execute("CREATE TABLE filler AS SELECT g FROM generate_series(1, 20000) g")
            conn.execute("CHECKPOINT")
        time.sleep(2.2)
    finally:
        holder.close()
        runner.stop()
        sink.close()
    consolidate(tmp_path)
    ts = pl.read_parquet(tmp_path / "timeseries.parquet")

    waits = ts.filter((pl.col("source") == "db.waits") & (pl.col("metric") == "Lock:transactionid")
                      & (pl.col("label") == "client backend"))
    # the samples taken before the rollback (not only those of its whole seconds before)
    lock_seconds = waits.filter(
        pl.col("t") < dt.datetime.fromtimestamp(blocked_until, dt.timezone.utc))
    # sampled at 10 Hz while blocked for 2.5 s: about 25 samples, each with the one waiter
    assert lock_seconds.height >= 15, waits
    assert set(lock_seconds["value"].to_list()) == {1.0}

    locks = ts.filter((pl.col("source") == "db.locks") & (pl.col("metric") == "blocked_backends"))
    assert locks["value"].max() == 1.0

    requested = ts.filter((pl.col("source") == "db.checkpointer")
                          & (pl.col("metric") == "checkpoints_requested"))
    assert requested["value"].sum() > 0  # the forced CHECKPOINT, whichever view holds it
    written = ts.filter((pl.col("source") == "db.checkpointer")
                        & (pl.col("metric") == "buffers_checkpoint"))
    assert written["value"].sum() > 0

    # what observing cost: pglab's loops, the sink's thread and the two telemetry backends
    # (local, though the node has no data directory) all used some CPU in some 5 s, and
    # all of it together a few percent of the machine at most (CPU time, not wall time, so
    # other work on the machine does not inflate it)
    cost = runner.summary()
    print("observer cost:", cost)
    assert cost["observer_cpu_s"] > sink.cpu_s > 0 and cost["observer_server_cpu_s"] > 0
    assert 0 < cost["observer_cpu_pct"] < 5


@pytest.mark.live
def test_forced_checkpoint_and_lock_wait_become_log_events(server: LocalServer,
                                                          tmp_path: Path) -> None:
    ctx = _context(server)
    sink = TelemetrySink(tmp_path)
    runner = TelemetryRunner([ServerLogEvents()], ctx, sink)
    runner.start()
    try:
        holder = server.connect(autocommit=False)
        holder.execute("UPDATE hot SET v = v + 1 WHERE id = 1")
        holder_pid = holder.info.backend_pid

        def blocked_update() -> None:
            with server.connect() as conn:
                conn.execute("UPDATE hot SET v = v + 1 WHERE id = 1")

        waiter = threading.Thread(target=blocked_update)
        waiter.start()
        time.sleep(0.8)  # past deadlock_timeout: "still waiting" is logged
        holder.rollback()
        holder.close()
        waiter.join(timeout=10)
        with server.connect() as conn:
            conn.execute("CHECKPOINT")
        time.sleep(1.5)
    finally:
        runner.stop()
        sink.close()
    consolidate(tmp_path)
    events = pl.read_parquet(tmp_path / "events.parquet")
    checkpoints = [json.loads(a) for a in
                   events.filter(pl.col("kind") == "checkpoint")["attrs"].to_list()]
    forced = [c for c in checkpoints if "force" in c["flags"] and "immediate" in c["flags"]]
    assert forced, checkpoints
    assert forced[-1]["total_s"] >= 0 and "buffers" in forced[-1]
    # the server's log also holds earlier tests' episodes: this one is told by its holder
    mine = [(row["t_start"], row["t_end"], json.loads(row["attrs"]))
            for row in events.filter(pl.col("kind") == "lock-wait").iter_rows(named=True)
            if json.loads(row["attrs"])["holders"] == [holder_pid]]
    assert len(mine) == 1
    start, end, attrs = mine[0]
    assert attrs["outcome"] == "acquired" and attrs["lock_mode"] == "ShareLock"
    assert 0.5 < (end - start).total_seconds() < 3


@pytest.mark.live
def test_probe_survives_a_server_restart(server: LocalServer, tmp_path: Path) -> None:
    ctx = _context(server)
    sink = TelemetrySink(tmp_path)
    runner = TelemetryRunner(make_probes(), ctx, sink)
    runner.start()
    try:
        time.sleep(1.2)
        server.restart()
        time.sleep(2.5)
    finally:
        runner.stop()
        sink.close()
    consolidate(tmp_path)
    ts = pl.read_parquet(tmp_path / "timeseries.parquet")
    events = pl.read_parquet(tmp_path / "events.parquet")
    assert "probe-error" in events["kind"].to_list()
    restart_at = events.filter(pl.col("kind") == "probe-error")["t_start"].min()
    after = ts.filter((pl.col("source") == "db.waits") & (pl.col("t") > restart_at))
    assert after.height > 0  # the sampler reconnected and went on


@pytest.mark.live
def test_telemetry_connections_are_not_counted(server: LocalServer) -> None:
    ctx = _context(server)
    sessions = ctx.db
    assert isinstance(sessions, DbSessions)
    conn, caps = sessions.get("primary")
    assert caps.version_num >= 150000
    try:
        rows = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pglab-telemetry'"
        ).fetchone()
        assert rows == (1,)
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(5)")  # statement_timeout keeps probes from hanging
    finally:
        sessions.close_all()


@pytest.mark.live
def test_prepared_rows_read_what_psycopg_reads(server: LocalServer) -> None:
    """The wait sampler's libpq path: the same rows as text, NULLs kept, an error raised
    as psycopg's (the probe then drops the connection), and the statement prepared once
    per connection."""
    query = ("SELECT 'client backend', NULL::text, 7::bigint, count(*) "
             "FROM pg_stat_activity GROUP BY 1, 2, 3")
    failing = PreparedRows("pglab_test_failing", "SELECT 1 / (SELECT count(*) - count(*) "
                           "FROM pg_class)")
    rows = PreparedRows("pglab_test_rows", query)
    with server.connect() as conn:
        expected = [tuple(None if v is None else str(v) for v in row)
                    for row in conn.execute(query).fetchall()]
        assert rows.rows(conn) == expected == rows.rows(conn)
        assert expected[0][:3] == ("client backend", None, "7")
        with pytest.raises(psycopg.Error, match="division by zero"):
            failing.rows(conn)
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements WHERE name LIKE "
                            "'pglab_test_%'").fetchone() == (2,)
