"""The text of a comparison's cells, shared by the terminal, Markdown and HTML renderers,
so that the three outputs always say the same thing."""

from __future__ import annotations

from pglab.compare.comparison import Comparison, MetricResult

HEADERS = ("metric", "statistic", "base", "contender", "delta", "95% CI of delta", "verdict")
# HEADERS' columns of numbers (right-aligned)
NUMERIC = range(2, 6)
_SHORT = {"per-second values": "seconds", "per-cut values": "cuts", "run values": "runs"}


def statistic(result: MetricResult) -> str:
    """`median of seconds`: what the row's base, contender, delta and interval are of."""
    text = result.statistic
    for long, short in _SHORT.items():
        text = text.replace(long, short)
    return text


def number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "n/a"
    size = abs(value)
    text = (f"{value:,.0f}" if size >= 1000 else f"{value:.1f}" if size >= 100
            else f"{value:.2f}" if size >= 1 else f"{value:.3f}" if value else "0")
    return f"{text} {unit}".rstrip()


def pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f}%"


def row(result: MetricResult,
        short_na: bool = False) -> tuple[str, str, str, str, str, str, str]:
    """The cells of one metric's row (HEADERS); `short_na`: the reason goes in notes()."""
    unit = result.unit
    delta = "n/a" if result.delta is None else (
        f"{number(result.delta, unit)} ({pct(result.delta_pct)})" if result.delta_pct
        is not None else number(result.delta, unit))
    ci = result.ci_pct
    interval = "" if ci is None else f"[{ci[0]:+.1f}%, {ci[1]:+.1f}%]"
    verdict: str = result.verdict
    if verdict == "n/a" and short_na:
        verdict = "n/a *"
    elif verdict == "n/a":
        verdict = f"n/a: {result.note}"
    return (result.metric.title, statistic(result), number(result.base, unit),
            number(result.contender, unit), delta, interval, verdict)


def spread(result: MetricResult) -> str:
    """`CV 1.2% / 3.4%` of the run values over repeats, when there are repeats."""
    parts = [f"{100 * cv:.1f}%" if cv is not None else "-"
             for cv in (result.base_cv, result.contender_cv)]
    return "" if parts == ["-", "-"] else f"repeat spread (CV) {parts[0]} / {parts[1]}"


def notes(results: list[MetricResult]) -> list[str]:
    """`* metric: why n/a`, for the rows rendered with short_na."""
    return [f"* {r.metric.title}: {r.note}" for r in results if r.verdict == "n/a"]


def footer(comparison: Comparison) -> str:
    return (f"base, contender, delta and its {100 * comparison.confidence:g}% interval are "
            f"each row's statistic (the mean of seconds is the run's rate; the median of "
            f"seconds leaves a stall's seconds out of a latency); --fail-if tests that "
            f"delta. Intervals: block bootstrap of the samples (resampling runs too when "
            f"both sides have repeats); with a single run on a side, widened by an assumed "
            f"run-to-run noise of +-{100 * comparison.noise:g}% (--noise).")
