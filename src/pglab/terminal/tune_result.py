"""What `pglab tune` found, for the terminal: per step and candidate change, the measured
effect; the path of kept changes and, for more than one, their combined effect."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.markup import escape

from pglab.compare.comparison import MetricResult
from pglab.tune import CandidateResult, Step, TuneResult

LABELS = (("lost_commits", "commits lost per cut"), ("stall_seconds", "stall seconds"),
          ("tps", "TPS"), ("p99", "p99"))


def _cell(m: MetricResult) -> str:
    if m.metric.name == "lost_commits" and m.base is not None and m.contender is not None:
        # counts, not a percentage: "-100%" hides whether 3 or 3,000 were lost, and a
        # baseline that lost none has no percentage at all
        return f"{m.base:,.0f} -> {m.contender:,.0f} {m.verdict}"
    if m.delta_pct is None:
        return "n/a"  # the reason is in the tune file (metric note)
    ci = m.ci_pct
    interval = f" [{ci[0]:+.0f}%, {ci[1]:+.0f}%]" if ci else ""
    return f"{m.delta_pct:+.1f}%{interval} {m.verdict}"


def _measured(cand: CandidateResult) -> str:
    by_name = {m.metric.name: m for m in cand.metrics}
    return " · ".join(f"{label} {_cell(by_name[n])}" for n, label in LABELS if n in by_name)


def _print_candidate(console: Console, cand: CandidateResult) -> None:
    """Two lines per candidate, readable at any terminal width (a table cut the change,
    the one thing the reader needs whole)."""
    verdict = "[green]kept[/green]" if cand.kept else (
        "[red]failed[/red]" if cand.failed else "not kept")
    console.print(f"  [bold]{escape(cand.candidate.label)}[/bold] ({cand.candidate.rule}, "
                  f"{len(cand.runs)} run(s)): {verdict}: {escape(cand.why)}",
                  highlight=False)
    if cand.metrics:
        console.print(f"      {escape(_measured(cand))}", highlight=False)


def _print_step(console: Console, step: Step, several: bool) -> None:
    cause = f", top cause {step.top_cause}" if step.top_cause else ", no cause left"
    head = f"step {step.number}: " if several else ""
    base = (f"baseline {len(step.baseline)} run(s)" if step.baseline or step.number == 1
            else f"from step {step.number - 1}'s winner")
    console.print(f"{head}{base}{cause}, {len(step.candidates)} candidate change(s)",
                  highlight=False)
    for failure in step.baseline_failures:
        console.print(f"  [yellow]a baseline run failed[/yellow] {escape(failure)}")
    if not step.candidates:
        console.print("  the analysis recommends nothing pglab can test that was not tried "
                      "(see analysis.json of " + ", ".join(step.analysed) + ")")
        return
    for cand in step.candidates:
        _print_candidate(console, cand)


def _effect(cand: CandidateResult) -> str:
    return _measured(cand) or "not measured"


def print_tune(console: Console, result: TuneResult) -> None:
    console.print(f"tune {result.tune_id}: {result.status}"
                  + (f" ({escape(result.reason)})" if result.reason else ""),
                  highlight=False)
    if result.point:
        console.print("  the sweep's first point, tuned: "
                      + ", ".join(f"{k}={v}" for k, v in result.point.items()), highlight=False)
    several = len(result.steps) > 1
    for step in result.steps:
        _print_step(console, step, several)
    if result.steps and any(c.metrics for s in result.steps for c in s.candidates):
        console.print("  changes are relative to each step's baseline runs (95% intervals, "
                      "block bootstrap over seconds and repeats)")
    winners = result.path_winners()
    if several and winners:
        console.print("[bold]path[/bold]")
        for step in result.steps:
            if step.winner is not None:
                console.print(f"  step {step.number}: {escape(step.winner.candidate.label)}: "
                              f"{escape(_effect(step.winner))}", highlight=False)
    if result.combined is not None:
        console.print("[bold]combined[/bold], against the original baseline "
                      f"({len(result.combined_baseline)} run(s))")
        _print_candidate(console, result.combined)
    winning = result.winning_overrides()
    if winning:
        # quoted for the shell: a list of faults has spaces and quotes, and pastes whole
        console.print("winning overrides: " + escape(" ".join(f"--set {shlex.quote(o)}"
                                                              for o in winning)),
                      highlight=False)
    elif result.status == "completed":
        console.print("no change was significantly better: keep the baseline")
    if result.path is not None:
        console.print(f"  details: {result.path}", highlight=False)
