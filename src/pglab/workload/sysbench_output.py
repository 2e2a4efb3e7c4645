"""sysbench's stdout -> its per-second lines, its summary, its errors; and the client series.

Pure functions, checked against real output of sysbench 1.0.20 (tests/samples/sysbench/).
With `--report-interval=1` sysbench prints, once a second from the moment its threads
started:

    [ 3s ] thds: 4 tps: 7.00 qps: 73.97 (r/w/o: 19.99/26.99/26.99) lat (ms,95%): 1170.65 \
        err/s: 14.00 reconn/s: 0.00      (one line)

and with --rate also `[ 3s ] queue length: 0, concurrency: 0`. Every figure of the line is
a rate over that interval; the latency is the --percentile of the interval's events
(`lat (ms,0%): 0.00` when --percentile=0 turned percentiles off). After the load comes
the summary (queries, transactions, ignored errors, reconnects, latency, fairness). An
error sysbench does not ignore prints `FATAL: ...` lines and no summary.

sysbench keeps no per-transaction log, so the client series has one row per second for all
threads together (job null), and its latency columns are what sysbench printed: the
interval's percentile, no average or maximum.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from pglab.results.schemas import CLIENT_SCHEMA, SYSBENCH_CLIENT_COLUMNS

_NUM = r"(-?\d+(?:\.\d+)?)"
_INTERVAL = re.compile(
    rf"^\[ *(\d+)s \] thds: (\d+) tps: {_NUM} qps: {_NUM} "
    rf"\(r/w/o: {_NUM}/{_NUM}/{_NUM}\) lat \(ms,(\d+)%\): {_NUM} "
    rf"err/s: {_NUM} reconn/s: {_NUM}\s*$")
_QUEUE = re.compile(r"^\[ *(\d+)s \] queue length: (\d+), concurrency: (\d+)\s*$")
_VERSION = re.compile(r"^sysbench (\S+)")
_COUNT_RATE = re.compile(rf"^\s*(transactions|queries|ignored errors|reconnects):\s+(\d+)\s+"
                         rf"\({_NUM} per sec\.\)\s*$")
_QUERY_KIND = re.compile(r"^\s*(read|write|other|total):\s+(\d+)\s*$")
_TOTAL_TIME = re.compile(rf"^\s*total time:\s+{_NUM}s\s*$")
_EVENTS = re.compile(r"^\s*total number of events:\s+(\d+)\s*$")
_LATENCY = re.compile(rf"^\s*(min|avg|max|sum):\s+{_NUM}\s*$")
_PERCENTILE = re.compile(rf"^\s*(\d+)th percentile:\s+{_NUM}\s*$")
_PERCENTILE_OFF = re.compile(r"^\s*percentile stats:\s+disabled\s*$")
_FAIRNESS = re.compile(rf"^\s*(events|execution time) \(avg/stddev\):\s+{_NUM}/{_NUM}\s*$")
_THREADS = re.compile(r"^Number of threads: (\d+)\s*$")


@dataclass(frozen=True)
class IntervalLine:
    """One `[ Ns ]` line: the second that ended N seconds after the threads started."""

    second: int
    threads: int
    tps: float
    qps: float
    qps_read: float
    qps_write: float
    qps_other: float
    percentile: int  # the latency's percentile, 0 when sysbench ran with --percentile=0
    lat_ms: float | None  # None when percentiles were off
    errors_per_s: float  # ignored errors (the event was re-run)
    reconnects_per_s: float


@dataclass(frozen=True)
class QueueLine:
    """With --rate: events waiting for a thread, and threads busy, at the second's end."""

    second: int
    queue_length: int
    concurrency: int


@dataclass
class SysbenchSummary:
    """The figures after the load (all of it, the warmup included)."""

    queries_read: int | None = None
    queries_write: int | None = None
    queries_other: int | None = None
    queries_total: int | None = None
    transactions: int | None = None
    transactions_per_s: float | None = None
    queries: int | None = None
    queries_per_s: float | None = None
    ignored_errors: int | None = None
    ignored_errors_per_s: float | None = None
    reconnects: int | None = None
    reconnects_per_s: float | None = None
    total_time_s: float | None = None
    events: int | None = None
    lat_min_ms: float | None = None
    lat_avg_ms: float | None = None
    lat_max_ms: float | None = None
    lat_sum_ms: float | None = None
    percentile: int | None = None  # None when sysbench printed `percentile stats: disabled`
    lat_percentile_ms: float | None = None
    events_per_thread_avg: float | None = None
    events_per_thread_stddev: float | None = None
    exec_time_per_thread_avg_s: float | None = None
    exec_time_per_thread_stddev_s: float | None = None


@dataclass
class SysbenchOutput:
    version: str | None = None
    threads: int | None = None
    intervals: list[IntervalLine] = field(default_factory=list)
    queue: list[QueueLine] = field(default_factory=list)
    summary: SysbenchSummary | None = None  # None: sysbench ended before printing one
    fatal: list[str] = field(default_factory=list)  # `FATAL: ...` lines, without the prefix
    # The `[ Ns ]` second after which the first FATAL line came (0: before any interval).
    fatal_after_s: int | None = None


def parse_interval_line(line: str) -> IntervalLine | None:
    """A `[ Ns ] thds: ...` line, or None for any other line."""
    match = _INTERVAL.match(line)
    if match is None:
        return None
    g = match.groups()
    percentile = int(g[7])
    return IntervalLine(
        second=int(g[0]), threads=int(g[1]), tps=float(g[2]), qps=float(g[3]),
        qps_read=float(g[4]), qps_write=float(g[5]), qps_other=float(g[6]),
        percentile=percentile, lat_ms=float(g[8]) if percentile else None,
        errors_per_s=float(g[9]), reconnects_per_s=float(g[10]))


def parse_queue_line(line: str) -> QueueLine | None:
    match = _QUEUE.match(line)
    if match is None:
        return None
    return QueueLine(int(match.group(1)), int(match.group(2)), int(match.group(3)))


def parse_output(text: str) -> SysbenchOutput:
    """Everything pglab reads from a `sysbench ... run` stdout; lines it does not know are
    skipped, so a cut-off output gives what it holds."""
    out = SysbenchOutput()
    summary = SysbenchSummary()
    seen_summary = False
    section = ""
    for line in text.splitlines():
        if (interval := parse_interval_line(line)) is not None:
            out.intervals.append(interval)
            continue
        if (queue := parse_queue_line(line)) is not None:
            out.queue.append(queue)
            continue
        if line.startswith("FATAL: "):
            if not out.fatal:
                out.fatal_after_s = out.intervals[-1].second if out.intervals else 0
            out.fatal.append(line.removeprefix("FATAL: ").strip())
            continue
        if out.version is None and (match := _VERSION.match(line)):
            out.version = match.group(1)
            continue
        if (match := _THREADS.match(line)):
            out.threads = int(match.group(1))
            continue
        stripped = line.strip()
        if stripped in ("SQL statistics:", "General statistics:", "Latency (ms):",
                        "Threads fairness:"):
            section, seen_summary = stripped, True
            continue
        if not seen_summary:
            continue
        if section == "SQL statistics:":
            if (match := _QUERY_KIND.match(line)):
                setattr(summary, f"queries_{match.group(1)}", int(match.group(2)))
            elif (match := _COUNT_RATE.match(line)):
                name = match.group(1).replace(" ", "_")
                setattr(summary, name, int(match.group(2)))
                setattr(summary, f"{name}_per_s", float(match.group(3)))
        elif section == "General statistics:":
            if (match := _TOTAL_TIME.match(line)):
                summary.total_time_s = float(match.group(1))
            elif (match := _EVENTS.match(line)):
                summary.events = int(match.group(1))
        elif section == "Latency (ms):":
            if (match := _LATENCY.match(line)):
                setattr(summary, f"lat_{match.group(1)}_ms", float(match.group(2)))
            elif (match := _PERCENTILE.match(line)):
                summary.percentile = int(match.group(1))
                summary.lat_percentile_ms = float(match.group(2))
            elif _PERCENTILE_OFF.match(line):
                summary.percentile = None
        elif section == "Threads fairness:" and (match := _FAIRNESS.match(line)):
            avg, stddev = float(match.group(2)), float(match.group(3))
            if match.group(1) == "events":
                summary.events_per_thread_avg, summary.events_per_thread_stddev = avg, stddev
            else:
                summary.exec_time_per_thread_avg_s = avg
                summary.exec_time_per_thread_stddev_s = stddev
    if seen_summary and summary.transactions is not None:
        out.summary = summary
    return out


def summary_to_dict(output: SysbenchOutput) -> dict[str, Any]:
    """manifest.results["sysbench"]: the summary's figures, the version, the errors."""
    record: dict[str, Any] = {"version": output.version, "threads": output.threads,
                              "intervals": len(output.intervals)}
    if output.summary is not None:
        record.update(asdict(output.summary))
    if output.fatal:
        record["fatal"] = output.fatal[:10]
        record["fatal_after_s"] = output.fatal_after_s
    return record


def fatal_message(output: SysbenchOutput) -> str | None:
    """The error that ended sysbench, in one line: the server's message and the failed
    query when sysbench printed them, else its first FATAL line."""
    if not output.fatal:
        return None
    server = next((f for f in output.fatal if "() failed:" in f), output.fatal[0])
    # `PQexec() failed: 7 division by zero`: the 7 is libpq's PGRES_FATAL_ERROR status
    server = re.sub(r"^(\w+\(\) failed:) \d+ ", r"\1 ", server)
    query = next((f.removeprefix("failed query was: ") for f in output.fatal
                  if f.startswith("failed query was: ")), None)
    state = next((m.group(1) for f in output.fatal
                  if (m := re.search(r"state = '(\w{5})'", f))), None)
    return (server + (f" (SQLSTATE {state})" if state else "")
            + (f"; failed query: {query}" if query else ""))


def per_second_series(intervals: list[IntervalLine], threads_started_s: float,
                      warmup_s: int) -> pl.DataFrame:
    """The client series (CLIENT_SCHEMA, then SYSBENCH_CLIENT_COLUMNS) from the per-second
    lines: one all-threads row (job null) per interval.

    `t` is the start of the whole second nearest to the interval's start
    (`threads_started_s` + N - 1, epoch seconds), so the series joins telemetry on `t` like
    pgbench's. sysbench prints whole intervals only, so no row is `partial`; a row is
    `warmup` when its interval ends within the first `warmup_s` seconds. `failures` is 0:
    sysbench's pgsql driver re-runs an event after a deadlock, a unique violation or a
    serialization failure (counted in `retries`, rounded from its err/s) and ends the run at
    any other error. Latency: sysbench's per-second percentile in `lat_percentile_ms`, and
    in lat_p50/p95/p99_ms when it is one of those; no average, maximum or lag (null).
    """
    rows: dict[str, list[Any]] = {name: [] for name in (*CLIENT_SCHEMA,
                                                        *SYSBENCH_CLIENT_COLUMNS)}
    for line, second in zip(intervals, _slots(intervals), strict=True):
        start = round(threads_started_s + second - 1)
        values: dict[str, Any] = dict.fromkeys(rows)
        values.update(
            t=start * 1_000_000, job=None, warmup=second <= warmup_s, partial=False,
            tps=line.tps, failures=0, skipped=0, retries=round(line.errors_per_s),
            qps=line.qps, qps_read=line.qps_read, qps_write=line.qps_write,
            qps_other=line.qps_other, errors_per_s=line.errors_per_s,
            reconnects_per_s=line.reconnects_per_s, lat_percentile_ms=line.lat_ms,
            threads=line.threads)
        if line.percentile in (50, 95, 99):
            values[f"lat_p{line.percentile}_ms"] = line.lat_ms
        for name, value in values.items():
            rows[name].append(value)
    schema = {**CLIENT_SCHEMA, **SYSBENCH_CLIENT_COLUMNS}
    frame = pl.DataFrame(
        {**rows, "t": pl.Series("t", rows["t"], dtype=pl.Int64())},
        schema_overrides={k: v for k, v in schema.items() if k != "t"})
    frame = frame.with_columns(
        pl.col("t").cast(pl.Datetime("us")).dt.replace_time_zone("UTC"))
    # sysbench's clock and the wall clock round two intervals to one second at most once
    # in a long run: keep the later, so `t` stays unique
    return (frame.select(list(schema)).cast(schema)  # type: ignore[arg-type]
            .unique("t", keep="last", maintain_order=True).sort("t"))


def _slots(intervals: list[IntervalLine]) -> list[int]:
    """Each line's second. sysbench labels a line with its elapsed time rounded, so a line
    its reporting thread printed late takes the next second's label: on a loaded machine
    `[ 1s ] [ 2s ] [ 3s ] [ 5s ] [ 5s ]`, the second 5 the final flush. The lines follow
    one another a second apart, so a repeated label goes to the free second next to it:
    before it when the line before left one, else after."""
    seconds = [line.second for line in intervals]
    for i in range(1, len(seconds)):
        if seconds[i] != seconds[i - 1]:
            continue
        before = seconds[i - 2] if i >= 2 else 0
        if seconds[i - 1] - 1 > before:
            seconds[i - 1] -= 1
        elif i + 1 == len(seconds) or seconds[i + 1] > seconds[i] + 1:
            seconds[i] += 1
    return seconds


def measured_window_stats(series: pl.DataFrame, duration_s: int) -> dict[str, Any]:
    """manifest.results["measured"] from the series: the first `duration_s` seconds after
    the warmup. tps is the mean of the seconds' tps (sysbench's transactions in them);
    a latency percentile is the median of the per-second percentiles (as compare takes
    it), not a percentile of the window's transactions: sysbench logs none."""
    window = series.filter(~pl.col("warmup") & ~pl.col("partial")).sort("t").head(duration_s)
    seconds = window.height
    if seconds == 0:
        return {"seconds": 0, "transactions": 0, "tps": 0.0, "failures": 0, "skipped": 0,
                "retries": 0, "lat_avg_ms": None, "lat_p50_ms": None, "lat_p95_ms": None,
                "lat_p99_ms": None, "lat_max_ms": None, "lag_avg_ms": None}

    def median(column: str) -> float | None:
        value = window[column].median()
        return float(value) if isinstance(value, (int, float)) else None

    tps_sum = float(window["tps"].sum())
    return {
        "seconds": seconds,
        "transactions": round(tps_sum),  # tps is per interval of ~1 s: a count, rounded
        "tps": tps_sum / seconds,
        "failures": 0,
        "skipped": 0,
        "retries": int(window["retries"].sum()),
        "lat_avg_ms": None,
        "lat_p50_ms": median("lat_p50_ms"),
        "lat_p95_ms": median("lat_p95_ms"),
        "lat_p99_ms": median("lat_p99_ms"),
        "lat_max_ms": None,
        "lag_avg_ms": None,
        "lat_percentile_ms": median("lat_percentile_ms"),
        "qps": float(window["qps"].sum()) / seconds,
        "latency_from": "the median of sysbench's per-second percentiles (no "
                        "per-transaction log)",
    }
