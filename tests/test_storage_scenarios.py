"""The built-in storage scenarios, run for real (shortened), each showing its signal
from the recorded data alone (as tests/test_builtin_scenarios.py does for the rest).
zfs-recordsize, whose signal is the options read back, is read on its committed samples
(test_compare_samples.py) and tuned live in test_tune_builtins.py."""

from __future__ import annotations

import datetime as dt
import json
import os
import statistics
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from test_builtin_scenarios import (
    _low_seconds_with,
    _run,
    inside,
    low_times,
    measured_tps,
    top_cause,
    wait_shares,
)

pytestmark = [pytest.mark.root, pytest.mark.live, pytest.mark.usefixtures("storage_packages"),
              pytest.mark.skipif(os.geteuid() != 0, reason="storage volumes need root")]


# The timing checks here are cpu_exclusive or cpu_light, not exclusive: the limited side
# of each run is an emulated device, which holds its limits and latency for every byte
# that reaches it, whoever writes it back, and whose flush never waits for the host's disk
# (storage/device_server.py). The other tests' writes do not change what it measures, as
# they would a cgroup v1 blkio limit; their CPU would, and such a test has it first. The
# runs that mostly wait on their slow device are cpu_light (their processes used 0.29 to
# 0.45 of a CPU over the run); wal-on-own-volume's fast side is CPU-bound.


@pytest.mark.cpu_light  # a timing signal of an emulated device (above)
def test_wal_segment_init_stall_coincides_with_walinit_waits(tmp_path: Path) -> None:
    # Left alone, the shortened run needs some 20 s to fill its first segments; a WAL
    # switch makes the next commit need a new one at once. The built-in's ext4 volume
    # throttles the zero-fill at 8 MB/s however the other tests write.
    (run,) = _run(tmp_path, "wal-segment-init-stall", "workload.duration=12s",
                  "workload.warmup=2s", 'faults=[{at="3s", action="switch-wal"}, '
                  '{at="8s", action="switch-wal"}]')
    beside = _low_seconds_with(run, "IO:WalInit")
    print("wal-segment-init-stall: low seconds", len(low_times(run)), "beside WalInit waits",
          len(beside))
    # each WAL switch makes the next commits wait for a new segment: a low second each
    assert len(beside) >= 2, beside
    assert top_cause(run) == "wal-segment-init"


def _manifest(run: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((run / "manifest.json").read_text())
    return manifest


def _volume(run: Path, node: str = "primary", role: str = "data") -> dict[str, Any]:
    volumes = _manifest(run)["nodes"][node]["storage"]
    found: dict[str, Any] = next(v for v in volumes if v["role"] == role)
    return found


@pytest.mark.cpu_light  # a timing signal of emulated devices (above)
def test_wal_init_zero_on_and_off(storage_packages: None, tmp_path: Path) -> None:
    # Two of the four points (XFS; the filesystem axis is the same code path), with WAL
    # switches so that the shortened run needs new segments at once: the first as the
    # measured seconds begin. A first switch at 2 s leaves two seconds on the segments that
    # already exist, the same ~4,000 TPS either way; they made 89% of the zero-filling
    # run's transactions in one such run, and its mean TPS 1.3 times below the other's
    # where the seconds after the switch were 5.9 times below.
    runs = _run(tmp_path, "wal-init-ext4-vs-xfs", "workload.duration=10s",
                "workload.warmup=2s", "storage.filesystem=xfs",
                'matrix={"server.settings.wal_init_zero" = ["on", "off"]}',
                'faults=[{at="0s", action="switch-wal"}, {at="4s", action="switch-wal"}]')
    by_zero = {_manifest(r)["variant"]["server.settings.wal_init_zero"]: r for r in runs}
    for run in runs:
        assert _volume(run)["filesystem"] == "xfs"
        assert _volume(run)["device"]["write_mbps"] == 8
    # Two runs alone on the machine measured 60 and 61 samples of backends in IO:WalInit*
    # with zero-filling on and none with it off, and 398 and 291 against 2,296 and 2,146 TPS.
    init = {zero: _wal_init_samples(run) for zero, run in by_zero.items()}
    assert init["on"] >= 15, init  # backends waited while new segments were zero-filled
    assert init["off"] <= init["on"] / 4, init
    tps = {zero: statistics.fmean(measured_tps(run).to_list()) for zero, run in by_zero.items()}
    assert tps["off"] > 1.5 * tps["on"], tps


def _wal_init_samples(run: Path) -> float:
    import polars as pl

    waits = pl.read_parquet(run / "timeseries.parquet").filter(
        (pl.col("source") == "db.waits") & (pl.col("node") == "primary")
        & pl.col("metric").str.starts_with("IO:WalInit"))
    return float(waits["value"].sum())


@pytest.mark.cpu_exclusive  # a timing signal of emulated devices (above)
def test_wal_on_its_own_fast_volume_wins(storage_packages: None, tmp_path: Path) -> None:
    # 4 s: every second of each run is alike (a run alone measured 246 TPS, seconds 235 to
    # 249, against 1,931, seconds 1,875 to 2,145: 7.8 times)
    runs = _run(tmp_path, "wal-on-own-volume", "workload.duration=4s", "workload.warmup=1s")
    tps = {_volume(r, role="wal")["device"]["latency_ms"]:
           statistics.fmean(measured_tps(r).to_list()) for r in runs}
    assert set(tps) == {3.0, 0.0}
    # every commit waits for its WAL flush: 3 ms (plus the data volume's) against none
    assert tps[0.0] > 1.5 * tps[3.0], tps


@pytest.mark.cpu_light  # a timing signal of emulated devices (above)
def test_standby_slow_volume_makes_commits_wait_on_syncrep(storage_packages: None,
                                                           tmp_path: Path) -> None:
    (run,) = _run(tmp_path, "standby-slow-volume", "workload.duration=15s",
                  "workload.warmup=2s",
                  'faults=[{at="5s", action="bulk-update", args={rows=50000}}]')
    faults = pl.read_parquet(run / "events.parquet").filter(pl.col("kind") == "fault")
    update = faults["t_start"][0]
    window = (update, update + dt.timedelta(seconds=10))
    after = (update - dt.timedelta(seconds=1), update + dt.timedelta(seconds=60))
    low = low_times(run)
    print("standby-slow-volume: low seconds", len(low), "after the bulk update",
          inside(low, [after]), "in its first 10 s", inside(low, [window]))
    # the bulk update's WAL reaches the standby faster than its 6 MB/s device writes it:
    # commits wait (8 of 9 low seconds in its first 10 s when this was written) until the
    # standby has written it, and what follows it (a vacuum of the rows it updated): the
    # low seconds come after it, as sync-standby-slow-disk's do. Beside the suite: 8 in the
    # first 10 s, 2 more 3 s later, and the second before it (the primary's volume is a
    # plain loop device on the host's disk, which the other tests share).
    assert inside(low, [window]) >= 5 and inside(low, [after]) >= 0.8 * len(low), low
    shares = wait_shares(run, start=window[0], end=window[1])
    assert max(shares, key=lambda k: shares[k]) == "IPC:SyncRep", shares
    assert _volume(run, node="standby1")["device"]["write_mbps"] == 6
    analysis = json.loads((run / "analysis.json").read_text())
    worst = max(analysis["stalls"], key=lambda s: s["deficit_transactions"])
    top = worst["causes"][0]
    # a standby that answers, slowly: not the advice for one that stopped answering
    assert (top["cause"], top.get("sub_cause")) == ("sync-replication", "standby-slow-disk")
