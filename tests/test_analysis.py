"""Analysis over committed run folders that real runs produced (tests/samples/runs/).

Each sample is a real pglab run with a real pathology injected (see
tests/test_analysis_live.py and tests/samples/runs/make_runs.py), with the big raw files
removed. These tests are pure: no server, a fraction of a second each.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import ROOT, SAMPLES, run_cli
from pglab.analysis.analyze import analyze_run, build_analysis
from pglab.analysis.causes import CAUSE_IDS, CAUSES
from pglab.analysis.evidence import object_names
from pglab.analysis.loading import load_run_frames
from pglab.analysis.recommendations import RULES, Facts, advise, recommend
from pglab.analysis.stalls import detect_stalls
from pglab.events import Event
from pglab.probes.base import ProbeOutput, Sample
from pglab.probes.sink import TelemetrySink
from pglab.results.manifest import Manifest
from pglab.scenario import load

RUNS = SAMPLES / "runs"
DESIGN_CAUSES = ("checkpoint-io", "wal-segment-init", "wal-write", "lock-contention",
                 "plan-change",
                 "sync-replication", "vacuum-io", "memory-reclaim", "cpu-saturation",
                 "too-many-connections", "client-bound", "server-crash", "storage-device",
                 "network", "data-loss", "lying-write-cache", "no-write-barriers",
                 "fsync-off", "zfs-sync-disabled", "unknown")


def _analysis(name: str) -> dict[str, Any]:
    return build_analysis(load_run_frames(RUNS / name)).to_json()


def _worst(analysis: dict[str, Any]) -> dict[str, Any]:
    return max(analysis["stalls"], key=lambda s: s["deficit_transactions"])


def _events(name: str, kind: str) -> pl.DataFrame:
    return pl.read_parquet(RUNS / name / "events.parquet").filter(pl.col("kind") == kind)


def test_samples_are_small_and_complete() -> None:
    for folder in sorted(p for p in RUNS.iterdir() if p.is_dir()):
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        assert size < 300_000, (folder, size)
        for name in ("manifest.json", "client.parquet", "timeseries.parquet",
                     "events.parquet"):
            assert (folder / name).is_file(), (folder, name)


def test_lock_stall_is_found_where_the_lock_was_held_and_blamed_on_it() -> None:
    analysis = _analysis("lock")
    worst = _worst(analysis)
    assert worst["kind"] == "drop-to-zero" and worst["depth"] == 1.0
    # The side connection held ACCESS EXCLUSIVE for 5 s: the server log's lock waits say
    # when. The window is the seconds without completions, so it starts in the second
    # after the waits began (or the same one) and ends within a second of their end.
    waits = _events("lock", "lock-wait").filter(  # not the row-lock waits of pgbench itself
        pl.col("attrs").str.contains('"lock_object": "relation '))
    first, last = waits["t_start"].min(), waits["t_end"].max()
    assert isinstance(first, dt.datetime) and isinstance(last, dt.datetime)
    start = dt.datetime.fromisoformat(worst["start"].replace("Z", "+00:00"))
    end = dt.datetime.fromisoformat(worst["end"].replace("Z", "+00:00"))
    second = dt.timedelta(seconds=1)
    assert start - second <= first < start + second
    assert end - second <= last < end + second
    assert 4 <= worst["seconds"] <= 5
    top = worst["causes"][0]
    assert top["cause"] == "lock-contention" and top["confidence"] >= 0.8
    holder = json.loads(waits["attrs"][0])["holders"][0]
    assert any(f"held by pid {holder}" in line for line in top["evidence"])
    assert any(re.match(r"\d+% of sampled client backends waited on heavyweight locks", line)
               for line in top["evidence"])
    assert "lock-timeout" in [r["rule"] for r in analysis["recommendations"]]


def test_wal_segment_creation_stalls_are_blamed_on_it() -> None:
    analysis = _analysis("walinit")
    # two forced WAL switches with 512 MB segments, zero-filled: two drops to zero
    drops = [s for s in analysis["stalls"] if s["kind"] == "drop-to-zero"]
    assert len(drops) == 2, analysis["stalls"]
    for stall in drops:
        top = stall["causes"][0]
        assert top["cause"] == "wal-segment-init" and top["confidence"] >= 0.7, stall
        assert any("MB written to initialise WAL segments" in line for line in top["evidence"])
    rules = {r["rule"]: r for r in analysis["recommendations"]}
    assert rules["wal-init-zero-off"]["change"] == {"server.settings.wal_init_zero": "off"}
    assert rules["wal-segment-size"]["change"] == {"server.initdb.wal_segsize_mb": 64}
    assert rules["wal-recycle"]["change"] == {"server.settings.wal_recycle": "on"}  # ext4


def test_foreign_writeback_is_blamed_on_the_kernel_flush() -> None:
    analysis = _analysis("writeback")
    top = _worst(analysis)["causes"][0]
    assert top["cause"] == "memory-reclaim", _worst(analysis)
    assert any("the kernel flushing other dirty page cache" in line for line in top["evidence"])
    assert "dirty-background-bytes" in [r["rule"] for r in analysis["recommendations"]]


@pytest.mark.parametrize("name", ["control", "control-4clients"])
def test_healthy_controls_have_no_stall_and_no_advice(name: str) -> None:
    analysis = _analysis(name)
    assert analysis["stalls"] == [], analysis["stalls"]
    assert analysis["summary"]["degraded_pct"] == 0.0
    assert analysis["summary"]["measured_seconds"] >= 10
    assert analysis["recommendations"] == []
    # nothing held them back either: a CPU-bound benchmark is doing its work
    assert analysis["steady_state"]["causes"] == []
    assert analysis["summary"]["verdict"] is None


def test_a_queue_on_one_row_without_a_stall_is_lock_contention() -> None:
    analysis = _analysis("hot-row")
    assert analysis["stalls"] == []  # never stalled: the queue is always there
    verdict = analysis["summary"]["verdict"]
    assert (verdict["cause"], verdict["basis"]) == ("lock-contention", "steady-state")
    (top,) = analysis["steady_state"]["causes"]
    share = re.match(r"(\d+)% of sampled client backends waited on heavyweight locks",
                     top["evidence"][0])
    assert share and int(share[1]) >= 50, top
    assert any("backends blocked on locks on average" in line for line in top["evidence"])
    # one hot row: a lock timeout would only turn the queue into errors
    assert "hot-row" in [r["rule"] for r in analysis["recommendations"]]


def test_a_connection_per_transaction_is_too_many_connections() -> None:
    analysis = _analysis("churn")
    assert analysis["stalls"] == []
    verdict = analysis["summary"]["verdict"]
    assert (verdict["cause"], verdict["basis"]) == ("too-many-connections", "steady-state")
    top = analysis["steady_state"]["causes"][0]
    sessions = re.match(r"(\d+) new sessions per second for (\d+) transactions",
                        top["evidence"][0])
    assert sessions and int(sessions[1]) >= 0.9 * int(sessions[2]), top  # one per transaction
    assert "pgbouncer" in [r["rule"] for r in analysis["recommendations"]]


def test_lock_queue_behind_slow_commits_is_not_its_own_cause() -> None:
    """A lock queue whose head waits on WAL flush is a symptom: the same run with the
    backends that held the locks waiting on WalSync instead of running on CPU."""
    data = load_run_frames(RUNS / "hot-row")
    own = build_analysis(data).steady_causes[0]["confidence"]
    slow = data.timeseries.with_columns(
        pl.when((pl.col("source") == "db.waits") & pl.col("metric").is_in(
            ["CPU", "Client:ClientRead"]))
        .then(pl.lit("IO:WalSync")).otherwise(pl.col("metric")).alias("metric"))
    causes = build_analysis(replace(data, timeseries=slow)).steady_causes
    lock = [c for c in causes if c["cause"] == "lock-contention"]
    assert not lock or lock[0]["confidence"] <= own / 3 + 0.01, causes


def test_a_busy_machine_is_not_the_stall_of_backends_waiting_on_a_standby() -> None:
    """The sync-slow-disk run with the host's CPU saturated in its worst stall (idle 1%,
    CPU pressure 90%), as other tests can keep it: its backends waited on IPC:SyncRep,
    not for the CPU, so cpu-saturation is halved and says why."""
    data = load_run_frames(RUNS / "sync-slow-disk")
    worst = _worst(build_analysis(data).to_json())
    start = dt.datetime.fromisoformat(worst["start"].replace("Z", "+00:00"))
    end = dt.datetime.fromisoformat(worst["end"].replace("Z", "+00:00"))
    inside = pl.col("t").is_between(start, end, closed="left")
    cpu = (pl.col("source") == "os.cpu") & (pl.col("metric") == "idle_pct")
    pressure = ((pl.col("source") == "os.pressure") & (pl.col("metric") == "some_pct")
                & (pl.col("label") == "cpu"))
    busy = data.timeseries.with_columns(
        pl.when(inside & cpu).then(pl.lit(1.0)).when(inside & pressure).then(pl.lit(90.0))
        .otherwise(pl.col("value")).alias("value"))
    causes = _worst(build_analysis(replace(data, timeseries=busy)).to_json())["causes"]
    assert causes[0]["cause"] == "sync-replication", causes
    (saturation,) = [c for c in causes if c["cause"] == "cpu-saturation"]
    # idle 1% and the pressure give it 0.6; halved, as the samples were 63% IPC:SyncRep
    assert saturation["confidence"] <= 0.3, saturation
    assert any(line.startswith("(halved: the backends waited on IPC:SyncRep")
               for line in saturation["evidence"]), saturation


def test_forced_checkpoint_stall_is_blamed_on_the_checkpoint() -> None:
    analysis = _analysis("checkpoint")
    forced = [row for row in _events("checkpoint", "checkpoint").iter_rows(named=True)
              if "force" in json.loads(row["attrs"])["flags"]]
    assert len(forced) == 1
    worst = _worst(analysis)
    start = dt.datetime.fromisoformat(worst["start"].replace("Z", "+00:00"))
    end = dt.datetime.fromisoformat(worst["end"].replace("Z", "+00:00"))
    assert start <= forced[0]["t_end"] and forced[0]["t_start"] < end + dt.timedelta(seconds=1)
    top = worst["causes"][0]
    assert top["cause"] == "checkpoint-io" and top["confidence"] >= 0.5, worst
    assert any("immediate" in line and "buffers" in line for line in top["evidence"])
    assert any(line.startswith("checkpointer wrote") for line in top["evidence"])


def test_a_run_stalled_for_most_of_its_seconds_keeps_its_working_reference() -> None:
    # The shortened dirty-writeback storm: TPS 0 or close for 12 of its 15 s, so its
    # median TPS is 2. Against that the stall looked healthy, the healthy seconds carried
    # its 200 MB of writeback, and the pile-up was not told apart from the checkpoint.
    analysis = _analysis("dirty-storm")
    assert analysis["summary"]["tps_median"] < 10
    data = load_run_frames(RUNS / "dirty-storm")
    stalled = detect_stalls(data.client).seconds.filter(pl.col("tps") < 100)
    assert stalled.height >= 8 and stalled["kind"].null_count() == 0
    worst = _worst(analysis)
    assert worst["kind"] == "drop-to-zero" and worst["seconds"] >= 8
    assert worst["reference_tps"] > 500
    top = worst["causes"][0]
    assert top["cause"] == "memory-reclaim", worst
    assert analysis["summary"]["verdict"]["cause"] == "memory-reclaim"



def test_a_server_down_for_most_of_the_run_is_one_stall_from_the_crash() -> None:
    # A crash 1 s into a 15 s disk pause: the killed backends wait in the paused I/O, the
    # server is down until the pause ends, and the load does not come back (its clients
    # died with the server). 2 working seconds of 20: the 90th percentile of TPS is 0,
    # which as the reference would make the run "degraded 0%, 0 stalls".
    data = load_run_frames(RUNS / "crash-on-paused-disk")
    working = data.client.filter(~pl.col("warmup") & ~pl.col("partial") & (pl.col("tps") > 0))
    assert 1 <= working.height <= 2  # the sample is what it says
    analysis = _analysis("crash-on-paused-disk")
    (stall,) = analysis["stalls"]
    assert stall["kind"] == "drop-to-zero" and stall["seconds"] >= 17
    crash = _events("crash-on-paused-disk", "fault").filter(
        pl.col("attrs").str.contains('"action": "crash"'))
    crashed_at = crash["t_start"][0]
    start = dt.datetime.fromisoformat(stall["start"].replace("Z", "+00:00"))
    assert start <= crashed_at  # the pause that came first already stopped commits
    assert [c["cause"] for c in stall["causes"][:2]] == ["server-crash", "storage-device"]
    assert analysis["summary"]["verdict"]["cause"] == "server-crash"


def test_an_unfinished_checkpoint_in_its_fsyncs_is_in_its_sync_phase() -> None:
    # The dirty-writeback storm again, in a draw whose checkpoint was still fsyncing its
    # piled-up writes when the run ended: no log line gives its phases, and without them
    # checkpoint-io would come ahead of memory-reclaim. Its checkpointer's own waits
    # (10 Hz) say it was in IO:DataFileSync nearly throughout.
    (checkpoint,) = _events("dirty-storm-unfinished", "checkpoint").iter_rows(named=True)
    assert checkpoint["t_end"] is None and '"buffers": null' in checkpoint["attrs"]
    analysis = _analysis("dirty-storm-unfinished")
    worst = _worst(analysis)
    assert worst["kind"] == "drop-to-zero" and worst["seconds"] >= 8
    causes = {c["cause"]: c for c in worst["causes"]}
    assert worst["causes"][0]["cause"] == "memory-reclaim", worst
    assert any("was in its sync phase" in line for line in causes["memory-reclaim"]["evidence"])
    assert any("still running, in its sync phase" in line
               for line in causes["checkpoint-io"]["evidence"])
    assert analysis["summary"]["verdict"]["cause"] == "memory-reclaim"

def test_the_second_before_a_stall_is_not_a_healthy_one() -> None:
    # The same storm again: the checkpoint's fsync put 257 MB under writeback within the
    # second before TPS fell, a second that still ran 1,395 transactions. Counted as
    # healthy, it made the 233 MB inside the stall look usual (4 x a mean of 64 MB).
    client = load_run_frames(RUNS / "dirty-storm-2").client
    worst = _worst(_analysis("dirty-storm-2"))
    start = dt.datetime.fromisoformat(worst["start"].replace("Z", "+00:00"))
    before = client.filter(pl.col("t") == start - dt.timedelta(seconds=1))["tps"][0]
    assert before > 1000
    top = worst["causes"][0]
    assert top["cause"] == "memory-reclaim", worst
    assert any("under writeback at once (healthy seconds averaged 0 MB)" in line
               for line in top["evidence"])


def test_a_run_whose_good_seconds_all_lead_into_stalls_keeps_a_baseline() -> None:
    # The storm once more, in a draw where two one-second dips before the checkpoint took
    # the seconds after them, and the seconds before them and before the stall are left
    # out as lead-ins: no healthy second at all. Against that empty baseline every wait
    # would rise "from 0%", and the lock waits behind the stalled commits (46%) come first.
    # The seconds leading into stalls are the baseline then: 21% lock waits, as usual.
    worst = _worst(_analysis("dirty-storm-3"))
    assert worst["kind"] == "drop-to-zero" and worst["seconds"] >= 8
    top = worst["causes"][0]
    assert top["cause"] == "memory-reclaim", worst
    locks = next(c for c in worst["causes"] if c["cause"] == "lock-contention")
    assert locks["confidence"] < top["confidence"], worst
    baseline = [int(m[1]) for line in locks["evidence"]
                if (m := re.search(r"\(healthy seconds (\d+)%\)", line))]
    assert baseline and baseline[0] > 0, locks  # a baseline with lock waits, not an empty one


def test_a_load_in_bursts_is_compared_with_its_own_undegraded_seconds() -> None:
    # 100 clients connecting for every transaction on a CPU at 100%: 97, 196, 97, 194 TPS.
    # The two low seconds are dips, and each high one is the tail of a dip and the lead-in
    # of the next: no second is left outside a window. The high seconds are the baseline
    # then (else every window claims each wait and pressure it saw, against "healthy 0%"),
    # and the run's verdict is its churn, as in the steady `churn` sample.
    analysis = _analysis("churn-bursty")
    assert [s["kind"] for s in analysis["stalls"]] == ["dip", "dip"], analysis["stalls"]
    for stall in analysis["stalls"]:
        for cause in stall["causes"]:
            assert not any("healthy 0%" in line for line in cause["evidence"]), cause
    verdict = analysis["summary"]["verdict"]
    assert verdict["cause"] == "too-many-connections", verdict
    top = analysis["steady_state"]["causes"][0]
    assert top["sub_cause"] == "connection-churn", top
    assert "pgbouncer" in [r["rule"] for r in analysis["recommendations"]]


def test_a_stall_is_not_compared_with_the_second_its_own_cause_began_in() -> None:
    # The storm on a busy machine: a dip before the checkpoint left only two undegraded
    # seconds, each leading into a stall, and the checkpoint's fsync put 249 MB under
    # writeback in the second before the 9-s drop. With both seconds as the baseline, the
    # usual writeback would be 124 MB, the drop's 225 MB no burst, and checkpoint-io the
    # verdict. The drop is compared with the other lead-in only.
    analysis = _analysis("dirty-storm-ci")
    worst = _worst(analysis)
    assert worst["kind"] == "drop-to-zero" and worst["seconds"] >= 8, worst
    top = worst["causes"][0]
    assert top["cause"] == "memory-reclaim", worst
    assert any("under writeback at once" in line for line in top["evidence"]), top
    assert analysis["summary"]["verdict"]["cause"] == "memory-reclaim", analysis["summary"]


def test_a_standby_that_does_not_read_its_socket_is_no_network_problem() -> None:
    # The sync-standby-on-a-slow-disk scenario looks like the network (0.80 over 0.78 when
    # both ends of the one connection count): the round trips on the replication
    # connection rise from 0.3 to 8 ms. But 4 MB of WAL sit in the walreceiver's receive
    # queue: it has arrived, and the standby does not take it in.
    worst = _worst(_analysis("sync-slow-disk"))
    top = worst["causes"][0]
    assert top["cause"] == "sync-replication", worst
    assert any("MB waiting in the receive queue of" in line and "on standby1" in line
               for line in top["evidence"]), top
    assert "network" not in [c["cause"] for c in worst["causes"]], worst
    # Every stall of the run is the slow standby's doing: the network, where its round
    # trips rose too, never ranks above synchronous replication.
    for stall in _analysis("sync-slow-disk")["stalls"]:
        assert stall["causes"][0]["cause"] == "sync-replication", stall


def test_a_stall_from_a_noisy_neighbour_is_said_to_come_from_outside() -> None:
    """A real control run during which other work on this shared machine took the CPU
    for a second: a real stall, but nothing to change in the server."""
    analysis = _analysis("control-neighbour")
    (stall,) = analysis["stalls"]
    top = stall["causes"][0]
    assert top["cause"] == "cpu-saturation" and top.get("outside_the_lab") is True, stall
    assert any("other processes took the rest" in line for line in top["evidence"])
    assert analysis["recommendations"] == []


def test_a_flush_beside_backends_on_the_cpu_is_not_their_stall() -> None:
    """The tune test's connection-per-transaction load beside other tests: in its one
    dip they took the CPU while the disk wrote back 152 MB of their page cache. The
    backends were on the CPU in every sample, so the flush is no cause of the dip, and
    the run's answer stays the connections (not dirty_background_bytes first)."""
    analysis = _analysis("churn-neighbour-writeback")
    (stall,) = analysis["stalls"]
    assert [c["cause"] for c in stall["causes"]] == ["cpu-saturation"], stall
    assert stall["causes"][0].get("outside_the_lab") is True
    assert analysis["summary"]["verdict"]["cause"] == "too-many-connections"
    assert analysis["recommendations"][0]["rule"] == "pgbouncer"
    assert "dirty-background-bytes" not in [r["rule"] for r in analysis["recommendations"]]


def test_a_writeback_burst_beside_a_read_only_load_is_not_its_stall() -> None:
    """A healthy control beside the suite (select-only, 2 clients, 41,000 TPS): in its
    one dip 237 MB of the suite's own page cache went under writeback at once. Its
    backends never waited on the disk (the 10 Hz sampler found none active), so the
    burst is no cause: the dip stays unattributed, and no kernel knob is recommended
    (not memory-reclaim and dirty-background-bytes)."""
    analysis = _analysis("healthy-neighbour-writeback")
    (stall,) = analysis["stalls"]
    assert [c["cause"] for c in stall["causes"]] == ["unknown"], stall
    assert analysis["recommendations"] == []


def test_writeback_held_up_by_a_paused_device_is_the_pause() -> None:
    """test_storage's pause-disk run: while primary's emulated device did not answer,
    its writes queued under writeback and went out after (86 MB at once, 68 MB/s on the
    device against PostgreSQL's 8). That is the pause's doing, and the stall is the
    device's, not memory-reclaim's."""
    analysis = _analysis("pause-disk-writeback")
    (stall,) = analysis["stalls"]
    assert stall["causes"][0]["cause"] == "storage-device", stall
    reclaim = next(c for c in stall["causes"] if c["cause"] == "memory-reclaim")
    assert reclaim["confidence"] < stall["causes"][0]["confidence"]
    assert any(line.startswith("(halved: primary's storage device had a fault (pause-disk)")
               for line in reclaim["evidence"]), reclaim
    assert analysis["summary"]["verdict"]["cause"] == "storage-device"


# --- partial and corrupt folders ----------------------------------------------------------


@pytest.fixture
def lock_copy(tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(RUNS / "lock", target)
    return target


def test_missing_telemetry_is_named_and_stalls_still_found(lock_copy: Path) -> None:
    (lock_copy / "timeseries.parquet").unlink()
    (lock_copy / "events.parquet").unlink()
    analysis = analyze_run(lock_copy).document.to_json()
    assert analysis["partial"] is True
    assert any(m.startswith("timeseries.parquet missing") for m in analysis["missing"])
    assert any(m.startswith("events.parquet missing") for m in analysis["missing"])
    worst = _worst(analysis)
    assert worst["kind"] == "drop-to-zero"
    assert worst["causes"][0]["cause"] == "unknown"  # no evidence: say so, do not guess
    assert any("missing:" in line for line in worst["causes"][0]["evidence"])
    assert json.loads((lock_copy / "analysis.json").read_text()) == analysis


def test_interrupted_run_reads_the_incremental_telemetry(lock_copy: Path) -> None:
    """A killed pglab leaves telemetry/samples.csv and events.jsonl, written by the real
    sink, and a manifest still saying running (with a pid that is gone)."""
    series = pl.read_parquet(lock_copy / "timeseries.parquet")
    events = pl.read_parquet(lock_copy / "events.parquet")
    sink = TelemetrySink(lock_copy)
    sink.write(ProbeOutput(
        samples=[Sample(*row) for row in series.iter_rows()],
        events=[Event(r["t_start"], r["kind"], r["node"], r["t_end"], json.loads(r["attrs"]))
                for r in events.iter_rows(named=True)],
    ))
    sink.close()
    (lock_copy / "timeseries.parquet").unlink()
    (lock_copy / "events.parquet").unlink()
    manifest = json.loads((lock_copy / "manifest.json").read_text())
    manifest.update(status="running", pid=2**22 + 12345)  # above pid_max: never alive
    (lock_copy / "manifest.json").write_text(json.dumps(manifest))
    analysis = analyze_run(lock_copy).document.to_json()
    assert analysis["status"] == "interrupted"
    assert any(m.startswith("run interrupted") for m in analysis["missing"])
    assert any("telemetry/samples.csv" in m for m in analysis["missing"])
    assert _worst(analysis)["causes"][0]["cause"] == "lock-contention"


def test_corrupt_and_empty_client_series(lock_copy: Path) -> None:
    (lock_copy / "client.parquet").write_bytes(b"PAR1 torn by a crash")
    analysis = analyze_run(lock_copy).document.to_json()
    assert analysis["stalls"] == [] and analysis["summary"]["measured_seconds"] == 0
    assert any(m.startswith("client.parquet unreadable") for m in analysis["missing"])

    empty = pl.read_parquet(RUNS / "lock" / "client.parquet").head(0)
    empty.write_parquet(lock_copy / "client.parquet")
    analysis = analyze_run(lock_copy).document.to_json()
    assert any(m.startswith("client.parquet has no rows") for m in analysis["missing"])

    client = pl.read_parquet(RUNS / "lock" / "client.parquet")
    client.head(4).with_columns(pl.lit(True).alias("warmup")).write_parquet(
        lock_copy / "client.parquet")  # a run interrupted during its warmup
    analysis = analyze_run(lock_copy).document.to_json()
    assert any("no measured second" in m for m in analysis["missing"])

    (lock_copy / "client.parquet").unlink()
    analysis = analyze_run(lock_copy).document.to_json()
    assert any(m.startswith("client.parquet missing") for m in analysis["missing"])


def test_telemetry_file_with_foreign_columns(lock_copy: Path) -> None:
    pl.DataFrame({"x": [1]}).write_parquet(lock_copy / "timeseries.parquet")
    analysis = analyze_run(lock_copy).document.to_json()
    assert any(m.startswith("timeseries.parquet lacks columns") for m in analysis["missing"])
    assert _worst(analysis)["kind"] == "drop-to-zero"


# --- command line --------------------------------------------------------------------------


def test_cli_analyze_prints_findings_and_json(lock_copy: Path) -> None:
    result = run_cli("analyze", str(lock_copy))
    assert result.returncode == 0, result.stderr
    assert "lock-contention" in result.stdout and "TPS 0 for" in result.stdout
    assert "lock-timeout" in result.stdout
    # a stall's cost is a deficit; "lost" is for commits a crash takes away
    assert re.search(r"about [\d,]+ fewer transactions", result.stdout), result.stdout
    assert " lost" not in result.stdout
    result = run_cli("analyze", str(lock_copy), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["format"] == 2 and document["stalls"]
    assert all("deficit_transactions" in s and "lost_transactions" not in s
               for s in document["stalls"])


def test_cli_analyze_on_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    for target in (tmp_path, tmp_path / "nope"):
        result = run_cli("analyze", str(target))
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pglab: "), result.stderr
        assert "Traceback" not in result.stderr


# --- registries and docs ----------------------------------------------------------------------


def test_cause_registry_is_the_designed_taxonomy() -> None:
    assert set(CAUSE_IDS) == set(DESIGN_CAUSES)
    assert len({c.id for c in CAUSES}) == len(CAUSES)


def test_every_cause_and_rule_is_documented() -> None:
    doc = (ROOT / "docs" / "ANALYSIS.md").read_text()
    for cause in CAUSE_IDS:
        assert f"`{cause}`" in doc, cause
    for rule in RULES:
        assert f"`{rule.id}`" in doc, rule.id
    assert len({r.id for r in RULES}) == len(RULES)


def test_rules_cover_the_settings_a_dba_reaches_for() -> None:
    manifest = json.loads((RUNS / "lock" / "manifest.json").read_text())
    zfs = {**manifest, "host": {**manifest["host"], "data_dir": {"fstype": "zfs"},
                                "memory_bytes": 2**34}}
    zfs["nodes"]["primary"]["settings"] = {
        "shared_buffers": {"setting": str(8 * 2**30 // 8192), "unit": "8kB"},
        "checkpoint_completion_target": {"setting": "0.5", "unit": None},
        "checkpoint_flush_after": {"setting": "0", "unit": "8kB"},
    }
    zfs["scenario"]["workload"]["clients"] = 200
    # every cause but a loss of acknowledged commits (after which no rule trading
    # durability for speed is advised: test_durability_analysis.py)
    every_cause = dict.fromkeys(sorted(set(CAUSE_IDS) - {"data-loss"}), 0.9)
    flags = frozenset({"time", "wal", "immediate"})
    fired = recommend(Facts(every_cause, Manifest.from_json(zfs), True, None, flags))
    keys = {k for rec in fired for k in rec["change"]}
    for key in ("server.settings.max_wal_size", "server.settings.checkpoint_timeout",
                "server.settings.checkpoint_completion_target",
                "server.settings.wal_init_zero", "server.settings.wal_recycle",
                "server.initdb.wal_segsize_mb", "server.settings.full_page_writes",
                "server.settings.wal_compression", "server.settings.wal_buffers",
                "server.settings.shared_buffers", "kernel.vm.dirty_background_bytes",
                "server.settings.huge_pages", "topology.pooler",
                "server.settings.autovacuum_vacuum_cost_limit"):
        assert key in keys, key
    untestable = {r["rule"] for r in fired if r["test"] == "not testable by pglab on this machine"}
    assert {"zfs-dataset", "standby-wal-disk", "walreceiver-cpu",
            "forced-checkpoints"} <= untestable
    zfs_rule = next(r for r in fired if r["rule"] == "zfs-dataset")
    for option in ("recordsize", "compression", "logbias", "primarycache"):
        assert option in zfs_rule["action"]
    fpw = next(r for r in fired if r["rule"] == "full-page-writes-off")
    assert "UNSAFE" in fpw["risk"] and "ZFS" in fpw["risk"]
    # full_page_writes off is never offered on a filesystem that can tear pages
    ext4 = recommend(Facts(every_cause, Manifest.from_json(manifest), True, None, flags))
    assert "full-page-writes-off" not in {r["rule"] for r in ext4}


def test_recurring_stalls_are_reported_as_periodic() -> None:
    """The lock sample's measured seconds repeated back to back: its stall recurs with
    the sample's length as period (as stalls recur with a checkpoint interval)."""
    client = pl.read_parquet(RUNS / "lock" / "client.parquet").filter(
        pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial"))
    span = dt.timedelta(seconds=client.height)
    tiled = pl.concat([client.with_columns(pl.col("t") + span * i) for i in range(6)])
    report = detect_stalls(tiled.drop("job"))
    zero_windows = [w for w in report.windows if w.kind == "drop-to-zero"]
    assert len(zero_windows) == 6
    assert report.periodic is not None and report.periodic.period_s == client.height
    assert detect_stalls(client.drop("job")).periodic is None  # one stall is no period


def test_a_folder_with_only_a_manifest(tmp_path: Path) -> None:
    shutil.copy(RUNS / "lock" / "manifest.json", tmp_path / "manifest.json")
    analysis = analyze_run(tmp_path).document.to_json()
    assert analysis["partial"] and analysis["stalls"] == []
    assert analysis["recommendations"] == []
    named = " ".join(analysis["missing"])
    for name in ("client.parquet", "timeseries.parquet", "events.parquet"):
        assert f"{name} missing" in named


@pytest.mark.parametrize("name", ["lock", "walinit", "checkpoint"])  # writeback: kernel only
def test_recommended_test_commands_are_valid_runs(name: str, tmp_path: Path) -> None:
    """Each `test` line is a `pglab run` that pglab accepts (kernel.* keys excepted:
    the [kernel] table is another branch's work)."""
    folder = shutil.copytree(RUNS / name, tmp_path / name)
    analysis = analyze_run(folder).document.to_json()
    lines = [r["test"] for r in analysis["recommendations"]
             if r["test"].startswith("pglab run ") and not any(
                 k.startswith("kernel.") for k in r["change"])]
    assert lines, analysis["recommendations"]
    for line in lines:
        argv = shlex.split(line)
        assert argv[:2] == ["pglab", "run"]
        overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        loaded = load(Path(argv[2]), overrides)
        for key, value in next(r["change"] for r in analysis["recommendations"]
                               if r["test"] == line).items():
            node: Any = loaded.raw
            for part in key.split("."):
                node = node[part]
            assert node == value, (line, key)


def test_runner_records_an_analysis_failure_instead_of_failing(lock_copy: Path) -> None:
    """The hook at the end of a run: whatever goes wrong is kept in the manifest."""
    from pglab.results.folder import RunFolder
    from pglab.results.manifest import read_manifest
    from pglab.runner import _analyze

    (lock_copy / "analysis.json").mkdir()  # cannot be replaced by a file
    _analyze(RunFolder(lock_copy), read_manifest(lock_copy))
    recorded = json.loads((lock_copy / "manifest.json").read_text())
    assert "cannot write" in recorded["analysis"]["error"]
    assert recorded["status"] == "completed"


def test_wal_compression_proposes_a_method_the_server_was_built_with() -> None:
    def proposed(choices: object) -> object:
        primary: dict[str, Any] = {"settings": {}}
        if choices is not None:
            primary["setting_choices"] = choices
        facts = Facts({"wal-write": 0.9}, Manifest(nodes={"primary": primary}), fpi_surge=True)
        (rule,) = [r for r in recommend(facts) if r["rule"] == "wal-compression"]
        return rule["change"]["server.settings.wal_compression"]

    assert proposed({"wal_compression": ["pglz", "lz4", "zstd", "on", "off"]}) == "lz4"
    assert proposed({"wal_compression": ["pglz", "on", "off"]}) == "pglz"  # no lz4 built in
    assert proposed({}) == "on"  # PostgreSQL 13-14: a boolean
    assert proposed(None) == "lz4"  # a folder from before the choices were recorded


def test_the_run_level_verdict_is_printed_and_reported(tmp_path: Path) -> None:
    copy = tmp_path / "hot-row"
    shutil.copytree(RUNS / "hot-row", copy)
    printed = run_cli("analyze", str(copy))
    assert printed.returncode == 0, printed.stderr
    assert "top cause lock-contention" in printed.stdout
    assert "held back over the whole run" in printed.stdout
    reported = run_cli("report", str(copy))
    assert reported.returncode == 0, reported.stderr
    html = (copy / "report.html").read_text()
    assert "Top cause: <b>lock-contention</b>" in html
    assert "What held the whole run back" in html and "heavyweight locks" in html


# --- advice that fits the sub-cause -------------------------------------------------------


def test_a_paused_standby_gets_quorum_advice_a_slow_one_a_faster_disk() -> None:
    """The same cause (sync-replication, ranked first in both), two kinds: a standby
    that stopped answering (sample sync-paused: SIGSTOP for 6 s) and one whose disk is
    too slow (sync-slow-disk). The fault events are not what tells them apart."""
    paused, slow = _analysis("sync-paused"), _analysis("sync-slow-disk")
    for analysis, kind in ((paused, "standby-unresponsive"), (slow, "standby-slow-disk")):
        top = _worst(analysis)["causes"][0]
        assert top["cause"] == "sync-replication" and top["sub_cause"] == kind, top
    assert paused["recommendations"][0]["rule"] == "quorum-commit"  # the fitting advice first
    rules = {r["rule"]: r for r in paused["recommendations"]}
    assert rules["quorum-commit"]["change"] == {"topology.standbys": 2,
                                                "topology.synchronous": "any:1"}
    assert rules["quorum-commit"]["test"].startswith("pglab run sync-standby-paused")
    assert "ha-synchronous-role" in rules and rules["ha-synchronous-role"][
        "not_testable_because"]
    assert "synchronous-commit-local" in rules
    assert not {"standby-wal-disk", "walreceiver-cpu"} & set(rules)
    rules = {r["rule"]: r for r in slow["recommendations"]}
    assert "standby-wal-disk" in rules and "synchronous-commit-local" in rules
    assert not {"quorum-commit", "ha-synchronous-role"} & set(rules)
    for analysis in (paused, slow):  # the WAL-flush advice is not the standby's
        assert all(r["rule"] != "synchronous-commit-off" or "sync-replication" not in
                   r["because"] for r in analysis["recommendations"])


def _stall_at(analysis: dict[str, Any], start: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [s for s in analysis["stalls"] if s["start"].startswith(start)]
    assert len(found) == 1, [s["start"] for s in analysis["stalls"]]
    return found[0]


def test_a_standby_that_replays_each_commit_on_a_starved_cpu_is_replay_bound() -> None:
    """Sample standby-replay-cpu (the built-in as it ships): commits wait for the standby
    to apply them (remote_apply), the standby has a quarter of a CPU. The bulk update's
    row locks hold the load for 22 s (lock-contention stays first there); 12 s after it,
    autovacuum's WAL falls 0.4 s behind in replay while the startup process computes in
    every sample: commits wait on SyncRep for the replay, not for vacuum's IO."""
    analysis = _analysis("standby-replay-cpu")
    locks = _stall_at(analysis, "2026-11-27T16:58:22")
    assert locks["causes"][0]["cause"] == "lock-contention", locks["causes"][0]
    behind = {c["cause"]: c for c in locks["causes"]}["sync-replication"]
    assert behind["sub_cause"] == "standby-replay", behind
    assert any(line.startswith("standby1's startup process: ") and "on-CPU samples in "
               in line for line in behind["evidence"]), behind["evidence"]  # os.profile's
    replay = _stall_at(analysis, "2026-11-27T16:58:54")
    top, second = replay["causes"][:2]
    assert (top["cause"], top["sub_cause"]) == ("sync-replication", "standby-replay"), top
    assert top["confidence"] > second["confidence"], replay["causes"]
    assert any(re.match(r"standby standby1 up to 0\.\d\d s behind in applying WAL", line)
               for line in top["evidence"]), top["evidence"]
    assert any(re.match(r"the startup process on standby1 was on CPU in \d+% of its", line)
               for line in top["evidence"]), top["evidence"]
    rules = {r["rule"]: r for r in analysis["recommendations"]}
    assert rules["synchronous-commit-flush"]["change"] == {
        "server.settings.synchronous_commit": "on"}
    assert rules["standby-replay-cpu"]["change"] == {"nodes.standby1.envelope.cpus": 1}
    for rule in ("synchronous-commit-flush", "standby-replay-cpu"):
        assert rules[rule]["test"].startswith("pglab run standby-replay-cpu --set "), rules[rule]
        assert rules[rule]["risk"]
    assert not {"quorum-commit", "ha-synchronous-role"} & set(rules)


def test_a_replay_behind_holds_no_commit_without_remote_apply(tmp_path: Path) -> None:
    """The same run as if synchronous_commit were on: a commit then waits for the
    standby's flush, and its replay falling behind neither weighs nor names the kind."""
    copy = tmp_path / "run"
    shutil.copytree(RUNS / "standby-replay-cpu", copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["nodes"]["primary"]["settings"]["synchronous_commit"]["setting"] = "on"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    analysis = build_analysis(load_run_frames(copy)).to_json()
    for stall in analysis["stalls"]:
        for cause in stall["causes"]:
            assert cause.get("sub_cause") != "standby-replay", cause
            assert not any("applying WAL" in line for line in cause["evidence"]), cause
    rules = {r["rule"] for r in analysis["recommendations"]}
    assert not {"synchronous-commit-flush", "standby-replay-cpu"} & rules


def test_an_observer_starved_of_cpu_does_not_make_the_standby_unresponsive() -> None:
    """Sample standby-replay-cpu-starved: the same built-in, whose observer heard no node
    at all (neither the primary nor the standby, nor the host's CPU figures) for 10 s of
    the 25-s stall. That silence is the observer's, not the standby's: the standby was
    replaying, not paused, and the advice is not quorum commit."""
    ts = pl.read_parquet(RUNS / "standby-replay-cpu-starved" / "timeseries.parquet")
    heard = set(ts.filter(pl.col("source") == "db.waits")["t"].dt.truncate("1s").to_list())
    start = dt.datetime(2026, 11, 27, 16, 55, 7, tzinfo=dt.timezone.utc)
    window = [start + dt.timedelta(seconds=i) for i in range(25)]
    assert sum(second not in heard for second in window) >= 9  # nobody answered
    analysis = _analysis("standby-replay-cpu-starved")
    top = _worst(analysis)["causes"][0]
    assert (top["cause"], top["sub_cause"]) == ("sync-replication", "standby-replay"), top
    assert not any("stopped responding" in line for line in top["evidence"]), top
    rules = {r["rule"] for r in analysis["recommendations"]}
    assert "synchronous-commit-flush" in rules
    assert not {"quorum-commit", "ha-synchronous-role"} & rules


def test_one_hot_row_and_a_table_lock_get_different_advice() -> None:
    hot = _analysis("hot-row")
    (steady,) = hot["steady_state"]["causes"]
    assert steady["cause"] == "lock-contention" and steady["sub_cause"] == "hot-row"
    assert [r["rule"] for r in hot["recommendations"]] == ["hot-row"]
    table = _worst(_analysis("lock"))["causes"][0]
    assert table["sub_cause"] == "table-lock", table
    assert "lock-timeout" in [r["rule"] for r in _analysis("lock")["recommendations"]]


def test_every_rule_says_when_it_does_not_apply() -> None:
    from pglab.analysis.recommendations import RULES

    for rule in RULES:
        assert rule.not_when, rule.id
        assert rule.testable or rule.why_untestable, rule.id


def test_a_queue_on_walwrite_is_blamed_on_what_its_holder_does() -> None:
    """Two draws of one scenario (1 MB WAL segments on an 8 MB/s disk): commits queue
    on WALWriteLock (74%), whose holder spends a third of its WAL IO zero-filling new
    segments. Both must name wal-segment-init, with the evidence of the holder's work;
    before, one said wal-write and the other checkpoint-io (one 1-s dip)."""
    for name in ("walinit-small", "walinit-small-2"):
        analysis = _analysis(name)
        verdict = analysis["summary"]["verdict"]
        assert verdict["cause"] == "wal-segment-init", (name, verdict)
        top = analysis["steady_state"]["causes"][0]
        assert top["cause"] == "wal-segment-init", (name, top)
        assert any("zero-filled new segments (pg_stat_io wal/init writes)" in line
                   for line in top["evidence"]), top
        assert "wal-write" not in [c["cause"] for c in analysis["steady_state"]["causes"]]
        assert analysis["recommendations"][0]["because"] == ["wal-segment-init"]
    assert _analysis("walinit-small-2")["summary"]["verdict"]["minor_stalls"] is True


def test_connection_churn_gets_a_pooler_and_persistent_connections() -> None:
    churn = _analysis("churn")
    (steady,) = churn["steady_state"]["causes"]
    assert steady["sub_cause"] == "connection-churn", steady
    rules = {r["rule"]: r for r in churn["recommendations"]}
    assert rules["persistent-connections"]["change"] == {"workload.reconnect": False}
    assert churn["recommendations"][0]["rule"] == "pgbouncer"  # it answers both kinds


def test_a_checkpoint_started_by_wal_volume_gets_max_wal_size() -> None:
    # checkpoint-storm-ci: five stalls behind checkpoints started by WAL volume, the worst
    # a 5-s drop at 0.76; checkpoint-storm: one 1-s dip at 0.56 beside a 2-s drop that
    # memory-reclaim explains, too weak to advise on alone (the rule is withheld, saying so)
    for name, given in (("checkpoint-storm-ci", True), ("checkpoint-storm", False)):
        analysis = _analysis(name)
        checkpoint = [c for s in analysis["stalls"] for c in s["causes"][:1]
                      if c["cause"] == "checkpoint-io"]
        assert checkpoint and all(c["sub_cause"] == "wal-volume" for c in checkpoint), name
        assert ("max-wal-size" in [r["rule"] for r in analysis["recommendations"]]) is given
        withheld = {w["rule"]: w["why"] for w in analysis["withheld"]}
        assert given or withheld["max-wal-size"] == (
            "weak evidence: checkpoint-io from one 1-s dip at confidence 0.56 only"), withheld


def test_a_checkpoints_own_fsyncs_are_not_other_page_cache() -> None:
    # The storm as test_builtin_scenarios runs it: its worst drop (5 s) came as the
    # checkpoint's fsyncs flushed the ~400 MB of page cache left dirty by the data load
    # and the run. PostgreSQL wrote nothing in the drop itself; read as "the kernel
    # flushing other dirty page cache", the disk's writes would make the verdict
    # memory-reclaim.
    analysis = _analysis("checkpoint-storm-ci")
    worst = _worst(analysis)
    assert worst["kind"] == "drop-to-zero" and worst["seconds"] >= 4, worst
    assert worst["causes"][0]["cause"] == "checkpoint-io", worst
    assert not any("other dirty page cache" in line
                   for c in worst["causes"] for line in c["evidence"]), worst
    assert analysis["summary"]["verdict"]["cause"] == "checkpoint-io", analysis["summary"]


def test_every_testable_rules_change_is_a_valid_set_for_its_scenario() -> None:
    """What a tune would run: each testable rule's change, on each committed run whose
    scenario it could be tried on, parses and validates as `--set` overrides of that
    scenario (the huge-pages rule's vm.nr_hugepages was once an unknown knob, so every
    tune marked it 'not applicable here')."""
    from pglab.analysis.recommendations import _set_value
    from pglab.scenario import load_text

    tried = set()
    for run in sorted(p for p in RUNS.iterdir() if (p / "manifest.json").is_file()):
        manifest = Manifest.from_json(json.loads((run / "manifest.json").read_text()))
        facts = Facts({}, manifest, fpi_surge=True, run_dir=run)
        text = (run / "scenario.toml").read_text()
        for rule in RULES:
            change = rule.change(facts) if rule.testable else {}
            if not change:
                continue
            sets = [f"{k}={shlex.split(_set_value(v))[0]}" for k, v in change.items()]
            # raises BadInput if refused; a script it names is beside it (the sample's copy)
            load_text(text, f"{run.name} + {rule.id}", sets, path=run / "scenario.toml")
            tried.add(rule.id)
    assert {"huge-pages", "wal-segment-size", "dirty-background-bytes"} <= tried, tried


def test_a_slow_wal_volume_is_no_evidence_for_the_checkpoint() -> None:
    """pg_wal on its own slow volume: the stall's disk evidence is the WAL volume's for
    wal-segment-init and the data volume's for checkpoint-io (a checkpoint writes no WAL
    file), so the segment's creation leads, as in the other draws of this built-in."""
    manifest = json.loads((RUNS / "wal-own-volume-slow" / "manifest.json").read_text())
    device = {v["role"]: v["device"]["name"] for v in manifest["nodes"]["primary"]["storage"]}
    stall = _worst(_analysis("wal-own-volume-slow"))
    causes = {c["cause"]: c for c in stall["causes"]}
    assert stall["causes"][0]["cause"] == "wal-segment-init", stall["causes"]
    assert any(f"volume device {device['wal']}" in line
               for line in causes["wal-segment-init"]["evidence"]), causes["wal-segment-init"]
    assert not any(f"volume device {device['wal']}" in line
                   for line in causes["checkpoint-io"]["evidence"]), causes["checkpoint-io"]


def test_a_standby_silent_for_whole_seconds_is_unresponsive() -> None:
    """A run of sync-standby-paused: the stall outlasted the 4-s pause while the standby
    caught up, and over the window it answered more than half its
    healthy rate of samples. The whole seconds without an answer still say it stopped
    responding, so the first advice is quorum commit, not a faster standby disk."""
    analysis = _analysis("sync-paused-ci")
    top = _worst(analysis)["causes"][0]
    assert (top["cause"], top.get("sub_cause")) == ("sync-replication",
                                                     "standby-unresponsive"), top
    assert any(re.search(r"none at all in [2-9] of the window's \d+ s", line)
               for line in top["evidence"]), top["evidence"]
    assert analysis["recommendations"][0]["rule"] == "quorum-commit"


def _samples() -> list[str]:
    return sorted(p.name for p in RUNS.iterdir() if (p / "manifest.json").is_file())


@pytest.mark.parametrize("name", _samples())
def test_no_advice_that_the_runs_own_series_rule_out(name: str) -> None:
    """Read from the series, not from the rules: wal-buffers is given only where the WAL
    buffers filled, wal-compression only where full-page images are a tenth of the WAL or
    more, dirty-background-bytes only where dirty memory reached the 64 MB it sets. The
    committed sync-paused and dirty-storm samples have wal_buffers_full 0 on every node:
    no wal-buffers for them."""
    analysis = _analysis(name)
    given = {r["rule"] for r in analysis["recommendations"]}
    ts = pl.read_parquet(RUNS / name / "timeseries.parquet")

    def of(source: str, metric: str, node: str | None = None) -> pl.Series:
        rows = ts.filter((pl.col("source") == source) & (pl.col("metric") == metric))
        return rows.filter(pl.col("node") == node)["value"] if node else rows["value"]

    full = of("db.wal", "wal_buffers_full")
    if "wal-buffers" in given:
        assert full.is_empty() or float(full.max() or 0) > 0  # type: ignore[arg-type]
    elif not full.is_empty() and float(full.max() or 0) == 0:  # type: ignore[arg-type]
        assert "wal-buffers" not in given
    fpi = float(of("db.wal", "wal_fpi", "primary").sum())
    wal = float(of("db.wal", "wal_bytes", "primary").sum())
    if "wal-compression" in given and wal:
        assert fpi * 8192 >= 0.1 * wal
    dirty = of("os.memory", "dirty_mb", "host")
    if "dirty-background-bytes" in given and not dirty.is_empty():
        assert float(dirty.max() or 0) >= 64  # type: ignore[arg-type]
    for held in analysis.get("withheld", []):
        assert held["rule"] not in given and held["why"], held


def test_wal_buffers_are_not_advised_when_they_never_filled() -> None:
    for name in ("sync-paused", "dirty-storm"):
        analysis = _analysis(name)
        assert "wal-buffers" not in [r["rule"] for r in analysis["recommendations"]], name
        (held,) = [w for w in analysis["withheld"] if w["rule"] == "wal-buffers"]
        assert held["why"].startswith("not when: wal_buffers_full was 0 on every node "
                                      "over the whole run (primary"), held


def test_a_one_second_dip_at_half_confidence_gives_no_advice_of_its_own() -> None:
    # sync-paused: the paused standby's 6-s drop (sync-replication 0.99) and a 1-s dip
    # after it that wal-write explains at 0.50; the dip's four WAL rules came after the
    # standby advice, as if they were as well founded
    analysis = _analysis("sync-paused")
    dips = [s for s in analysis["stalls"] if s["seconds"] == 1 and s["causes"]
            and s["causes"][0]["cause"] == "wal-write"]
    assert dips and dips[0]["causes"][0]["confidence"] < 0.6, analysis["stalls"]
    rules = [r["rule"] for r in analysis["recommendations"]]
    assert rules == ["quorum-commit", "synchronous-commit-local", "ha-synchronous-role"]
    weak = {w["rule"]: w["why"] for w in analysis["withheld"] if w["why"].startswith("weak")}
    assert set(weak) == {"wal-segment-size", "wal-compression", "synchronous-commit-off"}
    assert weak["wal-compression"] == ("weak evidence: wal-write from one 1-s dip at "
                                       "confidence 0.50 only")
    assert all("weak_evidence" not in r for r in analysis["recommendations"])
    # writeback: the run's top cause is itself one 1-s spike at 0.50; its advice is all
    # the run has, given and said to be weak
    (rec,) = _analysis("writeback")["recommendations"]
    assert rec["weak_evidence"] == ("weak evidence: memory-reclaim from one 1-s "
                                    "latency-spike at confidence 0.50 only"), rec


@pytest.mark.parametrize("name", _samples())
def test_the_top_causes_advice_comes_first(name: str) -> None:
    """When some rule answers the verdict's cause, the first recommendation is one; every
    rule's `because` holds for each cause on its own (checkpoint: wal-compression is
    wal-write's advice there, with no surge of full-page images, and ranks with it)."""
    analysis = _analysis(name)
    verdict = analysis["summary"]["verdict"]
    recs = analysis["recommendations"]
    if verdict and any(verdict["cause"] in r["because"] for r in recs):
        assert verdict["cause"] in recs[0]["because"], (verdict, recs[0])
    if name == "checkpoint":
        (compression,) = [r for r in recs if r["rule"] == "wal-compression"]
        assert compression["because"] == ["wal-write"]
        order = [r["rule"] for r in recs]
        assert order.index("wal-compression") > order.index("dirty-background-bytes")


def test_one_long_holder_is_not_a_hot_row() -> None:
    # long-holder: a psql session updated branch 1's row and sat idle in its transaction
    # for 8 s under TPC-B; 8 sessions queued behind it. It was called hot-row, with the
    # advice to split counter rows, "not testable".
    analysis = _analysis("long-holder")
    worst = _worst(analysis)
    lock = worst["causes"][0]
    assert (lock["cause"], lock.get("sub_cause")) == ("lock-contention", "long-holder"), lock
    assert any("8 session(s) queued on row (1,153) of pgbench_branches behind pid" in line
               and "(psql, postgres), idle in transaction, its transaction open 7.8 s" in line
               for line in lock["evidence"]), lock["evidence"]
    assert any("a long holder" in line for line in lock["evidence"]), lock["evidence"]
    rules = {r["rule"]: r for r in analysis["recommendations"]}
    assert "hot-row" not in rules and "lock-timeout" not in rules, list(rules)
    assert list(rules)[:2] == ["long-holder", "idle-in-transaction-timeout"]
    timeout = rules["idle-in-transaction-timeout"]
    assert timeout["change"] == {"server.settings.idle_in_transaction_session_timeout": "1s"}
    assert "--set server.settings.idle_in_transaction_session_timeout=1s" in timeout["test"]
    assert timeout["test"].startswith("pglab run ")
    # lock contention of no told-apart kind, on a run whose queues' holders were pgbench's
    # own transactions of milliseconds (crash-on-paused-disk's): the long-holder rules'
    # `not when` holds in its lock-queue events
    frames = load_run_frames(RUNS / "crash-on-paused-disk")
    advice = advise(Facts({"lock-contention": 0.9}, frames.manifest, False, frames=frames))
    withheld = {w["rule"]: w["why"] for w in advice.withheld}
    for rule in ("long-holder", "idle-in-transaction-timeout"):
        assert withheld[rule].startswith("not when: no session held a lock queue with its "
                                         "transaction open 2 s or more"), withheld
    assert "hot-row" in [r["rule"] for r in advice.given]


def test_lock_evidence_names_relations_and_databases() -> None:
    # long-holder's probe recorded the OIDs it named (object-names); the log's lock waits
    # give tuple (1,153) of relation 16396 of database 16384
    frames = load_run_frames(RUNS / "long-holder")
    names = object_names(frames)
    logged = _events("long-holder", "lock-wait")["attrs"].to_list()
    tuple_waits = [json.loads(a)["lock_object"] for a in logged if "of relation" in a]
    assert tuple_waits and all(names.name(t, "primary") == "tuple (1,153) of relation "
                               "pgbench_branches of database pglab" for t in tuple_waits)
    # a relation the probe did not see, in its own database and in another one
    assert names.name("relation 99999 of database 16384", "primary") == (
        "relation 99999 of database pglab (unnamed: not seen by db.lockqueue)")
    # lock, recorded before the probe named anything: says so rather than guess
    lock = _worst(_analysis("lock"))["causes"][0]
    assert any("on relation 16392 of database 16384 (unnamed: no names recorded in this "
               "run)" in line for line in lock["evidence"]), lock["evidence"]
    # the hot-row line names the table whose rows the queues were on
    crash = _analysis("crash-on-paused-disk")
    (steady,) = [c for c in crash["steady_state"]["causes"] if c["cause"] == "lock-contention"]
    assert any(line.startswith("waiters queued on the same rows of pgbench_branches ")
               for line in steady["evidence"]), steady["evidence"]


def test_each_checkable_not_when_is_read_from_the_run() -> None:
    """The checks no committed run trips on (this machine's page cache is always dirtier
    than 64 MB; its WAL is mostly full-page images), on a real run's series as they would
    be: dirty memory capped at 40 MB, full-page images a twentieth, the WAL buffers full
    3 times/s; and on a real manifest: the churn run's pgbench threads."""
    data = load_run_frames(RUNS / "dirty-storm")
    causes = {"memory-reclaim": 0.9, "wal-write": 0.9, "checkpoint-io": 0.9}
    metric = pl.col("metric")
    edited = data.timeseries.with_columns(
        pl.when(metric == "dirty_mb").then(pl.col("value").clip(upper_bound=40.0))
        .when(metric == "wal_fpi").then(pl.col("value") / 20)
        .when((metric == "wal_buffers_full") & (pl.col("node") == "primary")).then(pl.lit(3.0))
        .otherwise(pl.col("value")).alias("value"))
    for frames, given, held in (
            (data, {"dirty-background-bytes", "wal-compression"}, {"wal-buffers"}),
            (replace(data, timeseries=edited), {"wal-buffers"},
             {"dirty-background-bytes", "wal-compression"})):
        advice = advise(Facts(causes, data.manifest, False, frames=frames))
        rules = {r["rule"] for r in advice.given}
        withheld = {w["rule"]: w["why"] for w in advice.withheld}
        assert given <= rules and held <= set(withheld) and not held & rules, (rules, withheld)
    assert withheld["dirty-background-bytes"] == (
        "not when: dirty page cache peaked at 40 MB over the whole run, under the 64 MB this "
        "sets: writeback would start no sooner")
    assert withheld["wal-compression"].startswith("not when: full-page images were at most 5% "
                                                  "of the WAL the primary wrote")

    churn = load_run_frames(RUNS / "churn")
    advice = advise(Facts({"client-bound": 0.9}, churn.manifest, False))
    assert [w["why"] for w in advice.withheld if w["rule"] == "pgbench-jobs"] == [
        "not when: pgbench ran 2 threads for 50 clients on 2 cores"]


def test_the_long_holders_advice_is_tested_in_the_lab() -> None:
    """idle-holder: the idle-in-transaction fault holds branch 1's row for 8 s under
    TPC-B; its analysis advises idle_in_transaction_session_timeout with a test line;
    idle-holder-timeout is that test line's run: the server ended the idle session, and
    the stall behind it went with it."""
    held = _analysis("idle-holder")
    worst = _worst(held)
    assert (worst["causes"][0]["cause"], worst["causes"][0].get("sub_cause")) == (
        "lock-contention", "long-holder"), worst["causes"][0]
    rules = {r["rule"]: r for r in held["recommendations"]}
    assert list(rules)[:2] == ["long-holder", "idle-in-transaction-timeout"], list(rules)
    test = shlex.split(rules["idle-in-transaction-timeout"]["test"])
    assert test[-2:] == ["--set", "server.settings.idle_in_transaction_session_timeout=1s"]
    # the log's lock waits name the tuple's relation and database, from the probe's names
    assert any("tuple (" in line and "of relation pgbench_branches of database pglab" in line
               for c in held["steady_state"]["causes"] for line in c["evidence"])

    fixed_manifest = json.loads((RUNS / "idle-holder-timeout" / "manifest.json").read_text())
    assert fixed_manifest["overrides"] == {
        "server.settings.idle_in_transaction_session_timeout": "1s"}
    (fault,) = [f for f in fixed_manifest["faults"] if f["kind"] == "fault"]
    assert json.loads(fault["attrs"])["ended_by_server"] == (
        "terminating connection due to idle-in-transaction timeout")
    fixed = _analysis("idle-holder-timeout")
    assert all(c.get("sub_cause") != "long-holder" for s in fixed["stalls"]
               for c in s["causes"]), fixed["stalls"]
    lost, lost_fixed = (a["summary"]["deficit_transactions"] for a in (held, fixed))
    assert lost_fixed < lost / 4, (lost, lost_fixed)


# --- the field reports' answers among the advice (issue 34) ------------------------------


def _with_volumes(tmp_path: Path, name: str, volumes: list[dict[str, Any]],
                  **settings: str) -> dict[str, Any]:
    """The sample's analysis as if its primary had run on these volumes (the manifest's
    storage records, as storage/volume.py writes them) with these settings: the rest,
    its stalls and their evidence, is the real run's."""
    copy = tmp_path / name
    shutil.copytree(RUNS / name, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["nodes"]["primary"]["storage"] = volumes
    for key, value in settings.items():
        manifest["nodes"]["primary"]["settings"][key] = {"setting": value, "unit": None}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return build_analysis(load_run_frames(copy)).to_json()


def _volume(role: str, filesystem: str, size: int = 2 * 2**30,
            kind: str = "image") -> dict[str, Any]:
    return {"role": role, "filesystem": filesystem, "size_bytes": size, "kind": kind,
            "options_asked": {}, "options": {}, "device": {"kind": "emulated",
                                                           "write_mbps": 8.0}}


def test_xfs_for_pg_wal_is_testable_on_an_ext4_volume_the_lab_made(tmp_path: Path) -> None:
    """The Kubernetes report ended on XFS with wal_init_zero = off: on an ext4 volume
    pglab made, the filesystem is a scenario key, so tune can test it. With zero-filling
    on, XFS writes the same zeros as ext4, and zero-filling off alone costs TPS on ext4
    (a tune here: stall seconds -67%, TPS -22%): the change is the pair."""
    data = _with_volumes(tmp_path, "walinit", [_volume("data", "ext4")])
    rules = {r["rule"]: r for r in data["recommendations"]}
    xfs = rules["wal-filesystem-xfs"]
    assert xfs["change"] == {"storage.filesystem": "xfs", "server.settings.wal_init_zero": "off"}
    assert xfs["test"].startswith("pglab run") and "--set storage.filesystem=xfs" in xfs["test"]
    assert "--set server.settings.wal_init_zero=off" in xfs["test"]
    assert xfs["because"] == ["wal-segment-init"]
    # within tune's --top 3, beside zero-filling off alone (the pair's control)
    assert [r["rule"] for r in data["recommendations"]][:3] == [
        "wal-init-zero-off", "wal-filesystem-xfs", "wal-recycle"]
    # zero-filling off already: the filesystem alone
    off = _with_volumes(tmp_path / "off", "walinit", [_volume("data", "ext4")],
                        wal_init_zero="off")
    (xfs,) = [r for r in off["recommendations"] if r["rule"] == "wal-filesystem-xfs"]
    assert xfs["change"] == {"storage.filesystem": "xfs"}
    # pg_wal on a volume of its own: that volume changes; one under XFS's 300 MB grows
    wal = _with_volumes(tmp_path / "w", "walinit",
                        [_volume("data", "ext4"), _volume("wal", "ext4", 256 * 2**20)],
                        wal_init_zero="off")
    (xfs,) = [r for r in wal["recommendations"] if r["rule"] == "wal-filesystem-xfs"]
    assert xfs["change"] == {"storage.wal.filesystem": "xfs", "storage.wal.size": "300MB"}


def test_xfs_for_pg_wal_is_advice_only_where_the_lab_cannot_remake_the_filesystem(
        tmp_path: Path) -> None:
    """The sample's own run had pg_wal in the lab's directory on the host's ext4; and a
    mount pglab did not make (storage.path) is used as it is."""
    on_host = {r["rule"]: r for r in _analysis("walinit")["recommendations"]}
    mount = _with_volumes(tmp_path, "walinit", [_volume("data", "ext4", kind="path")])
    for advice in (on_host, {r["rule"]: r for r in mount["recommendations"]}):
        xfs = advice["wal-filesystem-xfs"]
        assert xfs["change"] == {} and xfs["test"] == "not testable by pglab on this machine"
        assert "[storage]" in xfs["not_testable_because"]


@pytest.mark.parametrize("name", ["wal-own-volume-slow", "sync-slow-disk", "checkpoint",
                                  "lock", "control"])
def test_xfs_for_pg_wal_is_not_advised_elsewhere(name: str) -> None:
    """wal-own-volume-slow stalled creating segments on XFS volumes already; the others
    are no WAL-segment stall."""
    assert "wal-filesystem-xfs" not in [r["rule"] for r in _analysis(name)["recommendations"]]


def test_xfs_answers_a_wal_write_stall_only_with_sparse_segments() -> None:
    """For wal-write: with wal_init_zero off each first write into a sparse segment
    allocates a block; with it on no segment is sparse."""
    manifest = json.loads((RUNS / "walinit" / "manifest.json").read_text())
    manifest["nodes"]["primary"]["storage"] = [_volume("data", "ext4")]
    settings = manifest["nodes"]["primary"]["settings"]
    for zero, fires in (("on", False), ("off", True)):
        settings["wal_init_zero"] = {"setting": zero, "unit": None}
        facts = Facts({"wal-write": 0.9}, Manifest.from_json(manifest), False)
        given = [r["rule"] for r in recommend(facts)]
        assert ("wal-filesystem-xfs" in given) is fires, (zero, given)


def test_a_slower_vacuum_is_advised_only_where_a_vacuum_ran() -> None:
    """The HA investigation mitigated a standby that could not keep up with a bulk update
    and VACUUM's WAL by making vacuum slower. The committed sync-slow-disk runs stalled on
    a bulk UPDATE alone (their VACUUM fault was after the shortened run's end; only
    instant autovacuums of catalogs ended in them): the rule is withheld there, with what
    the series showed."""
    for name in ("sync-slow-disk", "sync-slow-disk-kernel"):
        advice = _analysis(name)
        assert "vacuum-cost-delay" not in [r["rule"] for r in advice["recommendations"]]
        (withheld,) = [w for w in advice["withheld"] if w["rule"] == "vacuum-cost-delay"]
        assert "no vacuum was running on the primary in any of" in withheld["why"], withheld
        assert "the longest that ended took 0.00 s" in withheld["why"], withheld
    # a bulk update, a checkpoint, then VACUUM of its rows: 1.2 s, its WAL a burst of
    # full-page images that stopped commits again
    rules = {r["rule"]: r for r in _analysis("sync-slow-disk-vacuum")["recommendations"]}
    slower = rules["vacuum-cost-delay"]
    assert slower["change"]["server.settings.vacuum_cost_delay"] == "10ms"  # manual VACUUM
    assert slower["change"]["server.settings.autovacuum_vacuum_cost_delay"] == "10ms"
    assert slower["test"].startswith("pglab run sync-standby-slow-disk")
    assert slower["sub_causes"] == ["standby-slow-disk"]
    for name in ("sync-paused", "walinit", "control"):  # another sub-cause, another cause
        advice = _analysis(name)
        assert "vacuum-cost-delay" not in [r["rule"] for r in advice["recommendations"]]
        assert "vacuum-cost-delay" not in [w["rule"] for w in advice["withheld"]]


@pytest.mark.parametrize("name", ["net-far-standby", "wal-own-volume-slow", "net-partition"])
def test_a_matrix_points_test_command_is_that_point_with_the_change(name: str,
                                                                     tmp_path: Path) -> None:
    """A run that was one point of a matrix: each `test` line runs that point once, with the
    change, not every point again (whose own values would override the change)."""
    from pglab.scenario.builtin import load_builtin

    folder = shutil.copytree(RUNS / name, tmp_path / name)
    analysis = analyze_run(folder).document.to_json()
    testable = [r for r in analysis["recommendations"] if r["test"].startswith("pglab run ")
                and not any(k.startswith("kernel.") for k in r["change"])]
    assert testable, analysis["recommendations"]
    for advice in testable:
        argv = shlex.split(advice["test"])
        overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        loaded = load_builtin(argv[2], overrides)
        assert len(loaded.variants) == 1, advice["test"]
        assert not loaded.variants[0].overrides, advice["test"]  # no matrix point over it
        for key, value in advice["change"].items():
            node: Any = loaded.raw
            for part in key.split("."):
                node = node[int(part)] if isinstance(node, list) else node[part]
            assert node == value, (advice["test"], key, node)
