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
from pathlib import Path
from typing import Any

from pglab.errors import EnvironmentProblem
from pglab.report.model import ReportModel

# The charts worth a picture, in report order.
MAIN_CHARTS = ("tps", "latency", "waits", "cpu", "disk_mbps", "memory", "replication")


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
    for start, end, _ in timeline["stalls"]:
        ax.axvspan(*_times(t0, [start, end]), color="#d9534f", alpha=0.18, linewidth=0)
    if chart.get("ymax"):
        ax.set_ylim(0, chart["ymax"])
    else:
        ax.set_ylim(bottom=0)
    ax.set_title(chart["title"], loc="left", fontsize=11)
    ax.set_ylabel(chart["unit"])
    ax.grid(True, color="#eeeeee")
    ax.legend(loc="upper right", fontsize=8, ncol=4, frameon=False)


def write_pngs(model: ReportModel, out_dir: Path) -> list[Path]:
    """One PNG per main chart the run has; returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt
    except ImportError as exc:  # a dependency, but a broken install should say so plainly
        raise EnvironmentProblem(f"PNG export needs matplotlib ({exc})") from None
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(f"{out_dir}: cannot create ({exc.strerror})") from None
    charts = {c["id"]: c for c in model.timeline["charts"]}
    written = []
    for chart_id in MAIN_CHARTS:
        chart = charts.get(chart_id)
        if chart is None or not chart["x"]:
            continue
        fig, ax = plt.subplots(figsize=(10, 3.2), dpi=100)
        try:
            _draw(ax, chart, model.timeline)
            ax.xaxis.set_major_formatter(
                mdates.DateFormatter("%H:%M:%S", tz=dt.timezone.utc))  # type: ignore[no-untyped-call]
            ax.set_xlabel("UTC")
            fig.tight_layout()
            path = out_dir / f"{chart_id}.png"
            buffer = io.BytesIO()
            fig.savefig(buffer, format="png")
            tmp = path.with_name(f".{path.name}.tmp")  # whole files only, as everywhere
            tmp.write_bytes(buffer.getvalue())
            os.replace(tmp, path)
            written.append(path)
        finally:
            plt.close(fig)
    return written
