"""CPU weight: the rest of the suite beside a favoured test (cgroup v1 cpu.shares).

An exclusive, disk_exclusive, cpu_exclusive or cpu_light test is favoured: the other
workers go on beside it at a low CPU weight, so they get the CPU it leaves and a fifth of
what it wants. Their disk writes are not held back, which is why a test whose timing they
change is on the disk chain (tests/README.md). The controller puts itself in
`<its cgroup>/pglabtests-<pid>/shared` of the cpu and cpuacct hierarchies before the
workers start (they inherit it, and pglab places a lab's cgroups under its own); the worker
running a favoured test moves to `.../exclusive` and turns every suite's `shared` group
down (other pglab suites on the machine too), and the last favoured test to end turns them
back up. Without root or the v1 cpu controller nothing moves.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil
import pytest

from pglab.lab.cgroups import detect_cgroups, own_cgroup

SUITE_CGROUP_ENV = "PGLAB_TEST_CPU_CGROUPS"  # the suite's group in each hierarchy, ":"-joined
SUITE_PREFIX = "pglabtests-"  # not "pglab-": pglab's own groups are named so, and reaped
# Held shared by each favoured test while it runs: the last one out puts the weights back.
FAVOUR_LOCK = Path(tempfile.gettempdir()) / "pglab-tests.favour"
# 256/1280: a fifth of a contended CPU. At 16 (1.5%) a shared test starved: a sysbench
# run beside connection-path had a second under 20 TPS, where it does hundreds.
FULL_SHARES, BESIDE_SHARES = 1024, 256
# Real-time CPU time for the suite's groups (cpu.rt_runtime_us, microseconds a second): a
# new group has none, so no process in it may run at SCHED_FIFO, and pglab's delaying wire
# asks for that, as it gets it outside any group, so that a link's round trip holds on a
# busy machine (at normal priority a 2 ms link's p99 reached 23 ms).
SUITE_RT_US, GROUP_RT_US = 200_000, 100_000
_KEY = pytest.StashKey["SuiteCpu"]()


def hierarchies(version: int | None, mounts: Mapping[str, Path],
                own: Callable[[str], str]) -> list[Path]:
    """This process's cgroup in the v1 hierarchies of cpu and cpuacct (one when
    co-mounted); none on v2."""
    if version != 1:
        return []
    found: list[Path] = []
    for controller in ("cpu", "cpuacct"):
        if controller not in mounts:  # cpuacct is not one pglab needs
            continue
        path = mounts[controller] / own(controller).lstrip("/")
        if path not in found:
            found.append(path)
    return found


def stale(name: str, prefix: str, alive: Callable[[int], bool]) -> bool:
    """A suite's dir or group (prefix + the controller's pid) whose controller is gone."""
    owner = name.removeprefix(prefix)
    return name.startswith(prefix) and owner.isdigit() and not alive(int(owner))


def shares_after(favoured_running: bool) -> int:
    """The weight of every suite's shared group: low while any favoured test runs."""
    return BESIDE_SHARES if favoured_running else FULL_SHARES


def _open_favour() -> int:
    fd = os.open(FAVOUR_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(PermissionError):  # made by another user's suite
        os.fchmod(fd, 0o666)
    return fd


class SuiteCpu:
    """This suite's cgroups (shared, exclusive) and the weights of the shared ones."""

    def __init__(self) -> None:
        self.suites: list[Path] = []

    @staticmethod
    def of(config: pytest.Config) -> SuiteCpu:
        if _KEY not in config.stash:
            config.stash[_KEY] = SuiteCpu()
        return config.stash[_KEY]

    def make(self) -> None:
        """The controller's part: its suite's groups, itself in `shared` (root, v1 only)."""
        support = detect_cgroups()
        parents = (hierarchies(support.version, support.mounts, own_cgroup)
                   if os.geteuid() == 0 else [])
        if not any((parent / "cpu.shares").exists() for parent in parents):
            return
        for parent in parents:
            for found in parent.glob(f"{SUITE_PREFIX}*"):  # of a suite that was killed
                if stale(found.name, SUITE_PREFIX, psutil.pid_exists):
                    self._remove(found)
            suite = parent / f"{SUITE_PREFIX}{os.getpid()}"
            for name in ("shared", "exclusive"):
                (suite / name).mkdir(parents=True, exist_ok=True)
            self._give_rt_runtime(suite)
            (suite / "shared" / "cgroup.procs").write_text(str(os.getpid()))
            self.suites.append(suite)
        # the workers, started later, inherit it
        os.environ[SUITE_CGROUP_ENV] = ":".join(map(str, self.suites))

    @staticmethod
    def _give_rt_runtime(suite: Path) -> None:
        if not (suite / "cpu.rt_runtime_us").exists():
            return
        with contextlib.suppress(OSError):  # the machine's budget taken by other suites
            (suite / "cpu.rt_runtime_us").write_text(str(SUITE_RT_US))
            for name in ("shared", "exclusive"):
                (suite / name / "cpu.rt_runtime_us").write_text(str(GROUP_RT_US))

    def favour(self) -> int:
        """A worker's part as a favoured test begins: the shared groups turned down, and
        itself into `exclusive`. Returns the shared flock on FAVOUR_LOCK it holds until
        `unfavour` (a disk_exclusive test and a cpu_exclusive one may run at once)."""
        held = _open_favour()
        fcntl.flock(held, fcntl.LOCK_SH)  # before the weights: the last one out puts them back
        self._move(shares_after(favoured_running=True), "exclusive")
        return held

    def unfavour(self, held: int) -> None:
        """Back into `shared`; the shared groups back up when no other favoured test of
        any suite runs (none holds FAVOUR_LOCK; a killed worker's flock goes with it)."""
        self._move(None, "shared")
        os.close(held)
        last = _open_favour()
        try:
            fcntl.flock(last, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another favoured test runs: the weights stay down
        else:
            self._move(shares_after(favoured_running=False), None)
        finally:
            os.close(last)

    @staticmethod
    def _move(shares: int | None, into: str | None) -> None:
        for suite in filter(None, os.environ.get(SUITE_CGROUP_ENV, "").split(":")):
            for shared in Path(suite).parent.glob(f"{SUITE_PREFIX}*/shared"):
                if shares is not None and (shared / "cpu.shares").exists():
                    with contextlib.suppress(OSError):  # a suite that ended meanwhile
                        (shared / "cpu.shares").write_text(str(shares))
            if into is not None:
                (Path(suite) / into / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        """The controller's part at the end: back where it was, the groups removed. What a
        test left running in them (a zfs-fuse daemon, a test's `sleep`) goes back too."""
        for suite in self.suites:
            (suite.parent / "cgroup.procs").write_text(str(os.getpid()))
            for name in ("shared", "exclusive"):
                with contextlib.suppress(OSError):
                    for pid in (suite / name / "cgroup.procs").read_text().split():
                        with contextlib.suppress(OSError):  # gone meanwhile
                            (suite.parent / "cgroup.procs").write_text(pid)
            self._remove(suite)

    @staticmethod
    def _remove(suite: Path) -> None:
        # a lab cgroup a failed test left is pglab's to reap; empty groups go
        for path in [*sorted(suite.rglob("*"), key=lambda p: -len(p.parts)), suite]:
            if path.is_dir():
                with contextlib.suppress(OSError):
                    path.rmdir()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        SuiteCpu.of(config).make()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        SuiteCpu.of(config).remove()
