"""The findings of an analysis (analysis.json) for the terminal: short by default (the
verdict, each worst stall's top causes, the first recommendations with the command that
tests each), everything with `details`."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from pglab.analysis.plans import change_line
from pglab.analysis.statements import statement_line
from pglab.durability.section import cut_lines, headline
from pglab.results.analysis_doc import AnalysisDocument, deficit, verdict_basis

MAX_STALLS = 8  # the worst ones; the rest are in analysis.json
# what the short form keeps: the worst stalls, the causes of each, the recommendations
SHORT_STALLS = 3
SHORT_CAUSES = 2
SHORT_RECOMMENDATIONS = 3


def _time(iso: str | None) -> str:
    # analysis.json's times are UTC (`...Z`), and every time pglab prints says so
    return f"{iso[11:19]} UTC" if iso else "?"


def _stall_line(stall: dict[str, Any]) -> str:
    kind, seconds = stall["kind"], stall["seconds"]
    if kind == "drop-to-zero":
        head = f"TPS 0 for {seconds} s"
    elif kind == "dip":
        head = f"TPS down {100 * stall['depth']:.0f}% for {seconds} s"
    else:
        head = f"latency spike for {seconds} s (max {stall.get('max_latency_ms') or 0:.0f} ms)"
    return (f"{head} at {_time(stall['start'])} (about {deficit(stall) or 0:,} fewer "
            "transactions)")


def _print_causes(console: Console, causes: list[dict[str, Any]], indent: str,
                  details: bool) -> bool:
    """With details, every cause with every evidence line (the line that justifies a
    sub-cause or a halved confidence can be any of them); else the first SHORT_CAUSES
    causes, the first one with its strongest evidence line. Whether the short form left
    something out."""
    shown = causes if details else causes[:SHORT_CAUSES]
    left_out = len(causes) > len(shown)
    for rank, cause in enumerate(shown):
        style = "dim" if cause["cause"] == "unknown" else "cyan"
        outside = ", outside the lab" if cause.get("outside_the_lab") else ""
        kind = f": {cause['sub_cause']}" if cause.get("sub_cause") else ""
        # unknown's "confidence" is how far the best cause fell short: its evidence says
        sure = ("" if cause["cause"] == "unknown"
                else f" (confidence {cause['confidence']:.2f}{outside})")
        console.print(f"{indent}[{style}]{cause['cause']}{kind}[/{style}]{sure}")
        lines = cause["evidence"] if details else cause["evidence"][:1 if rank == 0 else 0]
        left_out = left_out or len(cause["evidence"]) > len(lines)
        for line in lines:
            console.print(f"{indent}  - {escape(line)}", highlight=False)
    return left_out and not details


def _print_durability(console: Console, section: dict[str, Any], cuts: bool,
                      details: bool) -> bool:
    style = "bold red" if section.get("failed") else "bold"
    console.print(f"[{style}]durability[/{style}]: {escape(headline(section))}",
                  highlight=False)
    if cuts:
        for line in cut_lines(section):
            console.print(f"  {escape(line)}", highlight=False)
    return _print_causes(console, section.get("causes") or [], "  ", details)


def _print_recommendation(console: Console, rec: dict[str, Any], details: bool) -> None:
    console.print(f"  [green]{rec['rule']}[/green] ({', '.join(rec['because'])}): "
                  f"{escape(rec['action'])}", highlight=False)
    if details:
        console.print(f"      effect: {escape(rec['effect'])}", highlight=False)
        console.print(f"      risk: {escape(rec['risk'])}", highlight=False)
        if rec.get("not_when"):
            console.print(f"      not when: {escape(rec['not_when'])}", highlight=False)
    if rec.get("weak_evidence"):  # said in the short form too: it qualifies the advice
        console.print(f"      [yellow]{escape(rec['weak_evidence'])}[/yellow]", highlight=False)
    why = f": {rec['not_testable_because']}" if rec.get("not_testable_because") else ""
    # one line, whatever the width (the console soft-wraps): a command to copy
    console.print(f"      test: {escape(rec['test'] + why)}", highlight=False)


def print_findings(console: Console, analysis: AnalysisDocument,
                   durability_details: bool = True, details: bool = True,
                   more: str | None = None) -> None:
    """The durability verdict first when the run lost or damaged data, then the summary,
    the worst stalls with their ranked causes, the durability section of a run whose
    cuts lost nothing, and the recommendations. `durability_details`: the per-cut lines
    (`pglab run` printed them already, first). Without `details`, the short form, ending
    with `more` (the command that prints the rest) when it left something out."""
    section = analysis.durability
    left_out = False
    if section is not None and section.get("failed"):
        left_out = _print_durability(console, section, durability_details, details)
    summary = analysis.summary
    console.print(
        f"[bold]analysis[/bold]: median {summary.get('tps_median', 0):,.0f} TPS, "
        f"CV {summary.get('tps_cv', 0):.2f}, degraded {summary.get('degraded_pct', 0):.1f}% "
        f"of {summary.get('measured_seconds', 0)} s, {summary.get('stalls', 0)} stall(s)"
        + (f"; {summary['idle_seconds']} s idle left out (no client session at work)"
           if summary.get("idle_seconds") else "")
    )
    periodic = summary.get("periodic")
    if periodic:
        also = " like the checkpoints" if periodic.get("matches_checkpoints") else ""
        console.print(f"  stalls recur every {periodic['period_s']:g} s{also} "
                      f"({periodic['windows']} windows)")
    for note in analysis.missing:
        console.print(f"  [yellow]missing[/yellow] {escape(note)}")
    verdict = analysis.verdict
    if verdict is not None:
        console.print(f"  top cause [bold cyan]{verdict.get('cause')}[/bold cyan] "
                      f"({escape(verdict_basis(verdict))})", highlight=False)
    slowness = analysis.performance_verdict
    if slowness is not None and slowness is not verdict:
        console.print(f"  top cause of slowness [cyan]{slowness.get('cause')}[/cyan] "
                      f"({escape(verdict_basis(slowness))})", highlight=False)
    steady = analysis.steady_causes
    if steady:
        console.print("  [bold]held back over the whole run[/bold]")
        left_out = _print_causes(console, steady, "    ", details) or left_out
    stalls = sorted(analysis.stalls, key=lambda s: deficit(s) or 0,
                    reverse=True)
    shown = MAX_STALLS if details else SHORT_STALLS
    for stall in stalls[:shown]:
        console.print(f"  [bold]{escape(_stall_line(stall))}[/bold]", highlight=False)
        left_out = _print_causes(console, stall["causes"], "    ", details) or left_out
        statements = [st for st in stall.get("statements") or [] if isinstance(st, dict)]
        if details and statements:  # which statements its backends were in
            console.print("    [bold]statements[/bold]")
            for entry in statements:
                console.print(f"      - {escape(statement_line(entry))}", highlight=False)
        changes = [ch for ch in stall.get("plan_changes") or [] if isinstance(ch, dict)]
        for change in changes if details else []:  # both plans (the cause names the first)
            console.print(f"    {escape(change_line(change))}", highlight=False)
            for side in ("before", "after"):
                console.print(f"      {side}: " + escape(" / ".join(
                    str(line).strip() for line in change.get(side) or [])), highlight=False)
        left_out = left_out or bool((statements or changes) and not details)
    if len(stalls) > shown:
        left_out = True
        console.print(f"  ... {len(stalls) - shown} smaller stall(s)"
                      + (" in analysis.json" if details else ""))
    if section is not None and not section.get("failed"):
        left_out = _print_durability(console, section, durability_details, details) or left_out
    recommendations = analysis.recommendations
    if recommendations:
        console.print("[bold]recommendations[/bold]")
    for rec in recommendations if details else recommendations[:SHORT_RECOMMENDATIONS]:
        _print_recommendation(console, rec, details)
    if not details and len(recommendations) > SHORT_RECOMMENDATIONS:
        console.print(f"  ... {len(recommendations) - SHORT_RECOMMENDATIONS} more")
    if details:
        for held in analysis.withheld:
            console.print(f"  withheld [dim]{held.get('rule')}[/dim] "
                          f"({', '.join(held.get('because') or [])}): "
                          f"{escape(str(held.get('why')))}", highlight=False)
    # their effects and risks, and the advice withheld
    if not details and more and (left_out or recommendations or analysis.withheld):
        console.print(f"[dim]more: {escape(more)}[/dim]", highlight=False)
