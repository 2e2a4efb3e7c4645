"""User-facing errors and the exit codes they map to.

A PglabError is a mistake or a condition the user can act on: the CLI prints its message
on one line and exits with its code, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from pathlib import Path


class ExitCode(IntEnum):
    OK = 0
    RUN_FAILED = 1  # the server or the load generator failed during the run
    BAD_INPUT = 2  # the scenario, a setting, an option or a file given is wrong
    ENVIRONMENT = 3  # something this machine lacks: binaries, permissions, a writable dir
    INTERRUPTED = 130  # SIGINT or SIGTERM: cleaned up, folder marked interrupted


class PglabError(Exception):
    """An error whose message is meant for the user, as one line."""

    exit_code: ExitCode = ExitCode.RUN_FAILED

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(PglabError):
    exit_code = ExitCode.BAD_INPUT


class EnvironmentProblem(PglabError):
    exit_code = ExitCode.ENVIRONMENT


class Interrupted(BaseException):
    """Raised in the main thread when SIGINT or SIGTERM arrives.

    Not a PglabError, for the reason KeyboardInterrupt is no Exception: the signal can
    land anywhere, and the `except Exception` that keeps a failed probe, report or
    analysis from failing the run must not swallow a Ctrl-C.
    """

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"interrupted by {signal_name}")
        self.signal_name = signal_name
        # what was marked interrupted on the way out (a run folder, a tune file): the
        # last line names it, and says nothing of a run when none was being made
        self.marked: list[str] = []


def did_you_mean(word: str, choices: Iterable[str], prefix: str = "") -> str:
    """' (did you mean 'x'?)' for the closest of `choices`, or '' when none is close."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""


def expect_path(path: Path, kind: str, what: str, hint: str = "") -> None:
    """BadInput naming `path` and what it is, unless it is an existing `kind` ("file" or
    "folder"): "no such run folder", "a file, not a run folder", "a folder, not a
    scenario file"; `hint` (what is expected) follows in parentheses."""
    found = ("folder" if path.is_dir() else "file" if path.is_file()
             else "special file" if path.exists() else None)
    if found == kind:
        return
    tail = f" ({hint})" if hint else ""
    if found is None:
        raise BadInput(f"{path}: no such {what}{tail}")
    raise BadInput(f"{path}: a {found}, not a {what}{tail}")
