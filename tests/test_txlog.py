"""Per-transaction logs -> per-second series, against real pgbench 15 and 18 logs.

Every sample log comes with the summary pgbench printed for the same run
(`<name>.summary.txt`); the counts in the log must agree with it exactly.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest

from pglab.results.schemas import CLIENT_SCHEMA
from pglab.workload.pgbench_output import PgbenchSummary, parse_summary
from pglab.workload.txlog import (
    TX_SCHEMA,
    TxLogSpec,
    WindowStats,
    measured_window_stats,
    per_second_series,
    read_txlogs,
)

SAMPLES = Path(__file__).resolve().parent / "samples" / "pgbench"
VERSIONS = ["15", "18"]
NAMES = ["plain", "rate", "retries", "custom", "failed", "stall", "sampled"]
CASES = [(v, n) for v in VERSIONS for n in NAMES]
US = 1_000_000
FAILURES = ["failed", "serialization", "deadlock"]


def files_of(version: str, name: str) -> dict[int, Path]:
    return {job: SAMPLES / version / f"txlog_{name}.{job}" for job in (0, 1)}


def summary_of(version: str, name: str) -> PgbenchSummary:
    return parse_summary((SAMPLES / version / f"txlog_{name}.summary.txt").read_text())


def spec_of(name: str, summary: PgbenchSummary) -> TxLogSpec:
    return TxLogSpec(
        has_lag=summary.lag_avg_ms is not None,
        has_retries=summary.max_tries not in (None, 1),
        sampling_rate=0.1 if name == "sampled" else 1.0,
    )


def load(version: str, name: str) -> tuple[pl.DataFrame, PgbenchSummary, TxLogSpec]:
    summary = summary_of(version, name)
    spec = spec_of(name, summary)
    return read_txlogs(files_of(version, name), spec), summary, spec


def line_count(paths: dict[int, Path]) -> int:
    return sum(len(p.read_text().splitlines()) for p in paths.values())


def count(tx: pl.DataFrame, *statuses: str) -> int:
    return tx.filter(pl.col("status").is_in(list(statuses))).height


# --- reading -----------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "name"), CASES)
def test_log_agrees_with_summary(version: str, name: str) -> None:
    tx, summary, _ = load(version, name)
    assert dict(tx.schema) == TX_SCHEMA
    assert tx.height == line_count(files_of(version, name))  # every line read
    assert set(tx["job"].unique()) == {0, 1}
    assert tx["status"].is_in(["ok", "skipped", *FAILURES]).all()
    ok = tx.filter(pl.col("status") == "ok")
    if name == "sampled":  # about 10% logged
        assert summary.transactions is not None
        assert 0.05 * summary.transactions < ok.height < 0.15 * summary.transactions
        return
    assert ok.height == summary.transactions
    assert count(tx, *FAILURES) == summary.failed
    assert count(tx, "skipped") == (summary.skipped or 0)
    assert int(tx["retries"].sum()) == (summary.retries or 0)
    assert tx.filter(pl.col("retries") > 0).height == (summary.retried or 0)
    assert ok["latency_us"].null_count() == 0
    assert tx.filter(pl.col("status") != "ok")["latency_us"].null_count() == tx.height - ok.height


@pytest.mark.parametrize(
    ("version", "name", "status", "n"),
    [
        ("15", "rate", "skipped", 206),
        ("18", "rate", "skipped", 157),
        ("15", "retries", "serialization", 1649),
        ("18", "retries", "serialization", 1181),
        ("15", "custom", "deadlock", 117),
        ("18", "custom", "deadlock", 130),
        ("15", "failed", "failed", 115),
        ("18", "failed", "failed", 138),
    ],
)
def test_status_words(version: str, name: str, status: str, n: int) -> None:
    tx, _, _ = load(version, name)
    assert count(tx, status) == n


@pytest.mark.parametrize("version", VERSIONS)
def test_rate_log_matches_summary_statistics(version: str) -> None:
    """With -R, pgbench's latency/lag averages come from the same sums as the log."""
    tx, summary, spec = load(version, "rate")
    assert spec.has_lag and not spec.has_retries
    ok = tx.filter(pl.col("status") == "ok")
    assert round(float(ok["latency_us"].mean()) / 1000, 3) == summary.latency_avg_ms  # type: ignore[arg-type]
    assert round(float(ok["lag_us"].mean()) / 1000, 3) == summary.lag_avg_ms  # type: ignore[arg-type]
    assert int(ok["lag_us"].max()) / 1000 == summary.lag_max_ms  # type: ignore[arg-type]
    assert summary.latency_limit_ms == 5.0
    assert ok.filter(pl.col("latency_us") > 5000).height == summary.above_limit
    # pgbench logs lag 0 for skipped transactions: not kept
    assert tx.filter(pl.col("status") == "skipped")["lag_us"].null_count() == count(tx, "skipped")


@pytest.mark.parametrize(
    ("version", "first"),
    [
        ("15", (0, 0, 1, 1795285443451346, 1502063, "ok")),
        ("18", (0, 0, 1, 1795285501162528, 1502003, "ok")),
    ],
)
def test_first_row(version: str, first: tuple[object, ...]) -> None:
    tx, _, _ = load(version, "stall")
    row = tx.row(0, named=True)
    assert (
        row["job"],
        row["script"],
        row["client"] + 1,
        row["end_us"],
        row["latency_us"],
        row["status"],
    ) == first
    assert row["lag_us"] is None and row["retries"] == 0


def test_retries_column() -> None:
    tx, _, _ = load("18", "retries")
    assert tx["retries"].max() == 2  # --max-tries=3
    first = tx.row(0, named=True)  # "1 1 serialization 0 1795285509 265746 2"
    assert (first["client"], first["status"], first["end_us"], first["retries"]) == (
        1,
        "serialization",
        1795285509265746,
        2,
    )


# --- odd input ---------------------------------------------------------------------------

PLAIN = TxLogSpec(has_lag=False, has_retries=False, sampling_rate=1.0)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = tmp_path / "txlog.1"
    empty.write_text("")
    tx = read_txlogs({0: empty, 1: tmp_path / "missing"}, PLAIN)
    assert tx.height == 0 and dict(tx.schema) == TX_SCHEMA
    assert read_txlogs({}, PLAIN).height == 0
    series = per_second_series(tx, 5)
    assert series.height == 0 and dict(series.schema) == CLIENT_SCHEMA
    assert measured_window_stats(tx, series) == WindowStats(
        0, 0, 0.0, 0, 0, 0, None, None, None, None, None, None
    )


@pytest.mark.parametrize("keep", [1, 5, 12, 20, 27, 30])
def test_truncated_last_line(tmp_path: Path, keep: int) -> None:
    """A killed pgbench leaves a partial last line; it is dropped wherever it was cut."""
    source = (SAMPLES / "18" / "txlog_plain.0").read_text()
    lines = source.splitlines(keepends=True)
    last = lines[-1]
    assert keep < len(last) - 1
    cut = tmp_path / "txlog.123"
    cut.write_text("".join(lines[:-1]) + last[:keep])
    tx = read_txlogs({0: cut}, PLAIN)
    assert tx.height == len(lines) - 1
    full = read_txlogs({0: SAMPLES / "18" / "txlog_plain.0"}, PLAIN)
    assert tx.equals(full.head(len(lines) - 1))


def test_garbage_lines_are_dropped(tmp_path: Path) -> None:
    log = tmp_path / "txlog.9"
    log.write_text(
        "0 1 2950 0 1795282080 483829\n"
        "garbage\n"
        "\n"
        "0 2 x y z w\n"
        "0 3 1005 0 1795282080 9999999\n"  # microseconds out of range
        "0 4 -5 0 1795282080 1\n"  # negative latency
        '"0 5 1 0 1795282080 2\n'
        "0 6 other 0 1795282081 5\n"  # a failure word from a newer pgbench
        "0 7 800 0 1795282081 10 extra columns here\n"
        "\x00\xff\n"
        "1 1 790 1 1795282081 483830\n"
    )
    tx = read_txlogs({3: log}, PLAIN)
    assert tx["client"].to_list() == [0, 0, 0, 1]
    assert tx["status"].to_list() == ["ok", "failed", "ok", "ok"]
    assert tx["script"].to_list() == [0, 0, 0, 1]
    assert tx["job"].to_list() == [3, 3, 3, 3]
    assert tx["latency_us"].to_list() == [2950, None, 800, 790]


def test_invalid_utf8(tmp_path: Path) -> None:
    log = tmp_path / "txlog.5"
    log.write_bytes(
        b"0 1 2950 0 1795282080 483829\n\xff\xfe 1 2 3 4 5\n"
        b"0 2 \xff 0 1795282080 5\n0 3 100 0 1795282081 5\n"
    )
    tx = read_txlogs({0: log}, PLAIN)
    assert tx["latency_us"].to_list() == [2950, None, 100]
    assert tx["status"].to_list() == ["ok", "failed", "ok"]


def test_spec_mismatch_does_not_crash() -> None:
    """Columns the spec does not announce are ignored; announced but absent ones are null."""
    rate_files = files_of("15", "rate")
    tx = read_txlogs(rate_files, PLAIN)
    assert tx.height == line_count(rate_files) and tx["lag_us"].null_count() == tx.height
    plain_files = files_of("15", "plain")
    tx = read_txlogs(plain_files, TxLogSpec(has_lag=True, has_retries=True, sampling_rate=1.0))
    assert tx.height == line_count(plain_files)
    assert tx["lag_us"].null_count() == tx.height and tx["retries"].sum() == 0


# --- per-second series -------------------------------------------------------------------


@pytest.mark.parametrize(("version", "name"), CASES)
def test_series_of_samples(version: str, name: str) -> None:
    tx, summary, spec = load(version, name)
    series = per_second_series(tx, 1, spec.sampling_rate)
    assert dict(series.schema) == CLIENT_SCHEMA
    everything = series.filter(pl.col("job").is_null())
    jobs = series.filter(pl.col("job").is_not_null())
    # one row per second and job plus one for all jobs, every second present
    seconds = everything["t"].dt.epoch("s").to_list()
    assert seconds == list(range(seconds[0], seconds[-1] + 1))
    assert series.height == 3 * len(seconds)
    assert series.equals(series.sort(["t", "job"], nulls_last=False))
    # every transaction lands in exactly one second
    ok = count(tx, "ok")
    assert float(everything["tps"].sum()) * spec.sampling_rate == pytest.approx(ok)
    assert float(jobs["tps"].sum()) * spec.sampling_rate == pytest.approx(ok)
    assert int(everything["failures"].sum()) == count(tx, *FAILURES) == int(jobs["failures"].sum())
    assert int(everything["skipped"].sum()) == count(tx, "skipped")
    assert int(everything["retries"].sum()) == int(tx["retries"].sum())
    if name != "sampled":
        assert round(float(everything["tps"].sum())) == summary.transactions
    # load_start lies in the first second, which is partial, as is the last one
    assert everything["partial"][0] and everything["partial"][-1]
    assert everything["warmup"][0]
    assert not everything["partial"][1:-1].any()
    # the pooled maximum is the maximum of the jobs' maxima
    both = everything.join(jobs.group_by("t").agg(pl.col("lat_max_ms").max().alias("m")), on="t")
    assert both.filter(pl.col("lat_max_ms") != pl.col("m")).height == 0
    if spec.has_lag:
        assert everything["lag_avg_ms"].null_count() < everything.height
    else:
        assert everything["lag_avg_ms"].null_count() == everything.height
    window = measured_window_stats(tx, series, spec.sampling_rate)
    measured = everything.filter(~pl.col("warmup") & ~pl.col("partial"))
    assert window.seconds == measured.height
    assert window.transactions == pytest.approx(float(measured["tps"].sum()) * spec.sampling_rate)


@pytest.mark.parametrize(
    ("version", "lat_max", "measured_lat_max"),
    [
        ("15", [None, None, 1502.086, 1501.814, None, 1504.24], 1502.086),
        ("18", [None, None, 1502.014, 1501.73, None, 1501.775], 1502.014),
    ],
)
def test_stall_seconds_have_zero_tps(
    version: str, lat_max: list[float | None], measured_lat_max: float
) -> None:
    """Real 1.5 s transactions: seconds in which nothing completed show up with tps 0."""
    tx, _, _ = load(version, "stall")
    series = per_second_series(tx, 0)
    everything = series.filter(pl.col("job").is_null())
    assert everything["tps"].to_list() == [0.0, 0.0, 2.0, 2.0, 0.0, 2.0]
    assert everything["lat_max_ms"].to_list() == [pytest.approx(x) if x else x for x in lat_max]
    assert everything["partial"].to_list() == [True, False, False, False, False, True]
    assert everything["warmup"].to_list() == [True, False, False, False, False, False]
    for job in (0, 1):
        assert series.filter(pl.col("job") == job)["tps"].to_list() == [
            0.0,
            0.0,
            1.0,
            1.0,
            0.0,
            1.0,
        ]
    window = measured_window_stats(tx, series)
    assert (window.seconds, window.transactions, window.tps) == (4, 4, 1.0)
    assert window.lat_max_ms == pytest.approx(measured_lat_max)
    # with a warmup longer than the run nothing is measured
    late = per_second_series(tx, 60)
    assert late["warmup"].all()
    assert measured_window_stats(tx, late).seconds == 0
    # clients that died with their server and were not restarted: the seconds the load
    # was planned for and did not run are an outage at tps 0, measured like the others
    planned = per_second_series(tx, 0, planned_s=9).filter(pl.col("job").is_null())
    assert planned["tps"].to_list() == [0.0, 0.0, 2.0, 2.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    assert planned["partial"].to_list() == [True] + [False] * 8 + [True]


def synthetic(rows: Sequence[tuple[int, int, int | None, str]], lag: bool = False) -> pl.DataFrame:
    """(job, end_us, latency_us, status) -> a transactions frame like read_txlogs'."""
    return pl.DataFrame(
        {
            "job": [r[0] for r in rows],
            "client": [r[0] for r in rows],
            "script": [0] * len(rows),
            "end_us": [r[1] for r in rows],
            "latency_us": [r[2] for r in rows],
            "status": [r[3] for r in rows],
            "lag_us": [(100 if r[3] == "ok" else None) if lag else None for r in rows],
            "retries": [1 if r[3] == "serialization" else 0 for r in rows],
        },
        schema=TX_SCHEMA,
    )


T0 = 1_700_000_000 * US


def test_gap_gives_zero_tps_seconds() -> None:
    rows = [(0, T0 + i * 100_000 + 50_000, 1000, "ok") for i in range(20)]  # seconds 0-1
    rows += [(1, T0 + 5 * US + i * 100_000 + 50_000, 2000, "ok") for i in range(10)]  # second 5
    series = per_second_series(synthetic(rows), 0)
    everything = series.filter(pl.col("job").is_null())
    assert everything["tps"].to_list() == [10.0, 10.0, 0.0, 0.0, 0.0, 10.0]
    assert everything["t"][0] == datetime.fromtimestamp(T0 // US, tz=timezone.utc)
    assert everything["lat_avg_ms"].to_list() == [1.0, 1.0, None, None, None, 2.0]
    assert series.filter(pl.col("job") == 1)["tps"].to_list() == [0.0] * 5 + [10.0]
    assert series.filter(pl.col("job") == 0)["tps"].to_list() == [10.0, 10.0] + [0.0] * 4
    assert series["failures"].sum() == 0 and series["lat_p99_ms"].dtype == pl.Float64
    # load_start = T0 + 49 ms: second 0 is partial; load_end T0 + 5.95 s: second 5 too
    assert everything["partial"].to_list() == [True, False, False, False, False, True]
    stats = measured_window_stats(synthetic(rows), series)
    assert (stats.seconds, stats.transactions, stats.tps) == (4, 10, 2.5)


def test_percentiles_linear_interpolation() -> None:
    """Percentiles interpolate linearly between closest ranks (numpy's default)."""
    # 100 transactions of 1..100 ms completing in second 1; seconds 0 and 2 frame it
    rows = [(0, T0 + 1 * US + i * 1000, (i + 1) * 1000, "ok") for i in range(100)]
    rows += [(0, T0 + 500_000, 1000, "ok"), (0, T0 + 2 * US + 500_000, 1000, "ok")]
    tx = synthetic(rows)
    series = per_second_series(tx, 0)
    second = series.filter(pl.col("job").is_null())[1]
    assert second["lat_p50_ms"].item() == pytest.approx(50.5)
    assert second["lat_p95_ms"].item() == pytest.approx(95.05)
    assert second["lat_p99_ms"].item() == pytest.approx(99.01)
    assert second["lat_max_ms"].item() == 100.0
    assert second["lat_avg_ms"].item() == pytest.approx(50.5)
    stats = measured_window_stats(tx, series)
    assert stats.seconds == 1 and stats.transactions == 100
    assert (stats.lat_p50_ms, stats.lat_p95_ms, stats.lat_p99_ms) == pytest.approx(
        (50.5, 95.05, 99.01)
    )


def test_failures_skips_lag_and_sampling() -> None:
    rows = [
        (0, T0 + 200_000, 1000, "ok"),
        (0, T0 + 1 * US + 100, 1000, "ok"),
        (1, T0 + 1 * US + 200, None, "serialization"),
        (1, T0 + 1 * US + 300, None, "skipped"),
        (0, T0 + 1 * US + 400, None, "deadlock"),
        (0, T0 + 1 * US + 500, None, "failed"),
        (0, T0 + 2 * US + 900_000, 3000, "ok"),
    ]
    tx = synthetic(rows, lag=True)
    series = per_second_series(tx, 0, sampling_rate=0.5)
    second = series.filter(pl.col("job").is_null()).row(1, named=True)
    assert (second["tps"], second["failures"], second["skipped"], second["retries"]) == (
        2.0,
        3,
        1,
        1,
    )
    assert (second["lag_avg_ms"], second["lag_max_ms"]) == (0.1, 0.1)
    job1 = series.filter(pl.col("job") == 1).row(1, named=True)
    assert (
        job1["tps"],
        job1["failures"],
        job1["skipped"],
        job1["lat_avg_ms"],
        job1["lag_avg_ms"],
    ) == (0.0, 1, 1, None, None)
    stats = measured_window_stats(tx, series, sampling_rate=0.5)
    assert (
        stats.seconds,
        stats.transactions,
        stats.tps,
        stats.failures,
        stats.skipped,
        stats.retries,
        stats.lag_avg_ms,
    ) == (1, 1, 2.0, 3, 1, 1, 0.1)


def test_warmup_flags() -> None:
    rows = [(0, T0 + s * US + 500_000, 400_000, "ok") for s in range(10)]
    series = per_second_series(synthetic(rows), 3)
    everything = series.filter(pl.col("job").is_null())
    # load_start = T0 + 0.1 s: seconds 0..3 start before load_start + 3 s
    assert everything["warmup"].to_list() == [True] * 4 + [False] * 6
    assert everything["partial"].to_list() == [True] + [False] * 8 + [True]
    stats = measured_window_stats(synthetic(rows), series)
    assert (stats.seconds, stats.transactions, stats.tps) == (5, 5, 1.0)


def test_copy_of_job_files_keeps_job_numbers(tmp_path: Path) -> None:
    """Job numbers come from the mapping, e.g. PREFIX.<pid>.3 -> job 3."""
    target = tmp_path / "txlog.77.3"
    shutil.copy(SAMPLES / "15" / "txlog_stall.1", target)
    tx = read_txlogs({3: target}, PLAIN)
    assert tx["job"].unique().to_list() == [3]
    assert tx["client"].unique().sort().to_list() == [1]


def test_max_seconds_limits_the_measured_window() -> None:
    # ten transactions in each of seconds 0..5, the first and last partial
    rows = [(0, T0 + sec * US + 100_000 + i * 50_000, 1000, "ok")
            for sec in range(6) for i in range(10)]
    series = per_second_series(synthetic(rows), 0)
    everything = measured_window_stats(synthetic(rows), series)
    first_two = measured_window_stats(synthetic(rows), series, max_seconds=2)
    assert everything.seconds == 4
    assert (first_two.seconds, first_two.transactions, first_two.tps) == (2, 20, 10.0)
