"""Standbys, synchronous replication, PgBouncer and faults, against real servers."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import psycopg
import pytest

from conftest import processes_under, run_cli, write_scenario
from pglab.events import Event
from pglab.lab.lab import Lab
from pglab.probes.base import ProbeContext
from pglab.probes.os_probes import TcpProbe
from pglab.results.files import utc_now
from pglab.runner import probe_nodes
from pglab.scenario import load_text

pytestmark = pytest.mark.live  # real standbys and PgBouncer

SYNC_LAB = """
name = "sync"
[topology]
standbys = 2
synchronous = "on"
[workload]
scale = 1
"""


@pytest.fixture(scope="module")
def sync_lab(pglab_home: Path) -> Iterator[Lab]:
    loaded = load_text(SYNC_LAB, "sync.toml")
    with Lab(loaded.scenario, "sync.toml", f"topo-{time.time_ns()}") as lab:
        yield lab
    assert processes_under(lab.lab_dir) == []


def _commit_in_thread(lab: Lab) -> tuple[threading.Thread, list[float]]:
    done: list[float] = []

    def commit() -> None:
        assert lab.primary is not None
        with lab.primary.connect() as conn:
            conn.execute("UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = 1")
        done.append(time.monotonic())

    thread = threading.Thread(target=commit)
    thread.start()
    return thread, done


def _wait_events(lab: Lab) -> list[str]:
    assert lab.primary is not None
    with lab.primary.connect() as conn:
        rows = conn.execute("SELECT wait_event FROM pg_stat_activity "
                            "WHERE backend_type = 'client backend' AND wait_event IS NOT NULL"
                            ).fetchall()
    return [str(r[0]) for r in rows]


def test_standbys_stream_and_first_is_synchronous(sync_lab: Lab) -> None:
    facts = sync_lab.nodes_facts()
    assert facts["standby1"]["replication_state"] == "streaming"
    assert facts["standby1"]["sync_state"] == "sync"
    assert facts["standby2"]["sync_state"] == "async"
    assert facts["primary"]["synchronous_standby_names"] == "standby1"
    # A write on the primary is readable on both hot standbys.
    assert sync_lab.primary is not None
    with sync_lab.primary.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS marker (v int)")
        conn.execute("INSERT INTO marker VALUES (42)")
    for standby in sync_lab.standbys:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with standby.connect() as conn, conn.cursor() as cur:
                try:
                    if cur.execute("SELECT v FROM marker").fetchall() == [(42,)]:
                        break
                except psycopg.errors.UndefinedTable:
                    pass
            time.sleep(0.1)
        else:
            pytest.fail(f"{standby.name} did not replay the insert")


def test_tcp_probe_follows_each_replication_connection_from_both_ends(sync_lab: Lab) -> None:
    """Found from the walsenders' and walreceivers' own fds, without `ss -p`."""
    probe = TcpProbe()
    probe.start(ProbeContext(probe_nodes(sync_lab), lambda: None, time.time))
    assert probe.children_listed and probe.replication_processes() is not None
    probe.sample(utc_now())
    assert sync_lab.primary is not None
    with sync_lab.primary.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS tcp_traffic AS SELECT repeat('x', 1000) AS v "
                     "FROM generate_series(1, 1000)")
    time.sleep(0.2)
    out = probe.sample(utc_now())
    ends = Counter(s.node for s in out.samples if s.metric == "rtt_ms")
    assert ends == {"primary": 2, "standby1": 1, "standby2": 1}  # a walsender per standby
    sent = sum(s.value for s in out.samples if s.node == "primary" and s.metric == "sent_mbps")
    assert sent > 0


def test_replication_over_tcp_needs_the_labs_password(sync_lab: Lab) -> None:
    """Loopback TCP is open to every local user: no trusted replication login there."""
    assert sync_lab.primary is not None
    port = sync_lab.primary.port
    for user in ("postgres", "pglab_replication"):
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(f"host=127.0.0.1 port={port} user={user} replication=true "
                            "connect_timeout=5 passfile=/dev/null")
    passfile = sync_lab.lab_dir / "standby1" / "replication.pgpass"
    assert passfile.stat().st_mode & 0o777 == 0o600
    password = passfile.read_text().strip().rsplit(":", 1)[1]
    assert len(password) >= 24
    # the standbys' settings (recorded in the manifest) name the file, not the password
    facts = json.dumps(sync_lab.nodes_facts())
    assert "replication.pgpass" in facts and password not in facts
    with psycopg.connect(f"host=127.0.0.1 port={port} user=pglab_replication "
                         f"password={password} replication=true connect_timeout=5") as conn:
        assert conn.info.status == psycopg.pq.ConnStatus.OK


def test_paused_sync_standby_blocks_commits_and_resume_releases_them(sync_lab: Lab) -> None:
    sync = sync_lab.server("standby1")
    sync.signal_tree(signal.SIGSTOP)
    try:
        thread, done = _commit_in_thread(sync_lab)
        time.sleep(2.0)
        assert done == [], "a commit returned while the synchronous standby was paused"
        assert "SyncRep" in _wait_events(sync_lab)
    finally:
        resumed = time.monotonic()
        sync.signal_tree(signal.SIGCONT)
    thread.join(timeout=15)
    assert done and done[0] >= resumed, "the commit was not released by resuming the standby"


def test_paused_async_standby_does_not_block(sync_lab: Lab) -> None:
    other = sync_lab.server("standby2")
    other.signal_tree(signal.SIGSTOP)
    try:
        thread, done = _commit_in_thread(sync_lab)
        thread.join(timeout=10)
        assert done, "pausing an asynchronous standby blocked a commit"
    finally:
        other.signal_tree(signal.SIGCONT)


def _backends(run_dir: Path, node: str) -> pl.DataFrame:
    frame = pl.read_parquet(run_dir / "timeseries.parquet")
    return frame.filter((pl.col("source") == "db.backends") & (pl.col("node") == node))


def test_pgbench_through_pgbouncer_uses_pool_size_connections(
        tmp_path: Path, pgbouncer_binary: str) -> None:
    scenario = write_scenario(tmp_path, """
[topology]
pooler = "pgbouncer"
pool_size = 3
[workload]
scale = 1
clients = 12
jobs = 2
duration = "4s"
warmup = "1s"
""")
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    run_dir = next((tmp_path / "r" / "t").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["nodes"]["primary"]["pooler"]["pool_mode"] == "transaction"
    assert manifest["results"]["measured"]["transactions"] > 0
    assert (run_dir / "raw" / "pgbouncer-pgbouncer.log").is_file()
    # 12 pgbench clients, but the server saw at most pool_size client backends from them
    # (plus pglab's own telemetry connection).
    clients = _backends(run_dir, "primary").filter(pl.col("metric") == "client_backends")
    assert clients.height > 0
    assert max(clients["value"].to_list()) <= 3 + 2
    # ... while the rest queued in PgBouncer, which pooler.pools saw.
    pools = pl.read_parquet(run_dir / "timeseries.parquet").filter(
        (pl.col("source") == "pooler.pools") & (pl.col("metric") == "cl_waiting"))
    assert max(pools["value"].to_list()) > 0


def test_read_only_load_spreads_across_standbys(tmp_path: Path) -> None:
    # At a fixed rate, for 5 s: the commits counted are deltas of the 1 Hz sampler. Flat
    # out for 3 s, beside a cpu_exclusive test (this one at a fifth of the CPU), the
    # run's own 8 clients left its sampler one tick in 6 s, and no delta at all.
    scenario = write_scenario(tmp_path, """
[topology]
standbys = 2
[workload]
scale = 1
mix = ["select-only"]
clients = 8
jobs = 2
duration = "5s"
warmup = "1s"
rate = 400
on = "standbys"
""")
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    run_dir = next((tmp_path / "r" / "t").iterdir())
    stats = pl.read_parquet(run_dir / "timeseries.parquet").filter(
        (pl.col("source") == "db.database") & (pl.col("metric") == "xact_commit"))
    per_node = dict(stats.group_by("node").agg(pl.col("value").sum()).iter_rows())
    assert per_node.get("standby1", 0) > 0 and per_node.get("standby2", 0) > 0, per_node


def _faults(run_dir: Path) -> list[dict[str, object]]:
    events = pl.read_parquet(run_dir / "events.parquet").filter(pl.col("kind") == "fault")
    return [{**json.loads(a), "node": n} for a, n in zip(events["attrs"], events["node"],
                                                            strict=True)]


def test_faults_fire_on_the_timeline_and_are_recorded(tmp_path: Path) -> None:
    # The crash comes 5 s after the rest: a timeline begun late on a loaded machine fires
    # every fault already due at once (faults at 1, 2 and 3 s can all begin at 4.1 s), and
    # a crash due at 4 s would kill the bulk update. Due at 6 s, it can kill one more: begun
    # 1 s late beside the checkpoint, the vacuum and the WAL switch, the update of 20,000
    # rows can still be running 3 s later.
    scenario = write_scenario(tmp_path, """
[workload]
scale = 1
clients = 2
jobs = 1
duration = "10s"
warmup = "1s"
[[faults]]
at = "1s"
action = "checkpoint"
[[faults]]
at = "2s"
action = "bulk-update"
args = { rows = 20000 }
[[faults]]
at = "3s"
action = "vacuum"
args = { table = "pgbench_history" }
[[faults]]
at = "3s"
action = "switch-wal"
[[faults]]
at = "8s"
action = "crash"
""")
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    run_dir = next((tmp_path / "r" / "t").iterdir())
    faults = {f["action"]: f for f in _faults(run_dir)}
    assert set(faults) == {"checkpoint", "bulk-update", "vacuum", "switch-wal", "crash"}
    assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", str(faults["switch-wal"]["lsn"]))
    assert faults["bulk-update"]["rows"] == 20000
    assert "error" not in faults["vacuum"]
    assert float(str(faults["crash"]["recovery_s"])) > 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert "clients_aborted_by_crash" in manifest["results"]


@pytest.mark.disk_exclusive
@pytest.mark.root
def test_disk_memory_and_walreceiver_faults(tmp_path: Path) -> None:
    """throttle-disk throttles the node's commits and puts its limits back, memory-pressure
    runs inside the node's memory envelope, pausing only the WAL receiver leaves the
    standby up."""
    from pglab.lab.cgroups import detect_cgroups

    if not detect_cgroups().usable:
        pytest.skip("needs root and cgroups")
    scenario = write_scenario(tmp_path, """
[envelope]
memory = "1GB"
[topology]
standbys = 1
synchronous = "on"
[workload]
scale = 1
clients = 2
jobs = 1
duration = "13s"
warmup = "1s"
[[faults]]
at = "1s"
action = "throttle-disk"
duration = "3s"
args = { write_iops = 10 }
[[faults]]
at = "1s"
action = "memory-pressure"
duration = "2s"
args = { mb = 64 }
[[faults]]
at = "8s"  # after the seconds that follow the throttle, which are measured
action = "pause-standby"
node = "standby1"
duration = "2s"
args = { part = "walreceiver" }
[[faults]]
at = "10s"  # last: every process of the node waits in reclaim until the OOM kill
action = "memory-pressure"
duration = "3s"
args = { mb = 1536 }
""")
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    run_dir = next((tmp_path / "r" / "t").iterdir())
    faults = _faults(run_dir)
    (throttle,) = [f for f in faults if f["action"] == "throttle-disk"]
    assert throttle["restored"] == {"write_mbps": 0, "read_mbps": 0, "write_iops": 0,
                                    "read_iops": 0}
    # Each commit flushes WAL with at least one write: 10 IOPS let 2 clients commit at
    # most ~20 times a second (group commit), while the seconds around go much faster.
    events = pl.read_parquet(run_dir / "events.parquet").filter(pl.col("kind") == "fault")
    row = events.filter(pl.col("attrs").str.contains("throttle-disk"))
    begin, end = row["t_start"][0], row["t_end"][0]
    client = pl.read_parquet(run_dir / "client.parquet").filter(
        pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial"))
    second = dt.timedelta(seconds=1)
    inside = [float(v) for v in client.filter(
        (pl.col("t") >= begin) & (pl.col("t") + second <= end))["tps"]]
    # The writes queued under the throttle drain once it ends: on a busy machine the
    # first second after it can still be one of them (0 TPS), so the whole seconds from
    # the throttle's end up to the standby's pause are looked at (four, or three when the
    # seconds of the load fall between the faults' instants), and one must run free.
    pause_at = events.filter(pl.col("attrs").str.contains("pause-standby"))["t_start"][0]
    after = [float(v) for v in client.filter(
        (pl.col("t") >= end) & (pl.col("t") + second <= pause_at))["tps"]]
    series = [(t.strftime("%S"), round(float(v))) for t, v in client.select("t", "tps").rows()]
    why = f"throttled {begin:%S.%f}-{end:%S.%f}, paused at {pause_at:%S.%f}, TPS {series}"
    assert len(inside) >= 2 and after, why
    assert max(inside) <= 25 and max(after) > 2 * max(inside), why
    # A hog bigger than the node's 1 GB envelope is killed by the OOM killer inside it
    # (this machine has far more memory), one that fits is not.
    ended = sorted((f["args"]["mb"], f["ended_early"])  # type: ignore[index]
                   for f in faults if f["action"] == "memory-pressure")
    assert ended == [(64, False), (1536, True)], ended
    (pause,) = [f for f in faults if f["action"] == "pause-standby"]
    assert pause["paused_pids"]  # the WAL receiver's pid
    shares = pl.read_parquet(run_dir / "timeseries.parquet").filter(
        (pl.col("source") == "db.waits") & (pl.col("metric") == "IPC:SyncRep"))
    assert shares.height > 0  # commits waited while the receiver was stopped


def test_pgbouncer_listens_on_its_private_socket_only(pgbouncer_binary: str) -> None:
    """Its logins are trusted: a TCP port would let any local user in as superuser."""
    loaded = load_text('name = "p"\n[topology]\npooler = "pgbouncer"\n[workload]\nscale = 1\n',
                       "p.toml")
    with Lab(loaded.scenario, "p.toml", f"pool-{time.time_ns()}") as lab:
        assert lab.pooler is not None and lab.pooler.socket_dir is not None
        with lab.pooler.admin_connect() as conn:  # through the Unix socket
            assert conn.execute("SHOW VERSION").fetchall()
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", lab.pooler.port)) != 0
        assert oct(lab.pooler.socket_dir.stat().st_mode & 0o777) == "0o700"


@pytest.mark.live
def test_a_fault_that_begins_late_says_by_how_much() -> None:
    """A timeline begun 2 s after its window opened (on a loaded machine all of a run's
    faults of 1 to 4 s can begin at 4 s): the checkpoint due at 0.5 s begins at once and
    records that it began 1.5 s late; the one due at 3.5 s is on time."""
    from pglab.lab.faults import FaultTimeline
    from pglab.scenario.model import Fault

    loaded = load_text('name = "late"\n[workload]\nscale = 1\n', "late.toml")
    recorded: list[Event] = []
    faults = [Fault.model_validate({"at": at, "action": "checkpoint"})
              for at in ("500ms", "3500ms")]
    with Lab(loaded.scenario, "late.toml", f"late-{time.time_ns()}") as lab:
        timeline = FaultTimeline(faults, lab.fault_target, recorded.append)
        timeline.start(time.time() - 2.0)
        time.sleep(3.0)  # both begun (a checkpoint's event ends with the run: stop())
        timeline.stop()
    late, on_time = sorted((e.attrs for e in recorded), key=lambda a: float(a["at_s"]))
    assert "error" not in late and "error" not in on_time, recorded
    assert 1.4 <= float(late["delayed_s"]) < 2.0 and late["at_s"] == pytest.approx(
        0.5 + float(late["delayed_s"])), late
    # on time, give or take a sleeping thread's wake-up on a loaded machine
    assert on_time["at_s"] == pytest.approx(3.5 + float(on_time.get("delayed_s", 0.0)))
    assert float(on_time.get("delayed_s", 0.0)) < 1.0, on_time
