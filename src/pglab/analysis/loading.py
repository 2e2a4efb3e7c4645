"""A results folder -> the frames analysis works on, and what was missing or unreadable.

Analysis works from what a folder holds, whatever state the run ended in: a killed run
may have only telemetry/samples.csv and events.jsonl (read here like the sink reads them
when it consolidates), a run that failed early may have no client series at all. Every
gap is named in `missing`, so the analysis can say what it could not look at.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from pglab.results import files
from pglab.results.folder import StoredRun, load_run
from pglab.results.manifest import Manifest
from pglab.results.schemas import (
    CLIENT_SCHEMA,
    EVENTS_SCHEMA,
    PROFILE_SCHEMA,
    TIMESERIES_SCHEMA,
)
from pglab.results.spool import read_events_jsonl, read_samples_csv

CLIENT_COLUMNS = ("t", "warmup", "partial", "tps", "lat_p99_ms", "lat_max_ms", "failures")


@dataclass(frozen=True)
class RunFrames:
    """What one run folder holds, ready for analysis."""

    run: StoredRun
    client: pl.DataFrame  # all-jobs rows, every second (warmup and partial flagged), by t
    timeseries: pl.DataFrame  # TIMESERIES_SCHEMA
    events: pl.DataFrame  # EVENTS_SCHEMA
    missing: list[str] = field(default_factory=list)
    profile: pl.DataFrame | None = None  # PROFILE_SCHEMA, when os.profile ran

    @property
    def manifest(self) -> Manifest:
        return self.run.manifest


def _read_parquet(path: Path, schema: dict[str, Any], missing: list[str],
                  what: str) -> pl.DataFrame | None:
    if not path.is_file():
        return None
    try:
        frame = pl.read_parquet(path)
    except Exception as exc:  # a torn or foreign file: say so, analyse the rest
        missing.append(f"{path.name} unreadable ({type(exc).__name__}: {exc}); {what}")
        return pl.DataFrame(schema=schema)
    absent = [c for c in schema if c not in frame.columns]
    if absent:
        missing.append(f"{path.name} lacks columns {', '.join(absent)}; {what}")
        return pl.DataFrame(schema=schema)
    return frame.select(list(schema)).cast(schema)  # type: ignore[arg-type]


def _client(folder: Path, missing: list[str]) -> pl.DataFrame:
    schema = {c: CLIENT_SCHEMA[c] for c in ("job", *CLIENT_COLUMNS)}
    frame = _read_parquet(folder / files.CLIENT, schema, missing,
                          "no stall detection")
    if frame is None:
        missing.append(f"{files.CLIENT} missing (the run ended before pgbench's logs were "
                       "processed); no stall detection")
        frame = pl.DataFrame(schema=schema)
    client = frame.filter(pl.col("job").is_null()).drop("job").sort("t")
    if client.height == 0 and not any(m.startswith(files.CLIENT) for m in missing):
        missing.append("client.parquet has no rows (no transaction completed); "
                       "no stall detection")
    elif client.height > 0 and client.filter(~pl.col("warmup") & ~pl.col("partial")).is_empty():
        missing.append("client.parquet has no measured second (the run ended during its "
                       "warmup); no stall detection")
    return client


def _telemetry(folder: Path, missing: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    spool = folder / files.SPOOL
    series = _read_parquet(folder / files.TIMESERIES, TIMESERIES_SCHEMA, missing,
                           "no attribution from samples")
    if series is None and (spool / files.SPOOL_SAMPLES).is_file():
        series = read_samples_csv(spool / files.SPOOL_SAMPLES)
        missing.append("timeseries.parquet missing; read the incremental "
                       "telemetry/samples.csv (interrupted run)")
    if series is None:
        missing.append("timeseries.parquet missing (telemetry off or the run ended early); "
                       "no wait, resource or database evidence")
        series = pl.DataFrame(schema=TIMESERIES_SCHEMA)
    events = _read_parquet(folder / files.EVENTS, EVENTS_SCHEMA, missing,
                           "no log events")
    if events is None and (spool / files.SPOOL_EVENTS).is_file():
        events = read_events_jsonl(spool / files.SPOOL_EVENTS)
        missing.append("events.parquet missing; read the incremental "
                       "telemetry/events.jsonl (interrupted run)")
    if events is None:
        missing.append("events.parquet missing; no checkpoint, lock-wait or crash events")
        events = pl.DataFrame(schema=EVENTS_SCHEMA)
    return series, events


def _cap_to_duration(client: pl.DataFrame, manifest: Manifest) -> pl.DataFrame:
    """Measured seconds past the scenario's duration count as partial: pglab runs pgbench
    a second longer than asked (see docs/RESULTS.md, client.parquet), and the analysis measures
    the duration asked for, as pglab's own summary does."""
    duration = manifest.duration_s
    measured = ~pl.col("warmup") & ~pl.col("partial")
    kept = client.filter(measured)["t"].head(duration) if duration > 0 else None
    if kept is None or kept.len() < duration:
        return client
    return client.with_columns(
        (pl.col("partial") | (measured & (pl.col("t") > kept.max()))).alias("partial"))


def load_run_frames(folder: Path) -> RunFrames:
    """The folder's frames. Raises BadInput only when `folder` is not a run folder."""
    run = load_run(folder)
    missing: list[str] = []
    status = run.status
    if status != "completed":
        missing.append(f"run {status}" + (f": {run.reason}" if run.reason else "")
                       + "; the analysis covers what was recorded")
    client = _cap_to_duration(_client(folder, missing), run.manifest)
    if run.manifest.source_kind == "import":
        # a run made without pglab brings its client's figures and nothing else
        missing.append("an imported run: no telemetry, so stalls are found but not "
                       "attributed (no wait, resource, database or log evidence)")
        return RunFrames(run, client, pl.DataFrame(schema=TIMESERIES_SCHEMA),
                         pl.DataFrame(schema=EVENTS_SCHEMA), missing)
    series, events = _telemetry(folder, missing)
    profile = _read_parquet(folder / files.PROFILE, PROFILE_SCHEMA, missing,
                            "no on-CPU evidence")
    return RunFrames(run, client, series, events, missing, profile)
