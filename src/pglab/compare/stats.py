"""Pure statistics for comparing runs: a (hierarchical) moving-block bootstrap.

Why this test. Per-second samples of one run are autocorrelated (a checkpoint or a
vacuum slows several seconds in a row), so resampling single seconds would understate the
variance and call noise significant. A moving-block bootstrap resamples runs of
consecutive seconds instead; the block length is the lag after which the series'
autocorrelation becomes indistinguishable from zero (at least n^(1/3), at most n/2).

When a side has several runs (repeats), each bootstrap replicate first draws runs with
replacement, then blocks within each drawn run: the interval then includes the
run-to-run variation, which per-second samples of a single run cannot show.

The interval is a percentile interval of the difference of the statistic (contender minus
base); "no significant difference" when it includes zero. Pure Python (no numpy: polars
does not bring it) and deterministic: a fixed seed, so the same folders always give the
same verdict.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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


def block_resample(xs: Sequence[float], block: int, rng: random.Random) -> list[float]:
    """A moving-block (circular) resample of `xs`, of the same length."""
    n = len(xs)
    out: list[float] = []
    while len(out) < n:
        start = rng.randrange(n)
        out.extend(xs[(start + i) % n] for i in range(block))
    return out[:n]


def _replicate(runs: Sequence[Sequence[float]], blocks: Sequence[int],
               rng: random.Random) -> list[float]:
    """One bootstrap replicate of a side: runs drawn with replacement (when there are
    several), then blocks within each drawn run; pooled."""
    picked = [rng.randrange(len(runs)) for _ in runs] if len(runs) > 1 else [0]
    pooled: list[float] = []
    for index in picked:
        pooled.extend(block_resample(runs[index], blocks[index], rng))
    return pooled


@dataclass(frozen=True)
class Interval:
    """The contender-minus-base difference of a statistic, with its bootstrap interval."""

    base: float  # the statistic over the pooled base samples
    contender: float
    diff: float
    low: float
    high: float
    confidence: float
    resamples: int
    blocks: tuple[int, ...]  # block lengths used (base runs, then contender runs)

    @property
    def includes_zero(self) -> bool:
        return self.low <= 0.0 <= self.high

    def widened(self, margin: float) -> Interval:
        """The interval with `margin` added on both ends (an assumed extra uncertainty)."""
        return dataclasses.replace(self, low=self.low - margin, high=self.high + margin)

    def relative(self, value: float) -> float | None:
        """`value` (diff, low or high) as a fraction of the base statistic."""
        return value / abs(self.base) if self.base else None


def bootstrap_difference(base_runs: Sequence[Sequence[float]],
                         contender_runs: Sequence[Sequence[float]],
                         statistic: Statistic = median,
                         confidence: float = 0.95,
                         resamples: int = DEFAULT_RESAMPLES,
                         seed: int = DEFAULT_SEED) -> Interval:
    """Bootstrap interval of statistic(contender) - statistic(base).

    Each side is a list of runs, each run a list of per-second samples in time order
    (a run may be a single value, e.g. a count per run, when there are repeats).
    """
    base_runs = [list(r) for r in base_runs if r]
    contender_runs = [list(r) for r in contender_runs if r]
    if not base_runs or not contender_runs:
        raise ValueError("bootstrap_difference needs samples on both sides")
    rng = random.Random(seed)
    base_blocks = [block_length(r) for r in base_runs]
    cont_blocks = [block_length(r) for r in contender_runs]
    base_stat = statistic([x for r in base_runs for x in r])
    cont_stat = statistic([x for r in contender_runs for x in r])
    diffs = sorted(
        statistic(_replicate(contender_runs, cont_blocks, rng))
        - statistic(_replicate(base_runs, base_blocks, rng))
        for _ in range(resamples)
    )
    alpha = (1.0 - confidence) / 2.0
    return Interval(base=base_stat, contender=cont_stat, diff=cont_stat - base_stat,
                    low=quantile(diffs, alpha), high=quantile(diffs, 1.0 - alpha),
                    confidence=confidence, resamples=resamples,
                    blocks=tuple(base_blocks + cont_blocks))
