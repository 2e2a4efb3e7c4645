"""A contender's on-CPU comparison (compare/profile_diff.py) in the terminal, Markdown
and HTML: per node and process kind its samples per 1000 transactions on both sides and
the functions whose share changed most; a line for each thing not compared."""

from __future__ import annotations

from html import escape

from rich.console import Console
from rich.markup import escape as markup_escape

from pglab.compare.profile_diff import TITLE, ProfileComparison

HEADERS = ("process", "function", "base", "contender", "change", "per 1000 tx")
# the flame graphs colour a frame that grew red, one that shrank blue (cyan: of the
# console's own styles)
_STYLE = {True: "red", False: "cyan"}


def terminal(console: Console, found: ProfileComparison | None) -> None:
    if found is None:
        return
    if found.kinds:
        console.print(f"  [bold]{TITLE}[/bold]", highlight=False)
    for kind in found.kinds:
        console.print(f"    {markup_escape(kind.line())}", highlight=False)
        for function in kind.functions:
            style = _STYLE[function.points > 0]
            console.print(f"      [{style}]{markup_escape(function.line())}[/{style}]",
                          highlight=False)
    for note in found.notes:
        console.print(f"  {markup_escape(note)}", style="dim", highlight=False)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rows(found: ProfileComparison) -> list[tuple[str, ...]]:
    """HEADERS' cells: a kind's row (its totals), then a row per function."""
    rows: list[tuple[str, ...]] = []
    for kind in found.kinds:
        rows.append((kind.who, "(all its samples)", "", "", f"{kind.change_pct:+.0f}%",
                     f"{kind.base_per_1000_tx:.1f} -> {kind.contender_per_1000_tx:.1f}"))
        rows += [("", f.function, f"{f.base_pct:.1f}%", f"{f.contender_pct:.1f}%",
                  f"{f.points:+.1f} pts",
                  f"{f.base_per_1000_tx:.1f} -> {f.contender_per_1000_tx:.1f}")
                 for f in kind.functions]
    return rows


def markdown(found: ProfileComparison | None) -> list[str]:
    if found is None:
        return []
    lines: list[str] = []
    if found.kinds:
        lines += [f"**{TITLE}**", "", "| " + " | ".join(HEADERS) + " |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += ["| " + " | ".join(_md(c) for c in row) + " |" for row in _rows(found)]
        lines.append("")
    lines += [f"_{_md(note)}_" for note in found.notes]
    return [*lines, ""] if found.notes else lines


def html(found: ProfileComparison | None) -> list[str]:
    if found is None:
        return []
    parts: list[str] = []
    if found.kinds:
        parts.append(f"<h3>{escape(TITLE)}</h3><table><tr>"
                     + "".join(f"<th>{escape(h)}</th>" for h in HEADERS) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                  for row in _rows(found)]
        parts.append("</table>")
    parts += [f"<p class='na'>{escape(note)}</p>" for note in found.notes]
    return parts
