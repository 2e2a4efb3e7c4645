"""A standby's lag in seconds grows while it is silent: the series, the report, the evidence.

pg_stat_replication's flush_lag is measured when a standby's reply arrives, so a standby
that stops answering keeps its last value. The sample `sync-paused-behind` is a real run
of the built-in sync-standby-paused (the standby SIGSTOPped for 6 s).
"""

from __future__ import annotations

import re
from itertools import pairwise

import polars as pl

from conftest import SAMPLES
from pglab.analysis.analyze import build_analysis
from pglab.analysis.loading import load_run_frames
from pglab.probes.wal_clock import WalClock
from pglab.report.model import build_model

RUN = SAMPLES / "runs" / "sync-paused-behind"


def test_the_wal_clock_dates_a_position_between_its_samples() -> None:
    clock = WalClock()
    for t, lsn in ((0.0, 1000.0), (1.0, 1000.0), (2.0, 3000.0), (3.0, 3000.0)):
        clock.add(t, lsn)
    # WAL past 1000 was written between the samples at 1 s and 2 s: halfway for 2000
    assert clock.written_at(2000.0) == 1.5
    assert clock.written_at(1000.0) == 1.0  # the first byte after 1000, idle until 1 s
    assert clock.written_at(3000.0) is None  # nothing written past it yet
    assert clock.behind_s(3.0, 2000.0) == 1.5
    assert clock.behind_s(3.0, 3000.0) == 0.0
    assert clock.behind_s(10.0, 0.0) == 10.0  # older than every sample: at least that


def test_the_wal_clock_starts_anew_when_the_position_goes_back() -> None:
    clock = WalClock()
    clock.add(0.0, 5000.0)
    clock.add(1.0, 6000.0)
    clock.add(2.0, 100.0)  # another server (a restarted lab's, a failover)
    assert clock.written_at(50.0) == 2.0
    assert clock.written_at(5500.0) is None


def _lag(metric: str) -> pl.DataFrame:
    ts = pl.read_parquet(RUN / "timeseries.parquet")
    return ts.filter(pl.col("node") == "primary", pl.col("source") == "db.replication",
                     pl.col("metric") == metric, pl.col("label") == "standby1").sort("t")


def _pause() -> tuple[float, float]:
    events = pl.read_parquet(RUN / "events.parquet").filter(pl.col("kind") == "fault")
    row = events.row(0, named=True)
    return row["t_start"].timestamp(), row["t_end"].timestamp()


def test_the_seconds_behind_grow_while_the_standby_is_silent() -> None:
    start, end = _pause()
    # an interval probe's sample is stamped with the start of the second it was read at
    # the end of
    behind = _lag("flush_behind_s").with_columns(read=pl.col("t").dt.epoch("ms") / 1000 + 1)
    frozen = _lag("flush_lag_s")
    silent = behind.filter(pl.col("read") > start, pl.col("read") < end)
    assert silent.height >= 4
    values = silent["value"].to_list()
    # one second more at each one-second sample, as long as no reply came
    steps = [b - a for a, b in pairwise(values)]
    assert all(0.9 < step < 1.1 for step in steps), values
    assert max(values) > 4.0
    # what pg_stat_replication said meanwhile: its last reply's value, under 0.1 s
    said = frozen.filter(pl.col("t").is_in(silent["t"].implode()))["value"].to_list()
    assert said and max(said) < 0.1
    # and after the standby answered again, it is caught up within a second
    after = behind.filter(pl.col("read") > end + 1)["value"].to_list()
    assert after and max(after) < 1.0


def test_the_stall_evidence_and_the_report_show_the_lag_that_grew() -> None:
    analysis = build_analysis(load_run_frames(RUN)).to_json()
    worst = max(analysis["stalls"], key=lambda s: s["deficit_transactions"])
    sync = next(c for c in worst["causes"] if c["cause"] == "sync-replication")
    lines = [line for line in sync["evidence"] if "behind in confirming WAL flushed" in line]
    assert lines, sync["evidence"]
    peak = float(re.search(r"up to ([\d.]+) s", lines[0]).group(1))  # type: ignore[union-attr]
    assert peak > 4.0
    chart = next(c for c in build_model(RUN).timeline["charts"] if c["id"] == "replication")
    flush = next(s for s in chart["series"] if s["n"] == "flush lag standby1")
    assert max(v for v in flush["y"] if v is not None) > 4.0
