#!/usr/bin/env python3
"""Regenerates the run folders under tests/samples/runs/ with real runs on THIS machine.

    python tests/samples/runs/make_runs.py [NAME ...]     (default: every sample)

Each pathology of tests/test_analysis_live.py (a scenario plus an action on a side
connection during the load) runs for real with PostgreSQL 18 from the embedded wheel;
each of BUILTIN_RUNS is a built-in scenario run by `pglab run` with a few `--set`s.
The folder is copied here without the big raw files (per-transaction logs), so a sample
stays small; analysis needs only manifest.json, client.parquet, timeseries.parquet and
events.parquet. The analysis of each sample is rewritten by the next `pglab analyze`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/, for the pathologies

from test_analysis_live import PATHOLOGIES, run_pathology  # noqa: E402
from test_compare import WRITE_LOAD  # noqa: E402

KEEP_RAW = ("pgbench.stdout", "pgbench.argv")  # small; server logs and txlogs are not

# sample name: built-in scenario and the --set values shortening it
BUILTIN_RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "dirty-storm": ("dirty-writeback-storm", (
        "workload.duration=15s", "workload.warmup=2s", 'faults=[{at="6s", action="checkpoint"}]',
    )),
}
BUILTIN_RUNS["dirty-storm-2"] = BUILTIN_RUNS["dirty-storm"]  # draws of a noisy stall
BUILTIN_RUNS["dirty-storm-3"] = BUILTIN_RUNS["dirty-storm"]
# a draw whose checkpoint was still in its fsyncs when the run ended (no log line yet)
BUILTIN_RUNS["dirty-storm-unfinished"] = BUILTIN_RUNS["dirty-storm"]
# a draw whose only undegraded seconds led into its two stalls
BUILTIN_RUNS["dirty-storm-ci"] = BUILTIN_RUNS["dirty-storm"]
BUILTIN_RUNS["sync-slow-disk"] = ("sync-standby-slow-disk", (  # as its test runs it
    "workload.duration=15s", "workload.warmup=2s",
    'faults=[{at="5s", action="bulk-update", args={rows=50000}}]',
))
# a bulk update, a checkpoint, then VACUUM of its rows: the HA investigation's
# mitigation, a slower vacuum, is advised only where a vacuum ran long enough to matter
BUILTIN_RUNS["sync-slow-disk-vacuum"] = ("sync-standby-slow-disk", (
    "workload.duration=45s", "workload.warmup=3s",
    'faults=[{at="2s", action="bulk-update", args={rows=100000}}, {at="20s", '
    'action="checkpoint"}, {at="25s", action="vacuum", args={table="pgbench_accounts"}}]',
))
# the same with os.kernel on (as the built-in has it): the WAL
# receiver's syscall shares
BUILTIN_RUNS["sync-slow-disk-kernel"] = BUILTIN_RUNS["sync-slow-disk"]
# 1 MB WAL segments on the built-in's 8 MB/s disk: a segment is created every few
# hundred transactions, and commits queue on WALWriteLock behind its creator (a run of it
# can read as wal-write or as wal-segment-init)
BUILTIN_RUNS["walinit-small"] = ("wal-segment-init-stall", (
    "workload.duration=15s", "workload.warmup=2s", "server.initdb.wal_segsize_mb=1",
    # as the built-in was when they were recorded: the lab's directory, a cgroup limit
    "storage={}", "envelope.disk={write_mbps=8}", 'envelope.disk_scope="own-io"',
    'server.settings.min_wal_size="2MB"', 'server.settings.max_wal_size="16MB"',
))
BUILTIN_RUNS["walinit-small-2"] = BUILTIN_RUNS["walinit-small"]
BUILTIN_RUNS["checkpoint-storm"] = ("checkpoint-flush-storm", (  # max_wal_size 64MB
    "workload.duration=45s", "workload.warmup=2s",
))
BUILTIN_RUNS["checkpoint-storm-ci"] = ("checkpoint-flush-storm", (  # as its test runs it
    "workload.duration=20s", "workload.warmup=2s",
))
# pg_wal on its own volume as slow as the data's (the built-in's first matrix point, at its
# default options; a draw made under load, as verdict_stability.py runs it): a segment's
# creation stalls commits while a timed checkpoint writes to the data volume
BUILTIN_RUNS["wal-own-volume-slow"] = ("wal-on-own-volume", (
    'storage.wal.device={write_mbps=8, latency="3ms"}', "matrix={}",
))
# the primary key of pgbench_accounts dropped for 16 s: its statements' plans flip to
# sequential scans (auto_explain logs them); the same built-in without the fault is the
# base its comparison is made against
BUILTIN_RUNS["plan-flip"] = ("plan-flip-index-dropped", ())
BUILTIN_RUNS["plan-flip-base"] = ("plan-flip-index-dropped", ("faults=[]",))
BUILTIN_RUNS["sync-paused"] = ("sync-standby-paused", (  # a standby that stops answering
    "workload.duration=15s", "workload.warmup=2s",
    'faults=[{at="4s", action="pause-standby", node="standby1", duration="6s"}]',
))
# as test_builtin_scenarios runs it: the stall outlasts the pause
# while the standby catches up, and the standby answered at over half its healthy rate
# over the window, though not at all for 3 of its seconds
BUILTIN_RUNS["sync-paused-ci"] = ("sync-standby-paused", (
    "workload.duration=10s", "workload.warmup=2s",
    'faults=[{at="3s", action="pause-standby", node="standby1", duration="4s"}]',
))

# the same pause, recorded with the seconds behind (flush_behind_s) that grow while the
# standby is silent, where pg_stat_replication's flush_lag stays at its last reply's value
BUILTIN_RUNS["sync-paused-behind"] = BUILTIN_RUNS["sync-paused"]
# the two points of zfs-recordsize as its compare test reads them (4 s, warmup 1 s, scale 2;
# the committed pair is one `pglab run zfs-recordsize` of both points with these --sets)
for _size in ("8k", "16k"):
    BUILTIN_RUNS[f"zfs-{_size}"] = ("zfs-recordsize", (
        "workload.duration=4s", "workload.warmup=1s", "workload.scale=2", "matrix={}",
        f"storage.options.recordsize={_size}",
    ))
# the direct run of too-many-connections as its test runs it (3 s, warmup 2 s): 100 clients
# connecting for every transaction on a CPU at 100% go in bursts (97, 196, 97, 194 TPS)
BUILTIN_RUNS["churn-bursty"] = ("too-many-connections", (
    "workload.duration=3s", "workload.warmup=2s", "matrix={}",
))

# The network built-ins (hosts of their own, needs root), one matrix point each: a
# synchronous standby 5 ms away and one 0 ms away (its wait is the standby's flush, not
# the link), a link narrower than a bulk update's WAL, a single synchronous standby cut
# off for 10 s, and an application 1 ms from its database.
# a synchronous standby in a quarter of a CPU that must apply each commit (remote_apply)
# while a bulk update after a checkpoint floods it with WAL, os.profile on: the update's
# row locks hold the load, then commits wait for the startup process's replay; the second
# draw's observer was starved for 10 s (no node answered) inside the update's stall
BUILTIN_RUNS["standby-replay-cpu"] = ("standby-replay-cpu", ())
BUILTIN_RUNS["standby-replay-cpu-starved"] = BUILTIN_RUNS["standby-replay-cpu"]
BUILTIN_RUNS["net-far-standby"] = ("sync-standby-across-zones", (
    "matrix={}", "network.links.0.rtt=5ms"))
BUILTIN_RUNS["net-near-standby"] = ("sync-standby-across-zones", (
    "matrix={}", "network.links.0.rtt=0ms"))
BUILTIN_RUNS["net-narrow-link"] = ("standby-narrow-link", ())
BUILTIN_RUNS["net-partition"] = ("sync-standby-partitioned", (
    "matrix={}", 'topology.synchronous="on"'))
BUILTIN_RUNS["net-app-far"] = ("app-far-from-database", ("matrix={}",))
# the pooler on a host of its own, 1 ms from the client: the statements cross two links
BUILTIN_RUNS["net-app-far-pooler"] = ("app-far-from-database", (
    "matrix={}", 'topology.pooler="pgbouncer"', 'topology.pooler_host="own"',
    'network.links.0.between=["client", "pooler"]'))

# sample name: a scenario of its own (no built-in does this yet), run by `pglab run` as
# root (a storage volume). Scale 1 keeps a cut-recover-verify cycle to a few seconds.
DURABILITY_RUNS: dict[str, str] = {
    # volatile-ignores-flush holds every write for a second whatever the flushes say:
    # the WAL of the last second before the cut is certainly unflushed, so commits
    # acknowledged in it are lost
    "power-loss-lying-cache": """name = "power-loss-lying-cache"
[storage]
filesystem = "ext4"
device = { cache = "volatile-ignores-flush" }
[workload]
scale = 1
clients = 4
jobs = 2
duration = "15s"
warmup = "1s"
[[faults]]
at = "6s"
action = "power-loss"
""",
    # ext4 mounted without barriers on a device whose cache honours flushes: fsync never
    # sends one, so what the cache holds at each cut (its last destage delay of writes)
    # is lost though every commit was flushed
    "power-loss-nobarrier": """name = "power-loss-nobarrier"
[storage]
filesystem = "ext4"
options = { barrier = false }
device = { cache = "volatile" }
[workload]
scale = 1
clients = 4
jobs = 2
duration = "16s"
warmup = "1s"
[[faults]]
at = "4s"
action = "power-loss"
repeat = 2
every = "7s"
""",
    # the control: the same cuts on an honest device lose nothing
    "power-loss-honest": """name = "power-loss-honest"
[storage]
filesystem = "ext4"
device = { cache = "honest" }
[workload]
scale = 1
clients = 4
jobs = 2
duration = "16s"
warmup = "1s"
[[faults]]
at = "4s"
action = "power-loss"
repeat = 2
every = "7s"
""",
    # a crash while the disk is paused: the killed backends wait in the device's I/O until
    # the pause ends, so the server is down for most of the run and the load never resumes
    "crash-on-paused-disk": """name = "crash-on-paused-disk"
[storage]
filesystem = "ext4"
size = "1GB"
device = { write_mbps = 200 }
[workload]
scale = 1
clients = 4
duration = "20s"
warmup = "1s"
[[faults]]
at = "2s"
action = "pause-disk"
duration = "15s"
[[faults]]
at = "3s"
action = "crash"
duration = "1s"
""",
}


# sample name: a scenario of its own and the --set values of its run: a long holder made
# by the idle-in-transaction fault, and the run its advice's test line makes
IDLE_HOLDER = """name = "idle-holder"
[server.settings]
deadlock_timeout = "200ms"
[workload]
scale = 5
mix = ["tpcb-like"]
clients = 8
jobs = 2
duration = "16s"
warmup = "2s"
[[faults]]
at = "4s"
action = "idle-in-transaction"
duration = "8s"
"""
# A script of five statements; the `sql` fault holds a lock on pgbench_tellers for 4 s:
# the one statement that updates it queues, and so does every transaction.
STATEMENTS = """name = "statements"
[workload]
scale = 2
mix = []
scripts = ["shop.sql"]
clients = 4
jobs = 2
duration = "14s"
warmup = "2s"
[[faults]]
at = "5s"
action = "sql"
args = { sql = "BEGIN; LOCK TABLE pgbench_tellers IN EXCLUSIVE MODE; SELECT pg_sleep(4); COMMIT" }
"""
SHOP_SCRIPT = """\\set aid random(1, 100000 * :scale)
\\set bid random(1, 1 * :scale)
\\set tid random(1, 10 * :scale)
\\set delta random(-5000, 5000)
BEGIN;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
SELECT sum(tbalance) FROM pgbench_tellers WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime)
  VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
"""
# test_compare.py's write load on Debian's PostgreSQL 15: another version, not comparable
WRITE_LOAD_15 = f"""name = "w"
[server]
bin = "/usr/lib/postgresql/15/bin"
{WRITE_LOAD}"""
# Statistics made stale by a bulk change: 300,000 rows of branch 0 added to
# pgbench_tellers, whose autovacuum is off, after an index on its bid was made and the
# table analysed with 50 rows. The planner scales the old statistics to the table's new
# size, expects thousands of tellers for a branch where there are 10, and the join flips
# from a nested loop on accounts' primary key to a hash join that scans accounts
# (hundreds of ms a call, where ANALYZE brings it back to under one). The insert comes
# late enough that the seconds after it stay under half the run: the stall is measured
# against the seconds before it.
STALE_STATISTICS = """name = "plan-flip-stale-statistics"
[server.settings]
shared_buffers = "256MB"
[workload]
scale = 5
mix = ["tpcb-like"]
scripts = ["teller-accounts.sql@5"]
clients = 4
jobs = 2
duration = "30s"
warmup = "3s"
[[faults]]
at = "1s"
action = "sql"
[faults.args]
sql = '''ALTER TABLE pgbench_tellers SET (autovacuum_enabled = off);
CREATE INDEX pgbench_tellers_bid ON pgbench_tellers (bid); ANALYZE pgbench_tellers'''
[[faults]]
at = "18s"
action = "sql"
[faults.args]
sql = '''INSERT INTO pgbench_tellers (tid, bid, tbalance)
SELECT g, 0, 0 FROM generate_series(1001, 300000) g'''
"""
TELLER_ACCOUNTS_SCRIPT = """\\set bid random(1, 5 * :scale)
SELECT sum(a.abalance) FROM pgbench_tellers t
  JOIN pgbench_accounts a ON a.aid = t.tid * 9973 WHERE t.bid = :bid;
"""
SCRIPT_FILES = {"statements": {"shop.sql": SHOP_SCRIPT},  # written beside the scenario
                "plan-flip-stale": {"teller-accounts.sql": TELLER_ACCOUNTS_SCRIPT}}
SCENARIO_RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "control-pg15": (WRITE_LOAD_15, ()),
    "idle-holder": (IDLE_HOLDER, ()),
    "idle-holder-timeout": (IDLE_HOLDER, (
        "server.settings.idle_in_transaction_session_timeout=1s",)),
    "statements": (STATEMENTS, ()),
    "plan-flip-stale": (STALE_STATISTICS, ()),
}


def run_scenario_text(name: str, scratch: Path) -> Path:
    text, sets = SCENARIO_RUNS.get(name, (DURABILITY_RUNS.get(name, ""), ()))
    scenario = scratch / f"{name}.toml"
    scenario.write_text(text)
    for file_name, script in SCRIPT_FILES.get(name, {}).items():
        (scratch / file_name).write_text(script)
    command = [sys.executable, "-m", "pglab", "run", str(scenario), "--results", str(scratch)]
    for item in sets:
        command += ["--set", item]
    subprocess.run(command, check=True)
    stem = text.split('"', 2)[1]  # the scenario's name: its results folder
    return max((scratch / stem).iterdir())


def run_builtin(name: str, scratch: Path) -> Path:
    scenario, sets = BUILTIN_RUNS[name]
    command = [sys.executable, "-m", "pglab", "run", scenario, "--results", str(scratch)]
    for item in sets:
        command += ["--set", item]
    subprocess.run(command, check=True)
    return max((scratch / scenario).iterdir())


def record(name: str, scratch: Path) -> Path:
    if name in BUILTIN_RUNS:
        folder = run_builtin(name, scratch)
    elif name in DURABILITY_RUNS or name in SCENARIO_RUNS:
        folder = run_scenario_text(name, scratch)
    else:
        folder = run_pathology(PATHOLOGIES[name], scratch)
    return keep(folder, name)


def keep(folder: Path, name: str) -> Path:
    """Copy a run folder to the sample `name`, without what analysis does not read."""
    target = HERE / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(folder, target,
                    ignore=shutil.ignore_patterns("telemetry", "analysis.json", "report.html"))
    for path in (target / "raw").iterdir():
        if path.name not in KEEP_RAW:
            path.unlink() if path.is_file() else shutil.rmtree(path)
    for file_name, script in SCRIPT_FILES.get(name, {}).items():  # its scenario.toml's
        (target / file_name).write_text(script)
    return target


def main() -> None:
    names = sys.argv[1:] or [*PATHOLOGIES, *BUILTIN_RUNS, *DURABILITY_RUNS, *SCENARIO_RUNS]
    with tempfile.TemporaryDirectory(prefix="pglab-samples-") as scratch:
        for name in names:
            target = record(name, Path(scratch))
            size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
            print(f"{name}: {target} ({size / 1024:.0f} kB)")


if __name__ == "__main__":
    main()
