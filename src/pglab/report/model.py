"""The report's data model, built from a run folder alone (no server, no network).

`build_model` reads manifest.json, client.parquet, timeseries.parquet, events.parquet and,
when `pglab analyze` wrote it, analysis.json; page.py turns the model into report.html.
The `timeline` part is what the page's JavaScript draws; the rest are tables.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pglab.report.html_events import event_lanes
from pglab.report.html_kernel import kernel_charts
from pglab.report.html_postgres import postgres_charts
from pglab.report.html_profile import profile_section
from pglab.report.html_series import (
    PALETTE,
    Chart,
    Series,
    bucketed,
    line_chart,
    seconds_since,
    wait_charts,
    wide,
)
from pglab.results import files
from pglab.results.analysis_doc import AnalysisDocument
from pglab.results.folder import StoredRun, load_run
from pglab.results.manifest import Manifest


@dataclass
class ReportModel:
    run: StoredRun
    timeline: dict[str, Any]  # drawn by report.js
    analysis: AnalysisDocument | None  # analysis.json, None when not analysed
    top_waits: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # charts left out, and why
    profile: dict[str, Any] | None = None  # os.profile's flame graphs (flame.js), if recorded
    # queryid -> mean ms per call in each second of the run (None: no call ended in it),
    # for the statements table's sparklines
    statement_series: dict[str, list[float | None]] = field(default_factory=dict)


def _t0_us(client: pl.DataFrame | None, ts: pl.DataFrame | None) -> int | None:
    starts = [int(f["t"].dt.epoch("us").min()) for f in (client, ts)  # type: ignore[arg-type]
              if f is not None and f.height > 0]
    return min(starts) // 1_000_000 * 1_000_000 if starts else None


def _client_charts(client: pl.DataFrame, t0_us: int) -> list[Chart]:
    data = client.with_columns(seconds_since(pl.col("t"), t0_us).alias("x"))
    total = data.filter(pl.col("job").is_null()).sort("x")
    per_job = (data.filter(pl.col("job").is_not_null())
               .with_columns(pl.format("job {}", pl.col("job")).alias("name"),
                             pl.col("tps").alias("value")))
    x_all = total["x"].to_list()
    columns = wide(per_job, "name", x_all)
    columns["total"] = total["tps"].to_list()
    x, columns = bucketed(x_all, columns)
    tps = Chart("tps", "Throughput (transactions per second)", "TPS", x)
    jobs = [n for n in columns if n != "total"]
    for i, name in enumerate(sorted(jobs, key=lambda n: int(n.split()[1]))):
        tps.series.append(Series(name, columns[name], PALETTE[i % len(PALETTE)], stack=True))
    tps.series.append(Series("total", columns["total"], "#222222"))
    names = {"lat_p50_ms": "p50", "lat_p95_ms": "p95", "lat_p99_ms": "p99",
             "lat_max_ms": "max"}
    x, lat_cols = bucketed(x_all, {n: total[c].to_list() for c, n in names.items()})
    latency = Chart("latency", "Latency percentiles per second", "ms", x)
    colors = {"p50": "#2e9e44", "p95": "#e8871e", "p99": "#d9534f", "max": "#999999"}
    for name, values in lat_cols.items():
        # max hidden at first: one slow transaction would flatten the percentiles
        latency.series.append(Series(name, values, colors[name], dash=name == "max",
                                     hidden=name == "max"))
    return [tps, latency]


def _envelope_limits(manifest: Manifest, keys: dict[str, str]) -> list[tuple[str, float]]:
    """The primary's disk limits (MiB/s, IOPS): as applied when recorded, else as asked.
    A write limit of cgroup v1 holds only for what the node's processes submit, and is
    labelled so: the kernel's writeback of their pages reaches the disk past it."""
    envelope = manifest.node_envelope()
    disk = envelope.get("limits") or manifest.envelope.get("disk") or {}
    own_io = envelope.get("cgroup_version") == 1
    return [(f"{label} (own I/O only)" if own_io and key.startswith("write") else label,
             float(disk[key])) for key, label in keys.items()
            if isinstance(disk.get(key), (int, float)) and disk[key] > 0]


def _limit_overrun(chart: Chart, limits: list[tuple[str, float]], unit: str,
                   manifest: Manifest) -> str:
    """What the chart shows past a write limit, said: a limit the data contradicts is
    never drawn as if it held. Only the limited device's series count."""
    limit = next((value for label, value in limits if label.startswith("write")), None)
    envelope = manifest.node_envelope()
    device = envelope.get("device")
    name = device.get("name") if isinstance(device, dict) else None
    wanted = {"write", f"write {name}"} if name else None
    peak = max((v for s in chart.series if s.name.startswith("write")
                and (wanted is None or s.name in wanted) for v in s.y if v is not None),
               default=0.0)
    if limit is None or peak <= 1.2 * limit:
        return ""
    on = f" on {name}" if name else ""
    why = ("cgroup v1 does not throttle the kernel's writeback of the node's pages "
           "(envelope.disk_scope = \"own-io\"); a storage device limit holds every byte"
           if envelope.get("cgroup_version") == 1 else
           "the limit holds for the node's cgroup only: the rest is other processes' "
           "writes to the same device")
    return (f"the disk{on} wrote up to {peak:,.1f} {unit} against the write limit of "
            f"{limit:,.0f} {unit}: {why}")


def _telemetry_charts(ts: pl.DataFrame, t0_us: int, manifest: Manifest,
                      notes: list[str]) -> list[Chart]:
    charts: list[Chart] = []

    def add(chart: Chart | None, missing: str) -> None:
        if chart is None:
            notes.append(missing)
        else:
            charts.append(chart)

    cpu = line_chart(ts, t0_us, "cpu", "CPU and iowait (% of all cores)", "%", "os.cpu",
                     {"user_pct": "user", "system_pct": "system", "iowait_pct": "iowait",
                      "irq_pct": "irq", "steal_pct": "steal"}, stack=True)
    if cpu is not None:
        cpu.ymax = 100.0
    add(cpu, "CPU: no os.cpu samples")
    disk_mb = line_chart(ts, t0_us, "disk_mbps", "Disk throughput", "MiB/s", "os.disk",
                         {"read_mbps": "read", "write_mbps": "write"}, per_label=True)
    if disk_mb is not None:
        disk_mb.limits = _envelope_limits(manifest, {"write_mbps": "write limit",
                                                     "read_mbps": "read limit"})
        disk_mb.note = _limit_overrun(disk_mb, disk_mb.limits, "MiB/s", manifest)
    add(disk_mb, "Disk: no os.disk samples")
    disk_iops = line_chart(ts, t0_us, "disk_iops", "Disk IOPS", "IO/s", "os.disk",
                           {"read_iops": "read", "write_iops": "write"}, per_label=True)
    if disk_iops is not None:
        disk_iops.limits = _envelope_limits(manifest, {"write_iops": "write limit",
                                                       "read_iops": "read limit"})
        disk_iops.note = _limit_overrun(disk_iops, disk_iops.limits, "IO/s", manifest)
    add(disk_iops, "Disk IOPS: no os.disk samples")
    util = line_chart(ts, t0_us, "disk_util", "Disk utilisation", "%", "os.disk",
                      {"util_pct": "util"}, per_label=True)
    if util is not None:
        util.ymax = 100.0
    add(util, "Disk utilisation: no os.disk samples")
    memory = line_chart(ts, t0_us, "memory", "Dirty and writeback memory", "MiB", "os.memory",
                        {"dirty_mb": "dirty", "writeback_mb": "writeback"})
    if memory is not None:
        thresholds = ts.filter(pl.col("metric").is_in(
            ["dirty_background_threshold_mb", "dirty_threshold_mb"])).group_by("metric").agg(
            pl.col("value").last())
        memory.note = ", ".join(f"{m.replace('_mb', '').replace('_', ' ')} {v:,.0f} MiB"
                                for m, v in sorted(thresholds.iter_rows()))
    add(memory, "Memory: no os.memory samples")
    # the seconds behind grow while a standby is silent; pg_stat_replication's lags (what
    # runs recorded before them have) stay at their last reply's value
    lag = (line_chart(ts, t0_us, "replication", "Replication lag per standby", "s",
                      "db.replication",
                      {"replay_behind_s": "replay lag", "flush_behind_s": "flush lag"},
                      node="primary", per_label=True)
           or line_chart(ts, t0_us, "replication", "Replication lag per standby", "s",
                         "db.replication",
                         {"replay_lag_s": "replay lag", "flush_lag_s": "flush lag"},
                         node="primary", per_label=True))
    add(lag, "Replication lag: no standbys in this run")
    if lag is not None:
        behind = line_chart(ts, t0_us, "replication_bytes", "Replication lag per standby (WAL)",
                            "bytes", "db.replication",
                            {"sent_lag_bytes": "sent", "flush_lag_bytes": "flushed",
                             "replay_lag_bytes": "replayed"}, node="primary", per_label=True)
        add(behind, "Replication lag in bytes: not recorded")
    return charts


def _stalls(analysis: AnalysisDocument | None, t0_us: int) -> list[list[Any]]:
    out: list[list[Any]] = []
    for stall in analysis.stalls if analysis is not None else []:
        try:
            start = _iso_offset(stall["start"], t0_us)
            end = _iso_offset(stall["end"], t0_us)
        except (KeyError, TypeError, ValueError):
            continue
        causes = stall.get("causes") or []
        label = causes[0].get("cause", "") if causes and isinstance(causes[0], dict) else ""
        out.append([start, max(end, start + 1), f"stall ({stall.get('kind', '?')}) {label}"])
    return out


SPARK_SECONDS = 600  # a sparkline's points at most: a longer run is bucketed


def _statement_series(ts: pl.DataFrame, analysis: AnalysisDocument | None,
                      t0_us: int) -> dict[str, list[float | None]]:
    """Each listed statement's mean execution time per call, second by second
    (db.statements' exec_ms over its calls), on the primary."""
    queryids = [str(e.get("queryid")) for e in (analysis.statements if analysis else [])
                if isinstance(e, dict) and e.get("queryid")]
    if not queryids:
        return {}
    rows = (ts.filter((pl.col("source") == "db.statements") & (pl.col("node") == "primary")
                      & pl.col("label").is_in(queryids)
                      & pl.col("metric").is_in(["calls", "exec_ms"]))
            .with_columns(seconds_since(pl.col("t"), t0_us).alias("sec")))
    if rows.height == 0:
        return {}
    last = int(rows["sec"].max())  # type: ignore[arg-type]
    width = max(1, -(-(last + 1) // SPARK_SECONDS))  # seconds per point
    sums = (rows.with_columns((pl.col("sec") // width).alias("point"))
            .group_by("label", "point", "metric").agg(pl.col("value").sum()))
    found: dict[str, dict[int, dict[str, float]]] = {}
    for label, point, metric, value in sums.iter_rows():
        found.setdefault(str(label), {}).setdefault(int(point), {})[str(metric)] = float(value)
    out: dict[str, list[float | None]] = {}
    for queryid, points in found.items():
        out[queryid] = [points[i]["exec_ms"] / points[i]["calls"]
                        if points.get(i, {}).get("calls") and "exec_ms" in points[i] else None
                        for i in range(last // width + 1)]
    return out


def _iso_offset(value: str, t0_us: int) -> float:
    t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return round(t.timestamp() - t0_us / 1e6, 1)


def _started_us(manifest: Manifest) -> int:
    try:
        started = dt.datetime.fromisoformat(str(manifest.started_at).replace("Z", "+00:00"))
    except ValueError:
        return 0
    return int(started.timestamp()) * 1_000_000


def build_model(run_dir: Path) -> ReportModel:
    """Everything the report shows, from the folder alone; BadInput if it is not a run.
    A damaged Parquet file or analysis is left out, and the report says so (a note;
    `run.damaged` lists them)."""
    notes: list[str] = []
    run = load_run(run_dir, on_damaged=lambda exc: notes.append(f"{exc}; left out"))
    client = run.parquet(files.CLIENT)
    ts = run.parquet(files.TIMESERIES)
    events = run.parquet(files.EVENTS)
    analysis = run.analysis()  # the report still shows the run; a note says why no verdict
    t0_us = _t0_us(client, ts)
    if t0_us is None:  # e.g. failed before the load: the report still says what happened
        notes.append("No client or telemetry data: the run " + run.status
                     + (f" ({run.reason})" if run.reason else ""))
        t0_us = _started_us(run.manifest)
    charts: list[Chart] = []
    top_waits: list[dict[str, Any]] = []
    if client is not None and client.height > 0:
        charts += _client_charts(client, t0_us)
    else:
        notes.append("Throughput and latency: no client.parquet (pgbench logged nothing)")
    if ts is not None and ts.height > 0:
        waits, top_waits = wait_charts(ts, t0_us)
        if waits is not None:
            charts.append(waits)
        else:
            notes.append("Wait events: no db.waits samples")
        charts += kernel_charts(ts, t0_us)  # beside the waits: the same seconds, below them
        charts += postgres_charts(ts, t0_us, notes)  # what PostgreSQL did in those seconds
        charts += _telemetry_charts(ts, t0_us, run.manifest, notes)
    else:
        notes.append("Telemetry: no timeseries.parquet (telemetry disabled?)")
    warmup = None
    if client is not None and client.height > 0:
        warm = client.filter(pl.col("warmup") & pl.col("job").is_null())
        if warm.height:
            warmup = [0, int(warm.select(seconds_since(pl.col("t"), t0_us)).max().item()) + 1]
    x_max = max((c.x[-1] for c in charts if c.x), default=0) + 1
    lanes = event_lanes(events, ts, t0_us, run.manifest, x_max)
    timeline = {
        "t0": t0_us // 1_000_000,
        "xmax": x_max,
        "charts": [c.to_json() for c in charts],
        "lanes": lanes,
        "stalls": _stalls(analysis, t0_us),
        "warmup": warmup,
    }
    profile = profile_section(run, _stall_spans(analysis), _measured(client))
    unavailable = ((run.manifest.telemetry or {}).get("os.profile") or {}).get("unavailable")
    if profile is None and unavailable:
        notes.append(f"On-CPU flame graphs: os.profile did not run ({unavailable})")
    series = _statement_series(ts, analysis, t0_us) if ts is not None else {}
    return ReportModel(run, timeline, analysis, top_waits, notes, profile, series)


def _stall_spans(analysis: AnalysisDocument | None) -> list[tuple[dt.datetime, dt.datetime,
                                                                  str]]:
    """Each stall's start, end (exclusive) and what it is called on the timelines."""
    out = []
    for stall in analysis.stalls if analysis is not None else []:
        try:
            start = dt.datetime.fromisoformat(str(stall["start"]).replace("Z", "+00:00"))
            end = dt.datetime.fromisoformat(str(stall["end"]).replace("Z", "+00:00"))
        except (KeyError, TypeError, ValueError):
            continue
        causes = stall.get("causes") or []
        cause = causes[0].get("cause", "") if causes and isinstance(causes[0], dict) else ""
        out.append((start, end, f"{stall.get('kind', '?')} {cause}".strip()))
    return out


def _measured(client: pl.DataFrame | None) -> list[int]:
    """The measured seconds (epoch): all jobs, not warmup, not partial."""
    if client is None or client.is_empty():
        return []
    whole = client.filter(pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial"))
    return [int(s) for s in whole["t"].dt.epoch("s").to_list()]


__all__ = ["ReportModel", "build_model"]
