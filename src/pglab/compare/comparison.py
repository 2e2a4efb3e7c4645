"""BASE against each CONTENDER, metric by metric: values, delta, interval and verdict.

The headline. A row's base, contender and delta are the very statistic its interval is
for (`MetricResult.statistic`: the mean of per-second TPS, which is the run's TPS; the
median of per-second latencies; the mean of run values over repeats ...), so the delta
always lies inside its interval and `--fail-if` gates on what is printed. The runs' own
values (what pgbench and `pglab show` say) are kept beside it: a run with a stall has a
whole-run latency far above its median second's, and the two must not share a row.

Verdicts:
- `better` / `worse`: the 95% interval of the difference excludes zero.
- `no significant difference`: the interval includes zero.
- `n/a`: a side lacks the metric (with the reason), or the metric has one value per run
  (stall seconds; p95 or p99 of a run whose seconds are too few transactions to have one)
  and a side has no repeats to test it on.

Run-to-run noise. Per-second samples of one run only show how a run varies from second
to second, not how much two runs of the same configuration differ on this machine (on a
shared 2-core VM with other loads we measured identical runs up to 41% apart in TPS and
2x in p99 latency). So when a side has a single run, the interval is widened on both ends by
an assumed run-to-run noise (default 10%, `--noise`; see stats.Interval.widened).
When both sides have repeats, the bootstrap resamples runs and measures that variation
itself, and nothing is assumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pglab.compare import stats
from pglab.compare.envdiff import EnvDiff, compare_environments
from pglab.compare.groups import Group
from pglab.compare.metrics import BY_NAME, METRICS, Measure, Metric
from pglab.compare.profile_diff import ProfileComparison, compare_profiles
from pglab.errors import BadInput

if TYPE_CHECKING:
    from pglab.compare.statements import StatementsComparison

DEFAULT_NOISE = 0.10
NOISY_REPEATS_CV = 0.05  # repeats whose TPS spread (CV) exceeds this get a noise warning
Verdict = Literal["better", "worse", "no significant difference", "n/a"]


@dataclass(frozen=True)
class MetricResult:
    metric: Metric
    base: float | None  # the side's `statistic` (the interval's own, when there is one)
    contender: float | None
    interval: stats.Interval | None  # already widened by the assumed noise, if any
    verdict: Verdict
    note: str  # why n/a, or how the interval was made
    statistic: str  # what base, contender and delta are: "median of per-second values"
    base_cv: float | None = None  # spread of run values over repeats
    contender_cv: float | None = None
    base_run: float | None = None  # mean of the runs' own values (pgbench's figures)
    contender_run: float | None = None

    @property
    def unit(self) -> str:
        """The unit of `statistic`: the samples' when they are what was tested."""
        sampled = self.statistic.endswith(f"of {self.metric.sample} values")
        return (self.metric.sample_unit or self.metric.unit) if sampled else self.metric.unit

    @property
    def delta(self) -> float | None:
        if self.base is None or self.contender is None:
            return None
        return self.contender - self.base

    @property
    def delta_pct(self) -> float | None:
        if self.delta is None or not self.base:
            return None
        # the ratio first: a contender of 0 is exactly -100%, as its interval's end is
        return 100.0 * (self.delta / abs(self.base))

    @property
    def ci_pct(self) -> tuple[float, float] | None:
        """The interval as % of the base statistic."""
        if self.interval is None:
            return None
        low, high = self.interval.relative(self.interval.low), self.interval.relative(
            self.interval.high)
        if low is None or high is None:
            return None
        return 100.0 * low, 100.0 * high


@dataclass
class ContenderResult:
    group: Group
    metrics: list[MetricResult]
    env: EnvDiff
    warnings: list[str] = field(default_factory=list)
    statements: StatementsComparison | None = None  # None: not asked for (--metric)
    # None: --metric, or no run of either side was to record on-CPU profiles
    profile: ProfileComparison | None = None


@dataclass
class Comparison:
    base: Group
    contenders: list[ContenderResult]
    noise: float
    confidence: float
    failed_conditions: list[str] = field(default_factory=list)


def _run_values(measures: list[Measure]) -> list[float] | None:
    values = [m.value for m in measures]
    if any(v is None for v in values):
        return None
    return [float(v) for v in values if v is not None]


def compare_metric(metric: Metric, base: Group, contender: Group, noise: float,
                   confidence: float) -> MetricResult:
    base_m = [metric.read(r) for r in base.runs]
    cont_m = [metric.read(r) for r in contender.runs]
    base_values, cont_values = _run_values(base_m), _run_values(cont_m)
    by_run = ("mean of run values" if len(base.runs) > 1 or len(contender.runs) > 1
              else "run value")
    if base_values is None or cont_values is None:
        missing = next(m.missing for m in base_m + cont_m if m.value is None)
        base_mean = None if base_values is None else stats.mean(base_values)
        cont_mean = None if cont_values is None else stats.mean(cont_values)
        return MetricResult(metric, base_mean, cont_mean, None, "n/a", missing or "missing",
                            by_run, base_run=base_mean, contender_run=cont_mean)
    base_cv = stats.cv(base_values) if len(base_values) > 1 else None
    cont_cv = stats.cv(cont_values) if len(cont_values) > 1 else None
    base_value, cont_value = stats.mean(base_values), stats.mean(cont_values)
    repeats = len(base_values) > 1 and len(cont_values) > 1
    sampled = all(m.samples for m in base_m + cont_m) and not (
        metric.by_run_with_repeats and repeats)
    if sampled:
        base_runs = [m.samples or [] for m in base_m]
        cont_runs = [m.samples or [] for m in cont_m]
        statistic = f"{metric.statistic} of {metric.sample} values"
        how = (f"{statistic}, block bootstrap"
               + (" over repeats" if len(base_runs) > 1 or len(cont_runs) > 1 else ""))
    elif repeats:
        base_runs = [[v] for v in base_values]
        cont_runs = [[v] for v in cont_values]
        statistic = "mean of run values"
        how = "one value per run, bootstrap over repeats"
    else:
        why = next((m.unsampled for m in base_m + cont_m if m.unsampled), None)
        return MetricResult(metric, base_value, cont_value, None, "n/a",
                            (f"{why}: " if why else "")
                            + "one value per run: give repeats on both sides for a verdict",
                            by_run, base_cv, cont_cv, base_value, cont_value)
    interval = stats.bootstrap_difference(base_runs, cont_runs, metric.stat(), confidence)
    if len(base_runs) < 2 or len(cont_runs) < 2:
        interval = interval.widened(noise)
        how += f"; widened by the assumed run-to-run noise (+-{100 * noise:g}%)"
    verdict: Verdict
    if interval.includes_zero:
        verdict = "no significant difference"
    else:
        up = interval.estimate > 0
        verdict = "better" if up == (metric.better == "higher") else "worse"
    # The headline is the interval's own statistic over the pooled samples.
    return MetricResult(metric, interval.base, interval.contender, interval, verdict, how,
                        statistic, base_cv, cont_cv, base_value, cont_value)


def _noise_warnings(side: str, group: Group, results: list[MetricResult]) -> list[str]:
    warnings = []
    tps = next((r for r in results if r.metric.name == "tps"), None)
    spread = None if tps is None else (tps.base_cv if side == "base" else tps.contender_cv)
    if spread is not None and spread > NOISY_REPEATS_CV:
        warnings.append(f"noisy: the {side} repeats ({group.spec}) spread {100 * spread:.1f}% "
                        f"(CV of TPS) > {100 * NOISY_REPEATS_CV:g}%; run more repeats or "
                        "quieten the machine")
    if 1 < len(group.runs) < 5:
        # Resampling 2-4 runs cannot show the tails of run-to-run variation.
        warnings.append(f"only {len(group.runs)} {side} repeats: intervals over so few runs "
                        "tend to be too narrow; 5 or more are better")
    short = [run.label for run in group.runs
             if isinstance(run.measured.get("seconds"), int) and run.measured["seconds"] < 10]
    if short:
        warnings.append(f"under 10 measured seconds, so wide intervals: {', '.join(short[:4])}"
                        + (f" and {len(short) - 4} more" if len(short) > 4 else ""))
    return warnings


def applies_to(metric: Metric, groups: list[Group]) -> bool:
    """Whether any run has the metric at all (commits lost to a power loss are no row of a
    comparison of runs that had none)."""
    return not metric.situational or any(
        metric.read(run).applies for group in groups for run in group.runs)


def compare(base: Group, contenders: list[Group], noise: float = DEFAULT_NOISE,
            confidence: float = 0.95, metric_names: list[str] | None = None) -> Comparison:
    """BASE against each contender; statement by statement and on-CPU profiles too
    unless `metric_names` picks the rows."""
    from pglab.compare.statements import compare_statements  # it calls compare_metric

    metrics = [BY_NAME[n] for n in metric_names] if metric_names else [
        m for m in METRICS if applies_to(m, [base, *contenders])]
    results = []
    for contender in contenders:
        rows = [compare_metric(m, base, contender, noise, confidence) for m in metrics]
        env = compare_environments(base.runs, contender.runs, contender.label)
        warnings = list(env.warnings)
        warnings += _noise_warnings("base", base, rows)
        warnings += _noise_warnings("contender", contender, rows)
        skipped = base.skipped + contender.skipped
        warnings += [f"left out: {s}" for s in skipped[:4]]
        if len(skipped) > 4:
            warnings.append(f"left out: {len(skipped) - 4} more runs that did not complete")
        found = (None if metric_names else
                 compare_statements(base, contender, noise, confidence))
        profile = None if metric_names else compare_profiles(base, contender)
        results.append(ContenderResult(contender, rows, env, warnings, found, profile))
    return Comparison(base, results, noise, confidence)


# --- --fail-if --------------------------------------------------------------------------

_CONDITION = re.compile(r"^\s*([a-z_0-9]+)\s*([<>])\s*([-+]?\d+(?:\.\d+)?)\s*%\s*$")


@dataclass(frozen=True)
class Condition:
    """`tps<-5%`: fail when TPS changed significantly by less than -5%."""

    text: str
    metric: str
    op: Literal["<", ">"]
    pct: float

    def holds(self, result: MetricResult) -> bool:
        # The printed delta, of the statistic the verdict's interval is for.
        if result.verdict not in ("better", "worse") or result.delta_pct is None:
            return False  # not significant (or n/a): no evidence of a change
        return result.delta_pct < self.pct if self.op == "<" else result.delta_pct > self.pct


def parse_condition(text: str) -> Condition:
    match = _CONDITION.match(text)
    if match is None:
        raise BadInput(f"--fail-if {text!r}: expected METRIC<PCT% or METRIC>PCT%, e.g. "
                       "'tps<-5%' or 'p99>+10%'")
    name, op, pct = match.group(1), match.group(2), float(match.group(3))
    if name not in BY_NAME:
        raise BadInput(f"--fail-if {text!r}: unknown metric {name!r}; expected one of "
                       f"{', '.join(BY_NAME)}")
    return Condition(text.strip(), name, "<" if op == "<" else ">", pct)


def failed_conditions(comparison: Comparison, conditions: list[Condition]) -> list[str]:
    failed = []
    for contender in comparison.contenders:
        by_name = {r.metric.name: r for r in contender.metrics}
        for condition in conditions:
            result = by_name.get(condition.metric)
            if result is not None and condition.holds(result):
                failed.append(f"{condition.text}: {contender.group.label} changed "
                              f"{result.metric.title} by {result.delta_pct:+.1f}% "
                              f"({result.verdict})")
    return failed


def as_dict(comparison: Comparison) -> dict[str, object]:
    """The comparison as JSON-serialisable data (`pglab compare --format json`)."""
    from pglab.compare.profile_diff import as_dict as profile_dict
    from pglab.compare.statements import as_dict as statements_dict

    def metric(r: MetricResult) -> dict[str, object]:
        ci = r.ci_pct
        return {"metric": r.metric.name, "unit": r.unit, "better": r.metric.better,
                "statistic": r.statistic, "base": r.base, "contender": r.contender,
                "delta": r.delta, "delta_pct": r.delta_pct,
                "ci_pct": list(ci) if ci else None, "verdict": r.verdict, "note": r.note,
                "base_run": r.base_run, "contender_run": r.contender_run,
                "base_cv": r.base_cv, "contender_cv": r.contender_cv}

    return {
        "base": [str(r.path) for r in comparison.base.runs],
        "noise": comparison.noise,
        "confidence": comparison.confidence,
        "contenders": [{
            "runs": [str(r.path) for r in c.group.runs],
            "comparable": c.env.comparable,
            "warnings": c.warnings,
            "environment": [{"category": cat, "key": key, "base": a, "contender": b}
                            for cat, key, a, b in c.env.rows],
            "metrics": [metric(r) for r in c.metrics],
            **({"statements": statements_dict(c.statements)} if c.statements else {}),
            **({"profile": profile_dict(c.profile)} if c.profile else {}),
        } for c in comparison.contenders],
        "failed_conditions": comparison.failed_conditions,
    }
