"""The one switch between a comparison's outputs (`pglab compare --format`)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from pglab.compare import render_html, render_markdown, render_terminal
from pglab.compare.comparison import Comparison, as_dict

UNBOUNDED = 10_000  # columns: wider than any line a comparison prints


def render_text(comparison: Comparison, fmt: str) -> str:
    """The comparison as text in one of the formats of `pglab compare --format`."""
    if fmt == "json":
        return json.dumps(as_dict(comparison), indent=2) + "\n"
    if fmt == "html":
        return render_html.render(comparison)
    if fmt == "markdown":
        return render_markdown.render(comparison)
    # no width: a file gets each cell and line whole, as a pipe does
    console = Console(record=True, width=UNBOUNDED, soft_wrap=True, no_color=True,
                      file=io.StringIO())
    render_terminal.render(console, comparison)
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())
