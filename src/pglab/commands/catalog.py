"""`pglab scenarios`, `probes` and `faults`: what the registries hold."""

from __future__ import annotations

import json
from typing import Any

import click

from pglab.commands.console import out
from pglab.errors import ExitCode
from pglab.scenario import LoadedScenario
from pglab.scenario.needs import ROOT, Need, fix_for, runs_needs
from pglab.terminal.tables import Column, print_table


def scenarios(name: str | None, details: bool, as_json: bool) -> int:
    """One line per built-in (what it needs, whether this machine has it); one built-in's
    story with NAME, every one's with --details; --json for programs."""
    from pglab.scenario.builtin import builtin_names, load_builtin

    names = [name] if name else builtin_names()
    loaded = [load_builtin(n) for n in names]
    if as_json:
        records = [_scenario_record(n, one) for n, one in zip(names, loaded, strict=True)]
        out.print_json(json.dumps(records[0] if name else records))
        return ExitCode.OK
    if name or details:
        for n, one in zip(names, loaded, strict=True):
            _print_story(n, one)
        return ExitCode.OK
    needs = {n: runs_needs(v.scenario for v in one.variants)
             for n, one in zip(names, loaded, strict=True)}
    rows = [("scenario", "needs", "here")] + [
        (n, ", ".join(x.name for x in found) or "-", _here(found))
        for n, found in needs.items()]
    widths = [max(len(row[i]) for row in rows) for i in (0, 1)]
    for row in rows:
        _line(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[2]}".rstrip())
    if fix := fix_for(x for found in needs.values() for x in found):
        _line(f"to have what is missing: {fix}")
    _line("`pglab scenarios NAME` tells a scenario's story and what a run shows (--details: "
          "all of them); `pglab run NAME` runs it.")
    return ExitCode.OK


def _line(text: str) -> None:
    """A line as it is: never wrapped or cut (names and commands are copied from it),
    no markup ([kernel] is a key, not a style)."""
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def _here(needs: tuple[Need, ...]) -> str:
    missing = [n.name for n in needs if not n.met()]
    return f"missing: {', '.join(missing)}" if missing else "yes"


def need_lines(needs: tuple[Need, ...]) -> list[str]:
    """A scenario's needs for a person: one line each, with the keys that ask for it and
    whether this machine has it."""
    from pglab.system_parts import PARTS

    lines = []
    for need in needs:
        if need.met():
            here = "yes"
        elif need.name == ROOT:
            here = "MISSING: run pglab as root"
        else:
            here = f"MISSING: {PARTS[need.name].install}"
        lines.append(f"{need.name} (for {', '.join(need.why)}): {here}")
    return lines


def _print_story(name: str, loaded: LoadedScenario) -> None:
    scenario = loaded.scenario
    out.print(f"[bold]{name}[/bold]")
    _line(f"  {scenario.description}")
    if scenario.expect:
        _line(f"  expect: {scenario.expect}")
    if len(loaded.variants) > 1:
        _line(f"  runs: {len(loaded.variants)} (" + "; ".join(
            v.label() for v in loaded.variants) + ")")
    needs = runs_needs(v.scenario for v in loaded.variants)
    for line in need_lines(needs) or ["nothing beyond pglab and PostgreSQL"]:
        _line(f"  needs: {line}")
    _line(f"  run: pglab run {name}")


def _scenario_record(name: str, loaded: LoadedScenario) -> dict[str, Any]:
    from pglab.system_parts import PARTS

    needs = runs_needs(v.scenario for v in loaded.variants)
    return {
        "name": name,
        "description": loaded.scenario.description,
        "expect": loaded.scenario.expect or None,
        "runs": len(loaded.variants),
        "needs": [{"name": n.name, "why": list(n.why), "present": n.met(),
                   "install": None if n.name == ROOT else PARTS[n.name].install}
                  for n in needs],
        "runnable_here": all(n.met() for n in needs),
    }


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
        click.echo(json.dumps([{"name": action.name, "nodes": action.kind.nodes,
                                "duration": action.duration,
                                "args": {name: {"type": kind.__name__, "default": default}
                                         for name, (kind, default) in action.args.items()},
                                "help": action.help} for action in ACTIONS], indent=2))
        return ExitCode.OK
    rows = []
    for action in ACTIONS:
        args = ", ".join(f"{name}={default!r}" for name, (_t, default) in action.args.items())
        rows.append((action.name, action.kind.nodes, action.duration, args or "-", action.help))
    # the arguments stay whole only while they are short: one line per argument otherwise
    print_table(out, (Column("action"), Column("nodes"), Column("duration"),
                      Column("args (default)", prose=True),
                      Column("what it does", prose=True)), rows)
    return ExitCode.OK
