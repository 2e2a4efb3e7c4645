"""A real pathology injected into a real run, and the analysis of a killed run.

The pathologies are what tests/samples/runs/make_runs.py records as committed samples
(tests/test_analysis.py checks their analysis in detail; the built-in scenarios' tests
check the verdict of live runs of theirs). Each one is a scenario plus, optionally, an
action done on a side connection while pgbench runs (the runner API does not know about
it: the side thread finds the run's server through its lab directory, as any DBA would
find a server by its pid file). Here one of them, a table locked for 5 s in the middle
of the load, is injected live and must be found where it happened.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import run_cli, write_scenario
from pglab.lab.local import BENCH_DB, SUPERUSER
from pglab.paths import labs_dir
from pglab.results.analysis_doc import deficit
from pglab.runner import QuietUI, RunOptions, run_scenario
from pglab.scenario import load_text
from pglab.workload.pgbench_output import ProgressLine

pytestmark = pytest.mark.live  # real runs, real pathologies

SideAction = Callable[[psycopg.Connection[Any], Path], None]  # connection, lab dir


@dataclass(frozen=True)
class Pathology:
    name: str
    scenario: str  # TOML body after `name = ...`
    # the run's top cause (summary.verdict: first in the stalls with the largest deficit, or,
    # without a stall, what held the whole run back); None: a healthy run
    cause: str | None
    action: SideAction | None = None
    action_at_s: float = 0.0  # seconds after the load started (warmup included)


def _lock_accounts(conn: psycopg.Connection[Any], lab: Path) -> None:
    with conn.transaction():
        conn.execute("LOCK TABLE pgbench_accounts IN ACCESS EXCLUSIVE MODE")
        time.sleep(5)


def _switch_wal_twice(conn: psycopg.Connection[Any], lab: Path) -> None:
    # Like archive_timeout: each switch makes the next WAL write need a new segment, which
    # (wal_recycle off, wal_init_zero on) is zero-filled and fsynced while commits wait.
    conn.execute("SELECT pg_switch_wal()")
    time.sleep(7)
    conn.execute("SELECT pg_switch_wal()")


def _checkpoint(conn: psycopg.Connection[Any], lab: Path) -> None:
    conn.execute("CHECKPOINT")


def _foreign_writeback(conn: psycopg.Connection[Any], lab: Path) -> None:
    # Another program on the same disk writes 768 MB into the page cache and fsyncs it:
    # the flush queues the server's WAL fsyncs behind it.
    ballast = lab.parent / f"{lab.name}.ballast"
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={ballast}", "bs=1M", "count=768",
                        "conv=fsync"], check=True, capture_output=True)
    finally:
        ballast.unlink(missing_ok=True)


def _idle_holder(conn: psycopg.Connection[Any], lab: Path) -> None:
    # A session outside the load (a DBA's psql, a forgotten one) updates a branch row and
    # then sits idle in its transaction: every pgbench transaction that picks that branch
    # queues behind it until it ends.
    conn.execute("SET application_name = 'psql'")
    with conn.transaction():
        conn.execute("UPDATE pgbench_branches SET bbalance = bbalance WHERE bid = 1")
        time.sleep(8)


PATHOLOGIES = {
    p.name: p for p in [
        Pathology("lock", """
[server.settings]
deadlock_timeout = "200ms"
[workload]
scale = 5
mix = ["tpcb-like"]
clients = 4
jobs = 2
duration = "14s"
warmup = "3s"
""", "lock-contention", _lock_accounts, 8.0),
        Pathology("walinit", """
[server]
initdb = { wal_segsize_mb = 512 }
[server.settings]
wal_init_zero = "on"
wal_recycle = "off"
[workload]
scale = 5
mix = ["tpcb-like"]
clients = 4
jobs = 2
duration = "20s"
warmup = "4s"
""", "wal-segment-init", _switch_wal_twice, 9.0),
        Pathology("checkpoint", """
[server.settings]
# Dirty pages pile up in shared buffers (no checkpoint, no bgwriter cleaning), and the
# forced checkpoint leaves them to the kernel at once (no flush-after hints), so its
# sync phase floods the disk while commits wait for their WAL fsyncs.
shared_buffers = "2GB"
max_wal_size = "8GB"
checkpoint_timeout = "1h"
checkpoint_flush_after = 0
bgwriter_lru_maxpages = 0
[workload]
scale = 30
mix = ["tpcb-like"]
clients = 4
jobs = 2
duration = "20s"
warmup = "30s"
""", "checkpoint-io", _checkpoint, 36.0),
        Pathology("writeback", """
[workload]
scale = 5
mix = ["tpcb-like"]
clients = 4
jobs = 2
duration = "20s"
warmup = "4s"
""", "memory-reclaim", _foreign_writeback, 12.0),
        Pathology("hot-row", """
[server.settings]
deadlock_timeout = "100ms"
[workload]
# every transaction updates the one branch row: a queue on row locks, no stall
scale = 1
mix = ["tpcb-like"]
clients = 16
jobs = 2
duration = "10s"
warmup = "2s"
""", "lock-contention"),
        Pathology("long-holder", """
[server.settings]
deadlock_timeout = "200ms"
[workload]
# 5 branches: the clients spread over them until one is held by the idle session
scale = 5
mix = ["tpcb-like"]
clients = 8
jobs = 2
duration = "16s"
warmup = "2s"
""", "lock-contention", _idle_holder, 6.0),
        Pathology("churn", """
[server.settings]
max_connections = 120
[workload]
# a new connection per transaction (pgbench -C), no pool
scale = 5
mix = ["select-only"]
reconnect = true
clients = 50
jobs = 2
duration = "10s"
warmup = "2s"
""", "too-many-connections"),
        Pathology("control", """
[workload]
scale = 5
mix = ["select-only"]
clients = 2
jobs = 2
duration = "10s"
warmup = "2s"
""", None),
        Pathology("control-4clients", """
[workload]
scale = 10
mix = ["select-only"]
clients = 4
jobs = 2
duration = "15s"
warmup = "3s"
""", None),
    ]
}


def _my_lab() -> tuple[psycopg.Connection[Any], Path]:
    """The server of the run this process is running (its lab's owner.json names us)."""

    for lab in sorted(labs_dir().iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            owner = json.loads((lab / "owner.json").read_text())
            lines = (lab / "primary" / "data" / "postmaster.pid").read_text().splitlines()
        except (OSError, ValueError):
            continue
        if owner.get("pid") == os.getpid() and len(lines) >= 5:
            return psycopg.connect(host=lines[4], port=int(lines[3]), user=SUPERUSER,
                                   dbname=BENCH_DB, autocommit=True, connect_timeout=10), lab
    raise RuntimeError("no running lab of this process")


class _SideActionUI(QuietUI):
    """Starts the pathology's side action when the load starts."""

    def __init__(self, pathology: Pathology) -> None:
        self.pathology = pathology
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def load_started(self, total_s: int, label: str) -> None:
        action = self.pathology.action
        if action is None:
            return

        def act() -> None:
            try:
                time.sleep(self.pathology.action_at_s)
                conn, lab = _my_lab()
                with conn:
                    action(conn, lab)
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=act, daemon=True)
        self.thread.start()

    def progress(self, line: ProgressLine) -> None:
        pass


def run_pathology(pathology: Pathology, results_root: Path) -> Path:
    """One real run of the pathology; the run folder."""
    loaded = load_text(f'name = "{pathology.name}"\n' + pathology.scenario,
                       f"pathology {pathology.name}")
    ui = _SideActionUI(pathology)
    runs = run_scenario(loaded, RunOptions(results_root), ui)
    if ui.thread is not None:
        ui.thread.join(timeout=30)
    if ui.error is not None:
        raise RuntimeError(f"side action failed: {ui.error}") from ui.error
    assert len(runs) == 1 and runs[0].status == "completed", runs
    return runs[0].path


def test_live_killed_run_gives_a_partial_analysis(tmp_path: Path) -> None:
    """kill -9 of pglab in the middle of the load: the folder has a manifest saying
    running, the incremental telemetry and no client series. `pglab analyze` says so."""
    scenario = write_scenario(tmp_path, PATHOLOGIES["control"].scenario, name="killed")
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pglab", "run", str(scenario),
                             "--results", str(tmp_path / "results")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    samples: list[Path] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        samples = list((tmp_path / "results").glob("killed/*/telemetry/samples.csv"))
        if samples and samples[0].stat().st_size > 50_000:
            break
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    assert samples, "the run never reached its load"
    folder = samples[0].parent.parent
    result = run_cli("analyze", str(folder), "--json")
    assert result.returncode == 0, result.stderr
    analysis = json.loads(result.stdout)
    assert analysis["status"] == "interrupted" and analysis["partial"] is True
    missing = " ".join(analysis["missing"])
    assert "run interrupted" in missing and "client.parquet missing" in missing
    assert "telemetry/samples.csv" in missing


def test_live_lock_is_found_where_it_was_held(tmp_path: Path) -> None:
    pathology = PATHOLOGIES["lock"]
    run = run_pathology(pathology, tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    started = dt.datetime.fromisoformat(manifest["workload"]["started_at"].replace(
        "Z", "+00:00"))
    held = (started + dt.timedelta(seconds=pathology.action_at_s),
            started + dt.timedelta(seconds=pathology.action_at_s + 5))
    analysis = json.loads((run / "analysis.json").read_text())
    assert analysis["summary"]["verdict"]["cause"] == pathology.cause
    # the stall that lost the most is the lock's: it overlaps the seconds it was held
    stall = max(analysis["stalls"], key=lambda s: deficit(s) or 0)
    window = [dt.datetime.fromisoformat(stall[k].replace("Z", "+00:00"))
              for k in ("start", "end")]
    assert window[0] < held[1] and window[1] > held[0], (window, held)
    assert stall["causes"][0]["cause"] == "lock-contention"
