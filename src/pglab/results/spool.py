"""The incremental telemetry of a run in progress: telemetry/samples.csv and events.jsonl.

The telemetry sink appends to these during a run and consolidates them into
timeseries.parquet and events.parquet at its end; a killed run leaves only these, so
readers of a folder (analysis) read them the same way the sink does.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import polars as pl

from pglab.events import Event
from pglab.results.schemas import EVENTS_SCHEMA, TIMESERIES_SCHEMA, SchemaType


def iso_us(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).isoformat(timespec="microseconds")


def event_record(event: Event) -> dict[str, Any]:
    """An event as one line of events.jsonl (and as the manifest's `faults` records)."""
    return {
        "t_start": iso_us(event.t_start),
        "t_end": iso_us(event.t_end) if event.t_end else None,
        "node": event.node,
        "kind": event.kind,
        "attrs": event.attrs_json(),
    }


def read_samples_csv(path: Path) -> pl.DataFrame:
    if not path.is_file() or path.stat().st_size == 0:
        return pl.DataFrame(schema=TIMESERIES_SCHEMA)
    frame = pl.read_csv(
        path, has_header=False, new_columns=list(TIMESERIES_SCHEMA),
        schema_overrides={"t": pl.Utf8, "node": pl.Utf8, "source": pl.Utf8, "metric": pl.Utf8,
                          "label": pl.Utf8, "value": pl.Float64},
        truncate_ragged_lines=True, ignore_errors=True,  # a cut last line (kill -9)
    )
    return (
        frame.with_columns(pl.col("t").str.to_datetime(time_zone="UTC", time_unit="us",
                                                       strict=False),
                           pl.col("label").fill_null(""))
        .drop_nulls(["t", "value"])
        .sort("t", "node", "source", "metric", "label")
    )


def read_events_jsonl(path: Path) -> pl.DataFrame:
    rows = []
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a cut last line
    return events_frame(rows)


def events_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    if not rows:
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    text_schema: SchemaType = dict.fromkeys(EVENTS_SCHEMA, pl.Utf8)
    frame = pl.DataFrame(rows, schema=text_schema)
    return frame.with_columns(
        pl.col("t_start").str.to_datetime(time_zone="UTC", time_unit="us", strict=False),
        pl.col("t_end").str.to_datetime(time_zone="UTC", time_unit="us", strict=False),
    ).sort("t_start", "node", "kind")
