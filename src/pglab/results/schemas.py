"""The columns of the results folder's Parquet files (docs/RESULTS.md).

The writers (workload.txlog and the importer for client.parquet, the telemetry sink for
the other two) build their frames to these schemas, and readers cast to them, so a
column added here reaches both sides at once. A reader of an older folder that lacks a
column says so (analysis.loading, `files.read_parquet`) rather than guessing.
"""

from __future__ import annotations

import polars as pl

SchemaType = dict[str, pl.DataType | type[pl.DataType]]

# client.parquet: per second, one row per pgbench job and one for all jobs (job null);
# the warmup's seconds and the partial first and last seconds are flagged, not dropped.
CLIENT_SCHEMA: SchemaType = {
    "t": pl.Datetime("us", "UTC"),
    "job": pl.Int16(),
    "warmup": pl.Boolean(),
    "partial": pl.Boolean(),
    "tps": pl.Float64(),
    "failures": pl.Int64(),
    "skipped": pl.Int64(),
    "retries": pl.Int64(),
    "lat_avg_ms": pl.Float64(),
    "lat_p50_ms": pl.Float64(),
    "lat_p95_ms": pl.Float64(),
    "lat_p99_ms": pl.Float64(),
    "lat_max_ms": pl.Float64(),
    "lag_avg_ms": pl.Float64(),
    "lag_max_ms": pl.Float64(),
}

# client.parquet of a sysbench run: CLIENT_SCHEMA's columns (one all-threads row per
# second, job null), then these, which pgbench has no equivalent of
# (workload/sysbench_output.py: per_second_series).
SYSBENCH_CLIENT_COLUMNS: SchemaType = {
    "qps": pl.Float64(),  # queries per second, and by kind as sysbench counts them
    "qps_read": pl.Float64(),
    "qps_write": pl.Float64(),
    "qps_other": pl.Float64(),  # BEGIN/COMMIT and other statements
    "errors_per_s": pl.Float64(),  # ignored errors (the event re-run): err/s as printed
    "reconnects_per_s": pl.Float64(),
    "lat_percentile_ms": pl.Float64(),  # the second's latency at workload.percentile
    "threads": pl.Int32(),  # threads running in that second
}

# timeseries.parquet: every telemetry sample, long format (docs/TELEMETRY.md).
TIMESERIES_SCHEMA: SchemaType = {
    "t": pl.Datetime("us", "UTC"),
    "node": pl.Utf8,
    "source": pl.Utf8,
    "metric": pl.Utf8,
    "label": pl.Utf8,
    "value": pl.Float64,
}

# events.parquet: every event (server log, probes, faults); attrs is a JSON object.
EVENTS_SCHEMA: SchemaType = {
    "t_start": pl.Datetime("us", "UTC"),
    "t_end": pl.Datetime("us", "UTC"),
    "node": pl.Utf8,
    "kind": pl.Utf8,
    "attrs": pl.Utf8,
}

# profile.parquet (os.profile, opt-in): on-CPU stack samples per second, node and kind of
# process; `stack` is a folded chain, outermost frame first, `;`-separated
# (probes/perf_script.py names the frames).
PROFILE_SCHEMA: SchemaType = {
    "t": pl.Datetime("us", "UTC"),
    "node": pl.Utf8,  # a node's name, or "client" for pgbench
    "kind": pl.Utf8,  # backends, walwriter, ..., postmaster; pgbench
    "stack": pl.Utf8,
    "samples": pl.Int64,
}


# The columns every reader of a run folder's Parquet file relies on, by file name:
# `files.read_parquet` refuses a file without them (a foreign or older file), naming the
# column, and casts them, so no reader meets a column of another type.
REQUIRED_COLUMNS: dict[str, SchemaType] = {
    "client.parquet": {c: CLIENT_SCHEMA[c] for c in ("t", "job", "warmup", "partial", "tps")},
    "timeseries.parquet": TIMESERIES_SCHEMA,
    "events.parquet": EVENTS_SCHEMA,
    "profile.parquet": PROFILE_SCHEMA,
}
