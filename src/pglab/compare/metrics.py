"""The one registry of comparable metrics.

A metric says where its run value comes from, where its per-second samples come from (if
it has any), which direction is better, its unit and the statistic the bootstrap uses on
the samples (mean for rates, whose run value is the mean of its seconds; median for
latencies, which are skewed). A metric that a run cannot provide returns a reason
instead, shown as "n/a (reason)". `--fail-if` names, docs/COMPARE.md and tests use this list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pglab.compare import stats

if TYPE_CHECKING:  # at run time the CLI's help reads the names without loading polars
    from pglab.compare.rundata import RunData


@dataclass(frozen=True)
class Measure:
    """What one run gives for one metric: the run value and per-second samples."""

    value: float | None
    samples: list[float] | None = None  # time order; None: one value per run only
    missing: str | None = None  # why value is None
    unsampled: str | None = None  # why a run with per-second values gives none here
    # False: the metric means nothing for this run (no power loss to lose commits in);
    # a comparison leaves out such a metric unless one of its runs has it
    applies: bool = True


Reader = Callable[["RunData"], Measure]


@dataclass(frozen=True)
class Metric:
    name: str  # used by --fail-if
    title: str
    unit: str
    better: Literal["higher", "lower"]
    statistic: Literal["mean", "median"]
    read: Reader
    # only some runs have it (a Measure says applies=False): a comparison shows it only
    # when one of its runs does
    situational: bool = False
    sample: str = "per-second"  # what one of a run's samples is
    # With repeats on both sides, compare the runs' values, not their samples: samples
    # that are not alike within a run (an fsync=off run's first cut loses every commit,
    # its later cuts find nothing new to lose) would resample into runs that lost nothing.
    by_run_with_repeats: bool = False
    # The unit of the samples' statistic when it is not the run value's: a run's failed
    # transactions are a count, the mean of its seconds a rate.
    sample_unit: str | None = None

    def stat(self) -> stats.Statistic:
        return stats.mean if self.statistic == "mean" else stats.median


# A second's p95 needs 20 transactions, its p99 100: with fewer, the "percentile" is
# that second's maximum (or next to it), and comparing those calls one slow transaction
# a slower tail. Such a run is compared by its whole-run value, over repeats.
PER_SECOND_MINIMUM = {"lat_p95_ms": 20, "lat_p99_ms": 100}


def _client(column: str, measured_key: str) -> Reader:
    def read(run: RunData) -> Measure:
        value = run.measured.get(measured_key)
        samples = run.client_column(column)
        if value is None:
            why = ("no per-transaction latencies (imported without -l logs)"
                   if column.startswith("lat_p") else "not in the run's results")
            return Measure(None, None, why)
        needed = PER_SECOND_MINIMUM.get(column)
        rates = run.client_column("tps") if needed else None
        if needed and samples and rates and stats.median(rates) < needed:
            name = column.removeprefix("lat_").removesuffix("_ms")
            return Measure(float(value), None, unsampled=(
                f"a per-second {name} needs {needed} transactions a second, the run had "
                f"{stats.median(rates):g}"))
        return Measure(float(value), samples)
    return read


def _stall_seconds(run: RunData) -> Measure:
    analysis = run.analysis
    if analysis is None:
        return Measure(None, None, "no analysis.json (run `pglab analyze`)")
    value = analysis.summary.get("stall_seconds")
    if not isinstance(value, int | float):
        return Measure(None, None, "analysis.json has no summary.stall_seconds")
    return Measure(float(value))


def _lost_commits(run: RunData) -> Measure:
    """Acknowledged commits lost per crash or power loss: each cut is a trial of its own
    (its samples, in time order), so one run of five cuts already has five samples; the
    run value is their mean, as runs may differ in how many cuts fired."""
    if run.manifest.durability is None:  # the ledger of a run with crashes or power losses
        return Measure(None, None, "no crash or power loss in the run", applies=False)
    analysis = run.analysis
    if analysis is None:
        return Measure(None, None, "no analysis.json (run `pglab analyze`)")
    cuts = (analysis.durability or {}).get("cuts") or []
    if not cuts:
        return Measure(None, None, "no crash or power loss fired in the run's load")
    lost = [float(c.get("lost_commits") or 0) for c in cuts]
    return Measure(stats.mean(lost), lost)


def _checkpoints(run: RunData) -> Measure:
    count = run.events_in_window("checkpoint")
    if count is None:
        return Measure(None, None, "no telemetry (events.parquet)")
    return Measure(float(count))


def _per_transaction(node: str, source: str, metric: str, label: str, scale: float,
                     what: str) -> Reader:
    def read(run: RunData) -> Measure:
        if run.timeseries is None:
            return Measure(None, None, "no telemetry (timeseries.parquet)")
        found = run.per_transaction(node, source, metric, label, scale)
        if found is None:
            return Measure(None, None, f"no {what} samples in the measured window")
        ratios, whole = found
        return Measure(whole, ratios)
    return read


METRICS: tuple[Metric, ...] = (
    Metric("tps", "TPS", "tx/s", "higher", "mean", _client("tps", "tps")),
    Metric("lat_avg", "latency avg", "ms", "lower", "median",
           _client("lat_avg_ms", "lat_avg_ms")),
    Metric("p50", "latency p50", "ms", "lower", "median", _client("lat_p50_ms", "lat_p50_ms")),
    Metric("p95", "latency p95", "ms", "lower", "median", _client("lat_p95_ms", "lat_p95_ms")),
    Metric("p99", "latency p99", "ms", "lower", "median", _client("lat_p99_ms", "lat_p99_ms")),
    Metric("max", "latency max", "ms", "lower", "median", _client("lat_max_ms", "lat_max_ms")),
    Metric("failures", "failed transactions", "tx", "lower", "mean",
           _client("failures", "failures"), sample_unit="tx/s"),
    Metric("stall_seconds", "stall seconds", "s", "lower", "mean", _stall_seconds),
    Metric("lost_commits", "commits lost per cut", "tx", "lower", "mean", _lost_commits,
           situational=True, sample="per-cut", by_run_with_repeats=True),
    Metric("checkpoints", "checkpoints", "", "lower", "mean", _checkpoints),
    Metric("wal_per_tx", "WAL per transaction", "bytes", "lower", "median",
           _per_transaction("primary", "db.wal", "wal_bytes", "", 1.0, "db.wal wal_bytes")),
    Metric("cpu_per_tx", "server CPU per transaction", "ms", "lower", "median",
           _per_transaction("primary", "os.processes", "cpu_cores", "postgres", 1000.0,
                            "os.processes cpu_cores")),
)

BY_NAME = {m.name: m for m in METRICS}
