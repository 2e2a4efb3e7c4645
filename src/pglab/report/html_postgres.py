"""The primary's own activity for the report, on the shared time axis: WAL written,
connections by state, buffers written by checkpoints and by others, temporary files and
pg_stat_io. These explain a stall from PostgreSQL's side (a checkpoint's write burst, a
flood of WAL, sessions piling up idle in transaction, a query spilling to disk), beside
the wait events and the disk that show its effect.

Counters are per-second rates already (docs/TELEMETRY.md). pg_stat_io and the temporary
files keep only non-zero rates, so a second without a row is a zero, not a gap; a chart
whose every value is zero is left out with a note (nothing happened there).
"""

from __future__ import annotations

import polars as pl

from pglab.report.html_series import (
    PALETTE,
    Chart,
    Series,
    bucketed,
    metric_rows,
    seconds_since,
    wide,
)

NODE = "primary"
MIB = 1024 * 1024
IO_TOP = 7  # pg_stat_io series drawn; the rest stack as "other"
# Colours that say the state at a glance: working, idle, holding a transaction open.
STATE_COLORS = {"active": "#2e9e44", "idle": "#cccccc", "idle in transaction": "#e8871e",
                "idle in transaction (aborted)": "#d9534f", "fastpath function call": "#8e5cc2",
                "disabled": "#7f8c8d"}


def _seconds(ts: pl.DataFrame, t0_us: int) -> list[int]:
    """The seconds the primary's interval probes covered: the axis a sparse series (only
    its non-zero rates recorded) is zero on where it has no row."""
    probes = ts.filter((pl.col("node") == NODE) & pl.col("source").is_in(
        ["db.database", "db.wal", "db.checkpointer", "db.backends"]))
    return sorted(set(probes.select(seconds_since(pl.col("t"), t0_us))["t"].to_list()))


def _chart(chart_id: str, title: str, unit: str, x_all: list[int],
           columns: dict[str, list[float | None]], colors: dict[str, str] | None = None,
           stack: bool = False, zero_fill: bool = False) -> Chart | None:
    if zero_fill:
        for column in columns.values():
            column[:] = [0.0 if v is None else v for v in column]
    if not any(v for column in columns.values() for v in column):
        return None
    x, columns = bucketed(x_all, columns)
    chart = Chart(chart_id, title, unit, x)
    for i, (name, values) in enumerate(columns.items()):
        color = (colors or {}).get(name, PALETTE[i % len(PALETTE)])
        chart.series.append(Series(name, values, color, stack=stack))
    return chart


def _named(ts: pl.DataFrame, t0_us: int, source: str, metrics: dict[str, str],
           scale: float = 1.0) -> tuple[list[int], dict[str, list[float | None]]]:
    rows = metric_rows(ts, source, list(metrics), t0_us, NODE)
    if rows.is_empty():
        return [], {}
    named = rows.select("x", pl.col("metric").replace_strict(metrics, return_dtype=pl.String())
                        .alias("name"), pl.col("value") * scale)
    x_all = sorted(set(named["x"].to_list()))
    columns = wide(named, "name", x_all)
    return x_all, {n: columns[n] for n in metrics.values() if n in columns}


def _wal(ts: pl.DataFrame, t0_us: int) -> Chart | None:
    x, columns = _named(ts, t0_us, "db.wal", {"wal_bytes": "WAL written"}, 1 / MIB)
    chart = _chart("wal", "WAL written (pg_stat_wal)", "MiB/s", x, columns)
    if chart is not None:
        chart.note = ("after a checkpoint starts, the first change to each page writes the "
                      "whole page (full-page images): WAL rises")
    return chart


def _connections(ts: pl.DataFrame, t0_us: int) -> Chart | None:
    rows = metric_rows(ts, "db.backends", ["backends"], t0_us, NODE).filter(
        pl.col("label").str.starts_with("client backend/"))
    if rows.is_empty():
        return None
    states = rows.select("x", pl.col("label").str.slice(len("client backend/")).alias("state"),
                         "value")
    x_all = sorted(set(states["x"].to_list()))
    columns = wide(states, "state", x_all)
    order = [s for s in STATE_COLORS if s in columns] + sorted(
        s for s in columns if s not in STATE_COLORS)
    chart = _chart("connections", "Client connections by state (pg_stat_activity)",
                   "connections", x_all, {s: columns[s] for s in order}, STATE_COLORS,
                   stack=True, zero_fill=True)
    limit = metric_rows(ts, "db.backends", ["max_connections"], t0_us, NODE)
    highest = None if limit.is_empty() else limit["value"].max()
    if chart is not None and isinstance(highest, (int, float)):
        chart.note = f"max_connections {highest:,.0f}"
    return chart


def _buffers(ts: pl.DataFrame, t0_us: int) -> Chart | None:
    x, columns = _named(ts, t0_us, "db.checkpointer", {
        "buffers_checkpoint": "by checkpoints", "buffers_clean": "by the bgwriter",
        "buffers_backend": "by backends"})
    chart = _chart("checkpoint_buffers", "Shared buffers written", "buffers/s", x, columns,
                   {"by checkpoints": "#d9534f", "by the bgwriter": "#1f6fd1",
                    "by backends": "#e8871e"}, stack=True, zero_fill=True)
    if chart is not None:
        chart.note = ("a checkpoint's buffers are counted as it writes them, paced over "
                      "checkpoint_completion_target (the events lane shows each checkpoint)")
    return chart


def _temp(ts: pl.DataFrame, t0_us: int, x_all: list[int]) -> Chart | None:
    rows = metric_rows(ts, "db.database", ["temp_bytes"], t0_us, NODE)
    named = rows.select("x", pl.lit("temporary files").alias("name"), pl.col("value") / MIB)
    columns = wide(named, "name", x_all)
    return _chart("temp_files", "Temporary files written (queries spilling to disk)", "MiB/s",
                  x_all, columns, {"temporary files": "#8e5cc2"}, zero_fill=True)


def _io(ts: pl.DataFrame, t0_us: int, x_all: list[int]) -> Chart | None:
    rows = metric_rows(ts, "db.io", ["read_bytes", "write_bytes", "extend_bytes"], t0_us, NODE)
    if rows.is_empty():
        return None
    op = pl.col("metric").str.replace("_bytes", "")
    kind = pl.col("label").str.split("/")
    what = (kind.list.get(0) + " " + kind.list.get(1, null_on_oob=True).fill_null("") + " "
            + op).str.replace_all("  ", " ")
    named = rows.select("x", what.alias("what"), pl.col("value") / MIB)
    named = named.group_by("x", "what").agg(pl.col("value").sum())
    ranked = (named.group_by("what").agg(pl.col("value").sum())
              .sort(["value", "what"], descending=[True, False])["what"].to_list())
    keep = ranked[:IO_TOP]
    named = (named.with_columns(pl.when(pl.col("what").is_in(keep)).then(pl.col("what"))
                                .otherwise(pl.lit("other")))
             .group_by("x", "what").agg(pl.col("value").sum()))
    columns = wide(named, "what", x_all)
    order = [w for w in keep if w in columns] + (["other"] if "other" in columns else [])
    chart = _chart("pg_stat_io", "PostgreSQL I/O by process and object (pg_stat_io)", "MiB/s",
                   x_all, {w: columns[w] for w in order}, {"other": "#cccccc"}, stack=True,
                   zero_fill=True)
    if chart is not None:
        chart.note = ("reads, writes and extends as PostgreSQL asked them of the kernel "
                      "(the page cache's included)")
    return chart


def postgres_charts(ts: pl.DataFrame, t0_us: int, notes: list[str]) -> list[Chart]:
    """The primary's WAL, connections, buffer writes, temporary files and pg_stat_io
    charts it has data for; a note for each it has none (or only zeros) for."""
    x_all = _seconds(ts, t0_us)
    sources = set(ts.filter(pl.col("node") == NODE)["source"].unique().to_list())

    def why(source: str, zero: str) -> str:
        return zero if source in sources else f"no {source} samples"

    charts: list[Chart] = []
    for chart, missing in (
            (_wal(ts, t0_us), "WAL written: " + why("db.wal", "none")),
            (_buffers(ts, t0_us), "Shared buffers written: " + why(
                "db.checkpointer", "none counted")),
            (_connections(ts, t0_us), "Client connections: " + why("db.backends", "none")),
            (_temp(ts, t0_us, x_all), "Temporary files: " + why("db.database", "none written")),
            (_io(ts, t0_us, x_all), "pg_stat_io: " + why(
                "db.io", "no reads, writes or extends (PostgreSQL 16+)"))):
        if chart is None:
            notes.append(missing)
        else:
            charts.append(chart)
    return charts
