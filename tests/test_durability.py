"""The durability lab with real parts: power losses on honest and lying emulated devices
under load, and a damaged page found by the integrity check (issue 13)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import psutil
import pytest

from conftest import processes_under, run_cli, write_scenario
from pglab.durability import Ledger, verify
from pglab.lab.lab import Lab
from pglab.results.manifest import Manifest, read_manifest
from pglab.scenario import load_text
from test_storage import leftovers

needs_root = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="storage volumes need root")]


def root(test: Any) -> Any:
    for mark in needs_root:
        test = mark(test)
    return test


def _run(tmp_path: Path, body: str) -> tuple[Path, str]:
    scenario = write_scenario(tmp_path, body, "durable")
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    (run,) = [p for p in (tmp_path / "r" / "durable").iterdir() if p.is_dir()]
    return run, result.stdout


def _manifest(run: Path) -> Manifest:
    return read_manifest(run)


def _durability(manifest: Manifest) -> dict[str, Any]:
    assert manifest.durability is not None, "no durability record"
    return manifest.durability


def _fault_attrs(manifest: Manifest) -> list[dict[str, Any]]:
    return [json.loads(f["attrs"]) for f in manifest.faults or []]


def _clean(verdict: dict[str, Any]) -> None:
    assert verdict["server_up"], verdict
    assert verdict["amcheck"]["clean"], verdict["amcheck"]
    assert verdict["tpcb"]["holds"], verdict["tpcb"]


@pytest.mark.live
@root
def test_honest_device_repeated_power_losses_lose_nothing(storage_packages: None,
                                                          tmp_path: Path) -> None:
    # Scale 1 keeps a cut-recover-verify cycle at a few seconds, so each cut's own
    # verdict stands before the next cut (at scale 10 a cycle takes ~15 s here).
    run, stdout = _run(tmp_path, """
[storage]
filesystem = "ext4"
device = { cache = "honest" }
[workload]
scale = 1
clients = 4
jobs = 2
duration = "30s"
warmup = "1s"
[[faults]]
at = "3s"
action = "power-loss"
repeat = 3
every = "9s"
""")
    manifest = _manifest(run)
    record = _durability(manifest)
    attrs = _fault_attrs(manifest)
    assert [a["action"] for a in attrs] == ["power-loss"] * 3
    assert all(a["recovered"] and a["lost_bytes"] == 0 for a in attrs), attrs
    assert record["ledger"]
    assert record["cuts"], record  # at least one cut was verified on its own
    for verdict in [*record["cuts"], record["final"]]:
        _clean(verdict)
        assert verdict["commits"]["lost"] == 0, verdict["commits"]
    assert record["final"]["commits"]["acknowledged"] > 100
    # the load lived through the cuts: pgbench again after each, and the outage is in
    # the series as seconds without transactions
    assert len(manifest.workload["segments"]) >= 2
    assert (run / "raw" / "pgbench-2.stdout").exists()
    series = pl.read_parquet(run / "client.parquet").filter(
        pl.col("job").is_null() & ~pl.col("warmup")).sort("t")["tps"].to_list()
    first_zero = series.index(0)
    assert any(tps > 0 for tps in series[first_zero:]), series  # the outage, then the load
    assert "3 power losses: 0 acknowledged commits lost, integrity clean" in stdout
    assert stdout.index("power losses") < stdout.index("TPS")  # printed first
    assert processes_under(run) == []


@pytest.mark.exclusive  # commits acknowledged in the last second before the cut: timing
@root
def test_lying_cache_loses_acknowledged_commits(storage_packages: None,
                                                tmp_path: Path) -> None:
    # volatile-ignores-flush keeps every write for 1 s (device_server.WRITEBACK_DELAY_S)
    # whatever the flushes say: under load, the WAL of the last second is unflushed at the
    # cut, so commits acknowledged in it are certainly lost.
    run, stdout = _run(tmp_path, """
[storage]
filesystem = "xfs"
device = { cache = "volatile-ignores-flush" }
[workload]
scale = 1
clients = 4
jobs = 2
duration = "8s"
warmup = "1s"
[[faults]]
at = "4s"
action = "power-loss"
""")
    manifest = _manifest(run)
    (attrs,) = _fault_attrs(manifest)
    assert attrs["lost_bytes"] > 0  # the device's cache held data at the cut
    final = _durability(manifest)["final"]
    lost = final["commits"]["lost"]
    assert lost > 0, final
    assert not final["commits"]["allowed"]  # synchronous_commit = on: a real loss
    window = final["commits"]["lost_window_s"]
    assert 0 <= window[0] <= window[1] < 3, window  # the last moments before the cut
    assert f"1 power loss: {lost} acknowledged commits lost" in stdout


DAMAGE = """name = "damage"
[workload]
scale = 1
clients = 1
duration = "2s"
warmup = "0s"
"""


@pytest.mark.live
def test_damaged_page_is_found_naming_the_relation(tmp_path: Path) -> None:
    scenario = load_text(DAMAGE, "damage.toml").scenario
    with Lab(scenario, "damage.toml", f"damage-{time.time_ns()}") as lab:
        server, bins = lab.primary, lab.bins
        assert server is not None and bins is not None
        with server.connect() as conn:
            row = conn.execute("SELECT pg_relation_filepath('pgbench_accounts_pkey')"
                               ).fetchone()
        assert row is not None
        server.stop()
        path = server.data_dir / str(row[0])
        with path.open("r+b") as f:  # block 1, a leaf: its line pointers become garbage
            f.seek(8192 + 24)
            f.write(b"\xff" * 64)
        server.start()
        verdict = verify(server, bins, Ledger(()), None, ("accounts",), [])
    check = verdict["amcheck"]
    assert not check["clean"]
    assert any("pgbench_accounts_pkey" in r for r in check["relations"]), check


@pytest.mark.parametrize(("body", "message"), [
    ('[storage]\nfilesystem = "btrfs"\n[[faults]]\nat = "2s"\naction = "power-loss"\n',
     "faults[0]: 'power-loss' cannot cut storage: filesystem 'btrfs' cannot be shut down"),
    ('[[faults]]\nat = "2s"\naction = "power-loss"\n',
     "the 'power-loss' fault acts on primary's storage volume device, and primary has none"),
    ('[storage]\nfilesystem = "xfs"\n[[faults]]\nat = "2s"\naction = "power-loss"\n'
     'repeat = 3\n', "faults[0]: repeat = 3 needs every"),
    ('[storage]\nfilesystem = "xfs"\n[[faults]]\nat = "2s"\naction = "power-loss"\n'
     'repeat = 3\nevery = "4s"\n', "faults[0]: the last repeat falls at 10s, after the run"),
])
@root
def test_power_loss_refused_before_the_run(tmp_path: Path, body: str, message: str) -> None:
    scenario = write_scenario(tmp_path, '[workload]\nduration = "8s"\n' + body)
    result = run_cli("validate", str(scenario))
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _pgbench_gone_after_start(parent: int, timeout: float = 240) -> None:
    """Until pglab's pgbench has run and ended: the cut killed the load."""
    seen = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            running = any(c.name() == "pgbench" for c in psutil.Process(parent).children(True))
        except psutil.NoSuchProcess:
            return
        if running:
            seen = True
        elif seen:
            return
        time.sleep(0.1)
    raise AssertionError("pgbench never ran and ended")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
@pytest.mark.live
@root
def test_signal_during_a_cut_leaves_nothing(storage_packages: None, pglab_home: Path,
                                            tmp_path: Path, sig: signal.Signals) -> None:
    # The device is off and the filesystem shut down for 20 s: the signal lands there.
    scenario = write_scenario(tmp_path, """
[storage]
filesystem = "xfs"
device = { cache = "volatile" }
[workload]
scale = 1
clients = 2
duration = "30s"
warmup = "1s"
[[faults]]
at = "2s"
action = "power-loss"
duration = "20s"
""", "cut")
    proc = subprocess.Popen([sys.executable, "-m", "pglab", "run", str(scenario),
                             "--results", str(tmp_path / "r")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _pgbench_gone_after_start(proc.pid)
        time.sleep(1)
        proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    (run,) = [p for p in (tmp_path / "r" / "cut").iterdir() if p.is_dir()]
    if sig == signal.SIGINT:
        assert proc.returncode == 128 + sig
        assert _manifest(run).status == "interrupted"
        assert leftovers(pglab_home) == []
    # the next pglab reaps whatever a kill left; the folder reads as interrupted
    after = run_cli("run", str(write_scenario(tmp_path, TINY_RUN, "next")),
                    "--results", str(tmp_path / "r2"))
    assert after.returncode == 0, after.stderr[-2000:]
    assert leftovers(pglab_home) == []
    shown = run_cli("show", str(run))
    assert shown.returncode == 0 and "interrupted" in shown.stdout, shown.stdout


TINY_RUN = """
[storage]
filesystem = "ext4"
[workload]
scale = 1
clients = 1
duration = "1s"
warmup = "0s"
"""
