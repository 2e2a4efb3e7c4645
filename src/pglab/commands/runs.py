"""`pglab run`, `demo`, `validate` and `tune`: scenarios in, runs out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pglab.commands.console import err, load_scenario, out, print_run_analysis
from pglab.errors import ExitCode
from pglab.scenario import LoadedScenario
from pglab.scenario.builtin import load_builtin

if TYPE_CHECKING:
    from pglab.results.folder import StoredRun

# The runner (the lab, the probes, the drivers, polars) is imported only once the
# scenario is read and valid: a scenario with a mistake is refused in a fraction of the
# time (the runner's imports are most of a second of CPU, several seconds on a busy
# machine).


def run_loaded(loaded: LoadedScenario, results: Path, keep: bool, pg_bin: str | None,
               repeats: int = 1) -> int:
    from pglab.runner import RunOptions, check_variants, run_scenario
    from pglab.terminal.run_display import TerminalUI, print_summary, print_sweep

    ui = TerminalUI(err)
    check_variants(loaded)  # every point, before anything starts or is printed
    desc = loaded.scenario.description
    err.print(f"[bold]{loaded.scenario.name}[/bold]" + (f": {desc}" if desc else ""))
    if len(loaded.variants) > 1:
        err.print(f"{len(loaded.variants)} runs: "
                  + "; ".join(v.label() for v in loaded.variants))

    def show(run: StoredRun) -> None:
        print_summary(out, run)
        print_run_analysis(run)

    # Rounds of every variant in turn (A B A B ...), not each variant's repeats together:
    # a drift of the machine (another load, a warming cache) then falls on every side.
    rounds: list[list[StoredRun]] = []
    for number in range(1, repeats + 1):
        if repeats > 1:
            err.print(f"round {number}/{repeats}")
        runs = run_scenario(loaded, RunOptions(results, keep, pg_bin), ui, on_run=show)
        print_sweep(out, runs)
        rounds.append(runs)
    if repeats > 1 and len(loaded.variants) > 1:
        _compare_variants(loaded, rounds)
    done = all(r.status == "completed" for runs in rounds for r in runs)
    return ExitCode.OK if done else ExitCode.RUN_FAILED


def _compare_variants(loaded: LoadedScenario, rounds: list[list[StoredRun]]) -> None:
    """The first variant's repeats against each other variant's: compare's statistics
    over measured run-to-run variation, not an assumed noise."""
    from pglab.commands.compare import compare

    sides = [",".join(str(runs[i].path) for runs in rounds if runs[i].status == "completed")
             for i in range(len(loaded.variants))]
    labels = [v.label() for v in loaded.variants]
    if not sides[0]:
        err.print(f"no compare: no run of {labels[0]} completed")
        return
    for label, side in zip(labels[1:], sides[1:], strict=True):
        if not side:
            err.print(f"no compare with {label}: none of its runs completed")
            continue
        out.print(f"compare: {labels[0]} (base) against {label}, {len(rounds)} rounds",
                  markup=False, highlight=False)
        compare(sides[0], (side,), (), "terminal", None, 10.0, ())


def run(scenario: str, overrides: tuple[str, ...], results: Path, keep: bool,
        pg_bin: str | None, repeats: int = 1) -> int:
    return run_loaded(load_scenario(scenario, overrides), results, keep, pg_bin, repeats)


def demo(duration: str | None, overrides: tuple[str, ...], results: Path,
         pg_bin: str | None) -> int:
    # '' is a duration too (refused by validation), not "the default"
    extra = list(overrides) + ([f"workload.duration='{duration}'"] if duration is not None
                               else [])
    return run_loaded(load_builtin("demo", extra), results, False, pg_bin)


def validate(scenario: str, overrides: tuple[str, ...], as_json: bool = False) -> int:
    """Everything `run` checks before it starts: the scenario's mistakes (exit 2), then
    what this machine lacks of its needs (exit 3: root, system parts), so that a scenario
    that validates here also starts here."""
    loaded = load_scenario(scenario, overrides)
    from pglab.commands.catalog import need_lines
    from pglab.runner import check_variants
    from pglab.scenario.needs import runs_needs

    check_variants(loaded)
    needs = runs_needs(v.scenario for v in loaded.variants)
    if as_json:
        click.echo(json.dumps({"scenario": loaded.scenario.name, "where": loaded.where,
                               "runs": [{"label": v.label(), "overrides": v.overrides}
                                        for v in loaded.variants],
                               "needs": [{"name": n.name, "why": list(n.why),
                                          "present": n.met()} for n in needs]},
                              indent=2, default=str))
        return ExitCode.OK
    out.print(f"{loaded.where}: ok, {len(loaded.variants)} run(s)", markup=False,
              highlight=False, soft_wrap=True)
    for variant in loaded.variants:
        if variant.overrides:
            out.print(f"  {variant.label()}", markup=False, soft_wrap=True)
    for line in need_lines(needs):
        out.print(f"needs: {line}", markup=False, highlight=False, soft_wrap=True)
    out.print("PostgreSQL parameters are checked by the server when the run starts.")
    return ExitCode.OK


def tune(scenario: str, overrides: tuple[str, ...], results: Path, pg_bin: str | None,
         repeats: int, top: int, noise: float, steps: int = 1, as_json: bool = False) -> int:
    loaded = load_scenario(scenario, overrides)
    from pglab.runner import RunOptions, check_variants
    from pglab.terminal.run_display import TerminalUI, print_summary
    from pglab.terminal.tune_result import print_tune
    from pglab.tune import tune as run_tune

    check_variants(loaded)
    result = run_tune(lambda extra: load_scenario(scenario, tuple(extra)), list(overrides),
                      RunOptions(results, False, pg_bin), TerminalUI(err), repeats, top,
                      noise / 100.0, on_run=lambda run: print_summary(err if as_json else out,
                                                                      run),
                      steps=steps)
    if as_json and result.path is not None:  # the tune file, written on every path
        click.echo(json.dumps({"path": str(result.path),
                               **json.loads(result.path.read_text())}, indent=2))
    else:
        print_tune(out, result)
    return ExitCode.OK if result.status == "completed" else ExitCode.RUN_FAILED
