"""`pglab scenarios`, `probes` and `faults`: what the registries hold."""

from __future__ import annotations

from rich.table import Table

from pglab.commands.console import out
from pglab.errors import ExitCode


def scenarios() -> int:
    from pglab.scenario.builtin import builtin_names, load_builtin

    for name in builtin_names():
        loaded = load_builtin(name)
        out.print(f"[bold]{name}[/bold]  {loaded.scenario.description}")
        if loaded.scenario.expect:
            out.print(f"  expect: {loaded.scenario.expect}")
    return ExitCode.OK


def probes() -> int:
    from pglab.probes import PROBES

    table = Table(header_style="bold", box=None)
    for column in ("probe", "cadence", "what it records"):
        table.add_column(column)
    for probe in PROBES:
        cadence = "wait_sampling_hz" if probe.cadence == "fast" else "interval"
        opt_in = " (opt-in: telemetry.include)" if probe.opt_in else ""
        table.add_row(probe.name, cadence, probe.help + opt_in)
    out.print(table)
    return ExitCode.OK


def faults() -> int:
    from pglab.lab.fault_actions import ACTIONS

    table = Table(header_style="bold", box=None)
    for column in ("action", "nodes", "duration", "args (default)", "what it does"):
        table.add_column(column)
    for action in ACTIONS:
        args = ", ".join(f"{name}={default!r}" for name, (_t, default) in action.args.items())
        table.add_row(action.name, action.nodes, action.duration, args or "-", action.help)
    out.print(table)
    return ExitCode.OK
