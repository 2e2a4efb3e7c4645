"""A comparison's statements (compare/statements.py) in the terminal, Markdown and HTML:
one block per statement, its rows in the cells the run's rows use."""

from __future__ import annotations

from html import escape

from rich.console import Console
from rich.markup import escape as markup_escape

from pglab.compare import cells
from pglab.compare.statements import StatementResult, StatementsComparison, short_text

HEADERS = ("statement", "figure", "base", "contender", "delta", "95% CI of delta", "verdict")
TITLE = "statements (pg_stat_statements), the largest by time on either side"
NOTE = ("each statement's figure is the mean over the pg_stat_statements reads of the "
        "measured window (mean ms: of each read's time per call)")
_STYLE = {"better": "green", "worse": "red", "no significant difference": "dim"}


def _label(statement: StatementResult) -> str:
    ids = {q for q in (statement.base_queryid, statement.contender_queryid) if q}
    where = ("" if statement.base_queryid and statement.contender_queryid
             else " (base only)" if statement.base_queryid else " (contender only)")
    return f"{short_text(statement.text)}{where} [queryid {'/'.join(sorted(ids))}]" \
        if ids else short_text(statement.text)


def rows(statement: StatementResult) -> list[tuple[str, ...]]:
    """HEADERS' cells: the statement on its first row only."""
    out: list[tuple[str, ...]] = []
    for index, result in enumerate(statement.metrics):
        title, _stat, base, contender, delta, interval, verdict = cells.row(result)
        out.append((_label(statement) if index == 0 else "", title, base, contender, delta,
                    interval, verdict))
    return out


def plan_rows(statement: StatementResult) -> list[tuple[str, str]]:
    """The two plans side by side, a node a row (blank where one side has fewer)."""
    if statement.plans is None:
        return []
    base, contender = statement.plans
    return [(base[i] if i < len(base) else "", contender[i] if i < len(contender) else "")
            for i in range(max(len(base), len(contender)))]


def _more(found: StatementsComparison) -> str:
    return f"and {found.more} smaller statements" if found.more else ""


def terminal(console: Console, found: StatementsComparison | None) -> None:
    if found is None:
        return
    if found.missing:
        console.print(f"  {markup_escape(found.missing)}", style="dim", highlight=False)
        return
    if not found.statements:
        console.print("  statements: none ran in the measured window", style="dim")
        return
    console.print(f"  [bold]{TITLE}[/bold]", highlight=False)
    for statement in found.statements:
        table = rows(statement)
        # a statement's text and its [queryid ...] are text, never markup
        console.print(f"    {markup_escape(table[0][0])}", highlight=False)
        for (_, title, base, contender, delta, interval, verdict), result in zip(
                table, statement.metrics, strict=True):
            style = _STYLE.get(result.verdict, "")
            shown = f"[{style}]{verdict}[/{style}]" if style else verdict
            console.print(f"      {title}: {base} -> {contender}, {delta}"
                          + (f" {interval}" if interval else "") + f": {shown}",
                          highlight=False)
        pairs = plan_rows(statement)
        if pairs:
            width = max(len(b) for b, _ in pairs)
            console.print("      [bold]plan changed[/bold] (base | contender)")
            for left, right in pairs:
                console.print(markup_escape(f"        {left.ljust(width)} | {right}"),
                              highlight=False)
    if found.more:
        console.print(f"    {_more(found)}", style="dim", highlight=False)
    console.print(f"    {NOTE}", style="dim", highlight=False)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(found: StatementsComparison | None) -> list[str]:
    if found is None:
        return []
    if found.missing:
        return [f"_{_md(found.missing)}_", ""]
    if not found.statements:
        return ["_statements: none ran in the measured window_", ""]
    lines = [f"<details><summary>{TITLE}</summary>", "",
             "| " + " | ".join(HEADERS) + " |",
             "|" + "".join("---:|" if i in cells.NUMERIC else "---|"
                           for i in range(len(HEADERS)))]
    for statement in found.statements:
        lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows(statement)]
    for statement in found.statements:
        pairs = plan_rows(statement)
        if pairs:
            lines += ["", f"**plan changed**: `{_md(short_text(statement.text))}`", "",
                      "| base plan | contender plan |", "|---|---|"]
            lines += [f"| `{_md(b) or ' '}` | `{_md(c) or ' '}` |" for b, c in pairs]
    lines += ["", f"_{NOTE}{'; ' + _more(found) if found.more else ''}_", "", "</details>",
              ""]
    return lines


def html(found: StatementsComparison | None) -> list[str]:
    if found is None:
        return []
    if found.missing:
        return [f"<p class='na'>{escape(found.missing)}</p>"]
    if not found.statements:
        return ["<p class='na'>statements: none ran in the measured window</p>"]
    parts = [f"<h3>{escape(TITLE)}</h3><table><tr>"
             + "".join(f"<th>{escape(h)}</th>" for h in HEADERS) + "</tr>"]
    for statement in found.statements:
        for row, result in zip(rows(statement), statement.metrics, strict=True):
            css = {"better": "better", "worse": "worse", "n/a": "na"}.get(result.verdict,
                                                                           "same")
            parts.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row[:-1])
                         + f"<td class='{css}'>{escape(row[-1])}</td></tr>")
    parts.append("</table>")
    for statement in found.statements:
        if statement.plans is not None:
            base, contender = statement.plans
            parts.append(f"<h4>plan changed: <code>{escape(short_text(statement.text))}"
                         "</code></h4><table><tr><th>base plan</th><th>contender plan</th>"
                         f"</tr><tr><td style='text-align:left'><pre>"
                         f"{escape(chr(10).join(base))}</pre></td><td style='text-align:left'>"
                         f"<pre>{escape(chr(10).join(contender))}</pre></td></tr></table>")
    parts.append(f"<p class='na'>{escape(NOTE)}{escape('; ' + _more(found)) if found.more else ''}"
                 "</p>")
    return parts
