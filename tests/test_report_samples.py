"""report.html's scenario table, the primary's own charts and the PNG export, offline on
the committed sample runs (tests/samples/runs, real runs; the browser tests are in
test_report.py, on a live run)."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

from conftest import SAMPLES
from pglab.analysis.analyze import analyze_run
from pglab.report.model import ReportModel, build_model
from pglab.report.page import _scenario
from pglab.report.png import figures, write_pngs

RUNS = sorted(p for p in (SAMPLES / "runs").iterdir() if p.is_dir())
POSTGRES_CHARTS = ("wal", "checkpoint_buffers", "connections", "pg_stat_io")


def _rows(run: Path) -> dict[str, str]:
    """The scenario table as {key: its text}, its lines joined by newlines."""
    table = _scenario(build_model(run)).split("<details>")[0]
    cells = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td></tr>", table)
    return {html.unescape(k): html.unescape(v.replace("<br>", "\n")) for k, v in cells}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> ReportModel:
    """The `checkpoint` sample, analysed: a CHECKPOINT after 30 s of dirtying, a stall."""
    run = tmp_path_factory.mktemp("report") / "checkpoint"
    shutil.copytree(SAMPLES / "runs" / "checkpoint", run)
    analyze_run(run)
    return build_model(run)


def test_the_scenario_table_shows_nested_tables_as_rows() -> None:
    """Topology, envelope and faults are rows, not raw JSON ({"cpus": null, ...})."""
    for run in RUNS:
        rows = _rows(run)
        text = "\n".join(rows.values())
        assert not re.search(r'[{,]\s*"|\bnull\b|\bNone\b|\': ', text), (run.name, rows)
    storm = _rows(SAMPLES / "runs" / "dirty-storm")
    assert storm["envelope"] == "memory = 2,048 MiB\ndisk.write_mbps = 24", storm
    assert storm["topology"] == "one server, no pooler"  # every key at its default
    assert storm["faults"] == "checkpoint of primary at 6 s"
    assert storm["clients"] == "16" and storm["duration"] == "15 s (warmup 2 s)"
    paused = _rows(SAMPLES / "runs" / "sync-paused")
    assert paused["topology"] == "standbys = 1\nsynchronous = on", paused  # no pool_size
    assert paused["envelope"] == "no limits (the host's resources)"
    assert paused["faults"] == "pause-standby of standby1 at 4 s for 6 s"
    crash = _rows(SAMPLES / "runs" / "crash-on-paused-disk")
    assert crash["faults"] == ("pause-disk of primary at 2 s for 15 s\n"
                               "crash of primary at 3 s for 1 s"), crash
    control = _rows(SAMPLES / "runs" / "control")  # an older manifest: limits of 0, unset
    assert control["envelope"] == "no limits (the host's resources)", control


def test_the_primarys_own_series_are_drawn_with_the_stall(checkpoint: ReportModel) -> None:
    """WAL, buffers written, connections by state and pg_stat_io were recorded and never
    drawn: the checkpoint's buffers are where the stall is."""
    charts = {c["id"]: c for c in checkpoint.timeline["charts"]}
    assert set(POSTGRES_CHARTS) <= set(charts), sorted(charts)
    stalls = checkpoint.timeline["stalls"]
    assert stalls
    buffers = charts["checkpoint_buffers"]
    by_checkpoints = next(s for s in buffers["series"] if s["n"] == "by checkpoints")["y"]
    peak = max(range(len(by_checkpoints)), key=lambda i: by_checkpoints[i] or 0)
    # counted when the checkpoint ended: the second after its writes at the latest
    assert any(start - 1 <= buffers["x"][peak] <= end + 1 for start, end, _ in stalls), (
        buffers["x"][peak], stalls)
    assert by_checkpoints[peak] > 10_000  # 30 s of dirtying at scale 30
    io = charts["pg_stat_io"]
    assert "checkpointer relation write" in [s["n"] for s in io["series"]]
    states = [s["n"] for s in charts["connections"]["series"]]
    assert states[:2] == ["active", "idle"] and all(s["s"] for s in charts["connections"]
                                                    ["series"])
    assert "Temporary files: none written" in checkpoint.notes  # recorded, all zeros


def test_png_legends_sit_beside_the_plot_and_mark_the_stall(checkpoint: ReportModel,
                                                            tmp_path: Path) -> None:
    """A legend inside the axes covered the data it named."""
    seen = []
    for chart_id, fig in figures(checkpoint):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        (ax,) = fig.axes
        legend = ax.get_legend()
        box, plot = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.x0 >= plot.x1, (chart_id, box, plot)  # right of the plot ...
        assert box.x1 <= fig.bbox.x1 and box.y0 >= 0, (chart_id, box)  # ... in the image
        labels = [t.get_text() for t in legend.get_texts()]
        assert labels[-1] == "stall", (chart_id, labels)
        # every file on the run's one time axis, so the stall lines up across them
        seen.append((chart_id, ax.get_xlim()))
    assert {c for c, _ in seen} >= {"tps", "waits", *POSTGRES_CHARTS}, seen
    assert len({limits for _, limits in seen}) == 1, seen
    written = write_pngs(checkpoint, tmp_path)
    assert [p.stem for p in written] == [c for c, _ in seen]
