"""Event bands for the HTML report: one lane per kind of thing that happened.

Each item is [start, end, lane, colour, text] with start/end in seconds since t0 (one
decimal); an instantaneous event has start == end and is drawn as a thin mark.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

import polars as pl

from pglab.events import attrs_summary
from pglab.report.html_series import seconds_since
from pglab.results.manifest import Manifest

# lane -> the event kinds drawn in it (docs/TELEMETRY.md, "Events"), and its colour.
LANES: list[tuple[str, tuple[str, ...], str]] = [
    ("checkpoint", ("checkpoint",), "#1f6fd1"),
    ("WAL files added", (), "#8e5cc2"),  # from pg_stat_io or checkpoint logs, see below
    ("autovacuum", ("autovacuum", "autoanalyze", "vacuum"), "#2e9e44"),
    ("lock waits", ("lock-wait", "deadlock"), "#e8871e"),
    ("faults", ("fault",), "#c9b400"),
    ("crashes, restarts", ("crash", "recovery", "server-start", "server-stop"), "#d9534f"),
    ("errors", ("error", "connection-reset", "probe-error", "temp-file"), "#7f8c8d"),
]
SYNC_COLOR = "#0b3d7a"  # a checkpoint's sync phase, darker than its write phase
_SEGMENT = re.compile(r"^(\d+)\s*(kB|MB|GB)$")


def _offset(t: Any, t0_us: int) -> float | None:
    if t is None:
        return None
    # centiseconds: a checkpoint's sync phase can last a few ms
    return round(float(t.timestamp()) - t0_us / 1e6, 2)


def _text(kind: str, attrs: dict[str, Any]) -> str:
    keys = {
        "checkpoint": ("flags", "buffers", "write_s", "sync_s", "total_s", "wal_added",
                       "distance_kb"),
        "autovacuum": ("table", "pages_removed", "tuples_removed", "elapsed_s", "read_mb_s",
                       "write_mb_s"),
        "autoanalyze": ("table", "elapsed_s"),
        "vacuum": ("table", "autovacuum"),
        "lock-wait": ("lock_mode", "lock_object", "relation", "waited_ms", "holders"),
        "crash": ("process", "signal", "exit_code"),
        "error": ("severity", "sqlstate", "message"),
        "probe-error": ("probe", "error"),
        "fault": ("action", "args", "elapsed_s", "recovery_s", "error", "ended_by"),
    }.get(kind) or tuple(attrs)[:5]
    summary = attrs_summary(attrs, keys)
    return kind + (": " + summary if summary else "")


def _segment_bytes(manifest: Manifest) -> int:
    size = str(manifest.node().get("wal_segment_size", ""))
    match = _SEGMENT.match(size)
    if not match:
        return 16 * 1024 * 1024
    return int(match.group(1)) * {"kB": 1024, "MB": 1024**2, "GB": 1024**3}[match.group(2)]


def _wal_files_from_io(ts: pl.DataFrame | None, t0_us: int,
                       manifest: Manifest) -> list[list[Any]]:
    """Seconds in which new WAL segments were written (pg_stat_io context init, PG18)."""
    if ts is None:
        return []
    rows = ts.filter((pl.col("source") == "db.io") & (pl.col("metric") == "write_bytes")
                     & pl.col("label").str.ends_with("/wal/init") & (pl.col("node") == "primary"))
    if rows.is_empty():
        return []
    per_s = (rows.with_columns(seconds_since(pl.col("t"), t0_us).alias("x"))
             .group_by("x").agg(pl.col("value").sum()).sort("x"))
    segment = _segment_bytes(manifest)
    items = []
    for x, value in per_s.iter_rows():
        files = value / segment
        if files >= 0.5:
            items.append([float(x), float(x) + 1, 1, LANES[1][2],
                          f"{files:.0f} WAL file(s) added ({value / 1048576:.0f} MiB "
                          "written in pg_stat_io context init)"])
    return items


_PLANNED = ("server-start", "server-stop")  # a stop or start, not a crash or its recovery


def _load_start(manifest: Manifest) -> dt.datetime | None:
    """When pgbench started: stops and starts before it are the lab's set-up."""
    started = (manifest.workload or {}).get("started_at")
    try:
        return dt.datetime.fromisoformat(str(started).replace("Z", "+00:00")) if started \
            else None
    except ValueError:
        return None


# Kinds that last: without t_end they had not finished when the run ended.
_LASTING = ("checkpoint", "lock-wait", "recovery")


def event_lanes(events: pl.DataFrame | None, ts: pl.DataFrame | None, t0_us: int,
                manifest: Manifest, x_end: float) -> dict[str, Any]:
    """{"names": [...], "colors": [...], "items": [[start, end, lane, colour, text], ...]}.

    `x_end` (seconds since t0) is where unfinished events are drawn to.
    """
    lane_of = {kind: i for i, (_, kinds, _) in enumerate(LANES) for kind in kinds}
    load_start = _load_start(manifest)
    items: list[list[Any]] = []
    wal_items = _wal_files_from_io(ts, t0_us, manifest)
    for row in (events.iter_rows(named=True) if events is not None else []):
        kind = str(row["kind"])
        lane = lane_of.get(kind)
        if lane is None and kind.startswith("fault"):
            lane = lane_of["fault"]
        if lane is None:
            continue
        try:
            attrs = json.loads(row["attrs"] or "{}")
        except json.JSONDecodeError:
            attrs = {}
        if kind in _PLANNED and load_start is not None and (
                row["t_end"] or row["t_start"]) <= load_start:
            continue  # the set-up restart for restart-only settings: planned, no crash
        start = _offset(row["t_start"], t0_us)
        end = _offset(row["t_end"], t0_us)
        if start is None:
            continue
        color = LANES[lane][2]
        text = _text(kind, attrs)
        if row["node"] and row["node"] != "primary":
            text = f"{row['node']}: {text}"
        if end is None and kind in _LASTING:
            end, text = max(start, x_end), text + " (not finished when the run ended)"
        end = start if end is None else end
        if kind == "checkpoint" and attrs.get("write_phase_end"):
            mid = _offset(dt.datetime.fromisoformat(attrs["write_phase_end"]), t0_us)
            if mid is not None and start <= mid <= end:
                items.append([start, mid, lane, color, "write phase · " + text])
                items.append([mid, end, lane, SYNC_COLOR, "sync phase · " + text])
            else:
                items.append([start, end, lane, color, text])
        else:
            items.append([start, end, lane, color, text])
        if kind == "checkpoint" and not wal_items and (attrs.get("wal_added") or 0) > 0:
            items.append([end, end, 1, LANES[1][2],
                          f"{attrs['wal_added']} WAL file(s) added since the previous "
                          "checkpoint (checkpoint log)"])
    items += wal_items
    # the timelines start with the first sample; what ended before it (server start) is
    # setup, not part of the run
    items = [[max(0.0, i[0]), *i[1:]] for i in items if i[1] >= 0]
    # drawn in this order: the longest first, so a short mark (a sync phase, an
    # autovacuum of a few ms) stays visible on top of a long band
    items.sort(key=lambda i: i[0] - i[1])
    return {"names": [name for name, _, _ in LANES], "colors": [c for _, _, c in LANES],
            "items": items}
