"""`pglab show` and `pglab ls`: what is in run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from pglab.commands.console import err, out, warn_damaged
from pglab.errors import ExitCode, PglabError, expect_path
from pglab.results.folder import RunFilter, StoredRun, find_runs, load_run
from pglab.terminal.tables import Column, print_table


def summary_json(run: StoredRun) -> dict[str, Any]:
    manifest = run.manifest
    return {
        "path": str(run.path),
        "run_id": manifest.run_id,
        "scenario": manifest.scenario_name,
        "status": run.status,
        "reason": run.reason,
        "started_at": manifest.started_at,
        "ended_at": manifest.ended_at,
        "variant": manifest.variant,
        "clients": manifest.clients,
        "connection_path": (manifest.workload or {}).get("path"),
        "server_version": manifest.node().get("server_version"),
        "measured": manifest.results.get("measured"),
        "source": manifest.source_kind,
    }


def _show_json(run: StoredRun) -> dict[str, Any]:
    from pglab.terminal.telemetry_summary import summarize

    info = summary_json(run)
    telemetry = summarize(run)
    info["telemetry"] = telemetry.to_dict() if telemetry is not None else None
    info["damaged"] = run.damaged  # the files left out, each as its one-line error
    return info


def show(run_dir: Path, as_json: bool) -> int:
    # a damaged Parquet file: a warning, and the rest of the run shown (docs/RESULTS.md)
    run = load_run(run_dir, on_damaged=warn_damaged)
    if as_json:
        click.echo(json.dumps(_show_json(run), indent=2))
    else:
        from pglab.terminal.run_display import print_summary

        print_summary(out, run)
        source = run.manifest.source or {}
        if run.manifest.source_kind == "import":
            out.print(f"  imported ({source.get('from')}) from {source.get('summary')}"
                      f" on {source.get('imported_at')}", highlight=False)
    return ExitCode.OK


def _source(run: StoredRun) -> str:
    return "imported" if run.manifest.source_kind == "import" else "pglab"


def list_runs(root: Path, as_json: bool, scenario_glob: str | None, statuses: tuple[str, ...],
              since: str | None, until: str | None) -> int:
    expect_path(root, "folder", "folder of runs")
    keep = RunFilter.parse(scenario_glob, statuses, since, until)
    runs = []
    for path in find_runs(root):
        try:
            run = load_run(path)
        except PglabError as exc:
            err.print(f"[yellow]skipped[/yellow] {exc}")
            continue
        if keep.matches(run):
            runs.append(run)
    if as_json:
        click.echo(json.dumps([summary_json(r) for r in runs], indent=2))
        return ExitCode.OK
    rows = []
    for run in runs:
        info = summary_json(run)
        measured = info["measured"] or {}
        rows.append((
            str(run.path.relative_to(root) if run.path != root else run.path.name),
            str(info["scenario"]), run.status, _source(run),
            str(info["clients"] if not isinstance(info["clients"], list)
                else ",".join(map(str, info["clients"]))),
            f"{measured['tps']:,.1f}" if measured.get("tps") is not None else "-",
            f"{measured['lat_p99_ms']:.2f}" if measured.get("lat_p99_ms") is not None else "-",
            str(info["started_at"] or "-"),
        ))
    if rows:
        print_table(out, [Column(name, justify="right" if name in ("clients", "TPS", "p99 ms")
                                 else "left")
                          for name in ("run", "scenario", "status", "source", "clients", "TPS",
                                       "p99 ms", "started")], rows)
    if not runs:
        err.print(f"no runs under {root}" + (" matching the filters" if keep.active else ""))
    return ExitCode.OK
