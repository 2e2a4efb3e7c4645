"""`pglab analyze`: stalls, causes and recommendations of one run."""

from __future__ import annotations

import json
from pathlib import Path

import click

from pglab.analysis.analyze import analyze_run
from pglab.commands.console import err, out
from pglab.errors import ExitCode, PglabError
from pglab.results import files
from pglab.terminal.findings import print_findings


def analyze(run_dir: Path, as_json: bool, details: bool = False) -> int:
    try:
        analysis = analyze_run(run_dir)
    except PglabError:
        raise
    except Exception as exc:  # a folder this analysis did not foresee: one line, not a trace
        raise PglabError(f"{run_dir}: analysis failed: {type(exc).__name__}: {exc}") from None
    if as_json:
        click.echo(json.dumps(analysis.document.to_json(), indent=2, default=str))
    else:
        print_findings(out, analysis.document, details=details,
                       more=f"pglab analyze {run_dir} --details")
        err.print(f"wrote {run_dir / files.ANALYSIS}")
    return ExitCode.OK
