"""terminal/telemetry_summary.py on committed runs (tests/samples/runs/, made by
make_runs.py): the peak disk write is the node's volume devices' when it has some (the
host disk under them also carries their image files and other programs' writes)."""

from __future__ import annotations

import polars as pl

from conftest import SAMPLES
from pglab.results.folder import load_run
from pglab.terminal.telemetry_summary import summarize, summary_lines

RUNS = SAMPLES / "runs"


def _writes(run: str) -> pl.DataFrame:
    return pl.read_parquet(RUNS / run / "timeseries.parquet").filter(
        (pl.col("source") == "os.disk") & (pl.col("metric") == "write_mbps"))


def test_a_run_on_a_volume_peaks_on_its_device() -> None:
    summary = summarize(load_run(RUNS / "power-loss-honest"))
    assert summary is not None and summary.peak_disk_devices == ["loop0"]
    loop = _writes("power-loss-honest").filter(pl.col("label") == "loop0")
    assert summary.peak_disk_write_mbps == round(float(loop["value"].max()), 1)  # type: ignore[arg-type]
    assert summary.peak_disk_write_mbps is not None
    assert f"disk write {summary.peak_disk_write_mbps} MB/s (loop0)" in " ".join(
        summary_lines(summary))


def test_a_run_on_the_host_directory_peaks_over_its_disks() -> None:
    summary = summarize(load_run(RUNS / "checkpoint"))
    assert summary is not None and summary.peak_disk_devices == []
    per_second = _writes("checkpoint").group_by("t").agg(pl.col("value").sum())
    assert summary.peak_disk_write_mbps == round(float(per_second["value"].max()), 1)  # type: ignore[arg-type]
