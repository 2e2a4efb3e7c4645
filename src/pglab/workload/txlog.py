"""pgbench per-transaction logs (`-l`) -> transactions -> per-second client series.

Line format (pgbench 15 to 18, checked against real logs in tests/samples/pgbench/):

    client_id transaction_no time script_no time_epoch time_us [schedule_lag] [retries]

`time` is the latency in µs (`%.0f`), or `skipped` (--rate with --latency-limit), `failed`,
or with --failures-detailed `serialization` / `deadlock`. schedule_lag is printed with
--rate, retries with --max-tries other than 1. time_epoch/time_us is the completion time
(for a skipped transaction: when pgbench gave up on it). pgbench prints schedule_lag 0 for
skipped and failed transactions, so lag is kept only for successful ones. With --rate the
latency is measured from the scheduled start, so it includes the schedule lag.

Percentiles are computed with linear interpolation between closest ranks (Hyndman & Fan
type 7, numpy's default): for sorted values x[0..n-1], p -> x[h] + (h - floor(h)) *
(x[floor(h)+1] - x[floor(h)]) with h = p * (n - 1). polars' `interpolation="linear"`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from pglab.results.schemas import CLIENT_SCHEMA

US = 1_000_000
# The values of the per-transaction `status` column (TX_SCHEMA).
TX_STATUSES = ("ok", "skipped", "failed", "serialization", "deadlock")
FAILURE_STATUSES = ("failed", "serialization", "deadlock")
_NAMED_STATUSES = ("skipped", "failed", "serialization", "deadlock")
_QUANTILE_METHOD: Literal["linear"] = "linear"

TX_SCHEMA: dict[str, pl.DataType] = {
    "job": pl.Int16(),
    "client": pl.Int32(),
    "script": pl.Int16(),
    "end_us": pl.Int64(),
    "latency_us": pl.Int64(),
    "status": pl.String(),
    "lag_us": pl.Int64(),
    "retries": pl.Int32(),
}



@dataclass(frozen=True)
class TxLogSpec:
    """What pgbench was asked for, which decides the log's columns."""

    has_lag: bool  # pgbench ran with --rate
    has_retries: bool  # pgbench ran with --max-tries != 1
    sampling_rate: float  # 1.0 unless --sampling-rate was used


def _empty_tx() -> pl.DataFrame:
    return pl.DataFrame(schema=TX_SCHEMA)


def _layout(path: Path, probe_lines: int = 1000) -> tuple[int, int] | None:
    """(lines to skip, fields per line) from the first line that looks like a log line.

    polars sizes a header-less CSV on its first row (a schema of another width is an
    error), so the schema is sized on a real line; garbage before it is skipped.
    """
    with open(path, "rb") as fh:
        for index in range(probe_lines):
            line = fh.readline()
            if not line:
                return None
            fields = line.split()
            if len(fields) >= 6 and line.endswith(b"\n"):
                return index, len(fields)
    return None


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        if fh.tell() == 0:
            return True
        fh.seek(-1, 2)
        return fh.read(1) == b"\n"


def _read_one(job: int, path: Path, spec: TxLogSpec) -> pl.DataFrame:
    """One job's log. Rows that do not parse are dropped, as is an unfinished last line."""
    if not path.exists() or path.stat().st_size == 0:
        return _empty_tx()
    layout = _layout(path)
    if layout is None:
        return _empty_tx()
    skip, width = layout
    names = [f"c{i}" for i in range(width)]
    raw = pl.read_csv(
        path,
        separator=" ",
        has_header=False,
        schema=dict.fromkeys(names, pl.String()),
        truncate_ragged_lines=True,
        raise_if_empty=False,
        quote_char=None,
        skip_rows=skip,
        encoding="utf8-lossy",  # a damaged file must not stop the run's processing
    )
    if not _ends_with_newline(path) and raw.height > 0:
        raw = raw.head(raw.height - 1)  # a killed pgbench: the last line may be cut short

    def num(i: int, dtype: pl.DataType) -> pl.Expr:
        if i >= width:  # announced by the spec but not in the file
            return pl.lit(None, dtype=dtype)
        return pl.col(f"c{i}").cast(dtype, strict=False)

    time = pl.col("c2")
    latency = num(2, pl.Int64())
    status = (
        pl.when(latency.is_not_null())
        .then(pl.lit("ok"))
        .when(time.is_in(_NAMED_STATUSES))
        .then(time)
        .otherwise(pl.lit("failed"))  # any other word: a failure kind from a newer pgbench
    )
    lag = num(6, pl.Int64()) if spec.has_lag else pl.lit(None, dtype=pl.Int64())
    retries_col = 6 + int(spec.has_lag)
    retries = (
        num(retries_col, pl.Int32()).fill_null(0)
        if spec.has_retries
        else pl.lit(0, dtype=pl.Int32())
    )
    epoch, us = num(4, pl.Int64()), num(5, pl.Int64())
    tx = raw.select(
        pl.lit(job, dtype=pl.Int16()).alias("job"),
        num(0, pl.Int32()).alias("client"),
        num(3, pl.Int16()).alias("script"),
        (epoch * US + us).alias("end_us"),
        latency.alias("latency_us"),
        status.alias("status"),
        pl.when(latency.is_not_null()).then(lag).otherwise(None).cast(pl.Int64()).alias("lag_us"),
        retries.cast(pl.Int32()).alias("retries"),
        # validity of the row, dropped below
        (
            num(1, pl.Int64()).is_not_null()
            & time.is_not_null()
            & (time != "")
            & us.is_between(0, US - 1)
            & (epoch >= 0)
            & (latency.is_null() | (latency >= 0))
        ).alias("_valid"),
    )
    return tx.filter(
        pl.col("_valid") & pl.col("client").is_not_null() & pl.col("script").is_not_null()
    ).drop("_valid")


def read_txlogs(files: dict[int, Path], spec: TxLogSpec) -> pl.DataFrame:
    """All jobs' logs, one row per logged transaction (see TX_SCHEMA).

    `files` maps job (thread) index -> file: PREFIX.<pid> is job 0, PREFIX.<pid>.N job N.
    latency_us is null for skipped and failed transactions, lag_us null without --rate
    and for those, retries 0 without --max-tries.
    """
    frames = [_read_one(job, path, spec) for job, path in sorted(files.items())]
    frames = [f for f in frames if f.height > 0]
    if not frames:
        return _empty_tx()
    return pl.concat(frames, how="vertical").cast(TX_SCHEMA)  # type: ignore[arg-type]


def _aggregations() -> list[pl.Expr]:
    # Statistics in µs (exact integers), converted to ms afterwards. latency_us and lag_us
    # are null except for successful transactions.
    lat, lag = pl.col("latency_us"), pl.col("lag_us")

    def ms(expr: pl.Expr) -> pl.Expr:
        return expr.cast(pl.Float64()) / 1000.0

    return [
        (pl.col("status") == "ok").sum().cast(pl.Int64()).alias("n_ok"),
        pl.col("status").is_in(FAILURE_STATUSES).sum().cast(pl.Int64()).alias("failures"),
        (pl.col("status") == "skipped").sum().cast(pl.Int64()).alias("skipped"),
        pl.col("retries").cast(pl.Int64()).sum().alias("retries"),
        ms(lat.mean()).alias("lat_avg_ms"),
        ms(lat.quantile(0.50, _QUANTILE_METHOD)).alias("lat_p50_ms"),
        ms(lat.quantile(0.95, _QUANTILE_METHOD)).alias("lat_p95_ms"),
        ms(lat.quantile(0.99, _QUANTILE_METHOD)).alias("lat_p99_ms"),
        ms(lat.max()).alias("lat_max_ms"),
        ms(lag.mean()).alias("lag_avg_ms"),
        ms(lag.max()).alias("lag_max_ms"),
    ]


def _load_bounds(tx: pl.DataFrame) -> tuple[int, int]:
    """(load_start, load_end) in epoch µs: earliest transaction start, last completion."""
    start = pl.coalesce(pl.col("end_us") - pl.col("latency_us"), pl.col("end_us"))
    row = tx.select(start.min().alias("s"), pl.col("end_us").max().alias("e")).row(0)
    return int(row[0]), int(row[1])


def per_second_series(tx: pl.DataFrame, warmup_s: int, sampling_rate: float = 1.0,
                      planned_s: float | None = None) -> pl.DataFrame:
    """Per-second statistics by completion second, per job and for all jobs (job null).

    Seconds run from the one holding load_start (the earliest transaction start) to the
    one holding load_end (the last completion), every second present even without
    transactions (tps 0: a stall). `planned_s`: the load's planned length; load_end is
    then at least load_start + planned_s (a load whose clients died with a crashed server
    and were not restarted: the seconds it lost are in the series, at tps 0). A second is
    `partial` if it starts before load_start or ends after load_end, `warmup` if it
    starts before load_start + warmup_s. tps counts
    successful transactions divided by `sampling_rate`; failures (failed, serialization,
    deadlock), skipped and retries are counts of logged transactions; latency statistics
    come from successful transactions (pooled over jobs for the all-jobs rows). Sorted by
    t, then job with the all-jobs row first.
    """
    if tx.height == 0:
        return pl.DataFrame(schema=CLIENT_SCHEMA)
    load_start, load_end = _load_bounds(tx)
    if planned_s is not None:
        load_end = max(load_end, load_start + int(planned_s * US))
    first, last = load_start // US, load_end // US
    data = tx.with_columns((pl.col("end_us") // US).alias("sec"))

    seconds = pl.DataFrame({"sec": pl.int_range(first, last + 1, eager=True, dtype=pl.Int64())})
    jobs = data.select(pl.col("job").unique().sort())
    per_job = seconds.join(jobs, how="cross").join(
        data.group_by("sec", "job").agg(_aggregations()), on=["sec", "job"], how="left"
    )
    all_jobs = seconds.join(
        data.group_by("sec").agg(_aggregations()), on="sec", how="left"
    ).with_columns(pl.lit(None, dtype=pl.Int16()).alias("job"))
    combined = pl.concat([all_jobs.select(per_job.columns), per_job], how="vertical")

    start_us = pl.col("sec") * US
    out = combined.with_columns(
        (start_us < load_start + warmup_s * US).alias("warmup"),
        ((start_us < load_start) | (start_us + US > load_end)).alias("partial"),
        (pl.col("n_ok").fill_null(0) / sampling_rate).cast(pl.Float64()).alias("tps"),
        pl.col("failures").fill_null(0),
        pl.col("skipped").fill_null(0),
        pl.col("retries").fill_null(0),
        start_us.cast(pl.Datetime("us")).dt.replace_time_zone("UTC").alias("t"),
    )
    return (
        out.select(list(CLIENT_SCHEMA))
        .cast(CLIENT_SCHEMA)  # type: ignore[arg-type]
        .sort(["t", "job"], nulls_last=False)
    )


@dataclass(frozen=True)
class WindowStats:
    """Statistics over the measured window (all-jobs seconds neither warmup nor partial)."""

    seconds: int
    transactions: int  # successful transactions logged in the window
    tps: float  # transactions / seconds / sampling_rate
    failures: int
    skipped: int
    retries: int
    lat_avg_ms: float | None
    lat_p50_ms: float | None
    lat_p95_ms: float | None
    lat_p99_ms: float | None
    lat_max_ms: float | None
    lag_avg_ms: float | None


def _opt_float(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def measured_window_stats(
    tx: pl.DataFrame,
    series: pl.DataFrame,
    sampling_rate: float = 1.0,
    max_seconds: int | None = None,
) -> WindowStats:
    """Statistics of the transactions completing in the measured seconds of `series`.

    Counts are of logged transactions (a sample with --sampling-rate); only tps is scaled.
    Percentiles use linear interpolation (see the module docstring). Zeros and None when
    there is no measured second. With `max_seconds`, only the first that many measured
    seconds count (pglab runs pgbench one second longer than the duration asked for).
    """
    measured = (
        series.filter(pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial"))
        .select(pl.col("t").dt.epoch("us") // US)
        .to_series()
        .sort()
    )
    if max_seconds is not None:
        measured = measured.head(max_seconds)
    seconds = measured.len()
    if seconds == 0 or tx.height == 0:
        return WindowStats(seconds, 0, 0.0, 0, 0, 0, None, None, None, None, None, None)
    window = tx.filter((pl.col("end_us") // US).is_in(measured.implode()))
    row = window.select(_aggregations()).row(0, named=True)
    transactions = int(row["n_ok"] or 0)
    return WindowStats(
        seconds=seconds,
        transactions=transactions,
        tps=transactions / seconds / sampling_rate,
        failures=int(row["failures"] or 0),
        skipped=int(row["skipped"] or 0),
        retries=int(row["retries"] or 0),
        lat_avg_ms=_opt_float(row["lat_avg_ms"]),
        lat_p50_ms=_opt_float(row["lat_p50_ms"]),
        lat_p95_ms=_opt_float(row["lat_p95_ms"]),
        lat_p99_ms=_opt_float(row["lat_p99_ms"]),
        lat_max_ms=_opt_float(row["lat_max_ms"]),
        lag_avg_ms=_opt_float(row["lag_avg_ms"]),
    )


__all__ = [
    "TxLogSpec",
    "WindowStats",
    "measured_window_stats",
    "per_second_series",
    "read_txlogs",
]
