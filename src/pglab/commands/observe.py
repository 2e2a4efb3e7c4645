"""`pglab observe` for the terminal: warnings as they come, the summary and analysis at the end."""

from __future__ import annotations

from pathlib import Path

import click

from pglab.errors import BadInput, ExitCode


class TerminalUI:
    # click.echo, not rich: a warning is one line, whatever the terminal's width
    def status(self, message: str) -> None:
        click.echo(message, err=True)

    def warn(self, message: str) -> None:
        click.echo(f"pglab: warning: {message}", err=True)


def observe(dsn: str, standbys: tuple[str, ...], duration: str | None,
            exporters: tuple[str, ...], log: str | None, results: Path, name: str,
            interval: str, wait_hz: int, log_prefix: str | None = None,
            log_format: str | None = None, profile_hz: int | None = None) -> int:
    from pglab.commands.logs import line_prefix
    from pglab.commands.logs import log_format as checked_format
    from pglab.serverlog.decoders import STAMPED_FORMATS

    # the log options first, before the observer's modules are loaded: a mistake is one
    # line at once
    log_format = checked_format(log_format, "--log-format")
    if log_prefix is not None:
        if log is None:
            raise BadInput("--log-prefix: it is the prefix of --log's lines; give --log too")
        # a bad prefix: one line, before anything (without a time: syslog only)
        line_prefix(log_prefix, "--log-prefix", need_time=log_format not in STAMPED_FORMATS)
    if log_format is not None and log is None:
        raise BadInput("--log-format: it is the format of --log; give --log too")

    from pglab.commands.console import out, print_run_analysis
    from pglab.observe.run import ObserveOptions, observe
    from pglab.terminal.run_display import print_summary
    from pglab.units import parse_duration

    def seconds(option: str, text: str) -> float:
        try:
            return float(parse_duration(text))
        except ValueError as exc:
            raise BadInput(f"{option} {text!r}: {exc}") from None

    options = ObserveOptions(
        dsn=dsn, standbys=standbys,
        duration_s=seconds("--duration", duration) if duration else None,
        exporters=exporters, log=log, log_prefix=log_prefix, log_format=log_format,
        results_root=results, name=name,
        interval_s=seconds("--interval", interval), wait_hz=wait_hz, profile_hz=profile_hz)
    if options.interval_s < 0.1:
        raise BadInput(f"--interval {interval!r}: at least 0.1 s")
    run = observe(options, TerminalUI())
    print_summary(out, run)
    for node, cost in (run.manifest.telemetry or {}).get("observer_per_node", {}).items():
        cpu = cost.get("server_cpu_pct_of_core")
        out.print(f"  observer on {node}: {cost.get('queries_per_s')} queries/s"
                  + (f", {cpu:.2f}% of one core" if cpu is not None else
                     ", server CPU not measurable (remote)"), highlight=False)
    print_run_analysis(run)
    return ExitCode.OK
