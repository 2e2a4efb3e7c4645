"""Pure statistics for comparing runs: a (hierarchical) moving-block bootstrap.

Why this test. Per-second samples of one run are autocorrelated (a checkpoint or a
vacuum slows several seconds in a row), so resampling single seconds would understate the
variance and call noise significant. A moving-block bootstrap resamples runs of
consecutive seconds instead; the block length is the lag after which the series'
autocorrelation becomes indistinguishable from zero (at least n^(1/3), at most n/2).

When a side has several runs (repeats), each bootstrap replicate first draws runs with
replacement, then blocks within each drawn run: the interval then includes the
run-to-run variation, which per-second samples of a single run cannot show.

The interval is a percentile interval of the change of the statistic: of log(contender /
base) when the statistic is positive (TPS, latencies: a factor of 2 up or down counts the
same whichever run is the base), else of contender - base; "no significant difference"
when it includes zero. Pure Python (no numpy: polars
does not bring it) and deterministic: a fixed seed per side, so the same folders always
give the same verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
import random
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

Statistic = Callable[[Sequence[float]], float]
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20261121


def mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def stdev(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def cv(xs: Sequence[float]) -> float | None:
    """Coefficient of variation (sample stdev / |mean|); None when the mean is 0."""
    if not xs:
        return None
    m = mean(xs)
    return stdev(xs) / abs(m) if m else None


def quantile(sorted_xs: Sequence[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default) on sorted data."""
    h = p * (len(sorted_xs) - 1)
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (h - lo) * (sorted_xs[hi] - sorted_xs[lo])


def autocorrelation(xs: Sequence[float], lag: int) -> float:
    n = len(xs)
    if lag >= n:
        return 0.0
    m = mean(xs)
    var = math.fsum((x - m) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return math.fsum((xs[i] - m) * (xs[i + lag] - m) for i in range(n - lag)) / var


def block_length(xs: Sequence[float]) -> int:
    """Consecutive seconds that move together: the first lag whose autocorrelation is
    inside the +-2/sqrt(n) band of white noise, bounded to [n^(1/3), n/2]."""
    n = len(xs)
    if n < 4:
        return 1
    floor_len: int = max(1, round(float(n) ** (1 / 3)))
    band = 2.0 / math.sqrt(n)
    lag = 1
    while lag < n // 2 and abs(autocorrelation(xs, lag)) > band:
        lag += 1
    return max(floor_len, min(lag, n // 2))


def _circle(xs: Sequence[float], block: int) -> list[float]:
    """`xs` repeated so that a block starting at any of its indices is one slice."""
    return list(xs) * (1 + -(-block // len(xs)))


def block_resample(circle: Sequence[float], n: int, block: int,
                   rng: random.Random) -> list[float]:
    """A moving-block (circular) resample of n samples, from their `_circle`: ceil(n /
    block) blocks, each a whole slice (the circle is at least n + block long)."""
    draw = rng.random  # a third of randrange's cost, in the bootstrap's innermost loop
    if block == 1:
        return [circle[int(draw() * n)] for _ in range(n)]
    out: list[float] = []
    extend = out.extend
    for _ in range(-(-n // block)):
        start = int(draw() * n)
        extend(circle[start:start + block])
    del out[n:]
    return out


def _replicate(runs: Sequence[Sequence[float]], circles: Sequence[Sequence[float]],
               blocks: Sequence[int], rng: random.Random) -> list[float]:
    """One bootstrap replicate of a side: runs drawn with replacement (when there are
    several), then blocks within each drawn run; pooled."""
    if len(runs) == 1:
        return block_resample(circles[0], len(runs[0]), blocks[0], rng)
    picked = [rng.randrange(len(runs)) for _ in runs]
    pooled: list[float] = []
    for index in picked:
        pooled.extend(block_resample(circles[index], len(runs[index]), blocks[index], rng))
    return pooled


@dataclass(frozen=True)
class _Side:
    statistic: float  # over the pooled samples
    replicates: array[float]  # 8 bytes each: a cache of 512 sides stays ~8 MB
    blocks: tuple[int, ...]
    nonnegative: bool  # every sample >= 0
    positive: bool  # every replicate's statistic > 0


def _one_run_replicates(circle: Sequence[float], n: int, block: int, statistic: Statistic,
                        resamples: int, rng: random.Random) -> array[float]:
    """The replicates of a side of one run, as `_replicate` draws them one by one (the
    same draws in the same order, so the same samples): every block start drawn at once
    and each replicate joined from slices cut once (a call per replicate and a loop per
    block would cost most of a comparison's time)."""
    draw = rng.random
    per = -(-n // block)  # blocks per replicate, as block_resample draws them
    starts = [int(draw() * n) for _ in range(per * resamples)]
    at = [circle[start:start + block] for start in range(n)]
    joined = itertools.chain.from_iterable
    replicates = array("d")
    for first in range(0, per * resamples, per):
        sample = list(joined(map(at.__getitem__, starts[first:first + per])))
        del sample[n:]
        replicates.append(statistic(sample))
    return replicates


@functools.lru_cache(maxsize=512)
def _side(runs: tuple[tuple[float, ...], ...], statistic: Statistic, resamples: int,
          seed: int) -> _Side:
    """A side's statistic, its bootstrap replicates and block lengths. Each side draws
    from its own seed, so one side's replicates do not depend on the other's samples:
    comparing a base with many contenders (or all pairs of a set) resamples each once."""
    rng = random.Random(seed)
    blocks = tuple(block_length(r) for r in runs)
    circles = [_circle(r, b) for r, b in zip(runs, blocks, strict=True)]
    if len(runs) == 1:
        replicates = _one_run_replicates(circles[0], len(runs[0]), blocks[0], statistic,
                                         resamples, rng)
    else:
        replicates = array("d", (statistic(_replicate(runs, circles, blocks, rng))
                                 for _ in range(resamples)))
    pooled = [x for r in runs for x in r]
    return _Side(statistic(pooled), replicates, blocks, min(pooled) >= 0,
                 all(r > 0 for r in replicates))


@dataclass(frozen=True)
class Interval:
    """The change of a statistic from base to contender, with its bootstrap interval.

    Ratio mode (every replicate's statistic is positive on both sides): `low`/`high` bound
    log(contender / base), so a gain and a loss of the same factor are equally far from
    zero whichever side is the base. Difference mode (a statistic can be 0, as failures
    often are): they bound contender - base.
    """

    base: float  # the statistic over the pooled base samples
    contender: float
    mode: Literal["ratio", "difference"]
    low: float
    high: float
    confidence: float
    resamples: int
    blocks: tuple[int, ...]  # block lengths used (base runs, then contender runs)
    # Every sample of both sides is >= 0 (stall seconds, failures, TPS): the contender's
    # statistic cannot fall below 0, so no change is below -100%.
    nonnegative: bool = False

    @property
    def estimate(self) -> float:
        if self.mode == "ratio":
            return math.log(self.contender / self.base)
        return self.contender - self.base

    @property
    def includes_zero(self) -> bool:
        return self.low <= 0.0 <= self.high

    def widened(self, noise: float) -> Interval:
        """Both ends pushed out by a relative run-to-run noise (0.1 = 10%): by log(1 +
        noise) in ratio mode, by noise times the larger statistic in difference mode."""
        margin = (math.log1p(noise) if self.mode == "ratio"
                  else noise * max(abs(self.base), abs(self.contender)))
        return dataclasses.replace(self, low=self.low - margin, high=self.high + margin)

    def relative(self, value: float) -> float | None:
        """A bound (or the estimate) as a relative change: 0.25 = +25%."""
        if self.mode == "ratio":
            return math.expm1(value)
        if not self.base:
            return None
        relative = value / abs(self.base)
        # A replicate whose base drew more than the pooled base can put the difference's
        # bound below -base: as a change of a quantity that cannot be negative, that is
        # -100% (a stall cut to nothing), never -108%.
        return max(relative, -1.0) if self.nonnegative and self.base > 0 else relative


def bootstrap_difference(base_runs: Sequence[Sequence[float]],
                         contender_runs: Sequence[Sequence[float]],
                         statistic: Statistic = median,
                         confidence: float = 0.95,
                         resamples: int = DEFAULT_RESAMPLES,
                         seed: int = DEFAULT_SEED) -> Interval:
    """Bootstrap interval of the change statistic(base) -> statistic(contender).

    Each side is a list of runs, each run a list of per-second samples in time order
    (a run may be a single value, e.g. a count per run, when there are repeats).
    """
    base = tuple(tuple(r) for r in base_runs if r)
    contender = tuple(tuple(r) for r in contender_runs if r)
    if not base or not contender:
        raise ValueError("bootstrap_difference needs samples on both sides")
    # Two seeds: two sides of identical samples must not draw identical replicates.
    base_side = _side(base, statistic, resamples, seed)
    cont_side = _side(contender, statistic, resamples, seed + 1)
    base_stat, cont_stat = base_side.statistic, cont_side.statistic
    positive = base_stat > 0 and cont_stat > 0 and base_side.positive and cont_side.positive
    mode: Literal["ratio", "difference"] = "ratio" if positive else "difference"
    # map over both sides' replicates: a generator's frame per pair was most of this
    # function's time, comparing a base with many contenders
    base_reps, cont_reps = base_side.replicates, cont_side.replicates
    if len(base_reps) != len(cont_reps):
        raise ValueError("both sides need as many replicates")
    changes = sorted(map(math.log, map(operator.truediv, cont_reps, base_reps)) if positive
                     else map(operator.sub, cont_reps, base_reps))
    alpha = (1.0 - confidence) / 2.0
    return Interval(base=base_stat, contender=cont_stat, mode=mode,
                    low=quantile(changes, alpha), high=quantile(changes, 1.0 - alpha),
                    confidence=confidence, resamples=resamples,
                    blocks=base_side.blocks + cont_side.blocks,
                    nonnegative=base_side.nonnegative and cont_side.nonnegative)
