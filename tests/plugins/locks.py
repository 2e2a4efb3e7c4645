"""The machine locks: what a test shares with the others, and what it needs alone.

Three flocks on machine-wide files, so that they hold across every pglab suite on the
machine, always taken in this order (no two tests wait on each other):
- the machine: every live test shares it; an `exclusive` test holds it alone, so that no
  live test of any suite overlaps it;
- the disk: every live test on the host's disk shares it; a `disk_exclusive` test holds it
  alone, the live tests in RAM going on beside it;
- the CPU: held alone by the one `cpu_exclusive` test running.
A waiting test that wants a lock alone takes that lock's gate first, so that a stream of
shared holders (the other workers, or other suites) cannot starve it. A favoured test
followed on its worker by another with the same needs keeps the locks: the other workers
are drained once for a chain of such tests, not once per test (each drain waits out
whatever test it is running, a tune of a minute, say).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Generator
from pathlib import Path

import pytest

from plugins.cpu_weight import SuiteCpu
from plugins.needs import ALONE, SHARED, Needs, needs_of

LOCK_DIR = Path(tempfile.gettempdir())
MACHINE, DISK, CPU = "pglab-tests.lock", "pglab-tests.disk", "pglab-tests.cpu"
FLOCK = {SHARED: fcntl.LOCK_SH, ALONE: fcntl.LOCK_EX}
# The workers start their first units at once: the exclusive chain, first in the queue,
# begins with its exclusive tests, which take the machine before the others' first shared
# holds (else they wait out the others' first tests, with the machine half used).
FIRST_SHARED_DELAY_S = 2.0


def lock_plan(needs: Needs) -> list[tuple[str, str]]:
    """The lock files a test of `needs` takes, in the one order, each SHARED or ALONE."""
    wanted = ((MACHINE, needs.machine), (DISK, needs.disk), (CPU, ALONE if needs.cpu else None))
    return [(name, how) for name, how in wanted if how is not None]


def keeps_locks(needs: Needs, following: Needs) -> bool:
    """Whether a test's locks stay held for the next test on its worker (a chain)."""
    return needs.favoured and following.locks() == needs.locks()


def waits_before_first_hold(needs: Needs, started: bool, any_alone: bool) -> bool:
    """A worker's first test waits FIRST_SHARED_DELAY_S before it shares the machine when
    some test of the session holds it alone."""
    return needs.machine == SHARED and not started and any_alone


def open_lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(PermissionError):  # made by another user's suite
        os.fchmod(fd, 0o666)  # the first suite to run may be root's or a user's
    return fd


def _take(path: Path, how: str) -> int:
    gate, lock = open_lock(path.with_name(path.name + "-gate")), open_lock(path)
    fcntl.flock(gate, FLOCK[how])
    fcntl.flock(lock, FLOCK[how])
    os.close(gate)  # closing drops the gate's lock
    return lock


class Locks:
    """A worker's held locks: the needs they serve and their file descriptors."""

    def __init__(self, cpu: SuiteCpu) -> None:
        self.cpu = cpu
        self.held: tuple[Needs, list[int]] | None = None
        self.started = False
        self.any_alone: bool | None = None  # some test of the session holds the machine alone

    def acquire(self, needs: Needs) -> None:
        fds = [_take(LOCK_DIR / name, how) for name, how in lock_plan(needs)]
        if needs.favoured:
            fds.append(self.cpu.favour())
        self.held = (needs, fds)

    def release(self) -> None:
        if self.held is None:
            return
        needs, fds = self.held
        self.held = None
        if needs.favoured:
            self.cpu.unfavour(fds.pop())
        for fd in reversed(fds):
            os.close(fd)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> Generator[None, object, object]:
        # Outside pytest-timeout's wrapper: waiting for the lock is not the test's time.
        needs = needs_of(item)
        if self.held is not None and self.held[0].locks() != needs.locks():
            self.release()
        if self.held is None:
            if self.any_alone is None:
                self.any_alone = any(needs_of(i).machine == ALONE for i in item.session.items)
            if waits_before_first_hold(needs, self.started, self.any_alone):
                time.sleep(FIRST_SHARED_DELAY_S)
            self.acquire(needs)
        self.started = True
        try:
            return (yield)
        finally:
            if not keeps_locks(needs, needs_of(nextitem)):
                self.release()


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Locks(SuiteCpu.of(config)), "pglab-locks")
