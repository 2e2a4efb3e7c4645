"""A few lines that say what the telemetry saw: for `pglab show` and the run summary."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pglab.results import files
from pglab.results.folder import StoredRun


@dataclass(frozen=True)
class TelemetrySummary:
    checkpoints: int = 0
    checkpoints_by_reason: dict[str, int] = field(default_factory=dict)
    wal_files_added: int = 0
    autovacuum_runs: int = 0
    lock_waits: int = 0
    top_waits: list[tuple[str, float]] = field(default_factory=list)  # (wait, share 0-1)
    peak_disk_write_mbps: float | None = None
    # the node's storage volume devices the peak is of (their writes, not the host disk's,
    # which other programs share and which the volumes' image files also reach)
    peak_disk_devices: list[str] = field(default_factory=list)
    peak_dirty_mb: float | None = None
    peak_iowait_pct: float | None = None
    wal_mb_per_s: float | None = None
    other_events: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoints": self.checkpoints,
            "checkpoints_by_reason": self.checkpoints_by_reason,
            "wal_files_added": self.wal_files_added,
            "autovacuum_runs": self.autovacuum_runs,
            "lock_waits": self.lock_waits,
            "top_waits": [{"wait": w, "share": round(s, 4)} for w, s in self.top_waits],
            "peak_disk_write_mbps": self.peak_disk_write_mbps,
            "peak_disk_devices": self.peak_disk_devices,
            "peak_dirty_mb": self.peak_dirty_mb,
            "peak_iowait_pct": self.peak_iowait_pct,
            "wal_mb_per_s": self.wal_mb_per_s,
            "other_events": self.other_events,
        }


def _attrs(text: str | None) -> dict[str, Any]:
    """An event's attrs; {} for one that is not a JSON object (a damaged file's)."""
    try:
        attrs = json.loads(text or "{}")
    except ValueError:
        return {}
    return attrs if isinstance(attrs, dict) else {}


def _metric(ts: pl.DataFrame, source: str, metric: str) -> pl.DataFrame:
    return ts.filter((pl.col("source") == source) & (pl.col("metric") == metric))


def _volume_devices(run: StoredRun, node: str) -> list[str]:
    """The node's storage volume devices (loop2...); none for a node on the host's
    directory or an older manifest."""
    volumes = run.manifest.node_storage(node)
    return sorted({str(v["device"]["name"]) for v in volumes
                   if isinstance(v.get("device"), dict) and v["device"].get("name")})


def _peak_total(ts: pl.DataFrame, source: str, metric: str,
                labels: list[str] | None = None) -> float | None:
    """Highest per-timestamp sum over labels (e.g. over devices, or these), or None."""
    rows = _metric(ts, source, metric)
    if labels:
        rows = rows.filter(pl.col("label").is_in(labels))
    if rows.is_empty():
        return None
    per_t = rows.group_by("t").agg(pl.col("value").sum())
    return round(float(per_t["value"].max()), 1)  # type: ignore[arg-type]


def summarize(run: StoredRun, node: str = "primary") -> TelemetrySummary | None:
    """None when the run has no (readable) telemetry files; a damaged one is the run's
    `on_damaged`'s to report."""
    ts = run.parquet(files.TIMESERIES)
    events = run.parquet(files.EVENTS)
    if ts is None and events is None:
        return None
    ts = pl.DataFrame() if ts is None else ts
    events = pl.DataFrame() if events is None else events
    checkpoints = 0
    reasons: dict[str, int] = {}
    wal_added = 0
    counts: dict[str, int] = {}
    if not events.is_empty():
        for kind, attrs_text in events.select("kind", "attrs").iter_rows():
            counts[kind] = counts.get(kind, 0) + 1
            if kind != "checkpoint":
                continue
            attrs = _attrs(attrs_text)
            flags = attrs.get("flags")
            flags = flags if isinstance(flags, list) else []
            if attrs.get("restartpoint") or "shutdown" in flags:
                continue
            checkpoints += 1
            for flag in flags or ["?"]:
                if flag in ("time", "wal", "force", "immediate"):
                    reasons[flag] = reasons.get(flag, 0) + 1
            added = attrs.get("wal_added")
            wal_added += int(added) if isinstance(added, (int, float)) else 0
    top: list[tuple[str, float]] = []
    volumes: list[str] = []
    wal_rate = peak_write = peak_dirty = peak_iowait = None
    if not ts.is_empty():
        waits = ts.filter((pl.col("source") == "db.waits") & (pl.col("node") == node))
        sampled = float(waits.filter(pl.col("metric") == "sampled")["value"].sum())
        if sampled > 0:
            shares = (waits.filter(pl.col("metric") != "sampled").group_by("metric")
                      .agg(pl.col("value").sum()).sort("value", descending=True).head(5))
            top = [(str(m), float(v) / sampled) for m, v in shares.iter_rows()]
        wal = _metric(ts, "db.wal", "wal_lsn_bytes").filter(pl.col("node") == node)
        if not wal.is_empty():
            wal_rate = round(float(wal["value"].mean()) / 1e6, 2)  # type: ignore[arg-type]
        volumes = _volume_devices(run, node)
        peak_write = _peak_total(ts, "os.disk", "write_mbps", volumes)
        peak_dirty = _peak_total(ts, "os.memory", "dirty_mb")
        peak_iowait = _peak_total(ts, "os.cpu", "iowait_pct")
    shown = {"checkpoint", "autovacuum", "lock-wait"}
    return TelemetrySummary(
        checkpoints=checkpoints,
        checkpoints_by_reason=reasons,
        wal_files_added=wal_added,
        autovacuum_runs=counts.get("autovacuum", 0),
        lock_waits=counts.get("lock-wait", 0),
        top_waits=top,
        peak_disk_write_mbps=peak_write,
        peak_disk_devices=volumes if peak_write is not None else [],
        peak_dirty_mb=peak_dirty,
        peak_iowait_pct=peak_iowait,
        wal_mb_per_s=wal_rate,
        other_events={k: v for k, v in sorted(counts.items()) if k not in shown},
    )


def summary_lines(summary: TelemetrySummary) -> list[str]:
    reasons = ", ".join(f"{n} {r}" for r, n in sorted(summary.checkpoints_by_reason.items()))
    lines = [
        f"checkpoints {summary.checkpoints}" + (f" ({reasons})" if reasons else "")
        + f", WAL files added {summary.wal_files_added}"
        + (f", WAL {summary.wal_mb_per_s} MB/s" if summary.wal_mb_per_s is not None else "")
        + f", autovacuum runs {summary.autovacuum_runs}, lock waits {summary.lock_waits}",
    ]
    if summary.top_waits:
        lines.append("top waits " + ", ".join(f"{w} {s:.0%}" for w, s in summary.top_waits))
    peaks = []
    if summary.peak_disk_write_mbps is not None:
        on = f" ({', '.join(summary.peak_disk_devices)})" if summary.peak_disk_devices else ""
        peaks.append(f"disk write {summary.peak_disk_write_mbps} MB/s{on}")
    if summary.peak_dirty_mb is not None:
        peaks.append(f"dirty memory {summary.peak_dirty_mb} MB")
    if summary.peak_iowait_pct is not None:
        peaks.append(f"iowait {summary.peak_iowait_pct}%")
    if peaks:
        lines.append("peaks " + ", ".join(peaks))
    if summary.other_events:
        lines.append("events " + ", ".join(f"{k} {v}" for k, v in summary.other_events.items()))
    return lines
