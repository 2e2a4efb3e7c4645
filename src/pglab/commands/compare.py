"""`pglab compare`: BASE against each CONTENDER, with verdicts and --fail-if gates."""

from __future__ import annotations

from pathlib import Path

import click

from pglab.commands.console import err, out
from pglab.compare import comparison as cmp
from pglab.compare import render_terminal
from pglab.compare.groups import load_group
from pglab.compare.metrics import BY_NAME
from pglab.compare.render import render_text
from pglab.errors import BadInput, ExitCode, did_you_mean
from pglab.results.files import write_text


def compare(base: str, contenders: tuple[str, ...], fail_if: tuple[str, ...], fmt: str,
            output: Path | None, noise: float, metric_names: tuple[str, ...]) -> int:
    if not contenders:
        raise BadInput(f"compare {base}: expected at least one CONTENDER after BASE "
                       "(pglab compare BASE CONTENDER [CONTENDER...])")
    conditions = [cmp.parse_condition(text) for text in fail_if]
    for name in metric_names:
        if name not in BY_NAME:
            raise BadInput(f"--metric {name!r}: unknown metric{did_you_mean(name, BY_NAME)}; "
                           f"expected one of {', '.join(BY_NAME)}")
    names = list(dict.fromkeys([*metric_names, *(c.metric for c in conditions)])) \
        if metric_names else None
    result = cmp.compare(load_group(base), [load_group(c) for c in contenders],
                         noise / 100.0, metric_names=names)
    result.failed_conditions = cmp.failed_conditions(result, conditions)
    if fmt == "terminal" and output is None:
        render_terminal.render(out, result)  # piped, `out` has no width: whole lines
    elif output is None:
        click.echo(render_text(result, fmt), nl=False)
    else:
        write_text(output, render_text(result, fmt))
        err.print(f"wrote {output}")
    for failure in result.failed_conditions:
        click.echo(f"pglab: --fail-if {failure}", err=True)
    return ExitCode.RUN_FAILED if result.failed_conditions else ExitCode.OK
