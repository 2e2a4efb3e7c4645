"""The one switch between a comparison's outputs (`pglab compare --format`)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from pglab.compare import render_html, render_markdown, render_terminal
from pglab.compare.comparison import Comparison, as_dict


def render_text(comparison: Comparison, fmt: str) -> str:
    """The comparison as text in one of the formats of `pglab compare --format`."""
    if fmt == "json":
        return json.dumps(as_dict(comparison), indent=2) + "\n"
    if fmt == "html":
        return render_html.render(comparison)
    if fmt == "markdown":
        return render_markdown.render(comparison)
    console = Console(record=True, width=120, no_color=True, file=io.StringIO())
    render_terminal.render(console, comparison)
    return console.export_text()
