"""PNG export of the report's main charts, for CI artifacts and READMEs.

matplotlib (Agg backend, no display, no browser): it installs with pip alone, so
`pglab report RUN --png DIR` works on a fresh machine and in CI containers. The charts
are drawn from the same model as report.html, with the same colours and stall bands.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pglab.errors import EnvironmentProblem
from pglab.report.model import ReportModel

LEGEND_AT = 0.76  # the plot's right edge, as a fraction of the figure's width
# The charts worth a picture, in report order.
MAIN_CHARTS = ("tps", "latency", "waits", "wal", "checkpoint_buffers", "connections",
               "temp_files", "pg_stat_io", "cpu", "disk_mbps", "memory", "replication")


def _times(t0: int, xs: list[int]) -> list[dt.datetime]:
    return [dt.datetime.fromtimestamp(t0 + x, dt.timezone.utc) for x in xs]


def _draw(ax: Any, chart: dict[str, Any], timeline: dict[str, Any]) -> None:
    t0 = timeline["t0"]
    when = _times(t0, chart["x"])
    bottom = [0.0] * len(when)
    for series in chart["series"]:
        if series.get("h"):
            continue
        ys = [v if v is not None else math.nan for v in series["y"]]
        if series.get("s"):
            top = [b + (0.0 if math.isnan(v) else v) for b, v in zip(bottom, ys, strict=True)]
            ax.fill_between(when, bottom, top, color=series["c"], alpha=0.8, linewidth=0,
                            label=series["n"])
            bottom = top
        else:
            ax.plot(when, ys, color=series["c"], linewidth=1.4, label=series["n"],
                    linestyle="--" if series.get("d") else "-")
    for label, value in chart["limits"]:
        ax.axhline(value, color="#d62728", linestyle="--", linewidth=1.2, label=label)
    for index, (start, end, _) in enumerate(timeline["stalls"]):
        ax.axvspan(*_times(t0, [start, end]), color="#d9534f", alpha=0.18, linewidth=0,
                   label="stall" if index == 0 else None)
    # every file on the run's one time axis, as the page's charts are: a stall lines up
    ax.set_xlim(*_times(t0, [0, timeline["xmax"]]))
    if chart.get("ymax"):
        ax.set_ylim(0, chart["ymax"])
    else:
        ax.set_ylim(bottom=0)
    ax.set_title(chart["title"], loc="left", fontsize=11)
    ax.set_ylabel(chart["unit"])
    ax.grid(True, color="#eeeeee")
    # Beside the plot, never on it: a legend inside the axes covers the data it names.
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=8,
              frameon=False)


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # a dependency, but a broken install should say so plainly
        raise EnvironmentProblem(f"PNG export needs matplotlib ({exc})") from None
    return plt


def figures(model: ReportModel) -> Iterator[tuple[str, Any]]:
    """(chart id, matplotlib figure) of each main chart the run has; each figure is
    closed when the next is asked for (and at the end)."""
    import matplotlib.dates as mdates

    plt = _pyplot()
    charts = {c["id"]: c for c in model.timeline["charts"]}
    for chart_id in MAIN_CHARTS:
        chart = charts.get(chart_id)
        if chart is None or not chart["x"]:
            continue
        fig, ax = plt.subplots(figsize=(12, 3.2), dpi=100)
        try:
            _draw(ax, chart, model.timeline)
            ax.xaxis.set_major_formatter(
                mdates.DateFormatter("%H:%M:%S", tz=dt.timezone.utc))  # type: ignore[no-untyped-call]
            ax.set_xlabel("UTC")
            # the same plot area in every file, the legend in the room on the right
            fig.subplots_adjust(left=0.07, right=LEGEND_AT, top=0.88, bottom=0.16)
            yield chart_id, fig
        finally:
            plt.close(fig)


def write_pngs(model: ReportModel, out_dir: Path) -> list[Path]:
    """One PNG per main chart the run has; returns the files written."""
    _pyplot()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"{out_dir}: cannot create ({exc.strerror})") from None
    written = []
    for chart_id, fig in figures(model):
        path = out_dir / f"{chart_id}.png"
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        tmp = path.with_name(f".{path.name}.tmp")  # whole files only, as everywhere
        tmp.write_bytes(buffer.getvalue())
        os.replace(tmp, path)
        written.append(path)
    return written
