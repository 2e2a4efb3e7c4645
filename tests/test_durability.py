"""The durability lab with real parts: power losses on honest and lying emulated devices
under load, and a damaged page found by the integrity check."""

from __future__ import annotations

import contextlib
import datetime as dt
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
from pglab.durability.ledger import Ledger
from pglab.durability.verdicts import verify
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


# The built-ins at scale 1, with cuts as fast as they can come: each waits until the
# previous one is verified and the load has run again for 1 s (a cycle of 3-5 s here).
SHORT = ("workload.scale=1", "workload.warmup=1s")


def _builtin_cuts(tmp_path: Path, name: str, wanted: int, *sets: str
                  ) -> tuple[list[dict[str, Any]], list[tuple[Path, str]]]:
    """`wanted` power losses of built-in `name`, each with its own verdict: the cut
    verdicts in order, and every run (folder, stdout). A run whose load ended before all
    its cuts fired (a slow machine), or whose server did not come back, is followed by
    one for the rest."""
    verdicts: list[dict[str, Any]] = []
    runs: list[tuple[Path, str]] = []
    for attempt in range(3):
        left = wanted - len(verdicts)
        if left <= 0:
            break
        repeat = f', repeat={left}, every="3s"' if left > 1 else ""
        faults = f'faults=[{{at="2s", action="power-loss"{repeat}}}]'
        duration = f"workload.duration={round(4.5 * left)}s"  # 10 cuts: 45 s
        args = [a for item in (*SHORT, *sets, duration, faults) for a in ("--set", item)]
        results = tmp_path / f"r{attempt}"
        result = run_cli("run", name, "--results", str(results), *args, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
        (run,) = [p for p in (results / name).iterdir() if p.is_dir()]
        runs.append((run, result.stdout))
        cuts = _durability(_manifest(run))["cuts"]
        assert all(c["cuts_covered"] == 1 for c in cuts), cuts  # each verdict its own cut
        verdicts += cuts
    return verdicts[:wanted], runs


@pytest.mark.live
@root
def test_honest_device_ten_power_losses_lose_nothing(storage_packages: None,
                                                     tmp_path: Path) -> None:
    verdicts, runs = _builtin_cuts(tmp_path, "power-loss-honest", 10)
    assert len(verdicts) == 10, [v.get("start_error") for v in verdicts]
    for verdict in verdicts:  # every cut's own verdict: nothing lost, nothing damaged
        _clean(verdict)
        assert verdict["commits"]["newly_lost"] == verdict["commits"]["lost"] == 0, verdict
        assert verdict["lost_bytes"] == 0  # an honest device holds nothing back
    for run, stdout in runs:
        manifest = _manifest(run)
        record = _durability(manifest)
        _clean(record["final"])
        assert record["final"]["commits"]["lost"] == 0
        assert record["final"]["commits"]["acknowledged"] > 1000
        cuts = len(record["cuts"])
        noun = "power losses" if cuts > 1 else "power loss"
        assert f"{cuts} {noun}: 0 acknowledged commits lost, integrity clean" in stdout
        assert stdout.index(noun) < stdout.index("TPS")  # printed first
        # the load lived through the cuts: pgbench again after each (unless too little of
        # the run was left), and each outage is in the series as seconds without
        # transactions between seconds with some
        # (the manifest lists segments only when there are two or more)
        assert cuts <= len(manifest.workload.get("segments") or [1]) <= cuts + 1
        series = pl.read_parquet(run / "client.parquet").filter(
            pl.col("job").is_null() & ~pl.col("warmup")).sort("t")["tps"].to_list()
        first_zero = series.index(0)
        assert any(tps > 0 for tps in series[first_zero:]), series
        assert processes_under(run) == []


def _detected(verdict: dict[str, Any]) -> bool:
    """The cut's own verdict found loss or damage (or a server that cannot recover)."""
    if not verdict["server_up"]:
        return True
    return bool(verdict["commits"]["newly_lost"] or not verdict["amcheck"]["clean"]
                or not verdict["tpcb"]["holds"] or "error" in verdict)


# cpu_exclusive: each cut falls after 1 s of load, and the cache holds that second's
# writes only if the load wrote in it. At a low CPU weight beside a favoured run, two of
# ten cuts can find 0 bytes in the cache.
@pytest.mark.cpu_exclusive
@root
def test_lying_cache_loss_found_at_nine_of_ten_cuts(storage_packages: None,
                                                    tmp_path: Path) -> None:
    # volatile-ignores-flush asked to keep every write for 1 s (destage) whatever the
    # flushes say, and no cut comes before the load has run for 1 s: the WAL of
    # acknowledged commits is certainly in the cache at every cut (the default 100 ms
    # holds the last moment's, which a load starved of CPU may not have written)
    verdicts, runs = _builtin_cuts(tmp_path, "power-loss-lying-cache", 10,
                                   "storage.device.destage=1s")
    assert len(verdicts) == 10
    assert all(v["lost_bytes"] > 0 for v in verdicts), [v["lost_bytes"] for v in verdicts]
    found = [_detected(v) for v in verdicts]
    assert sum(found) >= 9, [v.get("commits") for v in verdicts]
    for run, stdout in runs:
        record = _durability(_manifest(run))
        final = record["final"]
        if not final["server_up"]:
            continue  # a cut left a server that cannot recover: nothing more to count
        # the cuts' own losses add up to the run's, and none of it is allowed
        assert sum(c["commits"]["newly_lost"] for c in record["cuts"]) == \
            final["commits"]["lost"] > 0
        assert not final["commits"]["allowed"]
        for cut in record["cuts"]:
            if cut["commits"]["newly_lost"]:  # acknowledged in the moments before its cut
                window = cut["commits"]["newly_lost_window_s"]
                assert 0 <= window[0] <= window[1] < 3, window
        cuts = len(record["cuts"])
        noun = "power losses" if cuts > 1 else "power loss"
        assert f"{cuts} {noun}: {final['commits']['lost']:,} acknowledged commits lost" in stdout


NO_BARRIERS = """[storage]
filesystem = "ext4"
size = "256MB"
options = { barrier = false }
device = { cache = "volatile" }
[workload]
scale = 1
clients = 4
duration = "4s"
warmup = "1s"
[[faults]]
at = "2s"
action = "power-loss"
"""
# what can delay the destage beyond its model on a busy 2-core machine: the device
# server's event loop waking late, and the cut's own instant (its epoch is taken before
# the filesystem's shutdown and the device's power loss, a few control round trips)
SCHEDULING_S = 0.1


# cpu_exclusive: the timing of an emulated device, whose write-back loop must wake on time
@pytest.mark.cpu_exclusive
@root
def test_a_mount_without_barriers_loses_only_the_caches_destage_window(
        storage_packages: None, tmp_path: Path) -> None:
    """About 15 s. ext4 without barriers on a volatile cache that honours flushes: no
    flush ever reaches the device, so a power cut drops what the cache holds. The cache
    writes back every write within its destage delay (100 ms, checked every 25 ms), so
    it holds the last moment's writes, not the seconds an unbounded cache held: the
    device's oldest dropped write and the commits the ledger finds lost are within
    1.25 x the delay before the cut. The analysis names the mount, not the device."""
    from pglab.storage.device_server import DEFAULT_CACHE_MB, DEFAULT_DESTAGE_S

    run, stdout = _run(tmp_path, NO_BARRIERS)
    bound = DEFAULT_DESTAGE_S * 1.25
    (cut,) = _durability(_manifest(run))["cuts"]
    assert cut["lost_bytes"] <= DEFAULT_CACHE_MB * 2**20, cut
    assert cut["held_s"] <= bound + SCHEDULING_S, cut
    if cut["commits"]["newly_lost"]:
        window = cut["commits"]["newly_lost_window_s"]
        assert 0 <= window[0] <= window[1] <= bound + SCHEDULING_S, window
    print(f"measured: held {cut['held_s']} s, lost {cut['commits']['newly_lost']} commits "
          f"acknowledged {cut['commits'].get('newly_lost_window_s')} s before the cut; "
          f"model: at most {bound} s")
    analysis = _analysis(run)
    causes = [c["cause"] for c in analysis["durability"]["causes"]]
    assert "no-write-barriers" in causes and "lying-write-cache" not in causes, causes
    (advice,) = [r for r in analysis["recommendations"] if r["rule"] == "barriers-on"]
    assert advice["test"].endswith("--set storage.options.barrier=on"), advice
    assert "flushes dropped (no-write-barriers)" in stdout


# PostgreSQL's wal_sync_method values as Linux carries them out: a call after the write,
# or a write flag (the open_* methods use no O_DIRECT unless debug_io_direct asks)
SYNC_METHODS = {"fsync": (0, os.fsync), "fdatasync": (0, os.fdatasync),
                "open_sync": (os.O_SYNC, None), "open_datasync": (os.O_DSYNC, None)}


@pytest.mark.live
@root
def test_which_flushes_reach_the_device(storage_packages: None, tmp_path: Path) -> None:
    """About 8 s. The ground the flush-dropping layers stand on (analysis/flush_layers.py),
    measured on the emulated device's flush counter: on ext4 with barriers every
    wal_sync_method sends the device a flush, so none is a layer on Linux; mounted
    without barriers none does, whichever method PostgreSQL uses."""
    from pglab.scenario import VolumeSpec
    from pglab.storage.devices import resolve_device
    from pglab.storage.volume import Volume

    for barrier in (True, False):
        spec = VolumeSpec.model_validate({
            "filesystem": "ext4", "size": "64MB", "options": {"barrier": barrier},
            "device": {"cache": "volatile", "destage": "60s"}})
        volume = Volume("primary", "data", spec, tmp_path / f"node-{barrier}", True,
                        resolve_device(spec.device), f"pglab-test-{barrier}")
        try:
            mount = volume.create()
            volume.apply_limits()
            assert volume.emulator is not None
            sent = {}
            for method, (flag, call) in SYNC_METHODS.items():
                before = volume.emulator.stats()["counters"]["flushes"]
                fd = os.open(mount / method, os.O_RDWR | os.O_CREAT | flag, 0o600)
                try:
                    for block in range(4):  # a new block, then overwrites, as WAL pages
                        os.pwrite(fd, os.urandom(4096), block * 4096 if block < 2 else 0)
                        if call is not None:
                            call(fd)
                finally:
                    os.close(fd)
                sent[method] = volume.emulator.stats()["counters"]["flushes"] - before
            print(f"barrier {'on' if barrier else 'off'}: device flushes per 4 syncs {sent}")
            if barrier:
                assert all(n >= 4 for n in sent.values()), sent  # one or more per sync
            else:
                assert all(n == 0 for n in sent.values()), sent
        finally:
            volume.remove()


def _short_builtin(tmp_path: Path, name: str, *sets: str) -> tuple[Path, str]:
    args = [a for item in ("workload.scale=1", "workload.warmup=1s", *sets)
            for a in ("--set", item)]
    result = run_cli("run", name, "--results", str(tmp_path / "r"), *args, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    (run,) = [p for p in (tmp_path / "r" / name).iterdir() if p.is_dir()]
    return run, result.stdout


def _analysis(run: Path) -> dict[str, Any]:
    analysis: dict[str, Any] = json.loads((run / "analysis.json").read_text())
    return analysis


# disk: its emulated device's image on the host's disk, as a user's would be. In RAM its
# flushes cost nothing, the load committed 5,000 a second, and beside the suite at a low
# CPU weight the WAL writer fell 1.35 s behind, past the bound checked here.
@pytest.mark.disk
@root
def test_async_commit_loses_a_bounded_allowed_few(storage_packages: None,
                                                  tmp_path: Path) -> None:
    run, stdout = _short_builtin(tmp_path, "power-loss-async-commit", "workload.duration=6s",
                                 'faults=[{at="3s", action="power-loss"}]')
    record = _durability(_manifest(run))
    (cut,) = record["cuts"]
    commits = cut["commits"]
    # commits acknowledged before the WAL writer flushed them: lost, and allowed
    assert commits["allowed"] and commits["newly_lost"] > 0, commits
    # within what PostgreSQL documents for it: 3 x wal_writer_delay (200 ms)
    assert commits["newly_lost_window_s"][1] <= 0.6, commits
    for verdict in (cut, record["final"]):  # and nothing else: no damage
        _clean(verdict)
    section = _analysis(run)["durability"]
    assert section["verdict"] == "allowed-loss" and not section["failed"]
    assert section["lost_commits"] == 0
    assert section["allowed_lost_commits"] == record["final"]["commits"]["lost"]
    assert "(allowed by synchronous_commit = off)" in stdout


@pytest.mark.live
@root
def test_fsync_off_loses_acknowledged_commits(storage_packages: None,
                                              tmp_path: Path) -> None:
    run, _ = _short_builtin(tmp_path, "power-loss-fsync-off", "workload.duration=6s",
                            'faults=[{at="3s", action="power-loss"}]')
    (cut,) = _durability(_manifest(run))["cuts"]
    if cut["server_up"]:  # the kernel wrote back little of 4 s: commits are gone
        assert cut["commits"]["newly_lost"] > 0 and not cut["commits"]["allowed"], cut
    analysis = _analysis(run)
    section = analysis["durability"]
    assert section["failed"] and section["verdict"] in ("data-loss", "corruption",
                                                        "server-lost"), section
    (cause,) = section["causes"][:1]
    assert cause["cause"] == "data-loss"
    assert any("fsync = off" in line for line in cause["evidence"]), cause
    assert analysis["recommendations"][0]["rule"] == "fsync-on"


# cpu_exclusive: a crash on the host's storage (no volume, no root) whose load must restart
# in time and whose outage must be the run's largest stall. At a low CPU weight beside a
# favoured run, the integrity check can take 8 s (amcheck 7.2 s) and leave no time for the
# second segment, or the second segment dip for 7 s, more than the outage.
@pytest.mark.cpu_exclusive
def test_crash_under_load_outage_recovery_and_verdict(tmp_path: Path) -> None:
    # 2 s down, then the processes' death, crash recovery and the integrity check (each
    # up to ~2 s on a busy machine) before the load restarts: 15 s leave it time to run
    run, stdout = _short_builtin(tmp_path, "crash-under-load", "workload.duration=15s",
                                 'faults=[{at="3s", action="crash", duration="2s"}]')
    manifest = _manifest(run)
    (attrs,) = _fault_attrs(manifest)
    assert attrs["recovered"] and attrs["recovery_s"] > 0
    assert attrs["downtime_s"] >= 2  # held down 2 s, then recovery
    (cut,) = _durability(manifest)["cuts"]
    _clean(cut)
    assert cut["commits"]["newly_lost"] == 0  # a process crash: the kernel kept it all
    assert len(manifest.workload["segments"]) == 2
    # the series: seconds with load, the outage at zero, then the load again
    series = pl.read_parquet(run / "client.parquet").filter(
        pl.col("job").is_null() & ~pl.col("warmup")).sort("t")["tps"].to_list()
    zero = series.index(0)
    assert series[zero + 1] == 0 and any(t > 0 for t in series[:zero]), series
    assert any(t > 0 for t in series[zero + 2:]), series
    analysis = _analysis(run)
    assert analysis["summary"]["verdict"]["cause"] == "server-crash"
    named = [s["causes"][0] for s in analysis["stalls"]
             if s["causes"] and s["causes"][0]["cause"] == "server-crash"]
    assert named, analysis["stalls"]
    # (with how long the killed processes took to exit, when that was a second or more)
    assert any(f"down {attrs['downtime_s']} s" in line
               and f"crash recovery {attrs['recovery_s']} s, then the load restarted" in line
               for line in named[0]["evidence"]), named
    assert "1 crash: 0 acknowledged commits lost, integrity clean" in stdout


@pytest.mark.live
def test_crash_without_a_restart_says_the_clients_died(tmp_path: Path) -> None:
    # down until the load's end: no time is left to start pgbench again
    run, _ = _short_builtin(tmp_path, "crash-under-load", "workload.duration=4s",
                            'faults=[{at="2s", action="crash", duration="2s"}]')
    assert "segments" not in _manifest(run).workload  # one pgbench, never restarted
    analysis = _analysis(run)
    # a crash keeps every acknowledged commit: anything else is a finding to read in full
    assert analysis["summary"]["verdict"]["cause"] == "server-crash", (
        analysis["summary"]["verdict"], analysis.get("durability"),
        _manifest(run).durability)
    evidence = [line for s in analysis["stalls"] for c in s["causes"]
                if c["cause"] == "server-crash" for line in c["evidence"]]
    assert any("the load was not restarted: its clients died" in line
               for line in evidence), evidence


# 14 s: after the crash (3 s in), the exit wait, recovery and the verdict take up to 8 s on
# a busy machine, and the load must have seconds left to run again (a 10 s run can have 1)
CRASH_ON_A_PAUSED_DISK = """[workload]
scale = 1
clients = 4
duration = "14s"
warmup = "1s"
[storage]
filesystem = "ext4"
size = "512MB"
device = { write_mbps = 200 }
[[faults]]
at = "2s"
action = "pause-disk"
duration = "3s"
[[faults]]
at = "3s"
action = "crash"
duration = "1s"
"""


# cpu_exclusive: the pause's end is pglab's timeline thread waking on time. At a low CPU
# weight beside a favoured run, a 3 s pause can end after 5.2 s.
@pytest.mark.cpu_exclusive
@root
def test_a_crash_on_a_paused_disk_waits_for_its_processes(storage_packages: None,
                                                          tmp_path: Path) -> None:
    """Backends killed while in a paused device's I/O exit only when the pause ends:
    the pause still ends on time (faults do not wait on each other; the timeline once
    ran them in one thread, and a crash stuck in its kill held the pause's end back
    until the run gave up minutes later), and the restart waits for the old processes
    rather than failing on their shared memory."""
    run, _ = _run(tmp_path, CRASH_ON_A_PAUSED_DISK)
    manifest = _manifest(run)
    pause_event, _ = sorted(manifest.faults or [], key=lambda f: str(f["t_start"]))
    pause, crash = sorted(_fault_attrs(manifest), key=lambda a: a["at_s"])
    assert pause["action"] == "pause-disk" and "ended_by" not in pause, pause
    held = (dt.datetime.fromisoformat(str(pause_event["t_end"]))
            - dt.datetime.fromisoformat(str(pause_event["t_start"]))).total_seconds()
    assert held < 4, held  # 3 s, not until the crash's kill gave up waiting
    assert crash["recovered"], crash
    # killed 1 s into the 3 s pause: its processes exit once the pause ends and the I/O
    # queued behind it completes (2 s and more on a busy machine); the restart after
    assert crash["exit_wait_s"] >= 1 and crash["downtime_s"] >= crash["exit_wait_s"], crash
    (cut,) = _durability(manifest)["cuts"]
    _clean(cut)
    assert cut["commits"]["newly_lost"] == 0
    assert len(manifest.workload["segments"]) == 2  # the load ran again after it


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
def test_power_loss_refused_before_the_run(tmp_path: Path, body: str, message: str,
                                          storage_packages: None) -> None:
    """The filesystems' tools are there (validate checks mkfs first), so that what is
    refused is the fault."""
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


def _recovering(parent: int, timeout: float = 240) -> None:
    """Until the node's startup process replays WAL after the cut (pglab's tree)."""
    _pgbench_gone_after_start(parent, timeout)  # the cut, not the node's first start
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            procs = psutil.Process(parent).children(True)
        except psutil.NoSuchProcess:
            break
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                if "startup" in " ".join(proc.cmdline()) and proc.name() == "postgres":
                    return
        time.sleep(0.02)
    raise AssertionError("no recovery was seen")


# "cut": the device is off and the filesystem shut down for 20 s, the signal lands there;
# "recovery": a 2 MB/s device makes the restart's journal replay and end-of-recovery
# checkpoint take seconds (2.7 s here), and the signal lands in WAL replay
PHASES = {"cut": ('device = { cache = "volatile" }', 'duration = "20s"',
                  _pgbench_gone_after_start),
          "recovery": ("device = { write_mbps = 2 }", "", _recovering)}


# pglab's own cleanup (SIGINT) in each phase; the next pglab's reaper after a kill -9 in the
# cut (the device off, its filesystem shut down). A kill -9 in recovery leaves what one
# under load leaves (a mounted emulated device, a postmaster's tree):
# test_storage.py's signals "under load" prove that reaped.
@pytest.mark.parametrize(("sig", "phase"), [
    (signal.SIGINT, "cut"), (signal.SIGKILL, "cut"), (signal.SIGINT, "recovery")])
@pytest.mark.live
@root
def test_signal_during_a_cut_or_recovery_leaves_nothing(
        storage_packages: None, pglab_home: Path, tmp_path: Path, sig: signal.Signals,
        phase: str) -> None:
    device, down, wait = PHASES[phase]
    scenario = write_scenario(tmp_path, f"""
[storage]
filesystem = "xfs"
{device}
[workload]
scale = 1
clients = 2
duration = "30s"
warmup = "1s"
[[faults]]
at = "2s"
action = "power-loss"
{down}
""", "cut")
    proc = subprocess.Popen([sys.executable, "-m", "pglab", "run", str(scenario),
                             "--results", str(tmp_path / "r")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait(proc.pid)
        if phase == "cut":
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
