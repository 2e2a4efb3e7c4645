"""The comparison statistics (pure functions), on per-second TPS that real pgbench 15 and
18 runs logged (tests/samples/pgbench/*/txlog_plain.*, binned per 100 ms so that the
short sample runs give enough points) and on exact small cases."""

from __future__ import annotations

import math
import random
from array import array

import polars as pl
import pytest

from conftest import ROOT, SAMPLES
from pglab.compare import stats
from pglab.compare.metrics import METRICS
from pglab.workload.txlog import TxLogSpec, read_txlogs

SPEC = TxLogSpec(has_lag=False, has_retries=False, sampling_rate=1.0)


def throughput(version: str, jobs: tuple[int, ...] = (0, 1)) -> list[float]:
    """Transactions per 100 ms of a real pgbench run (of some of its jobs), in time order."""
    sample = SAMPLES / "pgbench" / version
    files = {job: sample / f"txlog_plain.{job}" for job in jobs}
    tx = read_txlogs(files, SPEC)
    binned = (tx.group_by(pl.col("end_us") // 100_000).agg(pl.len().alias("n"))
              .sort("end_us"))
    values = [float(v) for v in binned["n"].to_list()]
    return values[1:-1]  # the first and last bins are partial


def test_exact_small_cases() -> None:
    assert stats.median([3, 1, 2]) == 2 and stats.median([4, 1, 2, 3]) == 2.5
    assert stats.quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert stats.cv([2.0, 2.0]) == 0.0 and stats.cv([0.0, 0.0]) is None
    assert stats.block_length([1.0, 2.0]) == 1
    # A slow trend is autocorrelated: long blocks; no variation: the n^(1/3) floor.
    assert stats.block_length([float(i) for i in range(40)]) == 10
    assert stats.block_length([5.0] * 27) == 3


@pytest.mark.parametrize("version", ["15", "18"])
def test_two_samples_of_one_configuration_include_zero(version: str) -> None:
    # The run's two pgbench threads: one client each, the same script, at the same time,
    # different transactions; their throughputs differ by chance only.
    job0, job1 = throughput(version, (0,)), throughput(version, (1,))
    assert len(job0) >= 10 and job0 != job1
    interval = stats.bootstrap_difference([job0], [job1], stats.mean)
    assert interval.estimate != 0 and interval.includes_zero and interval.mode == "ratio"
    # The same statistic and interval whatever the order of the calls: deterministic.
    again = stats.bootstrap_difference([job0], [job1], stats.mean)
    assert (again.low, again.high) == (interval.low, interval.high)


@pytest.mark.parametrize("version", ["15", "18"])
def test_a_doubled_throughput_is_significant(version: str) -> None:
    values = throughput(version)
    doubled = [2 * v for v in values]
    interval = stats.bootstrap_difference([values], [doubled], stats.mean)
    assert not interval.includes_zero and interval.low > 0
    assert interval.relative(interval.estimate) == pytest.approx(1.0)
    # Ratio mode: halving is as far from zero as doubling, whichever side is the base.
    halved = stats.bootstrap_difference([doubled], [values], stats.mean)
    assert halved.estimate == pytest.approx(-interval.estimate)
    assert halved.relative(halved.estimate) == pytest.approx(-0.5)
    # The assumed run-to-run noise widens the interval on both ends, by log(1 + noise).
    wide = interval.widened(0.5)
    assert wide.low == pytest.approx(interval.low - math.log(1.5))
    assert wide.high == pytest.approx(interval.high + math.log(1.5))


def test_zeros_use_differences() -> None:
    none_failed, some_failed = [0.0] * 20, [0.0] * 10 + [2.0] * 10
    interval = stats.bootstrap_difference([none_failed], [some_failed], stats.mean)
    assert interval.mode == "difference" and interval.estimate == 1.0
    assert interval.relative(interval.estimate) is None  # no % of a zero base
    same = stats.bootstrap_difference([none_failed], [none_failed], stats.mean)
    assert (same.low, same.high) == (0.0, 0.0) and same.includes_zero



def test_a_stall_cut_to_nothing_is_never_more_than_minus_100_percent() -> None:
    # Stall seconds per run (the tune's metric) of three baseline runs that disagree, and
    # a fix that leaves almost none: a replicate that draws the 40 s run thrice has a base
    # of 40 against the pooled 17, and its difference alone would read -235%.
    base, fixed = [[5.0], [6.0], [40.0]], [[0.0], [0.0], [1.0]]
    interval = stats.bootstrap_difference(base, fixed, stats.mean)
    assert interval.mode == "difference" and interval.nonnegative
    assert interval.low < -interval.base  # the raw bound is below -100% ...
    assert interval.relative(interval.low) == -1.0  # ... and is said as -100%
    relative = interval.relative(interval.estimate)
    assert relative is not None and -1.0 < relative < -0.9
    # a quantity that can be negative keeps its bound as it is
    signed = stats.bootstrap_difference([[5.0], [6.0], [40.0]], [[-1.0], [0.0], [1.0]],
                                        stats.mean)
    low = signed.relative(signed.low)
    assert not signed.nonnegative and low is not None and low < -1.0

def test_repeats_that_disagree_make_the_interval_wide() -> None:
    a, b = throughput("15"), throughput("18")
    # Two "repeats" from different runs on each side: the spread between runs enters the
    # interval, which must be wider than the one from a single run on each side.
    single = stats.bootstrap_difference([a], [a], stats.median)
    repeats = stats.bootstrap_difference([a, b], [b, a], stats.median)
    assert repeats.includes_zero
    assert repeats.high - repeats.low > single.high - single.low


def test_needs_samples_on_both_sides() -> None:
    with pytest.raises(ValueError):
        stats.bootstrap_difference([[]], [[1.0]])


def test_every_metric_is_documented() -> None:
    section = (ROOT / "docs" / "COMPARE.md").read_text()
    assert [m.name for m in METRICS if f"`{m.name}`" not in section] == []


def test_commits_lost_over_repeats_compare_the_runs() -> None:
    """Three runs of fsync=off against three with fsync=on (a tune of power-loss-fsync-off,
    as its runs recorded it): each fsync=off run's first cut lost every commit so far and
    its four later cuts nothing new. Resampling a run's cuts often drew a run that lost
    nothing, and a change from 9,300 lost per cut to none was 'no significant
    difference'; over repeats the runs are compared."""
    from dataclasses import replace

    from pglab.compare.comparison import compare_metric
    from pglab.compare.groups import Group
    from pglab.compare.metrics import BY_NAME, Measure

    cuts = {"off1": [46305.0, 0, 0, 0, 0], "off2": [46966.0, 0, 0, 0, 0],
            "off3": [46330.0, 0, 0, 0, 0], "on1": [0.0] * 5, "on2": [0.0] * 5,
            "on3": [0.0] * 5}
    lost = BY_NAME["lost_commits"]
    metric = replace(lost, read=lambda run: Measure(stats.mean(cuts[run]),  # type: ignore[index]
                                                   cuts[run]))  # type: ignore[index]
    base = Group("off", ["off1", "off2", "off3"])  # type: ignore[list-item]
    fixed = Group("on", ["on1", "on2", "on3"])  # type: ignore[list-item]
    result = compare_metric(metric, base, fixed, 0.1, 0.95)
    assert result.verdict == "better" and result.note.startswith("one value per run"), result
    by_cut = compare_metric(replace(metric, by_run_with_repeats=False), base, fixed, 0.1, 0.95)
    assert by_cut.verdict == "no significant difference"  # what it said before
    # one run a side: its cuts are the samples (nothing else shows its variation)
    single = compare_metric(metric, Group("off", ["off1"]),  # type: ignore[list-item]
                            Group("on", ["on1"]), 0.1, 0.95)  # type: ignore[list-item]
    assert single.note.startswith("mean of per-cut values, block bootstrap"), single.note



def _blocks_drawn_one_by_one(circle: list[float], n: int, block: int,
                             rng: random.Random) -> list[float]:
    """The moving-block resample as its definition says: blocks from random starts until
    there are n samples."""
    out: list[float] = []
    while len(out) < n:
        start = int(rng.random() * n)
        out.extend(circle[start:start + block])
    return out[:n]


@pytest.mark.parametrize("statistic", [stats.median, stats.mean])
def test_a_runs_replicates_are_its_blocks_drawn_one_by_one(statistic: stats.Statistic) -> None:
    """block_resample and a side of one run (all its replicates drawn at once, for speed)
    give, value for value, the replicates of blocks drawn one by one from the same seed:
    the same folders keep their intervals and verdicts. A real run's seconds (19, in
    blocks of 3: the last block cut), white noise (blocks of 4) and a run too short for
    blocks (of 1)."""
    noise = [random.Random(3).random() for _ in range(50)]
    for run in (throughput("18"), noise, [5.0, 1.0, 3.0]):
        block = stats.block_length(run)
        circle = stats._circle(run, block)
        reference, fast = random.Random(7), random.Random(7)
        expected = array("d", (statistic(_blocks_drawn_one_by_one(circle, len(run), block,
                                                                  reference))
                               for _ in range(300)))
        assert stats._one_run_replicates(circle, len(run), block, statistic, 300,
                                         fast) == expected
        one = random.Random(11)
        assert stats.block_resample(circle, len(run), block, random.Random(11)) == \
            _blocks_drawn_one_by_one(circle, len(run), block, one)
