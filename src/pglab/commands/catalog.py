"""`pglab scenarios`, `probes` and `faults`: what the registries hold."""

from __future__ import annotations

import json

import click

from pglab.commands.console import out
from pglab.errors import ExitCode
from pglab.terminal.tables import Column, print_table


def scenarios() -> int:
    from pglab.scenario.builtin import builtin_names, load_builtin

    for name in builtin_names():
        loaded = load_builtin(name)
        out.print(f"[bold]{name}[/bold]  {loaded.scenario.description}")
        if loaded.scenario.expect:
            out.print(f"  expect: {loaded.scenario.expect}")
    return ExitCode.OK


def probes(as_json: bool = False) -> int:
    from pglab.probes import PROBES

    if as_json:
        click.echo(json.dumps([{"name": probe.name, "cadence": probe.cadence,
                                "opt_in": probe.opt_in, "help": probe.help}
                               for probe in PROBES], indent=2))
        return ExitCode.OK
    rows = []
    for probe in PROBES:
        cadence = "wait_sampling_hz" if probe.cadence == "fast" else "interval"
        opt_in = " (opt-in: telemetry.include)" if probe.opt_in else ""
        rows.append((probe.name, cadence, probe.help + opt_in))
    print_table(out, (Column("probe"), Column("cadence"),
                      Column("what it records", prose=True)), rows)
    return ExitCode.OK


def faults(as_json: bool = False) -> int:
    from pglab.lab.fault_actions import ACTIONS

    if as_json:
        click.echo(json.dumps([{"name": action.name, "nodes": action.nodes,
                                "duration": action.duration,
                                "args": {name: {"type": kind.__name__, "default": default}
                                         for name, (kind, default) in action.args.items()},
                                "help": action.help} for action in ACTIONS], indent=2))
        return ExitCode.OK
    rows = []
    for action in ACTIONS:
        args = ", ".join(f"{name}={default!r}" for name, (_t, default) in action.args.items())
        rows.append((action.name, action.nodes, action.duration, args or "-", action.help))
    # the arguments stay whole only while they are short: one line per argument otherwise
    print_table(out, (Column("action"), Column("nodes"), Column("duration"),
                      Column("args (default)", prose=True),
                      Column("what it does", prose=True)), rows)
    return ExitCode.OK
