"""What `pglab tune` found, for the terminal: per step and candidate change, the measured
effect; the path of kept changes and, for more than one, their combined effect."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pglab.compare.comparison import MetricResult
from pglab.tune import CandidateResult, Step, TuneResult

COLUMNS = ("stall_seconds", "tps", "p99")


def _cell(m: MetricResult) -> str:
    if m.delta_pct is None:
        return f"n/a ({m.note})" if m.verdict == "n/a" else "-"
    ci = m.ci_pct
    interval = f" [{ci[0]:+.0f}%, {ci[1]:+.0f}%]" if ci else ""
    return f"{m.delta_pct:+.1f}%{interval} {m.verdict}"


def _row(table: Table, cand: CandidateResult) -> None:
    by_name = {m.metric.name: m for m in cand.metrics}
    cells = [_cell(by_name[n]) if n in by_name else "-" for n in COLUMNS]
    verdict = "yes: " if cand.kept else ("failed: " if cand.failed else "no: ")
    table.add_row(escape(cand.candidate.label), str(len(cand.runs)), *cells,
                  escape(verdict + cand.why))


def _table(console: Console, cands: list[CandidateResult]) -> None:
    table = Table(header_style="bold", box=None)
    for column in ("change", "runs", "stall seconds", "TPS", "p99", "kept"):
        table.add_column(column)
    for cand in cands:
        _row(table, cand)
    console.print(table)


def _print_step(console: Console, step: Step, several: bool) -> None:
    cause = f", top cause {step.top_cause}" if step.top_cause else ""
    head = f"step {step.number}: " if several else ""
    console.print(f"{head}baseline {len(step.baseline)} run(s){cause}, "
                  f"{len(step.candidates)} candidate change(s)", highlight=False)
    for failure in step.baseline_failures:
        console.print(f"  [yellow]a baseline run failed[/yellow] {escape(failure)}")
    if not step.candidates:
        console.print("  the analysis recommends nothing pglab can test that was not tried "
                      "(see analysis.json of " + ", ".join(step.analysed) + ")")
        return
    _table(console, step.candidates)


def _effect(cand: CandidateResult) -> str:
    by_name = {m.metric.name: m for m in cand.metrics}
    parts = [f"{label} {_cell(by_name[n])}" for n, label in
             (("stall_seconds", "stall seconds"), ("tps", "TPS")) if n in by_name]
    return "; ".join(parts) or "not measured"


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
        console.print("[bold]combined[/bold], against the original baseline")
        _table(console, [result.combined])
    winning = result.winning_overrides()
    if winning:
        console.print("winning overrides: " + " ".join(f"--set {o}" for o in winning),
                      highlight=False)
    elif result.status == "completed":
        console.print("no change was significantly better: keep the baseline")
    if result.path is not None:
        console.print(f"  details: {result.path}", highlight=False)
