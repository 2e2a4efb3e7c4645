"""Many `python -m pglab` commands, each in a process of its own forked from one that has
imported pglab once.

A fresh `python -m pglab` spends most of half a second of CPU importing polars, pydantic,
psycopg and pglab before a command that refuses its input says one line; a test that
tries a hundred wrong inputs paid that a hundred times. Here a server process (this file
run as a script, with the environment the commands get) imports them once, then forks a
child per command: the child is a real process with real file descriptors (stdin
/dev/null, stdout and stderr files) that runs `pglab`'s `__main__` as `python -m pglab`
does, and ends as the interpreter ends it (a traceback, an exit code, a signal), so its
exit code and its output are the ones a user would see. What it cannot show is what
importing prints: the server fails if preloading printed anything. test_damaged_input.py
runs some of the same commands fresh too and checks that both agree.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str


def run_all(argvs: list[list[str]], env: dict[str, str], jobs: int = 2,
            timeout: float = 240) -> list[Ran]:
    """`python -m pglab *argv` for each argv, `jobs` at a time, in the environment `env`."""
    with tempfile.TemporaryDirectory(prefix="pglab-forked-") as folder:
        Path(folder, "cases.json").write_text(json.dumps(argvs))
        server = subprocess.run([sys.executable, __file__, folder, str(jobs)], env=env,
                                capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                timeout=timeout)
        assert (server.returncode, server.stdout, server.stderr) == (0, "", ""), (
            f"the forking server: exit {server.returncode}: {server.stdout}{server.stderr}")
        codes = json.loads(Path(folder, "codes.json").read_text())
        # read as subprocess.run(text=True) decodes a pipe: the locale's encoding, \r\n -> \n
        return [Ran(code, Path(folder, f"{i}.out").read_text(),
                    Path(folder, f"{i}.err").read_text()) for i, code in enumerate(codes)]


def _preload() -> None:
    """What the commands import: pglab's CLI and every module of pglab.commands (they
    import polars, pydantic and psycopg)."""
    import importlib
    import pkgutil

    import pglab.cli
    import pglab.commands

    for module in pkgutil.iter_modules(pglab.commands.__path__):
        importlib.import_module(f"pglab.commands.{module.name}")
    import pglab.analysis.analyze


def _serve(folder: Path, jobs: int) -> list[str] | None:
    """The cases' exit codes into folder/codes.json; in a forked child, its argv."""
    _preload()
    gc.freeze()
    cases: list[list[str]] = json.loads((folder / "cases.json").read_text())
    codes: list[int | None] = [None] * len(cases)
    running: dict[int, int] = {}

    def reap() -> None:
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)

    for index, argv in enumerate(cases):
        while len(running) >= jobs:
            reap()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            null = os.open(os.devnull, os.O_RDONLY)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            out = os.open(folder / f"{index}.out", flags, 0o600)
            err = os.open(folder / f"{index}.err", flags, 0o600)
            for fd, target in ((null, 0), (out, 1), (err, 2)):
                os.dup2(fd, target)
                os.close(fd)
            return argv
        running[pid] = index
    while running:
        reap()
    (folder / "codes.json").write_text(json.dumps(codes))
    return None


if __name__ == "__main__":
    child_argv = _serve(Path(sys.argv[1]), int(sys.argv[2]))
    if child_argv is not None:
        # as `python -m pglab ARGV` does, outside any handler of ours: the interpreter
        # prints what escapes and sets the exit code
        import runpy

        sys.argv = ["pglab", *child_argv]
        sys.path[0] = os.getcwd()
        runpy.run_module("pglab", run_name="__main__", alter_sys=True)
