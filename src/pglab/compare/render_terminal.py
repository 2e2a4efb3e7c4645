"""A comparison in the terminal (rich tables; honours NO_COLOR)."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from pglab.compare import cells, render_profile, render_statements
from pglab.compare.comparison import Comparison

_ANY = 1_000_000  # columns: to measure the table's natural width
_STYLE = {"better": "green", "worse": "red", "no significant difference": "dim"}


def render(console: Console, comparison: Comparison) -> None:
    base = comparison.base
    console.print(f"[bold]base[/bold] {base.label}", highlight=False)
    for contender in comparison.contenders:
        console.print(f"[bold]contender[/bold] {contender.group.label}", highlight=False)
        for warning in contender.warnings:
            style = "bold red" if warning.startswith("NOT COMPARABLE") else "yellow"
            console.print(f"  [{style}]! {warning}[/{style}]", highlight=False)
        table = Table(header_style="bold", box=None, pad_edge=False)
        for index, header in enumerate(cells.HEADERS):
            table.add_column(header, justify="right" if index in cells.NUMERIC else "left")
        rows = [cells.row(result, short_na=True) for result in contender.metrics]
        for result, row in zip(contender.metrics, rows, strict=True):
            style = _STYLE.get(result.verdict, "")
            table.add_row(*row[:-1], f"[{style}]{row[-1]}[/{style}]" if style else row[-1])
        natural = Measurement.get(console, console.options.update(width=_ANY), table).maximum
        if natural <= console.width:
            console.print(table)
        else:  # a narrow terminal would cut or split the figures: a line per metric
            for result, (metric, stat, base_value, value, delta, ci, verdict) in zip(
                    contender.metrics, rows, strict=True):
                style = _STYLE.get(result.verdict, "")
                console.print(f"  [bold]{metric}[/bold] ({stat}): {base_value} -> {value}, "
                              f"{delta}"
                              + (f" {ci}" if ci else "") + ": "
                              + (f"[{style}]{verdict}[/{style}]" if style else verdict),
                              highlight=False)
        for note in cells.notes(contender.metrics):
            console.print(f"  {note}", style="dim", highlight=False)
        spreads = [f"{r.metric.title}: {cells.spread(r)}" for r in contender.metrics
                   if cells.spread(r) and r.metric.name == "tps"]
        for line in spreads:
            console.print(f"  {line}", highlight=False)
        render_statements.terminal(console, contender.statements)
        render_profile.terminal(console, contender.profile)
        if contender.env.rows:
            console.print("  [bold]environment differences[/bold] (base -> contender)")
            for category, key, a, b in contender.env.rows:
                console.print(f"    {category}.{key}: {a} -> {b}", highlight=False)
        else:
            console.print("  environment: same host, versions, settings and scenario")
    console.print(cells.footer(comparison), style="dim", highlight=False)
    for failure in comparison.failed_conditions:
        console.print(f"[bold red]FAIL[/bold red] {failure}", highlight=False)
