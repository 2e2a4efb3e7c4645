"""`pglab import`: a pgbench run made without pglab, as a results folder."""

from __future__ import annotations

import json
from pathlib import Path

import click

from pglab.commands.console import err, out
from pglab.errors import BadInput, ExitCode, expect_path
from pglab.importer import import_run
from pglab.results import files
from pglab.terminal.run_display import print_summary
from pglab.units import parse_duration


def import_(summary: Path, logs: tuple[Path, ...], name: str, results: Path, warmup: str,
            sampling_rate: float, this_host: bool, as_json: bool = False) -> int:
    expect_path(summary, "file", "pgbench or sysbench output file")
    for path in logs:
        expect_path(path, "file", "pgbench log file")
    try:
        warmup_s = int(parse_duration(warmup))
    except ValueError as exc:
        raise BadInput(f"--warmup {warmup!r}: {exc}") from None
    run = import_run(summary, list(logs), results, name, warmup_s, sampling_rate, this_host)
    if not as_json:
        print_summary(out, run)
    analysed = None
    if (run.path / files.CLIENT).is_file():  # a series: its stalls, as after `pglab run`
        from pglab.analysis.analyze import analyze_run
        from pglab.terminal.findings import print_findings

        try:
            analysis = analyze_run(run.path)
        except Exception as exc:  # the import stands; `pglab analyze` can try again
            err.print(f"[yellow]analysis failed[/yellow]: {type(exc).__name__}: {exc}",
                      highlight=False)
        else:
            analysed = run.path / files.ANALYSIS
            if not as_json:
                print_findings(out, analysis.document, details=False,
                               more=f"pglab analyze {run.path} --details")
    if as_json:
        from pglab.commands.folders import summary_json

        click.echo(json.dumps({**summary_json(run), "analysis": analysed and str(analysed)},
                              indent=2, default=str))
    return ExitCode.OK
