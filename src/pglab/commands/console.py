"""What the commands share: the two consoles, loading a scenario, printing findings."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.errors import MarkupError
from rich.text import Text

from pglab.processes import output_closed

if TYPE_CHECKING:
    from pglab.results.folder import StoredRun
    from pglab.scenario import LoadedScenario


# Columns of a console that is not a terminal: wider than any line pglab prints, so that
# a pipe or a file gets whole lines and tables at their natural width.
UNBOUNDED = 10_000


# The styles pglab's own lines are marked up with. Any other [...] in a line is text (a
# path, a value, a message): rich would print "results/[test]/x" as "results//x" and stop
# on the "[/x]" of "results/r[/x]" with a MarkupError.
_OWN_STYLES = frozenset({"bold", "dim", "cyan", "red", "green", "yellow", "white",
                         "bold red", "bold cyan"})
_TAG = re.compile(r"(?<!\\)\[(/?)([^\[\]]*)\]")


def own_markup_only(text: str) -> str:
    """`text` with every [...] that is not one of pglab's own styles escaped."""
    def tag(match: re.Match[str]) -> str:
        own = match.group(2) in _OWN_STYLES or (match.group(1) and not match.group(2))
        return match.group(0) if own else "\\" + match.group(0)

    return _TAG.sub(tag, text)


class PglabConsole(Console):
    """The console every command prints with. A line is one line: print never breaks it
    (soft wrap; a terminal folds what is wider than itself, and a copy of it is still one
    line), so that no id, path or command is ever split; not a terminal (a pipe, a file)
    and no COLUMNS: no width at all, instead of rich's 80 columns. Markup only of pglab's
    own styles, and a reader that goes away ends pglab as SIGPIPE would."""

    def __init__(self, stderr: bool = False) -> None:
        super().__init__(stderr=stderr, soft_wrap=True)
        if not self.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
            self.width = UNBOUNDED

    def render_str(self, text: str, **kwargs: Any) -> Text:
        marked = own_markup_only(text) if kwargs.get("markup") is not False \
            and self._markup else text
        try:
            return super().render_str(marked, **kwargs)
        except MarkupError:  # a closing tag of pglab's own styles inside a path
            return super().render_str(text, **{**kwargs, "markup": False})

    def on_broken_pipe(self) -> None:
        """Rich's own answer is SystemExit(1), which failed a run as an internal error and
        left its lab to a half cleanup: drop what else this console would write (its
        descriptor onto /dev/null, where later writes of anyone land too) and stop the
        way SIGPIPE stops a Unix tool."""
        self.quiet = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.file.fileno())
            os.close(devnull)
        output_closed()


out = PglabConsole()
err = PglabConsole(stderr=True)


def warn_damaged(problem: object) -> None:
    """A damaged optional file of a run folder, for the commands that show the rest
    (`load_run(..., on_damaged=warn_damaged)`): one line, as errors are."""
    import click

    click.echo(f"pglab: warning: {problem}; left out", err=True)


def load_scenario(source: str, overrides: tuple[str, ...]) -> LoadedScenario:
    """A scenario file (a path or a name ending in .toml) or a built-in scenario's name."""
    from pglab.scenario import load
    from pglab.scenario.builtin import load_builtin

    path = Path(source)
    if path.exists() or source.endswith(".toml") or "/" in source:
        return load(path, list(overrides))
    return load_builtin(source, list(overrides))


def print_run_analysis(run: StoredRun) -> None:
    """The findings the runner wrote at the end of the run, if it could."""
    from pglab.errors import BadInput
    from pglab.terminal.findings import print_findings

    error = run.manifest.analysis_error
    if error:
        err.print(f"[yellow]analysis failed[/yellow]: {error}", highlight=False)
        return
    try:
        analysis = run.analysis()
    except BadInput as exc:
        err.print(f"[yellow]analysis unreadable[/yellow]: {exc}", highlight=False)
        return
    if analysis is not None:  # the run's summary printed the cuts' lines first already
        print_findings(out, analysis, durability_details=False, details=False,
                       more=f"pglab analyze {run.path} --details")
