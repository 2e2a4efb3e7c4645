"""sysbench's stdout parsed: real output of sysbench 1.0.20 against PostgreSQL 18
(tests/samples/sysbench/, made by make_sysbench_samples.py), exact values."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from conftest import SAMPLES
from pglab.results.schemas import CLIENT_SCHEMA, SYSBENCH_CLIENT_COLUMNS
from pglab.workload.sysbench_output import (
    IntervalLine,
    QueueLine,
    fatal_message,
    measured_window_stats,
    parse_interval_line,
    parse_output,
    per_second_series,
    summary_to_dict,
)

SYSBENCH = SAMPLES / "sysbench"


def sample(name: str) -> str:
    return (SYSBENCH / name).read_text()


def test_read_write_lines_and_summary() -> None:
    out = parse_output(sample("run_read_write.txt"))
    assert (out.version, out.threads, out.fatal) == ("1.0.20", 4, [])
    assert len(out.intervals) == 5
    assert out.intervals[0] == IntervalLine(
        second=1, threads=4, tps=712.28, qps=14411.41, qps_read=10101.77, qps_write=2866.10,
        qps_other=1443.54, percentile=95, lat_ms=12.52, errors_per_s=5.99,
        reconnects_per_s=0.0)
    assert out.intervals[-1].second == 5 and out.intervals[-1].lat_ms == 28.16
    s = out.summary
    assert s is not None
    assert (s.queries_read, s.queries_write, s.queries_other, s.queries_total) == (
        44044, 12538, 6310, 62892)
    assert (s.transactions, s.transactions_per_s, s.queries, s.queries_per_s) == (
        3132, 621.40, 62892, 12477.92)
    assert (s.ignored_errors, s.ignored_errors_per_s, s.reconnects, s.reconnects_per_s) == (
        14, 2.78, 0, 0.0)
    assert (s.total_time_s, s.events) == (5.0399, 3132)
    assert (s.lat_min_ms, s.lat_avg_ms, s.lat_max_ms, s.lat_sum_ms) == (
        1.02, 6.41, 61.67, 20074.16)
    assert (s.percentile, s.lat_percentile_ms) == (95, 16.12)
    assert (s.events_per_thread_avg, s.events_per_thread_stddev,
            s.exec_time_per_thread_avg_s, s.exec_time_per_thread_stddev_s) == (
        783.0, 13.84, 5.0185, 0.01)
    record = summary_to_dict(out)
    assert record["transactions"] == 3132 and record["version"] == "1.0.20"
    assert "fatal" not in record


def test_other_percentile_and_percentiles_off() -> None:
    p99 = parse_output(sample("run_read_only_p99.txt"))
    assert [(i.percentile, i.lat_ms) for i in p99.intervals] == [
        (99, 17.32), (99, 28.67), (99, 7.04)]
    assert p99.summary is not None and (p99.summary.percentile,
                                        p99.summary.lat_percentile_ms) == (99, 17.63)
    off = parse_output(sample("run_write_only_p0.txt"))
    assert [(i.percentile, i.lat_ms, i.errors_per_s) for i in off.intervals] == [
        (0, None, 1.0), (0, None, 4.0), (0, None, 1.0)]
    assert off.summary is not None
    assert (off.summary.percentile, off.summary.lat_percentile_ms) == (None, None)
    assert (off.summary.lat_max_ms, off.summary.ignored_errors) == (36.60, 6)


def test_rate_adds_queue_lines() -> None:
    out = parse_output(sample("run_point_select_rate.txt"))
    assert [i.tps for i in out.intervals] == [327.66, 258.13, 287.99, 329.0]
    assert out.queue[0] == QueueLine(second=1, queue_length=0, concurrency=0)
    assert len(out.queue) == 4
    assert out.summary is not None and out.summary.transactions == 1203


def test_deadlocks_are_ignored_errors_not_a_failure() -> None:
    """sysbench's pgsql driver rolls back and re-runs the event after a deadlock (40P01),
    a unique violation (23505) or a serialization failure (40001)."""
    out = parse_output(sample("run_deadlock.txt"))
    assert out.fatal == []
    assert [i.errors_per_s for i in out.intervals] == [12.98, 13.01, 12.93, 13.07, 13.99]
    assert out.summary is not None and (out.summary.ignored_errors,
                                        out.summary.transactions) == (69, 40)


def test_a_fatal_error_ends_the_output_without_summary() -> None:
    out = parse_output(sample("run_division_by_zero.txt"))
    assert out.summary is None
    assert len(out.intervals) == 1 and out.fatal_after_s == 1
    assert out.fatal[0] == "PQexec() failed: 7 division by zero"
    assert fatal_message(out) == ("PQexec() failed: division by zero (SQLSTATE 22012); "
                                  "failed query: SELECT 1 / 0")
    assert summary_to_dict(out)["fatal_after_s"] == 1


def test_unique_violations_on_every_event_run_past_time() -> None:
    """Every event fails with an ignored error: sysbench re-ran them past --time=5 until
    `timeout 8` stopped it (the runner's FINISH_GRACE_S is for this)."""
    out = parse_output(sample("run_unique_violation.txt"))
    assert out.summary is None and out.fatal == []
    assert out.intervals[-1].second == 7 and out.intervals[-1].tps == 0.0
    assert out.intervals[-1].errors_per_s == 10.0


@pytest.mark.parametrize("line", [
    "[ 1s ] queue length: 0, concurrency: 0",
    "Threads started!",
    "[ 1s ] thds: 4 tps: x qps: 1 (r/w/o: 1/1/1) lat (ms,95%): 1 err/s: 0 reconn/s: 0",
])
def test_other_lines_are_not_intervals(line: str) -> None:
    assert parse_interval_line(line) is None


def test_series_has_the_client_columns_and_the_sysbench_ones() -> None:
    out = parse_output(sample("run_read_write.txt"))
    started = 1_764_000_000.4
    series = per_second_series(out.intervals, started, warmup_s=2)
    assert list(series.columns) == [*CLIENT_SCHEMA, *SYSBENCH_CLIENT_COLUMNS]
    assert series.height == 5
    first = series.row(0, named=True)
    assert first["t"] == dt.datetime.fromtimestamp(1_764_000_000, dt.timezone.utc)
    assert (first["job"], first["warmup"], first["partial"], first["tps"]) == (
        None, True, False, 712.28)
    assert (first["lat_p95_ms"], first["lat_percentile_ms"], first["lat_p99_ms"]) == (
        12.52, 12.52, None)
    assert (first["retries"], first["errors_per_s"], first["failures"]) == (6, 5.99, 0)
    assert (first["lat_avg_ms"], first["lat_max_ms"], first["lag_avg_ms"]) == (
        None, None, None)
    assert first["qps_read"] == 10101.77 and first["threads"] == 4
    assert series["warmup"].to_list() == [True, True, False, False, False]
    assert series["t"].diff().drop_nulls().dt.total_seconds().to_list() == [1, 1, 1, 1]

    stats = measured_window_stats(series, duration_s=2)
    assert stats["seconds"] == 2
    assert stats["tps"] == pytest.approx((647.06 + 656.90) / 2)
    assert stats["transactions"] == 1304
    assert stats["lat_p95_ms"] == pytest.approx((15.27 + 13.70) / 2)  # median of two
    assert stats["retries"] == 5 and stats["lat_avg_ms"] is None


def test_series_of_percentile_99_and_of_nothing() -> None:
    out = parse_output(sample("run_read_only_p99.txt"))
    series = per_second_series(out.intervals, 1_764_000_000.0, warmup_s=0)
    assert series["lat_p99_ms"].to_list() == [17.32, 28.67, 7.04]
    assert series["lat_p95_ms"].null_count() == 3
    assert measured_window_stats(series, 3)["lat_p99_ms"] == 17.32
    empty = per_second_series([], 0.0, 0)
    assert empty.height == 0 and empty.schema == pl.Schema(
        {**CLIENT_SCHEMA, **SYSBENCH_CLIENT_COLUMNS})
    assert measured_window_stats(empty, 5)["seconds"] == 0


def test_a_line_printed_late_keeps_its_second() -> None:
    # A run beside the whole suite: the fourth line comes late and takes the label 5,
    # then the final flush prints `[ 5s ]` again with nothing in it
    out = parse_output(sample("run_late_report.txt"))
    assert [line.second for line in out.intervals] == [1, 2, 3, 5, 5]
    series = per_second_series(out.intervals, 1_764_000_000.0, warmup_s=1)
    assert series["tps"].to_list() == [421.63, 17.30, 54.39, 19.30, 0.0]
    assert series["t"].diff().drop_nulls().dt.total_seconds().to_list() == [1, 1, 1, 1]
    assert series["warmup"].to_list() == [True, False, False, False, False]
    # measured: seconds 2 to 4, the late line's among them
    assert measured_window_stats(series, duration_s=3)["tps"] == pytest.approx(
        (17.30 + 54.39 + 19.30) / 3)
