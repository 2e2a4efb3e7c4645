"""Many `python -m pglab` commands, each in a process of its own forked from one that has
imported pglab once.

A fresh `python -m pglab` spends most of half a second of CPU importing polars, pydantic,
psycopg and pglab before a command that refuses its input says one line; a test that
tries a hundred wrong inputs paid that a hundred times. Here a server process (this file
run as a script, with the environment the commands get: rich reads COLUMNS when pglab's
consoles are made, at import) imports them once, then forks a child per command: the
child is a real process with real file descriptors (stdin /dev/null, stdout and stderr
files, never a terminal) that runs `pglab`'s `__main__` as `python -m pglab` does, and
ends as the interpreter ends it (a traceback, an exit code, a signal), so its exit code
and its output are the ones a user would see. What it cannot show is what importing
prints: the server fails if preloading printed anything. test_damaged_input.py runs
some of the same commands fresh too and checks that both agree.
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


class ForkedCli:
    """A server for commands in the environment `env`, `jobs` at a time."""

    def __init__(self, env: dict[str, str], jobs: int = 1) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="pglab-forked-")
        self.folder = Path(self._folder.name)
        self._errors = (self.folder / "server.err").open("w+")
        self._server = subprocess.Popen([sys.executable, __file__, str(self.folder), str(jobs)],
                                        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._errors, text=True)
        self._sent = 0

    def send(self, argv: list[str]) -> int:
        assert self._server.stdin is not None
        self._server.stdin.write(json.dumps(argv) + "\n")
        self._server.stdin.flush()
        self._sent += 1
        return self._sent - 1

    def receive(self) -> tuple[int, Ran]:
        """The next command to end: its number and what it did."""
        assert self._server.stdout is not None
        line = self._server.stdout.readline()
        assert line, f"the forking server ended: {self._said()}"
        index, code = map(int, line.split())
        # read as subprocess.run(text=True) decodes a pipe: the locale's encoding, \r\n -> \n
        out, err = (self.folder / f"{index}.out", self.folder / f"{index}.err")
        ran = Ran(code, out.read_text(), err.read_text())
        out.unlink()
        err.unlink()
        return index, ran

    def run(self, *argv: str) -> Ran:
        self.send(list(argv))
        return self.receive()[1]

    def close(self) -> None:
        assert self._server.stdin is not None
        self._server.stdin.close()
        code = self._server.wait(timeout=60)
        said = self._said()
        self._errors.close()
        self._folder.cleanup()
        assert (code, said) == (0, ""), f"the forking server: exit {code}: {said}"

    def _said(self) -> str:
        self._errors.seek(0)
        return self._errors.read()


def run_all(argvs: list[list[str]], env: dict[str, str], jobs: int = 2) -> list[Ran]:
    """`python -m pglab *argv` for each argv, `jobs` at a time, in the environment `env`."""
    server = ForkedCli(env, jobs)
    try:
        for argv in argvs:
            server.send(argv)
        assert server._server.stdin is not None
        server._server.stdin.close()  # the server forks the last, then waits for them all
        done = dict(server.receive() for _ in argvs)
    finally:
        server.close()
    return [done[index] for index in range(len(argvs))]


def _preload() -> None:
    """What the commands import: pglab's CLI, every module of pglab.commands (they import
    polars, pydantic and psycopg) and the analysis."""
    import importlib
    import pkgutil

    import pglab.analysis.analyze
    import pglab.cli
    import pglab.commands

    for module in pkgutil.iter_modules(pglab.commands.__path__):
        importlib.import_module(f"pglab.commands.{module.name}")


def _serve(folder: Path, jobs: int) -> list[str] | None:
    """Each line of stdin (an argv) run in a child, `jobs` at a time; "NUMBER CODE" on
    stdout as each ends. In a forked child: its argv."""
    # The requests are read from a copy of stdin, and stdin is /dev/null: sys.stdin, never
    # read, holds no request ahead for a child that reads it.
    requests = os.fdopen(os.dup(0), "r")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _preload()
    # Out of the collector's sight: a child whose collections touch every object copies
    # all the pages it shares with the server (as much CPU as importing again).
    gc.freeze()
    running: dict[int, int] = {}

    def reap() -> None:
        pid, status = os.wait()
        print(running.pop(pid), os.waitstatus_to_exitcode(status), flush=True)

    for index, line in enumerate(requests):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            out = os.open(folder / f"{index}.out", flags, 0o600)
            err = os.open(folder / f"{index}.err", flags, 0o600)
            for fd, target in ((out, 1), (err, 2)):
                os.dup2(fd, target)
                os.close(fd)
            argv: list[str] = json.loads(line)
            return argv
        running[pid] = index
        while len(running) >= jobs:
            reap()
    while running:
        reap()
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
