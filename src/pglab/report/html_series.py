"""Time series for the HTML report: from a run's Parquet files to compact chart columns.

Every chart shares one time axis: seconds since `t0` (the first second of the run's
data). Values are rounded to 3 significant digits and long series are averaged into
buckets, so an hour of 1 s data with 10 Hz wait samples stays a few hundred kB of JSON.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

# A chart never needs more points than a wide screen has pixels; beyond this, buckets.
MAX_POINTS = 3600

# One colour per wait class, the same in every chart and table of every report.
WAIT_CLASS_COLORS = {
    "CPU": "#2e9e44",
    "IO": "#1f6fd1",
    "LWLock": "#d9534f",
    "Lock": "#e8871e",
    "IPC": "#8e5cc2",
    "Client": "#7f8c8d",
    "Timeout": "#c9b400",
    "BufferPin": "#a0522d",
    "Extension": "#17becf",
    "Activity": "#bcbd22",
    "InjectionPoint": "#444444",
}
WAIT_CLASS_ORDER = list(WAIT_CLASS_COLORS)
PALETTE = ["#1f6fd1", "#e8871e", "#2e9e44", "#d9534f", "#8e5cc2", "#a0522d", "#e377c2",
           "#7f8c8d", "#c9b400", "#17becf"]


def round3(value: float | None) -> float | None:
    """3 significant digits: what a chart can show, and a third of the JSON."""
    if value is None or not math.isfinite(value):
        return None
    if value == 0:
        return 0
    digits = 2 - math.floor(math.log10(abs(value)))
    rounded = round(value, digits)
    return int(rounded) if digits <= 0 else rounded


@dataclass
class Series:
    name: str
    y: list[float | None]
    color: str
    stack: bool = False  # stacked with the chart's other stacked series
    dash: bool = False
    hidden: bool = False  # off until its legend entry is clicked (e.g. latency max)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.name, "c": self.color, "y": self.y}
        if self.stack:
            out["s"] = 1
        if self.dash:
            out["d"] = 1
        if self.hidden:
            out["h"] = 1
        return out


@dataclass
class Chart:
    id: str
    title: str
    unit: str
    x: list[int]  # seconds since t0
    series: list[Series] = field(default_factory=list)
    limits: list[tuple[str, float]] = field(default_factory=list)  # drawn as red lines
    note: str = ""
    ymax: float | None = None  # a fixed top (percentages); otherwise from the visible data

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "unit": self.unit, "x": self.x,
                "series": [s.to_json() for s in self.series],
                "limits": [[label, value] for label, value in self.limits],
                "note": self.note, "ymax": self.ymax}


def seconds_since(t: pl.Expr, t0_us: int) -> pl.Expr:
    return ((t.dt.epoch("us") - t0_us) // 1_000_000).cast(pl.Int64())


def _compact(values: list[float | None]) -> list[float | None]:
    # 1500 rather than 1500.0: a fifth of the bytes of a typical column
    return [int(v) if v is not None and v.is_integer() else v for v in values]


def bucketed(x: Sequence[int], columns: dict[str, list[float | None]]
             ) -> tuple[list[int], dict[str, list[float | None]]]:
    """Columns rounded to 3 significant digits; averaged into buckets beyond MAX_POINTS.

    Non-finite values become None (JSON has no NaN).
    """
    names = list(columns)
    frame = pl.DataFrame(
        [pl.Series("x", list(x), dtype=pl.Int64())]
        + [pl.Series(f"c{i}", columns[n], dtype=pl.Float64(), strict=False)
           for i, n in enumerate(names)])
    values = [f"c{i}" for i in range(len(names))]
    if frame.height > MAX_POINTS:
        size = math.ceil(frame.height / MAX_POINTS)
        frame = (frame.with_row_index("i")
                 .group_by(pl.col("i") // size, maintain_order=True)
                 .agg(pl.col("x").first(), *[pl.col(c).mean() for c in values]))
    frame = frame.with_columns(
        pl.when(pl.col(c).is_finite()).then(pl.col(c).round_sig_figs(3)).alias(c)
        for c in values)
    return (frame["x"].to_list(),
            {n: _compact(frame[c].to_list()) for n, c in zip(names, values, strict=True)})


def wide(frame: pl.DataFrame, key: str, x_all: list[int]) -> dict[str, list[float | None]]:
    """Long (x, key, value) rows -> one list per key aligned on x_all (None where absent)."""
    if frame.is_empty():
        return {}
    pivoted = (frame.select(pl.col("x").cast(pl.Int64()), pl.col(key).cast(pl.String()),
                            pl.col("value").cast(pl.Float64()))
               .pivot(on=key, index="x", values="value", aggregate_function="first"))
    full = pl.DataFrame({"x": x_all}, schema={"x": pl.Int64()}).join(
        pivoted, on="x", how="left", maintain_order="left")
    return {c: full[c].to_list() for c in full.columns if c != "x"}


def metric_rows(ts: pl.DataFrame, source: str, metrics: Sequence[str], t0_us: int,
                node: str | None = None) -> pl.DataFrame:
    """Rows of these metrics with x (seconds since t0), averaged per second and label."""
    rows = ts.filter((pl.col("source") == source) & pl.col("metric").is_in(list(metrics)))
    if node is not None:
        rows = rows.filter(pl.col("node") == node)
    return (rows.with_columns(seconds_since(pl.col("t"), t0_us).alias("x"))
            .group_by("x", "node", "metric", "label").agg(pl.col("value").mean())
            .sort("x"))


def line_chart(ts: pl.DataFrame, t0_us: int, chart_id: str, title: str, unit: str,
               source: str, metrics: dict[str, str], node: str | None = None,
               stack: bool = False, per_label: bool = False) -> Chart | None:
    """A chart with one series per metric (or per metric and label), None without data.

    `metrics` maps metric -> display name.
    """
    rows = metric_rows(ts, source, list(metrics), t0_us, node)
    if rows.is_empty():
        return None
    labels = sorted({str(v) for v in rows["label"].unique().to_list()})
    show_label = per_label or len(labels) > 1

    def name(metric: str, label: str) -> str:
        return f"{metrics[metric]} {label}".strip() if show_label else metrics[metric]

    display = pl.col("metric").replace_strict(metrics, return_dtype=pl.String())
    named = rows.with_columns(
        (display + " " + pl.col("label")).str.strip_chars().alias("name") if show_label
        else display.alias("name"))
    # one device seen from two nodes is still one device: mean, not sum, over nodes
    named = named.group_by("x", "name").agg(pl.col("value").mean())
    x_all = sorted(set(named["x"].to_list()))
    columns = wide(named, "name", x_all)
    order = list(dict.fromkeys(name(m, lb) for m in metrics for lb in labels))
    x, columns = bucketed(x_all, {n: columns[n] for n in order if n in columns})
    chart = Chart(chart_id, title, unit, x)
    for i, key in enumerate(columns):
        chart.series.append(Series(key, columns[key], PALETTE[i % len(PALETTE)], stack=stack))
    return chart


def wait_class(event: str) -> str:
    return event.split(":", 1)[0]


def wait_charts(ts: pl.DataFrame, t0_us: int) -> tuple[Chart | None, list[dict[str, Any]]]:
    """Average active sessions per second, stacked by wait class; the top wait events.

    Per second: the sum of a class's counts over the number of reads in that second,
    which is the mean number of busy processes in that class (docs/TELEMETRY.md).
    """
    waits = ts.filter((pl.col("source") == "db.waits") & (pl.col("node") == "primary"))
    if waits.is_empty():
        return None, []
    waits = waits.with_columns(seconds_since(pl.col("t"), t0_us).alias("x"))
    reads = (waits.filter(pl.col("metric") == "sampled").group_by("x")
             .agg(pl.col("t").n_unique().alias("reads")))
    counts = waits.filter(pl.col("metric") != "sampled").with_columns(
        pl.col("metric").str.split(":").list.first().alias("cls"))
    per_class = (counts.group_by("x", "cls").agg(pl.col("value").sum())
                 .join(reads, on="x").with_columns(pl.col("value") / pl.col("reads")))
    x_all = sorted(set(reads["x"].to_list()))
    columns = wide(per_class, "cls", x_all)
    for column in columns.values():  # a read with nothing in a class is a zero, not a gap
        column[:] = [0.0 if v is None else v for v in column]
    order = [c for c in WAIT_CLASS_ORDER if c in columns]
    order += sorted(c for c in columns if c not in order)
    x, columns = bucketed(x_all, {c: columns[c] for c in order})
    chart = Chart("waits", "Wait events (average active sessions by class)", "sessions", x)
    for cls in order:
        chart.series.append(Series(cls, columns[cls], WAIT_CLASS_COLORS.get(cls, "#999999"),
                                   stack=True))
    total_reads = int(reads["reads"].sum())
    top = (counts.group_by("metric").agg(pl.col("value").sum()).sort("value", descending=True)
           .head(15))
    table = [{"event": str(m), "cls": wait_class(str(m)),
              "color": WAIT_CLASS_COLORS.get(wait_class(str(m)), "#999999"),
              "aas": round3(float(v) / total_reads) if total_reads else None}
             for m, v in top.iter_rows()]
    total = float(waits.filter(pl.col("metric") == "sampled")["value"].sum()) or 1.0
    for row, (_, v) in zip(table, top.iter_rows(), strict=True):
        row["share"] = round3(100.0 * float(v) / total)
    return chart, table
