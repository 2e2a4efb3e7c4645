"""`pglab report`: report.html for a run folder, or a study's report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from pglab.commands.console import err, out, warn_damaged
from pglab.errors import ExitCode, PglabError
from pglab.report.study import find_study, write_study_report


def report(target: str, open_it: bool, png_dir: Path | None, results: Path,
           as_json: bool = False) -> int:
    say = err if as_json else out  # with --json, stdout holds the JSON alone
    written: dict[str, Any] = {}
    path = Path(target)
    if path.is_dir():
        from pglab.report.model import build_model
        from pglab.report.page import render
        from pglab.results import files

        model = build_model(path)  # damaged optional files: left out, noted in the report
        for problem in model.run.damaged:
            warn_damaged(problem)
        out_path = path / files.REPORT
        files.write_text(out_path, render(model))
        say.print(f"report: {out_path} ({out_path.stat().st_size / 1024:,.0f} kB)")
        written["report"] = str(out_path)
        if png_dir is not None:
            from pglab.report.png import write_pngs

            written["png"] = []
            for png in write_pngs(model, png_dir):
                say.print(f"png: {png}")
                written["png"].append(str(png))
    else:
        if png_dir is not None:
            raise PglabError("--png: only for a run folder, not a study", ExitCode.BAD_INPUT)
        out_path = write_study_report(find_study(target, results))
        say.print(f"study report: {out_path}")
        written["study_report"] = str(out_path)
    if as_json:
        click.echo(json.dumps(written, indent=2))
    if open_it:
        import webbrowser

        webbrowser.open(out_path.resolve().as_uri())
    return ExitCode.OK
