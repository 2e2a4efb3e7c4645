"""The client series of an observation, built from `db.throughput` samples.

client.parquet has the schema of a pgbench run (results/schemas.CLIENT_SCHEMA), one row
per second for "all jobs" (job null), so stall detection, the report and compare read it
unchanged. What differs from a pgbench series (docs/OBSERVE.md):
- `tps` is commits per second of every database of the observed node (all clients, all
  transactions, read-only ones too), from pg_stat_database. Backends publish their
  counters at most once a second (PostgreSQL 15+; an idle backend up to 10 s later), so
  per second they come in bursts. With pg_stat_statements, `tps` is statement calls per
  second (counted as each call ends) times the observation's commits per call: the
  shape of the calls, the level of the commits.
- `failures` is rollbacks per second (pglab's own subtracted), rounded: a ROLLBACK is not
  always a failure (some drivers end read-only transactions with one).
- `lat_avg_ms` is the mean execution time of top-level statements (pg_stat_statements),
  not a transaction's latency; null without pg_stat_statements.
- no percentiles, no schedule lag, no skipped transactions or retries (null or 0).
A second without a sample (the server did not answer) has no row.
"""

from __future__ import annotations

import polars as pl

from pglab.results.schemas import CLIENT_SCHEMA


def client_series(timeseries: pl.DataFrame, node: str = "primary") -> pl.DataFrame:
    mine = timeseries.filter((pl.col("source") == "db.throughput") & (pl.col("node") == node))
    if mine.is_empty():
        return pl.DataFrame(schema=CLIENT_SCHEMA)
    wide = mine.group_by("t").agg(
        pl.col("value").filter(pl.col("metric") == "commits").sum().alias("tps"),
        pl.col("value").filter(pl.col("metric") == "rollbacks").sum().round(0)
        .cast(pl.Int64).alias("failures"),
        pl.col("value").filter(pl.col("metric") == "statement_calls").sum().alias("calls"),
        pl.col("value").filter(pl.col("metric") == "statement_time_ms").sum().alias("ms"),
        pl.col("metric").is_in(["commits"]).any().alias("has_commits"),
    ).filter(pl.col("has_commits")).sort("t")
    commits, calls = float(wide["tps"].sum() or 0.0), float(wide["calls"].sum() or 0.0)
    if calls > 0 and commits > 0:
        # pg_stat_statements counts each call as it ends; pg_stat_database gets what a
        # backend publishes, at most once a second: the same load reads 6,300, 0, 6,200
        # commits/s there and 4,000, 3,900, 3,800 calls/s here. The calls give the shape,
        # the commits over the whole observation the level.
        wide = wide.with_columns(pl.when(pl.col("calls").is_not_null())
                                 .then(pl.col("calls") * (commits / calls))
                                 .otherwise(pl.col("tps")).alias("tps"))
    first, last = wide["t"].min(), wide["t"].max()
    series = wide.with_columns(
        pl.lit(None, dtype=pl.Int16()).alias("job"),
        pl.lit(False).alias("warmup"),
        pl.col("t").is_in([first, last]).alias("partial"),
        pl.lit(0, dtype=pl.Int64()).alias("skipped"),
        pl.lit(0, dtype=pl.Int64()).alias("retries"),
        pl.when(pl.col("calls") > 0).then(pl.col("ms") / pl.col("calls"))
        .otherwise(None).alias("lat_avg_ms"),
        *[pl.lit(None, dtype=pl.Float64()).alias(c)
          for c in ("lat_p50_ms", "lat_p95_ms", "lat_p99_ms", "lat_max_ms", "lag_avg_ms",
                    "lag_max_ms")],
    )
    return series.select(list(CLIENT_SCHEMA)).cast(CLIENT_SCHEMA)  # type: ignore[arg-type]


def measured(series: pl.DataFrame) -> dict[str, float | int | None]:
    """The figures `results.measured` holds for a pgbench run, as far as they exist."""
    window = series.filter(~pl.col("partial"))
    seconds = window.height
    total = float(window["tps"].sum() or 0.0)
    lat = window["lat_avg_ms"].drop_nulls()
    return {
        "seconds": seconds, "transactions": round(total),
        "tps": total / seconds if seconds else 0.0,
        "failures": int(window["failures"].sum() or 0), "skipped": 0, "retries": 0,
        "lat_avg_ms": float(lat.mean()) if lat.len() else None,  # type: ignore[arg-type]
        "lat_p50_ms": None, "lat_p95_ms": None, "lat_p99_ms": None, "lat_max_ms": None,
        "lag_avg_ms": None,
    }
