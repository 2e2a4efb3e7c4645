"""Parsers of pgbench's output, against real pgbench 15 and 18 samples (no server needed).

The samples come from tests/samples/pgbench/make_samples.sh; the expected values below are
read off those files.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from pglab.lab.pgbench_init import InitTimings, parse_init_output
from pglab.workload.pgbench_output import (
    PgbenchSummary,
    ProgressLine,
    parse_progress_line,
    parse_summary,
    summary_to_dict,
)

SAMPLES = Path(__file__).resolve().parent / "samples" / "pgbench"
VERSIONS = ["15", "18"]
TPCB = "<builtin: TPC-B (sort of)>"
TELLERS = "UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;"
VERSION_LINE = {"15": "15.18 (Debian 15.18-0+deb12u1)", "18": "18.6"}


def sample(version: str, name: str) -> str:
    return (SAMPLES / version / name).read_text()


def all_sample_files() -> list[Path]:
    return sorted(p for v in VERSIONS for p in (SAMPLES / v).iterdir() if p.suffix == ".txt")


# --- pgbench -i --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "total", "phases"),
    [
        (
            "15",
            0.27,
            {
                "drop tables": 0.0,
                "create tables": 0.0,
                "client-side generate": 0.15,
                "vacuum": 0.05,
                "primary keys": 0.06,
            },
        ),
        (
            "18",
            0.28,
            {
                "drop tables": 0.0,
                "create tables": 0.0,
                "client-side generate": 0.15,
                "vacuum": 0.07,
                "primary keys": 0.06,
            },
        ),
    ],
)
def test_init_output(version: str, total: float, phases: dict[str, float]) -> None:
    timings = parse_init_output(sample(version, "init.txt"))
    assert timings == InitTimings(total_s=total, phases=phases)
    assert list(timings.phases) == list(phases)  # pgbench's order


def test_init_output_variants() -> None:
    assert parse_init_output("") is None
    assert parse_init_output("creating tables...\ngenerating data (client-side)...\n") is None
    assert parse_init_output("done in") is None
    assert parse_init_output("done in x s (vacuum 1 s).") is None
    server_side = (
        "done in 12.34 s (drop tables 0.01 s, create tables 0.02 s, "
        "server-side generate 10.00 s, vacuum 1.00 s, primary keys 1.31 s, "
        "foreign keys 0.00 s)."
    )
    timings = parse_init_output("noise\n" + server_side + "\n")
    assert timings is not None
    assert timings.total_s == 12.34
    assert timings.phases["server-side generate"] == 10.0
    assert timings.phases["foreign keys"] == 0.0
    # cut short inside the parentheses: the total and the complete phases survive
    cut = parse_init_output("done in 0.59 s (drop tables 0.00 s, create tab")
    assert cut == InitTimings(0.59, {"drop tables": 0.0})
    assert parse_init_output("done in 0.59 s") == InitTimings(0.59, {})
    assert parse_init_output("done in 0.59 s (") == InitTimings(0.59, {})
    assert parse_init_output("done in 0.59 s (drop tables 0.00 s, create tab)") == InitTimings(
        0.59, {"drop tables": 0.0}
    )


# --- progress ----------------------------------------------------------------------------


def progress(version: str, name: str) -> list[ProgressLine]:
    lines = sample(version, name).splitlines()
    parsed = [parse_progress_line(line) for line in lines]
    assert lines[0] == "starting vacuum...end."
    assert parsed[0] is None
    return [p for p in parsed if p is not None]


@pytest.mark.parametrize("version", VERSIONS)
def test_progress_plain(version: str) -> None:
    lines = progress(version, "progress.txt")
    assert len(lines) == 4
    first = {
        "15": ProgressLine(1795285430.886, 1674.0, 2.348, 1.335, 0, None, 0, 0, 0),
        "18": ProgressLine(1795285488.572, 1745.9, 2.273, 5.618, 0, None, 0, 0, 0),
    }[version]
    assert lines[0] == first
    # --progress-timestamp: epoch seconds, one report per second
    assert all(0.99 < b.t - a.t < 1.01 for a, b in itertools.pairwise(lines))


@pytest.mark.parametrize("version", VERSIONS)
def test_progress_rate(version: str) -> None:
    lines = progress(version, "progress_rate.txt")
    assert len(lines) == 3
    expected = {
        "15": ProgressLine(1795285435.914, 105.1, 17.174, 77.802, 0, 0.231, 75, 0, 0),
        "18": ProgressLine(1795285493.619, 133.6, 13.719, 66.207, 0, 0.164, 70, 0, 0),
    }[version]
    assert lines[1] == expected
    skipped = {"15": [0, 75, 0], "18": [1, 70, 4]}[version]
    assert [p.skipped for p in lines] == skipped
    assert all(p.lag_ms is not None for p in lines)


@pytest.mark.parametrize("version", VERSIONS)
def test_progress_retries(version: str) -> None:
    lines = progress(version, "progress_retries.txt")
    assert [p.t for p in lines] == [1.0, 2.0, 3.0, 4.0]  # elapsed, no --progress-timestamp
    expected = {
        "15": ProgressLine(1.0, 1530.8, 0.686, 0.340, 1123, None, 0, 1175, 2316),
        "18": ProgressLine(1.0, 533.0, 2.700, 4.795, 474, None, 0, 650, 1196),
    }[version]
    assert lines[0] == expected
    assert all(p.failed > 0 and p.retries >= p.retried > 0 for p in lines)


@pytest.mark.parametrize("version", VERSIONS)
def test_progress_stall(version: str) -> None:
    """An interval without completed transactions: `0.0 tps, lat 0.000 ms stddev 0.000`."""
    lines = progress(version, "progress_stall.txt")
    assert [p.tps for p in lines] == [0.0, 2.0, 0.0, 2.0]
    assert lines[0].lat_ms is None and lines[0].stddev_ms is None
    assert lines[2].lat_ms is None
    second = {"15": 1502.074, "18": 1502.009}[version]
    assert lines[1].lat_ms == second


def test_progress_variants() -> None:
    # pgbench <= 14: no failures
    old = parse_progress_line("progress: 5.0 s, 124.9 tps, lat 6.839 ms stddev 7.325\n")
    assert old == ProgressLine(5.0, 124.9, 6.839, 7.325, 0, None, 0, 0, 0)
    # older versions printed NaN when nothing completed
    nan = parse_progress_line("progress: 3.0 s, 0.0 tps, lat -nan ms stddev -nan")
    assert nan == ProgressLine(3.0, 0.0, None, None, 0, None, 0, 0, 0)
    full = parse_progress_line(
        "progress: 1.0 s, 124.9 tps, lat 6.839 ms stddev 7.325, 76 failed, lag 0.5 ms, "
        "3 skipped, 10 retried, 12 retries"
    )
    assert full == ProgressLine(1.0, 124.9, 6.839, 7.325, 76, 0.5, 3, 10, 12)
    # a long interval can print 0.0 tps with real statistics (1 transaction in 60 s)
    slow = parse_progress_line("progress: 60.0 s, 0.0 tps, lat 900.100 ms stddev 0.000, 0 failed")
    assert slow is not None and slow.lat_ms == 900.1
    # unknown trailing fields from a future pgbench are ignored
    future = parse_progress_line(
        "progress: 2.0 s, 10.0 tps, lat 1.000 ms stddev 0.1, 0 failed, 7 widgets"
    )
    assert future == ProgressLine(2.0, 10.0, 1.0, 0.1, 0, None, 0, 0, 0)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "starting vacuum...end.",
        "progress:",
        "progress: x s, 1.0 tps",
        "progress: 1.0 s",
        "pgbench: error: client 0 aborted",
        "progress: 1.0 s, 12 tps, lat",
        "\x00\xff garbage",
        "transaction type: <builtin: TPC-B (sort of)>",
    ],
)
def test_progress_not_progress(line: str) -> None:
    parsed = parse_progress_line(line)
    assert parsed is None or parsed.lat_ms is None


def test_progress_truncated_keeps_head() -> None:
    cut = parse_progress_line("progress: 1.0 s, 12.5 tps, lat 1.2")
    assert cut == ProgressLine(1.0, 12.5, None, None, 0, None, 0, 0, 0)


# --- summary -----------------------------------------------------------------------------

COMMON = {
    "scaling_factor": 2,
    "query_mode": "simple",
    "clients": 4,
    "threads": 2,
    "duration_s": 3.0,
    "transaction_type": TPCB,
}

SUMMARIES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "15",
        "summary_tpcb.txt",
        {
            "max_tries": 1,
            "transactions": 3791,
            "failed": 0,
            "latency_avg_ms": 3.165,
            "latency_stddev_ms": None,
            "initial_connection_ms": 9.410,
            "tps": 1263.631285,
            "skipped": None,
            "retried": None,
            "retries": None,
            "lag_avg_ms": None,
            "latency_limit_ms": None,
            "above_limit": None,
            "serialization_failures": None,
        },
    ),
    (
        "18",
        "summary_tpcb.txt",
        {
            "max_tries": 1,
            "transactions": 8511,
            "failed": 0,
            "latency_avg_ms": 1.409,
            "latency_stddev_ms": None,
            "initial_connection_ms": 6.230,
            "tps": 2838.499674,
            "skipped": None,
            "retried": None,
            "retries": None,
            "lag_avg_ms": None,
        },
    ),
    (
        "15",
        "summary_r.txt",
        {
            "transactions": 3978,
            "latency_avg_ms": 3.014,
            "initial_connection_ms": 13.790,
            "tps": 1327.070946,
        },
    ),
    (
        "18",
        "summary_r.txt",
        {
            "transactions": 8462,
            "latency_avg_ms": 1.418,
            "initial_connection_ms": 5.350,
            "tps": 2820.316007,
        },
    ),
    (
        "15",
        "summary_rate.txt",
        {
            "transactions": 451,
            "failed": 0,
            "skipped": 108,
            "latency_limit_ms": 5.0,
            "above_limit": 23,
            "latency_avg_ms": 6.506,
            "latency_stddev_ms": 39.078,
            "lag_avg_ms": 0.179,
            "lag_max_ms": 3.615,
            "initial_connection_ms": 14.973,
            "tps": 151.229469,
        },
    ),
    (
        "18",
        "summary_rate.txt",
        {
            "transactions": 544,
            "failed": 0,
            "skipped": 94,
            "latency_limit_ms": 5.0,
            "above_limit": 17,
            "latency_avg_ms": 4.296,
            "latency_stddev_ms": 33.367,
            "lag_avg_ms": 0.146,
            "lag_max_ms": 4.588,
            "initial_connection_ms": 6.723,
            "tps": 181.684347,
        },
    ),
    (
        "15",
        "summary_rate_r.txt",
        {
            "transactions": 587,
            "skipped": 4,
            "above_limit": 10,
            "latency_avg_ms": 1.787,
            "latency_stddev_ms": 3.264,
            "lag_avg_ms": 0.142,
            "lag_max_ms": 4.994,
            "tps": 197.305353,
        },
    ),
    (
        "18",
        "summary_rate_r.txt",
        {
            "transactions": 573,
            "skipped": 20,
            "above_limit": 23,
            "latency_avg_ms": 1.971,
            "latency_stddev_ms": 5.639,
            "lag_avg_ms": 0.140,
            "lag_max_ms": 4.740,
            "tps": 192.877729,
        },
    ),
    (
        "15",
        "summary_retries.txt",
        {
            "max_tries": 3,
            "transactions": 1955,
            "failed": 1749,
            "serialization_failures": 1749,
            "deadlock_failures": 0,
            "retried": 2497,
            "retries": 4561,
            "latency_avg_ms": 3.234,
            "latency_includes_failures": True,
            "initial_connection_ms": 9.683,
            "tps": 652.871868,
            "skipped": None,
        },
    ),
    (
        "18",
        "summary_retries.txt",
        {
            "max_tries": 3,
            "transactions": 2701,
            "failed": 2254,
            "serialization_failures": 2254,
            "deadlock_failures": 0,
            "retried": 2623,
            "retries": 5022,
            "latency_avg_ms": 2.419,
            "latency_includes_failures": True,
            "initial_connection_ms": 6.260,
            "tps": 901.237876,
        },
    ),
    (
        "15",
        "summary_retries_r.txt",
        {
            "max_tries": 3,
            "transactions": 2082,
            "failed": 1916,
            "retried": 2672,
            "retries": 4906,
            "latency_avg_ms": 3.007,
            "tps": 692.700724,
        },
    ),
    (
        "18",
        "summary_retries_r.txt",
        {
            "max_tries": 3,
            "transactions": 4175,
            "failed": 2799,
            "retried": 2973,
            "retries": 5837,
            "latency_avg_ms": 1.777,
            "tps": 1347.190519,
        },
    ),
    (
        "15",
        "summary_mix_r.txt",
        {
            "transaction_type": "multiple scripts",
            "transactions": 18876,
            "failed": 0,
            "latency_avg_ms": 0.636,
            "tps": 6285.664051,
            "latency_includes_failures": False,
        },
    ),
    (
        "18",
        "summary_mix_r.txt",
        {
            "transaction_type": "multiple scripts",
            "transactions": 23315,
            "failed": 0,
            "latency_avg_ms": 0.514,
            "tps": 7777.183282,
        },
    ),
    (
        "15",
        "summary_custom.txt",
        {
            "transaction_type": "multiple scripts",
            "transactions": 206,
            "failed": 183,
            "serialization_failures": 0,
            "deadlock_failures": 183,
            "latency_avg_ms": 30.863,
            "latency_includes_failures": True,
            "initial_connection_ms": 14.854,
            "tps": 68.633036,
        },
    ),
    (
        "18",
        "summary_custom.txt",
        {
            "transaction_type": "multiple scripts",
            "transactions": 183,
            "failed": 190,
            "serialization_failures": 0,
            "deadlock_failures": 190,
            "latency_avg_ms": 35.295,
            "latency_includes_failures": True,
            "initial_connection_ms": 4.492,
            "tps": 55.601823,
        },
    ),
    (
        "15",
        "summary_t.txt",
        {
            "clients": 2,
            "threads": 1,
            "duration_s": None,
            "transactions_per_client": 50,
            "transactions": 100,
            "transactions_expected": 100,
            "latency_avg_ms": 1.048,
            "tps": 1909.162069,
        },
    ),
    (
        "18",
        "summary_t.txt",
        {
            "clients": 2,
            "threads": 1,
            "duration_s": None,
            "transactions_per_client": 50,
            "transactions": 100,
            "transactions_expected": 100,
            "latency_avg_ms": 1.095,
            "tps": 1825.983749,
        },
    ),
    (
        "15",
        "txlog_stall.summary.txt",
        {
            "transaction_type": "stall.sql",
            "scaling_factor": 1,
            "clients": 2,
            "duration_s": 4.0,
            "transactions": 6,
            "latency_avg_ms": 1502.148,
            "latency_stddev_ms": 1.019,
            "tps": 1.330870,
        },
    ),
    (
        "18",
        "txlog_stall.summary.txt",
        {
            "transaction_type": "stall.sql",
            "scaling_factor": 1,
            "clients": 2,
            "duration_s": 4.0,
            "transactions": 6,
            "latency_avg_ms": 1501.638,
            "latency_stddev_ms": 0.506,
            "tps": 1.331677,
        },
    ),
]


@pytest.mark.parametrize(
    ("version", "name", "expected"), SUMMARIES, ids=[f"{v}-{n}" for v, n, _ in SUMMARIES]
)
def test_summary_values(version: str, name: str, expected: dict[str, Any]) -> None:
    summary = parse_summary(sample(version, name))
    want = {**COMMON, "pgbench_version": VERSION_LINE[version], "server_version": None, **expected}
    got = {key: getattr(summary, key) for key in want}
    assert got == want


@pytest.mark.parametrize("version", VERSIONS)
def test_summary_statements_single_script(version: str) -> None:
    summary = parse_summary(sample(version, "summary_r.txt"))
    assert summary.scripts == []
    assert len(summary.statements) == 11
    first, tellers = summary.statements[0], summary.statements[7]
    assert first.statement == r"\set aid random(1, 100000 * :scale)"
    assert (first.latency_ms, first.failures, first.retries) == (0.001, 0, None)
    assert tellers.statement == TELLERS
    assert tellers.latency_ms == {"15": 0.337, "18": 0.177}[version]
    assert summary.statements[-1].statement == "END;"


@pytest.mark.parametrize(
    ("version", "latency", "failures", "retries"),
    [("15", 0.181, 1080, 2325), ("18", 0.101, 2463, 5030)],
)
def test_summary_statements_with_retries(
    version: str, latency: float, failures: int, retries: int
) -> None:
    summary = parse_summary(sample(version, "summary_retries_r.txt"))
    assert len(summary.statements) == 11
    tellers = summary.statements[7]
    assert (tellers.latency_ms, tellers.failures, tellers.retries, tellers.statement) == (
        latency,
        failures,
        retries,
        TELLERS,
    )
    assert all(s.retries is not None for s in summary.statements)
    # every failure happened in some statement
    assert sum(s.failures or 0 for s in summary.statements) == summary.failed


@pytest.mark.parametrize("version", VERSIONS)
def test_summary_multiple_scripts(version: str) -> None:
    summary = parse_summary(sample(version, "summary_mix_r.txt"))
    assert summary.statements == []
    select, tpcb = summary.scripts
    assert (select.name, select.weight, len(select.statements)) == ("<builtin: select only>", 80, 2)
    assert (tpcb.name, tpcb.weight, len(tpcb.statements)) == (TPCB, 20, 11)
    expected = {
        "15": [(15022, 5002.291024, 0.214, 0.244, None), (3849, 1281.708038, 2.251, 1.714, None)],
        "18": [(18601, 6204.734558, 0.175, 0.173, 18601), (4713, 1572.115154, 1.805, 1.065, 4713)],
    }[version]
    got = [
        (s.transactions, s.tps, s.latency_avg_ms, s.latency_stddev_ms, s.transactions_total)
        for s in summary.scripts
    ]
    assert got == expected
    assert tpcb.statements[7].statement == TELLERS
    assert tpcb.statements[7].latency_ms == {"15": 0.262, "18": 0.230}[version]
    assert all(s.failed == 0 for s in summary.scripts)
    # pgbench's per-script counts may miss a few transactions of the total (both versions)
    assert summary.transactions is not None
    assert 0 <= summary.transactions - sum(s.transactions or 0 for s in summary.scripts) <= 5


@pytest.mark.parametrize(
    ("version", "script_row", "select_row"),
    [
        # (transactions, total incl. failures, tps, latency avg, stddev, failed, deadlocks)
        (
            "15",
            (96, None, 31.984328, 47.430, 45.203, 183, 183),
            (110, None, 36.648709, 0.233, 0.129, 0, 0),
        ),
        (
            "18",
            (76, 266, 23.091467, 65.414, 83.645, 190, 190),
            (107, 107, 32.510355, 0.178, 0.144, 0, 0),
        ),
    ],
)
def test_summary_custom_script(
    version: str, script_row: tuple[object, ...], select_row: tuple[object, ...]
) -> None:
    summary = parse_summary(sample(version, "summary_custom.txt"))
    custom, select = summary.scripts
    assert (custom.name, custom.weight) == ("script.sql", 3)
    assert (select.name, select.weight) == ("<builtin: select only>", 1)
    for script, row in ((custom, script_row), (select, select_row)):
        assert (
            script.transactions,
            script.transactions_total,
            script.tps,
            script.latency_avg_ms,
            script.latency_stddev_ms,
            script.failed,
            script.deadlock_failures,
        ) == row
        assert script.serialization_failures == 0
    assert [s.statement for s in custom.statements] == [
        r"\set a random(1, 2)",
        r"\set b 3 - :a",
        "BEGIN;",
        "UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = :a;",
        "SELECT pg_sleep(0.002);",
        "UPDATE pgbench_branches SET bbalance = bbalance + 1 WHERE bid = :b;",
        "END;",
    ]
    assert sum(s.failures or 0 for s in custom.statements) == custom.failed
    assert custom.statements[5].failures == {"15": 114, "18": 116}[version]
    assert sum(s.transactions or 0 for s in summary.scripts) == summary.transactions


@pytest.mark.parametrize("path", all_sample_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_sample_parses_without_error(path: Path) -> None:
    text = path.read_text()
    summary = parse_summary(text)
    json.dumps(summary_to_dict(summary))
    for line in text.splitlines():
        parse_progress_line(line)
    parse_init_output(text)
    if path.name.startswith("summary") or path.name.endswith(".summary.txt"):
        assert summary.pgbench_version == VERSION_LINE[path.parent.name]
        assert summary.transactions is not None and summary.tps is not None


@pytest.mark.parametrize("version", VERSIONS)
def test_summary_truncated_anywhere(version: str) -> None:
    """A summary cut at any character parses; what is before the cut is kept."""
    text = sample(version, "summary_custom.txt")
    full = parse_summary(text)
    for cut in range(0, len(text), 7):
        partial = parse_summary(text[:cut])
        if partial.tps is not None:
            assert partial.transactions == full.transactions
        assert len(partial.scripts) <= len(full.scripts)


def test_summary_of_nothing() -> None:
    empty = parse_summary("")
    assert isinstance(empty, PgbenchSummary)
    data = summary_to_dict(empty)
    assert data.pop("scripts") == [] and data.pop("statements") == []
    assert data.pop("latency_includes_failures") is False
    assert set(data.values()) == {None}


def test_summary_garbage() -> None:
    garbage = "\n".join(
        [
            "\x00\x01\x02",
            "tps = lots",
            "number of clients: many",
            "SQL script 1:",
            " - weight: heavy",
            "statement latencies in milliseconds:",
            "   abc  def",
            "   1.5",
            "scaling factor: 2",
            "latency average = NaN ms",
            "number of transactions actually processed: -1",
            "pgbench (",
            ":" * 500,
        ]
    )
    summary = parse_summary(garbage)
    assert summary.scaling_factor == 2
    assert summary.tps is None and summary.clients is None and summary.transactions is None
    assert summary.statements == [] and summary.scripts == []
    assert summary.latency_avg_ms is None


def test_summary_other_versions() -> None:
    """Lines of older pgbench versions and of a client/server version mismatch."""
    text = "\n".join(
        [
            "pgbench (16.1, server 15.4)",
            "transaction type: <builtin: TPC-B (sort of)>",
            "scaling factor: 10",
            "partition method: range",
            "partitions: 4",
            "query mode: prepared",
            "number of clients: 8",
            "number of threads: 8",
            "duration: 60 s",
            "number of transactions actually processed: 12345",
            "latency average = 38.880 ms",
            "tps = 205.700000 (including connections establishing)",
            "tps = 205.800000 (excluding connections establishing)",
            "statement latencies in milliseconds:",
            "         0.002  \\set aid random(1, 100000 * :scale)",
            "         1.500  END;",
        ]
    )
    summary = parse_summary(text)
    assert (summary.pgbench_version, summary.server_version) == ("16.1", "15.4")
    assert (summary.partition_method, summary.partitions) == ("range", 4)
    assert summary.query_mode == "prepared"
    assert summary.tps == 205.8
    assert summary.failed is None and summary.max_tries is None
    assert [(s.latency_ms, s.failures, s.statement) for s in summary.statements] == [
        (0.002, None, r"\set aid random(1, 100000 * :scale)"),
        (1.5, None, "END;"),
    ]
    only_including = parse_summary("tps = 99.5 (including connections establishing)\n")
    assert only_including.tps == 99.5


@pytest.mark.parametrize("version", VERSIONS)
def test_summary_to_dict_is_json(version: str) -> None:
    summary = parse_summary(sample(version, "summary_custom.txt"))
    data = json.loads(json.dumps(summary_to_dict(summary)))
    assert data["tps"] == summary.tps
    assert data["scripts"][0]["name"] == "script.sql"
    assert data["scripts"][0]["statements"][0]["statement"] == r"\set a random(1, 2)"
    assert set(data) >= {
        "transactions",
        "failed",
        "retried",
        "retries",
        "skipped",
        "latency_avg_ms",
        "lag_avg_ms",
        "statements",
        "scripts",
    }
