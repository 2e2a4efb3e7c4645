"""Stall detection on the per-second client series (after warmup).

A measured second (neither warmup nor partial) is *degraded* when
- its TPS is 0 while the reference is not (drop-to-zero),
- its TPS is under DIP_FRACTION of the reference (dip), or
- its p99 latency is over SPIKE_FACTOR times the run's median p99 and at least
  SPIKE_FLOOR_MS above it (latency-spike). The max latency is reported, not used to
  detect: on a shared machine one descheduled transaction makes it jump tenfold, while
  a p99 three times the usual means many transactions were slow.
The reference is the rolling median of TPS over REFERENCE_WINDOW_S seconds, centred, so
a slow drift is not a stall but a short fall is. Only *working* seconds enter it: those
at DIP_FRACTION or more of the window's WORKING_QUANTILE of TPS. Otherwise a run stalled
for half of a window would have a median of a few TPS, its stall would look healthy and
its healthy seconds would be polluted with the stall's. Where a window has no working
second, the reference is the median of the run's working seconds (of its best seconds,
when it was stalled for more than a tenth of its length and its quantile is 0: a crash
that kept the server down for 18 s of 20 is one stall of 18 s, not a healthy run). Adjacent degraded
seconds make one window; its kind is the worst of its seconds, its depth 1 - min TPS /
reference, and its deficit the sum of (reference - TPS) over its seconds: the
transactions it did not make (never "lost", the word for acknowledged commits that a
crash takes away).
Four or more windows (all, or all of one kind) whose starts are regularly spaced
(intervals within PERIOD_TOLERANCE of their median) are reported as periodic.
"""

from __future__ import annotations

import datetime as dt
import itertools
import statistics
from dataclasses import dataclass

import polars as pl

DIP_FRACTION = 0.5
SPIKE_FACTOR = 3.0
SPIKE_FLOOR_MS = 5.0
REFERENCE_WINDOW_S = 61
WORKING_QUANTILE = 0.9
PERIOD_TOLERANCE = 0.2
KINDS = ("drop-to-zero", "dip", "latency-spike")  # worst first


@dataclass(frozen=True)
class StallWindow:
    start: dt.datetime  # first degraded second
    end: dt.datetime  # end of the last degraded second (exclusive)
    kind: str
    depth: float  # 1 - min TPS / reference
    deficit_transactions: int
    reference_tps: float
    min_tps: float
    p99_ms: float | None  # worst p99 in the window
    max_latency_ms: float | None

    @property
    def seconds(self) -> int:
        return int((self.end - self.start).total_seconds())


@dataclass(frozen=True)
class SteadyState:
    measured_seconds: int
    tps_median: float
    tps_mean: float
    tps_cv: float  # standard deviation / mean of per-second TPS
    p99_median_ms: float | None
    degraded_seconds: int
    degraded_pct: float
    zero_seconds: int


@dataclass(frozen=True)
class Periodicity:
    period_s: float
    windows: int
    kind: str | None  # None: all windows recur; else those of this kind do


@dataclass(frozen=True)
class StallReport:
    steady: SteadyState
    windows: list[StallWindow]
    periodic: Periodicity | None
    seconds: pl.DataFrame  # measured seconds: t, tps, reference, kind (null when healthy)


def measured_seconds(client: pl.DataFrame) -> pl.DataFrame:
    return client.filter(~pl.col("warmup") & ~pl.col("partial")).sort("t")


def classify_seconds(measured: pl.DataFrame) -> pl.DataFrame:
    """Each measured second with its reference TPS and its kind (null when healthy)."""
    window = max(1, min(REFERENCE_WINDOW_S, measured.height))
    p99_median = measured["lat_p99_ms"].median()
    p99_base = float(p99_median) if isinstance(p99_median, (int, float)) else None
    high = pl.col("tps").rolling_quantile(WORKING_QUANTILE, window_size=window, center=True,
                                          min_samples=1)
    # rolling statistics skip nulls, so a stalled second simply does not count
    working = pl.when(pl.col("tps") >= DIP_FRACTION * high).then(pl.col("tps"))
    rolling = working.rolling_median(window, center=True, min_samples=1)
    run_high = measured["tps"].quantile(WORKING_QUANTILE)
    if not run_high:  # stalled for most of the run: what it did when it worked is the
        best = measured["tps"].max()  # reference (else no second would be degraded)
        run_high = float(best) if isinstance(best, (int, float)) else None
    run_working = measured.filter(pl.col("tps") >= DIP_FRACTION * (run_high or 0.0))
    working_median = run_working["tps"].median() if run_working.height else None
    working_tps = float(working_median) if isinstance(working_median, (int, float)) else 0.0
    reference = pl.when(rolling > 0).then(rolling).otherwise(pl.lit(working_tps))
    frame = measured.with_columns(reference.alias("reference"))
    spike = pl.lit(False)
    if p99_base is not None:
        spike = spike | ((pl.col("lat_p99_ms") > SPIKE_FACTOR * p99_base)
                         & (pl.col("lat_p99_ms") - p99_base > SPIKE_FLOOR_MS))
    kind = (
        pl.when((pl.col("tps") == 0) & (pl.col("reference") > 0)).then(pl.lit("drop-to-zero"))
        .when(pl.col("tps") < DIP_FRACTION * pl.col("reference")).then(pl.lit("dip"))
        .when(spike.fill_null(False)).then(pl.lit("latency-spike"))
        .otherwise(pl.lit(None, dtype=pl.String()))
    )
    return frame.with_columns(kind.alias("kind"))


def _windows(seconds: pl.DataFrame) -> list[StallWindow]:
    degraded = seconds.filter(pl.col("kind").is_not_null())
    if degraded.height == 0:
        return []
    # adjacent seconds share a group: the second number minus the row number is constant
    grouped = degraded.with_columns(
        ((pl.col("t").dt.epoch("s")) - pl.int_range(pl.len())).alias("group")
    ).group_by("group", maintain_order=True).agg(
        pl.col("t").min().alias("start"),
        pl.col("t").max().alias("last"),
        pl.col("kind"),
        pl.col("tps").min().alias("min_tps"),
        pl.col("reference").median().alias("reference"),
        (pl.col("reference") - pl.col("tps")).clip(lower_bound=0).sum().alias("deficit"),
        pl.col("lat_p99_ms").max().alias("p99"),
        pl.col("lat_max_ms").max().alias("max_lat"),
    )
    windows = []
    for row in grouped.iter_rows(named=True):
        kinds = set(row["kind"])
        kind = next(k for k in KINDS if k in kinds)
        reference = float(row["reference"] or 0.0)
        depth = 1.0 - float(row["min_tps"]) / reference if reference > 0 else 0.0
        windows.append(StallWindow(
            start=row["start"], end=row["last"] + dt.timedelta(seconds=1), kind=kind,
            depth=round(max(0.0, depth), 3), deficit_transactions=round(float(row["deficit"])),
            reference_tps=reference, min_tps=float(row["min_tps"]),
            p99_ms=row["p99"], max_latency_ms=row["max_lat"],
        ))
    return windows


def _regular(windows: list[StallWindow]) -> float | None:
    if len(windows) < 4:
        return None
    starts = [w.start.timestamp() for w in windows]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    period = statistics.median(gaps)
    if period < 2 or any(abs(g - period) > PERIOD_TOLERANCE * period for g in gaps):
        return None
    return round(period, 1)


def _periodicity(windows: list[StallWindow]) -> Periodicity | None:
    """All windows regularly spaced, or else those of one kind (a checkpoint's drop may
    come with a latency spike that is not regular)."""
    period = _regular(windows)
    if period is not None:
        return Periodicity(period, len(windows), None)
    for kind in KINDS:
        same = [w for w in windows if w.kind == kind]
        period = _regular(same)
        if period is not None:
            return Periodicity(period, len(same), kind)
    return None


def detect_stalls(client: pl.DataFrame) -> StallReport:
    """Windows of degraded seconds and the steady-state summary of the measured seconds."""
    measured = measured_seconds(client)
    if measured.height == 0:
        empty = SteadyState(0, 0.0, 0.0, 0.0, None, 0, 0.0, 0)
        return StallReport(empty, [], None, measured.select(
            "t", "tps", pl.lit(None, pl.Float64()).alias("reference"),
            pl.lit(None, pl.String()).alias("kind")))
    seconds = classify_seconds(measured)
    tps = seconds["tps"]
    mean = float(tps.mean() or 0.0)  # type: ignore[arg-type]
    std = float(tps.std() or 0.0) if tps.len() > 1 else 0.0  # type: ignore[arg-type]
    degraded = int(seconds["kind"].is_not_null().sum())
    p99 = seconds["lat_p99_ms"].median()
    steady = SteadyState(
        measured_seconds=seconds.height,
        tps_median=float(tps.median() or 0.0),  # type: ignore[arg-type]
        tps_mean=mean,
        tps_cv=std / mean if mean > 0 else 0.0,
        p99_median_ms=float(p99) if isinstance(p99, (int, float)) else None,
        degraded_seconds=degraded,
        degraded_pct=100.0 * degraded / seconds.height,
        zero_seconds=int((tps == 0).sum()),
    )
    windows = _windows(seconds)
    return StallReport(steady, windows, _periodicity(windows),
                       seconds.select("t", "tps", "reference", "kind"))
