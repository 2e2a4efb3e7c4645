"""What `pglab tune` found, for the terminal: per candidate change, the measured effect."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from pglab.compare.comparison import MetricResult
from pglab.tune import TuneResult


def _cell(m: MetricResult) -> str:
    if m.delta_pct is None:
        return f"n/a ({m.note})" if m.verdict == "n/a" else "-"
    ci = m.ci_pct
    interval = f" [{ci[0]:+.0f}%, {ci[1]:+.0f}%]" if ci else ""
    return f"{m.delta_pct:+.1f}%{interval} {m.verdict}"


def print_tune(console: Console, result: TuneResult) -> None:
    baseline = result.baseline
    console.print(f"tune {result.tune_id}: baseline {len(baseline)} run(s), "
                  f"{len(result.candidates)} candidate change(s)")
    if not result.candidates:
        console.print("  the baseline's analysis recommends nothing pglab can test "
                      f"(see {baseline[0].path / 'analysis.json'})")
        return
    table = Table(header_style="bold", box=None)
    for column in ("change", "runs", "stall seconds", "TPS", "p99", "kept"):
        table.add_column(column)
    for cand in result.candidates:
        by_name = {m.metric.name: m for m in cand.metrics}
        cells = [_cell(by_name[n]) if n in by_name else "-" for n in
                 ("stall_seconds", "tps", "p99")]
        table.add_row(cand.candidate.label, str(len(cand.runs)), *cells,
                      ("yes: " if cand.kept else "no: ") + cand.why)
    console.print(table)
    console.print("  changes are relative to the baseline's runs (95% intervals, block "
                  "bootstrap over seconds and repeats)")
    winning = result.winning_overrides()
    if winning:
        console.print("winning overrides: " + " ".join(f"--set {o}" for o in winning))
    else:
        console.print("no change was significantly better: keep the baseline")
