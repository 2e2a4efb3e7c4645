"""`pglab import`: a pgbench run made without pglab -> a results folder.

Input: pgbench's stdout (the summary, required) and, when given, its logs: per-transaction
logs (`-l`) or aggregate logs (`-l --aggregate-interval=N`), one file per pgbench thread.
The folder gets the same files a pglab run has, as far as the input allows:
- manifest.json with `source.kind = "import"` (what was imported, from where), the
  parsed summary under `results.pgbench` and the measured-window figures under
  `results.measured`; the host and the server's settings are unknown (`--this-host`
  records this machine's facts when the pgbench run was made here).
- client.parquet (the schema of native runs) from the logs: with `-l` logs every column;
  with aggregate logs tps, latency avg/max, lag, skipped, retries, and failures (pgbench
  15-18 count them in aggregate logs only with --failures-detailed: without it, failures
  the summary reports are unknown per second, null), percentiles null.
- raw/: copies of the input files.
Without logs, pgbench's `-P` progress lines in the same file (its stderr kept with its
stdout, `2>&1`) make client.parquet: one row per progress interval with tps, latency
average, failures, lag, skipped and retries as pgbench printed them (percentiles and the
maximum null); their times are epoch seconds with --progress-timestamp, else seconds
since the run began, placed so that it ended when the file was last written. Without
either, only the summary's figures exist (no per-second samples).

sysbench's stdout (`--report-interval=1`, alone, no logs) imports too: its per-second
lines become client.parquet as in a pglab sysbench run (workload/sysbench_output.py),
its summary `results.sysbench`. sysbench prints no clock time and not the test's name:
the run is placed so that it ended when the file was last written, and the test is
unknown.

Aggregate log line (pgbench 15-18, checked against real logs in tests/samples/pgbench/):
interval_start num_transactions sum_latency sum_latency_2 min_latency max_latency
sum_lag sum_lag_2 min_lag max_lag skipped retried retries serialization_failures
deadlock_failures (µs; zeros where the option that fills a column was not used).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import re
import shutil
from pathlib import Path
from typing import Any

import polars as pl

from pglab.errors import BadInput
from pglab.hostfacts import host_facts
from pglab.results import files
from pglab.results.files import iso, utc_now, write_parquet
from pglab.results.folder import RunFolder, StoredRun, create_run_folder, load_run
from pglab.results.manifest import Manifest
from pglab.results.schemas import CLIENT_SCHEMA
from pglab.workload.pgbench_output import (
    PgbenchSummary,
    ProgressLine,
    parse_progress_line,
    parse_summary,
    summary_to_dict,
)
from pglab.workload.sysbench_output import SysbenchOutput, parse_output
from pglab.workload.sysbench_output import measured_window_stats as sysbench_window_stats
from pglab.workload.sysbench_output import per_second_series as sysbench_series
from pglab.workload.sysbench_output import summary_to_dict as sysbench_summary
from pglab.workload.txlog import (
    US,
    TxLogSpec,
    measured_window_stats,
    per_second_series,
    read_txlogs,
)

_AGG_COLUMNS = ("start", "n", "lat_sum", "lat_sum2", "lat_min", "lat_max", "lag_sum",
                "lag_sum2", "lag_min", "lag_max", "skipped", "retried", "retries",
                "serialization_failures", "deadlock_failures")
_BUILTINS = {"<builtin: TPC-B (sort of)>": "tpcb-like", "<builtin: select only>": "select-only",
             "<builtin: simple update>": "simple-update"}
_VERSION = re.compile(r"^(\d+(?:\.\d+)?)")
_EPOCH_2000 = 946_684_800  # aggregate lines start with an epoch; per-transaction lines don't


def _read_summary(path: Path) -> PgbenchSummary:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the pgbench summary ({exc.strerror})") from None
    summary = parse_summary(text)
    if summary.tps is None or summary.transactions is None:
        raise BadInput(f"{path}: not a pgbench summary (expected pgbench's stdout with "
                       "'number of transactions actually processed' and 'tps = ' lines)")
    return summary


def _log_kind(path: Path) -> str:
    """'aggregate' or 'transactions', from the first line."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline().split()
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the log ({exc.strerror})") from None
    if len(first) >= 6 and all(f.isdigit() for f in first[:2]):
        return "aggregate" if int(first[0]) > _EPOCH_2000 else "transactions"
    raise BadInput(f"{path}: not a pgbench log (expected -l per-transaction lines "
                   "'client_id transaction_no time script_no time_epoch time_us ...' or "
                   "--aggregate-interval lines 'interval_start num_transactions ...')")


def read_aggregate_log(path: Path, job: int) -> pl.DataFrame:
    """One thread's aggregate log; a line that is not 15 integers is an error."""
    rows: list[list[int]] = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 6 or not all(f.lstrip("-").isdigit() for f in fields):
            raise BadInput(f"{path}:{number}: not an --aggregate-interval log line "
                           f"(expected integers: {' '.join(_AGG_COLUMNS)})")
        values = [int(f) for f in fields[: len(_AGG_COLUMNS)]]
        rows.append(values + [0] * (len(_AGG_COLUMNS) - len(values)))
    frame = pl.DataFrame(rows, schema=list(_AGG_COLUMNS), orient="row")
    return frame.with_columns(pl.lit(job, dtype=pl.Int16()).alias("job"))


def aggregate_series(logs: pl.DataFrame, interval_s: int, warmup_s: int) -> pl.DataFrame:
    """Aggregate-log rows -> the client series (per interval; per job and all jobs).

    The first and last intervals are `partial` (pgbench starts and stops inside them)."""
    def agg() -> list[pl.Expr]:
        n = pl.col("n").sum()
        return [
            (n / interval_s).cast(pl.Float64()).alias("tps"),
            (pl.col("serialization_failures") + pl.col("deadlock_failures")).sum()
            .alias("failures"),
            pl.col("skipped").sum().alias("skipped"),
            pl.col("retries").sum().alias("retries"),
            (pl.col("lat_sum").sum() / n / 1000.0).alias("lat_avg_ms"),
            (pl.col("lat_max").max() / 1000.0).alias("lat_max_ms"),
            (pl.col("lag_sum").sum() / n / 1000.0).alias("lag_avg_ms"),
            (pl.col("lag_max").max() / 1000.0).alias("lag_max_ms"),
        ]

    per_job = logs.group_by("start", "job").agg(agg())
    all_jobs = logs.group_by("start").agg(agg()).with_columns(
        pl.lit(None, dtype=pl.Int16()).alias("job"))
    combined = pl.concat([all_jobs.select(per_job.columns), per_job])
    first, last = logs["start"].min(), logs["start"].max()
    series = combined.with_columns(
        (pl.col("start") < pl.lit(first) + warmup_s).alias("warmup"),
        pl.col("start").is_in([first, last]).alias("partial"),
        pl.lit(None, dtype=pl.Float64()).alias("lat_p50_ms"),
        pl.lit(None, dtype=pl.Float64()).alias("lat_p95_ms"),
        pl.lit(None, dtype=pl.Float64()).alias("lat_p99_ms"),
        (pl.col("start") * US).cast(pl.Datetime("us")).dt.replace_time_zone("UTC").alias("t"),
    )
    return (series.select(list(CLIENT_SCHEMA)).cast(CLIENT_SCHEMA)  # type: ignore[arg-type]
            .sort(["t", "job"], nulls_last=False))


def aggregate_window(logs: pl.DataFrame, series: pl.DataFrame,
                     interval_s: int) -> dict[str, Any]:
    """The measured-window figures (intervals neither warmup nor partial)."""
    measured = series.filter(pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial"))
    starts = [int(t.timestamp()) for t in measured["t"].to_list()]
    window = logs.filter(pl.col("start").is_in(starts))
    n = int(window["n"].sum() or 0)
    seconds = len(starts) * interval_s
    return {
        "seconds": seconds, "transactions": n, "tps": n / seconds if seconds else 0.0,
        "failures": int((window["serialization_failures"] + window["deadlock_failures"]).sum()
                        or 0),
        "skipped": int(window["skipped"].sum() or 0), "retries": int(window["retries"].sum()
                                                                      or 0),
        "lat_avg_ms": float(window["lat_sum"].sum()) / n / 1000.0 if n else None,
        "lat_p50_ms": None, "lat_p95_ms": None, "lat_p99_ms": None,
        "lat_max_ms": int(window["lat_max"].cast(pl.Int64).max() or 0) / 1000.0 if n else None,
        "lag_avg_ms": float(window["lag_sum"].sum()) / n / 1000.0 if n else None,
    }


def _progress_lines(path: Path) -> list[ProgressLine]:
    lines = path.read_text(errors="replace").splitlines()
    return [p for line in lines if line.startswith("progress: ")
            and (p := parse_progress_line(line)) is not None]


def progress_series(lines: list[ProgressLine], interval: float, ended_s: float,
                    warmup_s: int) -> pl.DataFrame:
    """`-P` progress lines (every `interval` s) -> the client series: a row per interval
    (all jobs), at the interval's start. A line's time is when its interval ended: epoch
    seconds with --progress-timestamp, else seconds since the run began, which ended at
    `ended_s`."""
    times = [line.t for line in lines]
    epoch = times[0] > _EPOCH_2000
    origin = times[0] - interval if epoch else 0.0  # the run's start on the lines' clock
    began = origin if epoch else ended_s - times[-1]  # ... in epoch seconds
    rows = [{
        "t": dt.datetime.fromtimestamp(began + line.t - interval - origin, dt.timezone.utc),
        "job": None, "warmup": line.t - interval - origin < warmup_s, "partial": False,
        "tps": line.tps, "failures": line.failed,
        "skipped": line.skipped, "retries": line.retries, "lat_avg_ms": line.lat_ms,
        "lat_p50_ms": None, "lat_p95_ms": None, "lat_p99_ms": None, "lat_max_ms": None,
        "lag_avg_ms": line.lag_ms, "lag_max_ms": None} for line in lines]
    return pl.DataFrame(rows, schema=CLIENT_SCHEMA).sort("t")


def progress_interval(lines: list[ProgressLine]) -> float:
    """The -P interval: the shortest step between lines (1 s if there is one line)."""
    times = [line.t for line in lines]
    return min((b - a for a, b in itertools.pairwise(times) if b > a), default=1.0)


def progress_window(series: pl.DataFrame, interval_s: float) -> dict[str, Any]:
    """The measured-window figures of a progress series (its intervals after warmup)."""
    window = series.filter(~pl.col("warmup"))
    seconds = window.height * interval_s
    n = float((window["tps"] * interval_s).sum() or 0.0)
    timed = window.filter(pl.col("lat_avg_ms").is_not_null())
    weights = float(timed["tps"].sum() or 0.0)
    lag = window.filter(pl.col("lag_avg_ms").is_not_null())
    return {
        "seconds": int(seconds), "transactions": round(n),
        "tps": n / seconds if seconds else 0.0,
        "failures": int(window["failures"].sum() or 0),
        "skipped": int(window["skipped"].sum() or 0),
        "retries": int(window["retries"].sum() or 0),
        "lat_avg_ms": float((timed["lat_avg_ms"] * timed["tps"]).sum()) / weights
        if weights else None,
        "lat_p50_ms": None, "lat_p95_ms": None, "lat_p99_ms": None, "lat_max_ms": None,
        "lag_avg_ms": float((lag["lag_avg_ms"] * lag["tps"]).sum())
        / (float(lag["tps"].sum()) or 1.0) if lag.height else None,
    }


def _summary_measured(summary: PgbenchSummary) -> dict[str, Any]:
    seconds = int(summary.duration_s or 0)
    return {"seconds": seconds, "transactions": summary.transactions, "tps": summary.tps,
            "failures": summary.failed or 0, "skipped": summary.skipped or 0,
            "retries": summary.retries or 0, "lat_avg_ms": summary.latency_avg_ms,
            "lat_p50_ms": None, "lat_p95_ms": None, "lat_p99_ms": None, "lat_max_ms": None,
            "lag_avg_ms": summary.lag_avg_ms}


def _scenario(name: str, summary: PgbenchSummary, warmup_s: int,
              sampling_rate: float) -> dict[str, Any]:
    if summary.scripts:
        mix = [f"{_BUILTINS.get(s.name, s.name)}@{s.weight}" for s in summary.scripts]
    else:
        kind = summary.transaction_type or "unknown"
        mix = [_BUILTINS.get(kind, kind)]
    workload = {"driver": "pgbench", "scale": summary.scaling_factor, "mix": mix,
                "clients": [summary.clients], "jobs": summary.threads,
                "duration": summary.duration_s, "warmup": float(warmup_s),
                "protocol": summary.query_mode, "per_statement": bool(summary.statements)
                or any(s.statements for s in summary.scripts),
                "max_tries": summary.max_tries or 1, "log_sampling": sampling_rate}
    return {"name": name, "server": {"target": "imported"}, "workload": workload}


def import_run(summary_path: Path, logs: list[Path], results_root: Path, name: str,
               warmup_s: int = 0, sampling_rate: float = 1.0,
               this_host: bool = False) -> StoredRun:
    """Make a results folder from a pgbench summary and its logs (see the module doc)."""
    if not re.fullmatch(r"[a-z0-9-]+", name):
        raise BadInput(f"--name {name!r}: expected lowercase letters, digits and '-'")
    sysbench = _sysbench_output(summary_path)
    if sysbench is not None:
        if logs:
            raise BadInput(f"{summary_path}: sysbench's output is imported alone (sysbench "
                           "writes no logs); drop the other files")
        return _import_sysbench(summary_path, sysbench, results_root, name, warmup_s,
                                this_host)
    summary = _read_summary(summary_path)
    kinds = {path: _log_kind(path) for path in logs}
    if len(set(kinds.values())) > 1:
        raise BadInput(f"{', '.join(map(str, logs))}: a mix of per-transaction and "
                       "aggregate logs; give the logs of one pgbench run")
    kind = next(iter(kinds.values()), "summary")
    series: pl.DataFrame | None = None
    if kind == "transactions":
        spec = TxLogSpec(has_lag=summary.lag_avg_ms is not None,
                         has_retries=(summary.max_tries or 1) != 1, sampling_rate=sampling_rate)
        tx = read_txlogs(dict(enumerate(logs)), spec)
        if tx.height == 0:
            raise BadInput(f"{logs[0]}: no pgbench per-transaction log lines in the -l logs")
        series = per_second_series(tx, warmup_s, sampling_rate)
        measured = dataclasses.asdict(measured_window_stats(tx, series, sampling_rate))
        start_us = int(tx["end_us"].cast(pl.Int64).min() or 0)
    elif kind == "aggregate":
        frame = pl.concat([read_aggregate_log(p, job) for job, p in enumerate(logs)])
        if frame.height == 0:
            raise BadInput(f"{logs[0]}: empty --aggregate-interval log")
        starts = sorted(set(frame["start"].to_list()))
        interval = min((b - a for a, b in itertools.pairwise(starts)), default=1)
        series = aggregate_series(frame, interval, warmup_s)
        measured = aggregate_window(frame, series, interval)
        logged = int((frame["serialization_failures"] + frame["deadlock_failures"]).sum())
        if (summary.failed or 0) > 0 and logged == 0:
            # Without --failures-detailed pgbench logs no failure count: unknown, not 0.
            measured["failures"] = None
            series = series.with_columns(pl.lit(None, dtype=pl.Int64()).alias("failures"))
        start_us = int(starts[0]) * US
    elif progress := _progress_lines(summary_path):
        kind = "progress"
        interval = progress_interval(progress)
        series = progress_series(progress, interval, summary_path.stat().st_mtime, warmup_s)
        measured = progress_window(series, interval)
        start_us = int(series["t"].min().timestamp() * US)  # type: ignore[union-attr]
    else:
        measured = _summary_measured(summary)
        start_us = int(summary_path.stat().st_mtime - (summary.duration_s or 0)) * US
    started = dt.datetime.fromtimestamp(start_us / US, dt.timezone.utc)

    folder = create_run_folder(results_root, name)
    shutil.copyfile(summary_path, folder.raw / "pgbench.stdout")
    for job, path in enumerate(logs):
        shutil.copyfile(path, folder.raw / f"{'aggregate' if kind == 'aggregate' else 'txlog'}"
                                           f".{job}")
    if series is not None:
        write_parquet(folder.file(files.CLIENT), series)
    version = _VERSION.match(summary.server_version or summary.pgbench_version or "")
    manifest = _manifest(folder, name, summary, measured, started, warmup_s, sampling_rate)
    manifest.nodes["primary"]["server_version"] = version.group(1) if version else None
    manifest.source = {"kind": "import", "from": kind, "imported_at": iso(utc_now()),
                          "summary": str(summary_path.absolute()),
                          "logs": [str(p.absolute()) for p in logs]}
    if this_host:
        manifest.host = host_facts(None)
    folder.write_manifest(manifest)
    return load_run(folder.path)


def _manifest(folder: RunFolder, name: str, summary: PgbenchSummary, measured: dict[str, Any],
              started: dt.datetime, warmup_s: int, sampling_rate: float) -> Manifest:
    ended = started + dt.timedelta(seconds=summary.duration_s or 0)
    return Manifest(
        run_id=folder.path.name, scenario_name=name, status="completed",
        started_at=iso(started), ended_at=iso(ended), scenario_source="import",
        scenario=_scenario(name, summary, warmup_s, sampling_rate),
        nodes={"primary": {"name": "primary", "target": "imported"}},
        workload={"jobs": summary.threads, "log_sampling": sampling_rate},
        results={"pgbench": summary_to_dict(summary), "measured": measured},
    )


def _sysbench_output(path: Path) -> SysbenchOutput | None:
    """sysbench's parsed stdout when the file is one (its banner and per-second lines or
    its summary), else None."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None  # _read_summary names the problem
    if not text.startswith("sysbench "):
        return None
    output = parse_output(text)
    if not output.intervals and output.summary is None:
        raise BadInput(f"{path}: sysbench output without per-second lines or a summary "
                       "(run it with --report-interval=1)")
    return output


def _import_sysbench(path: Path, output: SysbenchOutput, results_root: Path, name: str,
                     warmup_s: int, this_host: bool) -> StoredRun:
    """A results folder from sysbench's stdout: the per-second series, the summary."""
    summary = output.summary
    seconds = (summary.total_time_s if summary is not None and summary.total_time_s
               else float(len(output.intervals)))
    # sysbench prints no clock time: the file was last written when it ended
    ended_s = path.stat().st_mtime
    started_s = ended_s - seconds
    series = sysbench_series(output.intervals, started_s, warmup_s)
    measured_seconds = series.filter(~pl.col("warmup")).height
    measured = sysbench_window_stats(series, measured_seconds)
    if not output.intervals and summary is not None:  # the summary's figures alone
        measured.update(seconds=int(seconds), transactions=summary.transactions,
                        tps=summary.transactions_per_s or 0.0,
                        lat_avg_ms=summary.lat_avg_ms, lat_max_ms=summary.lat_max_ms)
    percentile = output.intervals[0].percentile if output.intervals else (
        summary.percentile if summary is not None else None)
    folder = create_run_folder(results_root, name)
    shutil.copyfile(path, folder.raw / "sysbench.stdout")
    if output.intervals:
        write_parquet(folder.file(files.CLIENT), series)
    workload = {"driver": "sysbench", "test": None, "threads": [output.threads or 1],
                "duration": float(measured_seconds), "warmup": float(warmup_s),
                "percentile": percentile}
    started = dt.datetime.fromtimestamp(started_s, dt.timezone.utc)
    manifest = Manifest(
        run_id=folder.path.name, scenario_name=name,
        status="completed" if not output.fatal else "failed",
        reason=output.fatal[0] if output.fatal else None,
        started_at=iso(started),
        ended_at=iso(dt.datetime.fromtimestamp(ended_s, dt.timezone.utc)),
        scenario_source="import",
        scenario={"name": name, "server": {"target": "imported"}, "workload": workload},
        nodes={"primary": {"name": "primary", "target": "imported", "server_version": None}},
        workload={"driver": "sysbench", "version": output.version,
                  "threads": output.threads, "per_transaction_log": False},
        results={"sysbench": sysbench_summary(output), "measured": measured},
    )
    manifest.source = {"kind": "import", "from": "sysbench", "imported_at": iso(utc_now()),
                       "summary": str(path.absolute()), "logs": []}
    if this_host:
        manifest.host = host_facts(None)
    folder.write_manifest(manifest)
    return load_run(folder.path)
