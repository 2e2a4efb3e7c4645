"""`pglab observe` on servers this test started (not pglab), over TCP, as a pg_monitor role.

Real parts only: PostgreSQL 18 from the embedded wheel, real pgbench, a real
node_exporter (Debian's prometheus-node-exporter) on localhost. Incidents are made by
the test beside pglab, which only watches.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from psycopg.conninfo import conninfo_to_dict

from conftest import ROOT_USER, apt_install, run_cli
from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.local import LocalServer, free_port
from pglab.lab.osuser import server_user

pytest_plugins = ("observe_fixtures",)  # node_exporter_url
pytestmark = pytest.mark.live  # servers this module starts, real loads

PASSWORD = "w4tch-Zq81-secret"
ROLE = "watcher"
# Every client takes a share lock on branch 1 (compatible with each other: no contention
# of their own); a session that updates that row stops them all until it ends.
SHARED_ROW = """\\set aid random(1, 100000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
SELECT bbalance FROM pgbench_branches WHERE bid = 1 FOR SHARE;
END;
"""


@dataclass
class Observed:
    srv: LocalServer

    def dsn(self, dbname: str = "app", password: str = PASSWORD) -> str:
        return (f"host=127.0.0.1 port={self.srv.port} user={ROLE} dbname={dbname} "
                f"password={password}")

    def pgbench(self, *args: str) -> list[str]:
        return [str(self.srv.bins.tool("pgbench")), "-h", str(self.srv.socket_dir), "-p",
                str(self.srv.port), "-U", "postgres", *args]


# what observe says once of a server without pg_stat_statements in its database
NO_STATEMENTS = "pg_stat_statements is not installed in database app"


def _server(root: Path, name: str, settings: dict[str, str]) -> LocalServer:
    user = server_user()
    srv = LocalServer(name, runnable_by(find_binaries(), user), root / "labs" / name, user)
    srv.initdb(None, None, "C", "UTF8", sync=False)
    srv.extra_conf.update(settings)
    hba = srv.data_dir / "pg_hba.conf"
    hba.write_text(f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    srv.start()
    with srv.connect("postgres") as conn:
        conn.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}' IN ROLE pg_monitor")
        conn.execute("CREATE DATABASE app")
        conn.execute("CREATE DATABASE untouched")
    return srv


@pytest.fixture(scope="module")
def observed(pglab_home: Path) -> Iterator[Observed]:
    """A busy-able server: pgbench data in `app`, pg_stat_statements installed."""
    srv = _server(pglab_home, "observed", {
        "shared_preload_libraries": "'pg_stat_statements'", "deadlock_timeout": "'200ms'"})
    with srv.connect("app") as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    env = {**os.environ, "LC_ALL": "C"}
    subprocess.run(Observed(srv).pgbench("-i", "-s", "1", "-q", "app"), check=True,
                   capture_output=True, env=env)
    yield Observed(srv)
    srv.stop(discard=True)
    shutil.rmtree(srv.node_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def idle(pglab_home: Path) -> Iterator[Observed]:
    """A server nobody uses, which logs every statement."""
    srv = _server(pglab_home, "idle", {"log_statement": "'all'", "autovacuum": "off",
                                       # no standby snapshots in the WAL every 15 s
                                       "wal_level": "minimal", "max_wal_senders": "0"})
    # Reading a page whose hint bits are not yet set writes it to the WAL (a full-page
    # image: data checksums are on in PostgreSQL 18): set them all before measuring.
    for db in ("app", "untouched", "postgres"):
        with srv.connect(db) as conn:
            conn.execute("VACUUM FREEZE")
    with srv.connect("postgres") as conn:
        conn.execute("CHECKPOINT")
    yield Observed(srv)
    srv.stop(discard=True)
    shutil.rmtree(srv.node_dir, ignore_errors=True)


def _only_run(results: Path, name: str = "observe") -> Path:
    runs = [p for p in (results / name).iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def _files_text(folder: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


def _stats(srv: LocalServer) -> dict[str, object]:
    with srv.connect("postgres") as conn:
        rows = conn.execute("SELECT datname, xact_commit, tup_inserted, tup_updated, "
                            "tup_deleted FROM pg_stat_database WHERE datname IS NOT NULL"
                            ).fetchall()
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    return {"dbs": {str(r[0]): tuple(r[1:]) for r in rows}, "lsn": lsn[0] if lsn else None}


def _observe(*args: str, results: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "pglab", "observe", *args, "--results",
                             str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _wait_for_samples(results: Path, timeout: float = 60) -> Path:
    """The observation's folder, once its first throughput samples are written."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for csv in (results / "observe").glob("*/telemetry/samples.csv"):
            if "db.throughput" in csv.read_text():
                return csv.parent.parent
        time.sleep(0.2)
    raise AssertionError("observe wrote no throughput sample")


def _incident(observed: Observed, tmp_path: Path, observe: list[str], load: list[str],
              after_s: float, app: str, statement: str, hold_s: float,
              ) -> tuple[Path, str, str, dt.datetime]:
    """An observation of a pgbench load (4 clients on `app`) during which a session of
    application `app`, outside pglab, runs `statement` `after_s` into the load and holds
    its locks `hold_s`: the folder, pglab's stdout and stderr, and when the load ended."""
    results = tmp_path / "results"
    proc = _observe(observed.dsn(), *observe, results=results)
    folder = _wait_for_samples(results)
    env = {**os.environ, "LC_ALL": "C"}
    pgbench = subprocess.Popen(observed.pgbench("-n", "-c", "4", *load, "app"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    time.sleep(after_s)
    with observed.srv.connect("app", autocommit=False) as holder:
        holder.execute(f"SET application_name = '{app}'")
        holder.execute(statement)
        time.sleep(hold_s)
        holder.rollback()
    _out, load_err = pgbench.communicate(timeout=60)
    ended = dt.datetime.now(dt.timezone.utc)
    assert pgbench.returncode == 0, load_err
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    return folder, stdout, stderr, ended


def test_a_row_lock_held_outside_is_named_by_the_analysis(observed: Observed,
                                                           tmp_path: Path) -> None:
    script = tmp_path / "shared-row.sql"
    script.write_text(SHARED_ROW)
    log = observed.srv.log_dir / "postgresql.json"
    folder, stdout, _stderr, _ended = _incident(
        observed, tmp_path, ["--duration", "16s", "--log", str(log)],
        ["-T", "11", "-f", str(script)], 4, "nightly-batch",
        "UPDATE pgbench_branches SET bbalance = bbalance WHERE bid = 1", 4)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["source"]["kind"] == "observe"
    assert manifest["status"] == "completed"
    client = pl.read_parquet(folder / "client.parquet")
    measured = client.filter(~pl.col("partial"))
    assert measured.filter(pl.col("tps") == 0).height >= 2, measured  # the held seconds
    assert float(measured["tps"].max()) > 50  # type: ignore[arg-type] # the load around them
    analysis = json.loads((folder / "analysis.json").read_text())
    zero = [w for w in analysis["stalls"] if w["kind"] == "drop-to-zero"]
    assert zero, analysis["stalls"]
    lock = zero[0]["causes"][0]
    assert lock["cause"] == "lock-contention", zero[0]["causes"]
    # Named: the row, the holder's application, its state and its statement
    named = [line for line in lock["evidence"] if "queued on row" in line]
    assert named, lock["evidence"]
    assert "of pgbench_branches behind pid" in named[0] and "(nightly-batch" in named[0]
    assert "idle in transaction" in named[0]
    assert "UPDATE pgbench_branches SET bbalance = bbalance WHERE bid = $1" in named[0]
    # one session idle in its transaction for seconds: a long holder, whose fix the lab
    # can test, not a hot row
    assert lock.get("sub_cause") == "long-holder", lock
    rules = [r["rule"] for r in analysis["recommendations"]]
    assert "idle-in-transaction-timeout" in rules and "hot-row" not in rules, rules
    # field mode names the statement the load queued in, from the server's own
    # pg_stat_statements and query ids (read, never installed by pglab)
    first = zero[0]["statements"][0]
    assert first["text"] == "SELECT bbalance FROM pgbench_branches WHERE bid = $1 FOR SHARE"
    assert first["top_wait"].startswith("Lock:"), first
    # pg_monitor has no privileges on the tables, so no plan names them: said once
    assert "relations" not in first, first
    events = pl.read_parquet(folder / "events.parquet")
    missing = [json.loads(a) for a in
               events.filter(pl.col("kind") == "statements-missing")["attrs"].to_list()]
    # pg_stat_statements.track is a superuser's to set: the observer's own role is
    # left out of db.statements, and that is said
    assert sorted(m["what"] for m in missing) == ["relations", "statements of pglab's role"], \
        missing
    events = pl.read_parquet(folder / "events.parquet")
    assert events.filter(pl.col("kind") == "lock-wait").height >= 1  # from the log file
    assert "lock-contention" in stdout
    assert PASSWORD not in _files_text(folder)
    cost = manifest["telemetry"]["observer_per_node"]["primary"]
    assert cost["queries_per_s"] > 0 and cost["server_cpu_s"] is not None


def test_a_table_lock_is_named_as_one_and_the_idle_end_is_no_stall(observed: Observed,
                                                                    tmp_path: Path) -> None:
    """LOCK TABLE on pgbench_branches while pgbench runs: the sessions it blocks directly
    want the table; those behind them wait on the rows these hold, so the waits read as
    row locks. The queue is the table's, and the sub-cause table-lock. The seconds after
    the load ended, with no client at work, are idle, not a stall. The observation
    profiles the server (on this host) on-CPU with perf, as root; else says once why not."""
    if ROOT_USER:
        apt_install("linux-perf", Path("/usr/bin/perf"))
    folder, stdout, stderr, ended = _incident(
        observed, tmp_path, ["--duration", "13s", "--profile", "49"], ["-T", "7"], 2,
        "migration", "LOCK TABLE pgbench_branches IN ACCESS EXCLUSIVE MODE", 3)
    _profiled(folder, stderr)
    analysis = json.loads((folder / "analysis.json").read_text())
    zero = [w for w in analysis["stalls"] if w["kind"] == "drop-to-zero"]
    assert zero, analysis["stalls"]
    lock = zero[0]["causes"][0]
    assert (lock["cause"], lock.get("sub_cause")) == ("lock-contention", "table-lock"), lock
    named = [line for line in lock["evidence"] if "queued on relation pgbench_branches" in line]
    assert named and "(migration" in named[0], lock["evidence"]
    assert "LOCK TABLE pgbench_branches IN ACCESS EXCLUSIVE MODE" in named[0]
    # pgbench ended seconds before the observation did: those seconds are left out
    assert analysis["summary"]["idle_seconds"] >= 2, analysis["summary"]
    late = [w for w in analysis["stalls"]
            if dt.datetime.fromisoformat(w["start"]) >= ended - dt.timedelta(seconds=1)]
    assert not late, late
    assert "s idle left out (no client session at work)" in stdout
    # pglab made no scenario of an observation: a test runs on one that reproduces it
    tests = [r["test"] for r in analysis["recommendations"]]
    assert tests and all(t.startswith(("pglab run SCENARIO ", "not testable")) for t in tests)


def _profiled(folder: Path, stderr: str) -> None:
    """--profile 49 on a server of this host: as root, the server's processes' on-CPU
    samples by PostgreSQL process kind (its client backends' chains through PostgresMain)
    and the profiler in the manifest; not root, one line saying why not."""
    from pglab.probes.procfs.processes import TITLE_KINDS
    from pglab.results.schemas import PROFILE_SCHEMA

    manifest = json.loads((folder / "manifest.json").read_text())
    record = manifest["telemetry"]["os.profile"]
    if not ROOT_USER:
        assert not (folder / "profile.parquet").exists()
        said = [line for line in stderr.splitlines() if "os.profile" in line]
        assert len(said) == 1 and record["unavailable"] in said[0], (stderr, record)
        return
    frame = pl.read_parquet(folder / "profile.parquet")
    assert dict(frame.schema) == PROFILE_SCHEMA
    kinds = set(frame["kind"].unique().to_list())
    assert "backends" in kinds and kinds <= {*TITLE_KINDS.values(), "backends", "postmaster"}
    assert frame["node"].unique().to_list() == ["primary"]  # no pgbench of pglab's
    backends = frame.filter(pl.col("kind") == "backends")
    assert any(";PostgresMain;" in s for s in backends["stack"].to_list())
    assert record["hz"] == 49 and record["call_graph"] == "dwarf"
    assert record["resolution"]["samples"] == frame["samples"].sum()
    assert "os.profile" in manifest["telemetry"]["probes"]
    assert manifest["telemetry"]["probe_cpu_s"]["os.profile"] > 0
    assert "--profile" not in stderr, stderr  # it found the postmaster: nothing to say

def test_nothing_is_written_and_the_password_stays_out(idle: Observed, tmp_path: Path,
                                                        node_exporter_url: str) -> None:
    before = _stats(idle.srv)
    results = tmp_path / "results"
    result = run_cli("observe", idle.dsn("app"), "--duration", "4s", "--node-exporter",
                     node_exporter_url, "--log", "sql", "--results", str(results))
    assert result.returncode == 0, result.stderr
    after = _stats(idle.srv)
    assert after["lsn"] == before["lsn"]  # no WAL at all
    dbs_before, dbs_after = before["dbs"], after["dbs"]
    assert isinstance(dbs_before, dict) and isinstance(dbs_after, dict)
    # commits, inserts, updates, deletes: a database pglab never touched did not move
    assert dbs_after["untouched"] == dbs_before["untouched"]
    # pglab's database: one commit, its session's start (PostgreSQL counts it as one);
    # every statement it ran ended in ROLLBACK
    commits, *writes = dbs_after["app"]
    assert (commits - dbs_before["app"][0], writes) == (1, list(dbs_before["app"][1:]))
    # A pg_monitor role may not read files: said once, on one line, and the rest runs.
    warnings = [ln for ln in result.stderr.splitlines() if "warning" in ln]
    # said once, and never installed: the server pglab did not start stays untouched
    assert len(warnings) == 2 and NO_STATEMENTS in warnings[0], result.stderr
    assert "pg_read_binary_file" in warnings[1], result.stderr
    folder = _only_run(results)
    assert PASSWORD not in _files_text(folder)
    series = pl.read_parquet(folder / "timeseries.parquet")
    sources = set(series["source"].unique().to_list())
    assert {"db.throughput", "db.waits", "os.cpu", "os.disk", "os.memory"} <= sources
    assert series.filter(pl.col("source") == "os.cpu")["node"].unique().to_list() == ["host"]
    client = pl.read_parquet(folder / "client.parquet")
    assert client["tps"].sum() == 0  # pglab's own statements are no commits
    # nor failed transactions: their ROLLBACKs, which the server counts late, are taken out
    # (a second of them showed as the application's, about one a second before)
    assert client["failures"].sum() == 0, client["failures"].to_list()
    # The server logged every statement (log_statement = all): pglab's are reads.
    logged = [json.loads(line) for line in
              (idle.srv.log_dir / "postgresql.json").read_text().splitlines()]
    ours = [r["message"].split(":", 1)[1] for r in logged
            if r.get("application_name") == "pglab"
            and r.get("message", "").startswith(("statement:", "execute"))]
    assert ours
    verbs = {m.split()[0].upper() for m in ours}
    assert verbs <= {"SELECT", "WITH", "BEGIN", "ROLLBACK"}, verbs
    for statement in ours:  # a WITH that is a read
        assert not any(w in statement.upper() for w in ("INSERT ", "UPDATE ", "DELETE ")), \
            statement
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["host"]["cpu_cores"] == os.cpu_count()  # from node_exporter
    assert manifest["nodes"]["primary"]["settings"]["log_statement"]["setting"] == "all"
    for command in ("show", "analyze", "report"):
        shown = run_cli(command, str(folder))
        assert shown.returncode == 0, (command, shown.stderr)
    assert "queries/s" in (folder / "report.html").read_text()  # the observer's cost
    compared = run_cli("compare", str(folder), str(folder))
    assert compared.returncode == 0, compared.stderr


@pytest.mark.parametrize("case", ["unreachable", "password", "exporter", "log"])
def test_bad_input_is_one_line(idle: Observed, tmp_path: Path, case: str) -> None:
    args: list[str] = []
    if case == "unreachable":
        args = [f"host=127.0.0.1 port={free_port()} user={ROLE} password={PASSWORD}"]
    elif case == "password":
        args = [idle.dsn(password="not-the-Pw-1234")]
    elif case == "exporter":
        args = [idle.dsn(), "--node-exporter", f"http://127.0.0.1:{free_port()}/metrics",
                "--duration", "2s"]
    else:
        args = [idle.dsn(), "--log", str(tmp_path / "no-such.log")]
    result = run_cli("observe", *args, "--results", str(tmp_path / "r"))
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("pglab:")
             and NO_STATEMENTS not in ln]  # the idle server has no pg_stat_statements
    assert len(lines) == 1, result.stderr
    assert PASSWORD not in result.stderr and "not-the-Pw-1234" not in result.stderr
    if case == "exporter":  # a warning; the observation goes on without it
        assert result.returncode == 0 and "warning" in lines[0] and "refused" in lines[0]
    else:
        assert result.returncode in (2, 3), result.stderr
        assert not (tmp_path / "r").exists()  # nothing made for a bad start


@pytest.mark.parametrize("source", ["sql", "command"])
def test_the_log_over_sql_or_from_a_command(observed: Observed, tmp_path: Path,
                                            source: str) -> None:
    """A checkpoint made outside pglab arrives as an event, read through SQL (a role
    granted pg_read_binary_file) or from `tail -F` of the log file."""
    with observed.srv.connect("postgres") as conn:
        conn.execute("DO $$BEGIN CREATE ROLE reader LOGIN PASSWORD 'r3ad-Pw-77' IN ROLE "
                     "pg_monitor; EXCEPTION WHEN duplicate_object THEN NULL; END$$")
    with observed.srv.connect("app") as conn:  # in the database pglab connects to
        conn.execute("GRANT EXECUTE ON FUNCTION pg_read_binary_file(text,bigint,bigint,"
                     "boolean) TO reader")
    hba = observed.srv.data_dir / "pg_hba.conf"
    if "reader" not in hba.read_text():
        hba.write_text("host all reader 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        observed.srv.reload()
    dsn = observed.dsn().replace(f"user={ROLE}", "user=reader").replace(PASSWORD,
                                                                         "r3ad-Pw-77")
    log = observed.srv.log_dir / "postgresql.json"
    spec = "sql" if source == "sql" else f"command:tail -n0 -F {log}"
    results = tmp_path / "results"
    proc = _observe(dsn, "--duration", "6s", "--log", spec, results=results)
    _wait_for_samples(results)
    time.sleep(1.5)  # tail has started
    with observed.srv.connect("postgres") as conn:
        conn.execute("CHECKPOINT")
    _out, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "warning" not in stderr, stderr
    folder = _only_run(results)
    events = pl.read_parquet(folder / "events.parquet")
    checkpoints = events.filter(pl.col("kind") == "checkpoint")
    assert checkpoints.height >= 1, events
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["source"]["log_stats"]["format"] == "jsonlog"
    assert "r3ad-Pw-77" not in _files_text(folder)


@pytest.fixture(scope="module")
def replicated(pglab_home: Path) -> Iterator[tuple[Observed, Observed]]:
    """A primary and its synchronous hot standby, made by this test with pg_basebackup."""
    primary = _server(pglab_home, "syncprimary", {})
    subprocess.run(Observed(primary).pgbench("-i", "-s", "1", "-q", "app"), check=True,
                   capture_output=True, env={**os.environ, "LC_ALL": "C"})
    standby = LocalServer("standby1", primary.bins, pglab_home / "labs" / "standby1",
                          primary.user)
    standby.prepare_dirs()
    subprocess.run([str(primary.bins.tool("pg_basebackup")), "-D", str(standby.data_dir),
                    "-h", str(primary.socket_dir), "-p", str(primary.port), "-U", "postgres",
                    "-X", "stream", "-c", "fast"], check=True, capture_output=True,
                   cwd=standby.node_dir, **primary.user.popen_kwargs())
    shutil.rmtree(standby.log_dir, ignore_errors=True)
    (standby.data_dir / "standby.signal").touch()
    primary.user.chown(standby.data_dir / "standby.signal")
    standby.extra_conf.update(primary_conninfo=(
        f"'host={primary.socket_dir} port={primary.port} user=postgres "
        "application_name=standby1'"), hot_standby="on")
    standby.start()
    with primary.connect("postgres") as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'standby1'")
        conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while conn.execute("SELECT 1 FROM pg_stat_replication WHERE application_name = "
                           "'standby1' AND sync_state = 'sync' AND state = 'streaming'"
                           ).fetchone() is None:
            assert time.monotonic() < deadline, "the standby did not become synchronous"
            time.sleep(0.2)
    yield Observed(primary), Observed(standby)
    for srv in (standby, primary):
        srv.stop(discard=True)
        shutil.rmtree(srv.node_dir, ignore_errors=True)


def test_a_paused_synchronous_standby_is_named(replicated: tuple[Observed, Observed],
                                               tmp_path: Path) -> None:
    import psutil

    primary, standby = replicated
    script = tmp_path / "shared-row.sql"
    script.write_text(SHARED_ROW)
    results = tmp_path / "results"
    proc = _observe(primary.dsn(), "--standby", standby.dsn(), "--duration", "15s",
                    results=results)
    folder = _wait_for_samples(results)
    load = subprocess.Popen(primary.pgbench("-n", "-c", "2", "-T", "11", "-f", str(script),
                                            "app"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LC_ALL": "C"})
    time.sleep(4)
    assert standby.srv.process is not None
    postmaster = psutil.Process(standby.srv.process.pid)
    paused = [postmaster, *postmaster.children(recursive=True)]
    paused_at = dt.datetime.now(dt.timezone.utc)
    for p in paused:  # made outside pglab: the whole standby stops answering
        p.suspend()
    try:
        time.sleep(4)
    finally:
        for p in paused:
            p.resume()
        resumed_at = dt.datetime.now(dt.timezone.utc)
    _out, load_err = load.communicate(timeout=60)
    assert load.returncode == 0, load_err
    _stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    manifest = json.loads((folder / "manifest.json").read_text())
    assert set(manifest["nodes"]) == {"primary", "standby1"}
    assert manifest["nodes"]["standby1"]["in_recovery"] is True
    series = pl.read_parquet(folder / "timeseries.parquet")
    assert series.filter(pl.col("node") == "standby1")["source"].n_unique() > 3
    analysis = json.loads((folder / "analysis.json").read_text())
    # the pause's stall (a second of SyncRep waits before it, with the machine busy, can be
    # a stall of its own, 1 s at 0.40, that names no standby)
    zero = [w for w in analysis["stalls"] if w["kind"] == "drop-to-zero"
            and w["causes"][0]["cause"] == "sync-replication"
            and dt.datetime.fromisoformat(w["start"].replace("Z", "+00:00")) < resumed_at
            and dt.datetime.fromisoformat(w["end"].replace("Z", "+00:00")) > paused_at]
    assert zero, (paused_at, resumed_at, analysis["stalls"])
    assert any("standby1" in line for line in zero[0]["causes"][0]["evidence"])
    assert PASSWORD not in _files_text(folder)


def test_ctrl_c_ends_an_open_ended_observation(idle: Observed, tmp_path: Path) -> None:
    import signal

    results = tmp_path / "results"
    proc = _observe(idle.dsn(), results=results)  # no --duration: until Ctrl-C
    folder = _wait_for_samples(results)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["source"]["ended_by"] == "SIGINT"
    assert (folder / "timeseries.parquet").is_file() and "results:" in stdout


def test_a_role_without_pg_monitor_is_told_once_and_observes(idle: Observed,
                                                              tmp_path: Path) -> None:
    with idle.srv.connect("postgres") as conn:
        conn.execute("DO $$BEGIN CREATE ROLE plain LOGIN PASSWORD 'pl4in-Pw-5'; "
                     "EXCEPTION WHEN duplicate_object THEN NULL; END$$")
    hba = idle.srv.data_dir / "pg_hba.conf"
    if "plain" not in hba.read_text():
        hba.write_text("host all plain 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        idle.srv.reload()
    dsn = idle.dsn().replace(f"user={ROLE}", "user=plain").replace(PASSWORD, "pl4in-Pw-5")
    result = run_cli("observe", dsn, "--duration", "3s", "--log", "sql", "--results",
                     str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr
    warnings = [ln for ln in result.stderr.splitlines() if "warning" in ln]
    assert len(warnings) == 4, result.stderr  # stats, settings, statements, the log
    assert sum(NO_STATEMENTS in w for w in warnings) == 1
    assert sum("pg_read_all_stats" in w for w in warnings) == 1
    assert sum("pg_read_all_settings" in w for w in warnings) == 1
    assert sum("pg_ls_logdir" in w for w in warnings) == 1
    folder = _only_run(tmp_path / "r")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert len(manifest["nodes"]["primary"]["missing_privileges"]) == 2
    assert pl.read_parquet(folder / "timeseries.parquet").height > 0


def _without_libpq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PG") and not name.startswith("PGLAB"):
            monkeypatch.delenv(name)


def test_libpq_environment_and_service_file_suffice(idle: Observed, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """No DSN at all: libpq's PGHOST... or a service file name the server, as for psql;
    the manifest records where it connected, never the password. (About 1 s.)"""
    from pglab.observe.target import connection_string, open_node

    _without_libpq_environment(monkeypatch)
    for name, value in (("PGHOST", "127.0.0.1"), ("PGPORT", str(idle.srv.port)),
                        ("PGUSER", ROLE), ("PGDATABASE", "app"), ("PGPASSWORD", PASSWORD),
                        ("PGOPTIONS", "-c work_mem=7MB")):
        monkeypatch.setenv(name, value)
    node = open_node("primary", connection_string(None))
    assert node.facts["dbname"] == "app" and node.facts["current_user"] == ROLE
    assert conninfo_to_dict(node.redacted) == {
        "host": "127.0.0.1", "port": str(idle.srv.port), "user": ROLE, "dbname": "app"}
    assert node.opened is not None
    # PGOPTIONS too, beside pglab's own options (libpq alone would drop it for them)
    assert node.opened.execute("SHOW work_mem").fetchone() == ("7MB",)
    assert node.opened.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
    node.opened.close()

    _without_libpq_environment(monkeypatch)
    services = tmp_path / "pg_service.conf"
    services.write_text(f"[watched]\nhost=127.0.0.1\nport={idle.srv.port}\nuser={ROLE}\n"
                        f"dbname=app\npassword={PASSWORD}\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    monkeypatch.setenv("PGSERVICE", "watched")
    node = open_node("primary", connection_string(None))
    assert node.facts["dbname"] == "app" and PASSWORD not in node.redacted
    assert node.opened is not None
    node.opened.close()
    # the service named as psql would take it, with a flag on top
    node = open_node("primary", connection_string("service=watched", dbname="untouched"))
    assert node.facts["dbname"] == "untouched"
    assert conninfo_to_dict(node.redacted) == {
        "service": "watched", "host": "127.0.0.1", "port": str(idle.srv.port), "user": ROLE,
        "dbname": "untouched"}
    assert node.opened is not None
    node.opened.close()


def test_psql_flags_observe_and_the_password_stays_out(idle: Observed, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`pglab observe -h HOST -p PORT -U USER -d DB` as psql takes them, the password from
    PGPASSWORD (and once inside -d's connection string): the run is recorded with the
    connection, never the password. (4 to 9 s on a shared 2-core machine: two short
    observations.)"""
    _without_libpq_environment(monkeypatch)
    results = tmp_path / "results"
    result = run_cli("observe", "-h", "127.0.0.1", "-p", str(idle.srv.port), "-U", ROLE,
                     "-d", "app", "--duration", "1s", "--results", str(results),
                     env={"PGPASSWORD": PASSWORD})
    assert result.returncode == 0, result.stderr
    folder = _only_run(results)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert conninfo_to_dict(manifest["nodes"]["primary"]["dsn"]) == {
        "host": "127.0.0.1", "port": str(idle.srv.port), "user": ROLE, "dbname": "app"}
    assert PASSWORD not in _files_text(folder)
    # the password in -d's connection string: redacted in the manifest as in a DSN's
    _without_libpq_environment(monkeypatch)
    given = run_cli("observe", "-h", "127.0.0.1", "-p", str(idle.srv.port), "-U", ROLE,
                    "-d", f"dbname=app password={PASSWORD}", "--duration", "1s",
                    "--results", str(tmp_path / "r2"))
    assert given.returncode == 0, given.stderr
    folder = _only_run(tmp_path / "r2")
    assert "password=********" in json.loads((folder / "manifest.json").read_text())[
        "nodes"]["primary"]["dsn"]
    assert PASSWORD not in _files_text(folder) + given.stdout + given.stderr
    # --help is help; -h is the host
    assert run_cli("observe", "--help").stdout.count("-h, --host") == 1
