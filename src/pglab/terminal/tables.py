"""Tables whose values a user copies stay whole at any width.

A rich table narrower than its content cuts cells (`checkpoi…`) or folds them over
lines: an id, a path, a command or an accepted value cut that way is useless. Here a
column is either whole (ids, names, values, numbers: one line each, never cut) or prose
(wrapped into what the whole columns leave). When even that does not fit the console, a
block per row instead: `header: value` lines, each whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

PROSE_MIN = 20  # columns a prose column needs to stay readable when wrapped
_PADDING = 2  # a column's padding in a box-less table: one space either side


@dataclass(frozen=True)
class Column:
    header: str
    prose: bool = False  # wraps at spaces; every other column keeps each value whole
    justify: Literal["left", "right"] = "left"


def _natural(column: Column, values: list[str]) -> int:
    return max([cell_len(column.header), *(cell_len(line) for v in values
                                            for line in v.splitlines() or [""])])


def _rstrip(line: list[Segment]) -> list[Segment]:
    while line and not line[-1].text.rstrip():
        line = line[:-1]
    if line:
        last = line[-1]
        line = [*line[:-1], Segment(last.text.rstrip(), last.style, last.control)]
    return line


def fits(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> bool:
    """Whether the whole columns at their widest and the prose ones at PROSE_MIN fit."""
    needed = 0
    for index, column in enumerate(columns):
        natural = _natural(column, [row[index] for row in rows])
        needed += (min(natural, PROSE_MIN) if column.prose else natural) + _PADDING
    return needed <= console.width


def print_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]],
                title: str | None = None) -> None:
    """The rows as a table when its whole columns fit, else as a block per row. Cells
    are plain text (no markup)."""
    if title is not None:
        console.print(Text(title, style="bold"))
    if fits(console, columns, rows):
        table = Table(header_style="bold", box=None)
        for column in columns:
            table.add_column(column.header, justify=column.justify, no_wrap=not column.prose,
                             overflow="fold" if column.prose else "ellipsis")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        # without the padding to the table's width: a wide prose cell would leave every
        # other line of a file or a pipe with a tail of spaces
        for line in console.render_lines(table, console.options, new_lines=False):
            console.print(Segments([*_rstrip(line), Segment.line()]))
        return
    for row in rows:
        cells = [(column.header, cell) for column, cell in zip(columns, row, strict=True)
                 if cell]
        # a row that continues the one above (an empty first cell) is indented under it
        indent = "  " if row and not row[0] else ""
        for position, (header, cell) in enumerate(cells):
            key = Text(f"{indent}{'  ' if position else ''}{header}: ",
                       style="bold" if position == 0 else "dim")
            console.print(key + Text(cell))
