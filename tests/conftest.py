"""Fixtures for tests against real PostgreSQL servers and the real pglab CLI, and the
rules that let the suite run in parallel (tests/README.md explains them).

Each xdist worker has its own PGLAB_HOMEs (binaries copy, template data dirs, labs): one
in RAM, where most live tests run, and one on the host's disk. A template is built once
per home and reused, exactly as repeated runs reuse it for a user, and one worker's
servers never count as another's leftovers.

Markers: `live` (starts servers, spawns loads, touches cgroups or kernel knobs; in RAM),
`disk` (live, on the host's disk), `exclusive` (needs the machine alone: kernel knobs, a
CPU share or a disk limit measured, a CPU-bound run that may not dip), `disk_exclusive`
(needs the host's disk alone: stalls at a disk limit; the tests in RAM go on beside it)
and `cpu_exclusive` (one at a time, the other tests beside it at a low CPU weight: a
signal their disk writes do not change). Machine-wide flocks hold these across every pglab
suite on the machine (the tests not marked live, which touch nothing of the machine's, run
beside any of them at a low CPU weight).
"""

from __future__ import annotations

import compileall
import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from pglab.lab.cgroups import detect_cgroups, own_cgroup
from pglab.paths import ensure_dir, spread_subdirs

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "samples"
PG15_BIN = Path("/usr/lib/postgresql/15/bin")
ROOT_USER = os.geteuid() == 0

# Skips that are a fact about the machine, not a missing part; as root (as CI runs) any
# other skip fails the test. Each entry: a regex on the skip reason, and why it may skip.
ALLOWED_SKIPS: tuple[tuple[str, str], ...] = (
    (r"^v1 only$|^the v1 writeback caveat$", "cgroup v1 behaviour, on a v2 machine"),
    (r"^needs root and a v2 hierarchy beside v1", "a hybrid cgroup layout is rare"),
    (r"^this disk writes only .* MB/s unthrottled", "a disk too slow to show a 10 MB/s limit"),
    (r"^machine too busy: ", "other work kept a CPU quota from being reached (interference)"),
    (r"^this kernel does not list children", "CONFIG_PROC_CHILDREN is a build option"),
    (r"is not on a block device listed in /proc/diskstats$", "overlay/tmpfs test dirs"),
    (r"^no /dev/shm$", "a container without /dev/shm"),
    (r"^the flag is ext2/3/4's$", "test dirs on another filesystem (xfs, tmpfs, overlay)"),
)

# --- the machine locks: what a test shares with the others, and what it needs alone ------
#
# Three flocks on machine-wide files, so that they hold across every pglab suite on the
# machine, always taken in this order (no two tests wait on each other):
# - the machine: every live test shares it; an `exclusive` test holds it alone, so that no
#   live test of any suite overlaps it (kernel knobs, a CPU share or a limit measured, a
#   CPU-bound run that may not dip);
# - the disk: every live test whose servers and files are on the host's disk shares it; a
#   `disk_exclusive` test holds it alone, with the live tests in RAM going on beside it;
# - the CPU: held alone by the one `cpu_exclusive` test running.
# A waiting test that wants a lock alone takes that lock's gate first, so that a stream of
# shared holders (the other workers, or other suites) cannot starve it: new shared
# holders queue behind the gate. The exclusive, disk_exclusive and cpu_exclusive tests
# are favoured over the others (CPU weight, below); a disk_exclusive test (which waits on
# a disk limit, and leaves most of the CPU) and a cpu_exclusive one (in RAM) may run at
# once, each in a chain of its own (the work units, below).

MACHINE_LOCK, DISK_LOCK, CPU_LOCK, FAVOUR_LOCK = (
    Path(tempfile.gettempdir()) / f"pglab-tests.{name}"
    for name in ("lock", "disk", "cpu", "favour"))
SHARED, ALONE = fcntl.LOCK_SH, fcntl.LOCK_EX

# Where a live test's servers (its PGLAB_HOME) and files (its tmp_path) are: in RAM, unless
# it is marked `disk` (or disk_exclusive). In RAM they write nothing to the host's disk,
# so a test timing that disk runs beside them; without a tmpfs here, every test is on the
# disk (and shares the disk lock).
RAM_ROOT = Path("/dev/shm")
# The suite's own dirs, in RAM_ROOT and in $TMPDIR, that the controller makes (the workers
# inherit their paths): the workers' homes and temp dirs are in them.
RAM_ENV, DISK_ENV = "PGLAB_TEST_RAM", "PGLAB_TEST_DISK"
SUITE_DIR_PREFIX = "pglab-tests-"


@functools.cache
def _in_ram_possible() -> bool:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[1] == str(RAM_ROOT) and fields[2] == "tmpfs":
            return os.access(RAM_ROOT, os.W_OK)
    return False


@dataclass(frozen=True)
class Needs:
    """What a test holds while it runs, and where its servers and files are."""

    machine: int | None = None  # SHARED or ALONE; None: a test not marked live
    disk: int | None = None
    cpu: bool = False  # the CPU lock
    favoured: bool = False  # its worker over the others (CPU weight)
    on_disk: bool = False

    def locks(self) -> tuple[int | None, int | None, bool, bool]:
        """What it holds: tests alike in this keep the locks from one to the next."""
        return self.machine, self.disk, self.cpu, self.favoured


OFFLINE = Needs()  # parsers, analysis of committed samples, lint, types: touches nothing


def _needs(item: pytest.Item | None) -> Needs:
    if item is None:
        return OFFLINE
    marked = {name for name in ("live", "disk", "exclusive", "disk_exclusive",
                                "cpu_exclusive") if item.get_closest_marker(name)}
    on_disk = bool(marked & {"disk", "disk_exclusive"}) or not _in_ram_possible()
    disk = SHARED if on_disk else None
    if "exclusive" in marked:  # nothing live beside it
        return Needs(machine=ALONE, favoured=True, on_disk=on_disk)
    if "disk_exclusive" in marked:
        return Needs(machine=SHARED, disk=ALONE, favoured=True, on_disk=True)
    if "cpu_exclusive" in marked:
        return Needs(machine=SHARED, disk=disk, cpu=True, favoured=True, on_disk=on_disk)
    if marked:
        return Needs(machine=SHARED, disk=disk, on_disk=on_disk)
    return OFFLINE


def _lock_file(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(PermissionError):  # made by another user's suite
        os.fchmod(fd, 0o666)  # the first suite to run may be root's or a user's
    return fd


def _take(path: Path, how: int) -> int:
    gate, lock = _lock_file(path.with_name(path.name + "-gate")), _lock_file(path)
    fcntl.flock(gate, how)
    fcntl.flock(lock, how)
    os.close(gate)  # closing drops the gate's lock
    return lock


def _acquire(needs: Needs) -> list[int]:
    """The locks a test of `needs` holds while it runs (released by closing them)."""
    locks = [_take(path, how) for path, how in ((MACHINE_LOCK, needs.machine),
                                                  (DISK_LOCK, needs.disk),
                                                  (CPU_LOCK, ALONE if needs.cpu else None))
             if how is not None]
    if needs.favoured:
        locks.append(_SUITE_CPU.favour())
    return locks


def _release(needs: Needs, locks: list[int]) -> None:
    if needs.favoured:
        _SUITE_CPU.unfavour(locks.pop())
    for fd in reversed(locks):
        os.close(fd)


# The locks this worker holds: (needs, fds). A favoured test followed by another of the
# same needs on the same worker keeps them: the other workers are drained once for a batch
# of exclusive tests, not once per test (each drain waits out whatever test it is running,
# a tune of a minute, say).
_HELD: list[tuple[Needs, list[int]]] = []
_STARTED: list[str] = []  # this worker's first test, once it has begun
FIRST_SHARED_DELAY_S = 2.0


# --- CPU weight: the rest of the suite beside a favoured test ------------------------------
#
# An exclusive, disk_exclusive or cpu_exclusive test is favoured: the other workers go on
# beside it at a low CPU weight (cgroup v1 cpu.shares): they get the CPU it leaves, and a
# fifth of what it wants. A cpu_exclusive test's signal must not depend on what the other
# tests' writes do to the host's disk (they still reach it): the CPU alone, an emulated
# device, a process's own fdatasync under a disk limit (tests/README.md). On cgroup v1
# the kernel's background writeback they set off flushes a throttled node's dirty pages
# past its limit (a checkpoint-flush-storm run beside them saw 633 MB/s on its 16 MB/s
# disk, and no stall): such a test is disk_exclusive. The controller puts itself in
# `<its cgroup>/pglabtests-<pid>/shared` of the cpu and cpuacct hierarchies before the
# workers start (they inherit it, and pglab places a lab's cgroups under its own); the worker
# running a favoured test moves to `.../exclusive` and turns every suite's `shared` group
# down (other pglab suites on the machine too), and the last one to end its batch turns
# them back up. Without root or the v1 cpu controller nothing moves, and the favoured tests
# run beside the others at full weight.

SUITE_CGROUP_ENV = "PGLAB_TEST_CPU_CGROUPS"  # the suite's group in each hierarchy, ":"-joined
SUITE_PREFIX = "pglabtests-"  # not "pglab-": pglab's own groups are named so, and reaped
# 256/1280: a fifth of a contended CPU. At 16 (1.5%) a shared test starved: a sysbench
# run beside connection-path had a second under 20 TPS, where it does hundreds.
FULL_SHARES, BESIDE_SHARES = 1024, 256


def _cpu_hierarchies() -> list[Path]:
    """This process's cgroup in the v1 hierarchies of cpu and cpuacct (one when co-mounted),
    found as pglab finds its own."""
    support = detect_cgroups()
    if support.version != 1:
        return []
    found: list[Path] = []
    for controller in ("cpu", "cpuacct"):
        if controller not in support.mounts:  # cpuacct is not one pglab needs
            continue
        path = support.mounts[controller] / own_cgroup(controller).lstrip("/")
        if path not in found:
            found.append(path)
    return found


# Real-time CPU time for the suite's groups (cgroup v1 cpu.rt_runtime_us, microseconds a
# second): a new group has none, so no process in it may run at SCHED_FIFO, and pglab's
# delaying wire asks for that, as it gets it outside any group, so that a link's round
# trip holds on a busy machine (at normal priority a 2 ms link's p99 reached 23 ms).
SUITE_RT_US, GROUP_RT_US = 200_000, 100_000


def _give_rt_runtime(suite: Path) -> None:
    if not (suite / "cpu.rt_runtime_us").exists():
        return
    with contextlib.suppress(OSError):  # the machine's budget taken by other suites
        (suite / "cpu.rt_runtime_us").write_text(str(SUITE_RT_US))
        for name in ("shared", "exclusive"):
            (suite / name / "cpu.rt_runtime_us").write_text(str(GROUP_RT_US))


class _SuiteCpu:
    """This suite's cgroups (shared, exclusive) and the weights of the shared ones."""

    def __init__(self) -> None:
        self.suites: list[Path] = []

    def make(self) -> None:
        """The controller's part: its suite's groups, itself in `shared` (root, v1 only)."""
        parents = _cpu_hierarchies() if os.geteuid() == 0 else []
        if not any((parent / "cpu.shares").exists() for parent in parents):
            return
        for parent in parents:
            for stale in parent.glob(f"{SUITE_PREFIX}*"):  # of a suite that was killed
                owner = stale.name.removeprefix(SUITE_PREFIX)
                if owner.isdigit() and not psutil.pid_exists(int(owner)):
                    self._remove(stale)
            suite = parent / f"{SUITE_PREFIX}{os.getpid()}"
            for name in ("shared", "exclusive"):
                (suite / name).mkdir(parents=True, exist_ok=True)
            _give_rt_runtime(suite)
            (suite / "shared" / "cgroup.procs").write_text(str(os.getpid()))
            self.suites.append(suite)
        # the workers, started later, inherit it
        os.environ[SUITE_CGROUP_ENV] = ":".join(map(str, self.suites))

    def favour(self) -> int:
        """A worker's part as a favoured test begins: the shared groups turned down, and
        itself into `exclusive`. Returns the shared flock on FAVOUR_LOCK it holds until
        `unfavour` (two favoured tests may run at once: a disk_exclusive one beside a
        cpu_exclusive one)."""
        held = _lock_file(FAVOUR_LOCK)
        fcntl.flock(held, SHARED)  # before the weights: the last one out puts them back
        self._move(BESIDE_SHARES, "exclusive")
        return held

    def unfavour(self, held: int) -> None:
        """Back into `shared`; the shared groups back up when no other favoured test of
        any suite runs (none holds FAVOUR_LOCK; a killed worker's flock goes with it)."""
        self._move(None, "shared")
        os.close(held)
        last = _lock_file(FAVOUR_LOCK)
        try:
            fcntl.flock(last, ALONE | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another favoured test runs: the weights stay down
        else:
            self._move(FULL_SHARES, None)
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


_SUITE_CPU = _SuiteCpu()


@pytest.hookimpl(tryfirst=True)  # before pytest's tmpdir plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: starts servers or loads, touches cgroups, "
                            "kernel knobs or the machine (deselect with -m 'not live'); "
                            "its servers and files in RAM")
    config.addinivalue_line("markers", "disk: its servers and files on the host's disk (a "
                            "disk limit, disk telemetry, an ext4 flag); implies live")
    config.addinivalue_line("markers", "exclusive: needs the machine alone (kernel knobs, "
                            "a CPU share or a limit measured, a CPU-bound run that may "
                            "not dip); implies live")
    config.addinivalue_line("markers", "disk_exclusive: needs the host's disk alone (a "
                            "timing the others' writes change), the tests in RAM beside "
                            "it at a low CPU weight; implies live and disk")
    config.addinivalue_line("markers", "cpu_exclusive: one at a time, the rest of the suite "
                            "beside it at a low CPU weight (a signal their disk writes "
                            "do not change: tests/README.md); implies live")
    if not hasattr(config, "workerinput"):
        _SUITE_CPU.make()
        _make_suite_dirs(config)
        # pglab's modules as bytecode, for the hundreds of `python -m pglab` the tests
        # start: where PYTHONDONTWRITEBYTECODE is set (as in this machine's environment)
        # each of them compiled all of pglab again, half a second of CPU a command, a
        # minute and a half of a suite bound by CPU. Python reads bytecode all the same.
        compileall.compile_dir(ROOT / "src" / "pglab", quiet=1)
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and getattr(config.option, "numprocesses", None)):
        units = Path(tempfile.mkdtemp(prefix="pglab-test-units-")) / "units.json"
        os.environ[UNITS_ENV] = str(units)  # the workers, started later, inherit it
        config.pluginmanager.register(_UnitScheduler(units), "pglab-unit-scheduler")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        _SUITE_CPU.remove()
        for env in (RAM_ENV, DISK_ENV):
            if suite := os.environ.get(env):
                # the temp dirs of failed tests kept (until the next suite starts), the
                # homes removed (the workers removed their own)
                for path in (Path(suite).iterdir() if any(_FAILED) else [Path(suite)]):
                    if not path.name.startswith(KEPT):
                        _remove_unmounted(path)


def _make_suite_dirs(config: pytest.Config) -> None:
    """The controller's part: the suite's dirs in RAM (the workers' homes in RAM, and
    pytest's temp dir unless --basetemp says where) and on the disk (their homes there,
    and the temp dirs of the tests on the disk), and those of suites that were killed, or
    kept for their failed tests, removed."""
    roots = [(DISK_ENV, Path(tempfile.gettempdir()))]
    if _in_ram_possible():
        roots.append((RAM_ENV, RAM_ROOT))
    for env, root in roots:
        for stale in root.glob(f"{SUITE_DIR_PREFIX}*"):
            owner = stale.name.removeprefix(SUITE_DIR_PREFIX)
            if owner.isdigit() and not psutil.pid_exists(int(owner)):
                _remove_unmounted(stale)
        suite = root / f"{SUITE_DIR_PREFIX}{os.getpid()}"
        suite.mkdir(mode=0o711, exist_ok=True)
        os.environ[env] = str(suite)  # the workers, started later, inherit it
    if config.option.basetemp is None and RAM_ENV in os.environ:
        config.option.basetemp = str(Path(os.environ[RAM_ENV]) / KEPT)


# In the suite's dirs: what is kept for the failed tests (pytest's temp dir in RAM, and
# the temp dirs of the tests on the disk); the rest, the workers' homes, goes.
KEPT = "tmp"
_FAILED: list[bool] = []  # the controller's: some test failed


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if any(_FAILED):
        kept = [str(Path(os.environ[env]) / KEPT) for env in (RAM_ENV, DISK_ENV)
                if env in os.environ and (Path(os.environ[env]) / KEPT).exists()]
        if kept:
            terminalreporter.write_line(f"the failed tests' temp dirs are kept until the "
                                        f"next suite starts: {' and '.join(kept)}")


def _remove_unmounted(path: Path) -> None:
    """`path` removed, unless a mount a failed test left is under it: never through one."""
    if f" {path}/" not in Path("/proc/self/mounts").read_text():
        shutil.rmtree(path, ignore_errors=True)


# --- work units: which tests go to one xdist worker together -------------------------------
#
# xdist hands out work units in queue order, one at a time to whichever worker is free. A
# unit is every exclusive and cpu_exclusive test, or every disk_exclusive test (two chains,
# which run at once), with the tests that share a module fixture with one (the other
# workers are drained once, and the tests of a chain run back to back under one hold of
# its locks); or the tests of a module that share a module- or class-scoped fixture of
# that module (a real run made once); or else one test, so that a long module spreads
# over all workers. The workers know markers and fixtures, the controller only node ids:
# each worker writes the map to a file.

UNITS_ENV = "PGLAB_TEST_UNITS"
EXCLUSIVE_UNIT, DISK_UNIT = "exclusive", "disk_exclusive"
SECONDS_KEY = "pglab/test-seconds"  # each test's time in the last run, in .pytest_cache
DURATIONS = Path(__file__).resolve().parent / "durations.json"  # --save-durations writes it


def _module(nodeid: str) -> str:
    return nodeid.split("::", maxsplit=1)[0]


def _shared_fixtures(item: pytest.Item) -> set[str]:
    """The module- or class-scoped fixtures defined in `item`'s own module that it uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    module = _module(item.nodeid)
    return {name for name, defs in info.name2fixturedefs.items()
            if defs and defs[-1].scope in ("module", "class", "package")
            and defs[-1].baseid.startswith(module)}


def _chain(item: pytest.Item) -> str | None:
    """The unit of a favoured test: the disk_exclusive chain, or the other."""
    needs = _needs(item)
    return None if not needs.favoured else DISK_UNIT if needs.disk == ALONE else EXCLUSIVE_UNIT


def _units(items: list[pytest.Item]) -> dict[str, str]:
    """Each test's work unit; tests sharing fixtures, directly or through another test,
    are one unit (a union-find over the fixtures of each module)."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    uses = {item.nodeid: [f"{_module(item.nodeid)}::{name}" for name in
                          sorted(_shared_fixtures(item))] for item in items}
    for keys in uses.values():
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    chained: dict[str, str] = {}  # a fixture's root -> the chain of a favoured test using it
    for item in items:
        if ((chain := _chain(item)) and (keys := uses[item.nodeid])
                and chained.get(root(keys[0])) != EXCLUSIVE_UNIT):
            chained[root(keys[0])] = chain
    units = {}
    for item in items:
        keys = uses[item.nodeid]
        shared = root(keys[0]) if keys else None
        units[item.nodeid] = (chained.get(shared or "") or _chain(item) or shared
                              or item.nodeid)
    return units


class _UnitScheduler:
    """The controller's side: xdist's scope scheduling, with the workers' units as
    scopes (xdist's own `xdist_group` does not work under pytest 9)."""

    def __init__(self, units: Path) -> None:
        self.units = units

    @pytest.hookimpl
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> object:
        from xdist.scheduler import LoadScopeScheduling

        path = self.units

        class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
            _map: dict[str, str] | None = None

            def _split_scope(self, nodeid: str) -> str:
                if self._map is None:  # written by the workers before their collection ends
                    self._map = json.loads(path.read_text())
                return self._map.get(nodeid, nodeid)

        return UnitScheduling(config, log)

    def pytest_unconfigure(self) -> None:
        shutil.rmtree(self.units.parent, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _needs(item).machine is not None and not item.get_closest_marker("live"):
            item.add_marker(pytest.mark.live)
    units = _units(items)
    _check_homes(items)
    # The queue: the two chains first; the offline units next, which the other workers run
    # beside the exclusive tests; then the live units, longest first by their times in the
    # last run (.pytest_cache, over the committed tests/durations.json for a fresh clone),
    # so that no long one starts last while the other workers have nothing left, or else
    # shared-fixture units, live tests, the rest. Those on the disk wait out the
    # disk_exclusive chain: they come after enough units in RAM to keep the two workers
    # beside the chains busy while it runs.
    cache = getattr(config, "cache", None)
    seconds: dict[str, float] = {**json.loads(DURATIONS.read_text()),
                                 **(cache.get(SECONDS_KEY, {}) if cache else {})}
    total: dict[str, float] = {}
    kind: dict[str, int] = {}
    offline: dict[str, bool] = {}
    on_disk: dict[str, bool] = {}
    for item in items:
        unit, needs = units[item.nodeid], _needs(item)
        total[unit] = total.get(unit, 0.0) + seconds.get(item.nodeid, 0.0)
        offline[unit] = offline.get(unit, True) and needs == OFFLINE
        on_disk[unit] = on_disk.get(unit, False) or needs.on_disk
        kind[unit] = min(kind.get(unit, 2), 0 if unit != item.nodeid
                         else 1 if item.get_closest_marker("live") else 2)
    chains = [unit for unit in (EXCLUSIVE_UNIT, DISK_UNIT) if unit in total]
    longest = sorted((unit for unit in total if unit not in chains),
                     key=lambda unit: (-total[unit], kind[unit]))
    in_ram_first: list[str] = []
    covered, cover = 0.0, 2 * total.get(DISK_UNIT, 0.0)  # the two workers beside the chains
    for unit in longest:
        if covered >= cover:
            break
        if not offline[unit] and not on_disk[unit]:
            in_ram_first.append(unit)
            covered += total[unit]
    first = set(in_ram_first)
    queue = [*chains, *(unit for unit in longest if offline[unit]), *in_ram_first,
             *(unit for unit in longest if not offline[unit] and unit not in first)]
    rank = {unit: place for place, unit in enumerate(queue)}

    def alone_first(item: pytest.Item) -> int:
        # In the exclusive unit the exclusive tests go first, while the other workers have
        # not begun (they wait FIRST_SHARED_DELAY_S): none has to be waited out; then the
        # cpu_exclusive ones in RAM, beside the disk_exclusive chain; those on the disk
        # last, after it.
        needs = _needs(item)
        return 0 if needs.machine == ALONE else 2 if needs.on_disk else 1

    items.sort(key=lambda item: (rank[units[item.nodeid]], alone_first(item)))
    path = os.environ.get(UNITS_ENV)
    if path and hasattr(config, "workerinput"):
        written = Path(f"{path}.{config.workerinput['workerid']}")
        written.write_text(json.dumps(units))
        written.replace(path)  # every worker writes the same map


def _check_homes(items: list[pytest.Item]) -> None:
    """A fixture shared by tests (a module's server, its runs) is made where its first
    test's servers are: the tests that share one (or `pglab_home`, module-scoped) are all
    in RAM or all on the disk."""
    where: dict[str, set[bool]] = {}
    for item in items:
        shared = _shared_fixtures(item)
        if "pglab_home" in getattr(item, "fixturenames", ()):
            shared.add("pglab_home")
        for name in shared:
            where.setdefault(f"{_module(item.nodeid)}::{name}", set()).add(
                _needs(item).on_disk)
    mixed = sorted(name for name, places in where.items() if len(places) > 1)
    if mixed:
        raise pytest.UsageError(f"tests sharing a fixture are both in RAM and on the disk "
                                f"(mark them all `disk`, or none): {', '.join(mixed)}")


_spent: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _spent[report.nodeid] = _spent.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    _remove_homes()  # this worker's, once its module and session fixtures are torn down
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    _FAILED.append(bool(session.testsfailed))
    if not _spent:
        return
    if getattr(session.config, "cache", None) is not None:
        known: dict[str, float] = session.config.cache.get(SECONDS_KEY, {})
        session.config.cache.set(SECONDS_KEY, {**known, **_spent})
    if session.config.getoption("save_durations"):
        DURATIONS.write_text(json.dumps({nodeid: round(spent, 1) for nodeid, spent
                                         in sorted(_spent.items()) if spent >= 0.5},
                                        indent=0) + "\n")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--save-durations", action="store_true",
                     help="write this run's test times to tests/durations.json (the order "
                          "of a fresh clone's first run)")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item,
                            nextitem: pytest.Item | None) -> Generator[None, object, object]:
    # Outside pytest-timeout's wrapper: waiting for the lock is not the test's time.
    needs = _needs(item)
    if _HELD and _HELD[0][0].locks() != needs.locks():
        _release(*_HELD.pop())
    if not _HELD:
        if (needs.machine == SHARED and not _STARTED
                and any(_needs(i).machine == ALONE for i in item.session.items)):
            # The workers start their first units at once: the exclusive unit, first in
            # the queue, begins with its exclusive tests, which take the machine before the
            # others (else they wait out the others' first tests, or the disk_exclusive
            # chain, with the machine half used).
            time.sleep(FIRST_SHARED_DELAY_S)
        _HELD.append((needs, _acquire(needs)))
    if not _STARTED:
        _STARTED.append(item.nodeid)
    homes = _homes()
    # set before its fixtures are: a module fixture's servers are where its tests' are
    os.environ["PGLAB_HOME"] = str(homes.disk if needs.on_disk else homes.ram)
    try:
        return (yield)
    finally:
        if not needs.favoured or _needs(nextitem).locks() != needs.locks():
            _release(*_HELD.pop())


@dataclass(frozen=True)
class _Homes:
    """This worker's two PGLAB_HOMEs (binaries copy, template data dirs, labs): one in RAM
    for most live tests, one on the host's disk for those that need it; and the dir of the
    latter's tmp_path dirs (the others' are under pytest's temp dir, in RAM too)."""

    ram: Path
    disk: Path
    disk_tmp: Path

    def all(self) -> list[Path]:
        return list(dict.fromkeys((self.ram, self.disk)))


_HOMES: list[_Homes] = []  # made by the worker's first test
_USERS_HOME = os.environ.get("PGLAB_HOME")  # put back at the end
_BASETEMP: list[Path] = []  # this worker's pytest temp dir
_FOOTPRINT = pytest.StashKey[tuple[tuple[bool, int], ...]]()


def _homes() -> _Homes:
    """This worker's homes, made on first use. Outside pytest's own temp root: every pytest
    that starts on the machine makes /tmp/pytest-of-USER 0700 again, and a server running
    as another user then loses its data dir in mid-run (a second suite, or a single test
    run beside the suite)."""
    if _HOMES:
        return _HOMES[0]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    disk_dir = Path(os.environ[DISK_ENV])  # made by the controller
    disk = Path(tempfile.mkdtemp(prefix=f"home-{worker}-", dir=disk_dir))
    disk_tmp = disk_dir / KEPT
    disk_tmp.mkdir(exist_ok=True)
    ram_dir = os.environ.get(RAM_ENV)
    ram = Path(tempfile.mkdtemp(prefix=f"home-{worker}-", dir=ram_dir)) if ram_dir else disk
    for home in dict.fromkeys((ram, disk)):
        home.chmod(0o711)
        # As pglab marks them when it makes them (paths.spread_subdirs), before the tests
        # that make their servers here by hand: each data dir's files in a block group of
        # its own
        for name in ("labs", "templates"):
            ensure_dir(home / name, spread=True)
        make_reachable(home)
    disk_tmp.chmod(0o711)
    make_reachable(disk_tmp)
    spread_subdirs(disk_tmp)  # each test's tmp_path (its runs' results) apart too
    _HOMES.append(_Homes(ram, disk, disk_tmp))
    return _HOMES[0]


def _remove_homes() -> None:
    for home in _HOMES[0].all() if _HOMES else ():
        _remove_unmounted(home)


def _footprint() -> tuple[tuple[bool, int], ...]:
    """What making a server or a template changes in a PGLAB_HOME: its labs and templates
    dirs (an entry added or removed)."""
    out = []
    for home in _homes().all():
        for name in ("labs", "templates"):
            try:
                out.append((True, (home / name).stat().st_mtime_ns))
            except FileNotFoundError:
                out.append((False, 0))
    return tuple(out)


def make_reachable(path: Path) -> None:
    """As root the servers run as an unprivileged user, who must reach the data dirs and
    the tests' files: o+x on every directory above `path`."""
    if os.geteuid() != 0:
        return
    for parent in [path, *path.parents]:
        if parent == Path("/"):
            break
        mode = os.stat(parent).st_mode
        if mode & 0o011 != 0o011:
            os.chmod(parent, mode | 0o011)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_FOOTPRINT] = _footprint()  # before any fixture: module fixtures count too
    if _BASETEMP:  # each pytest that starts makes /tmp/pytest-of-USER 0700 again: undo it
        make_reachable(_BASETEMP[0])  # (for tests whose servers use a dir of tmp_path)
    yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield
    if not item.get_closest_marker("live") and _footprint() != item.stash[_FOOTPRINT]:
        raise AssertionError("this test (or its fixture) made a server or a template: "
                             "mark it @pytest.mark.live (tests/README.md)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if ROOT_USER and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(
            report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if not any(re.search(pattern, reason) for pattern, _why in ALLOWED_SKIPS):
            # As root (CI) every part can be installed, so a skip hides a missing part.
            report.outcome = "failed"
            report.longrepr = (f"skipped as root, and not in ALLOWED_SKIPS "
                               f"(tests/conftest.py): {reason}")
    return report


def apt_install(package: str, wanted: Path) -> Path:
    """`wanted` from Debian's `package`, installed with apt as root (CI is root); skips
    otherwise (a skip that fails as root, see ALLOWED_SKIPS)."""
    if wanted.exists():
        return wanted
    if not ROOT_USER or shutil.which("apt-get") is None:
        pytest.skip(f"needs {wanted} (apt-get install {package})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Another apt on a shared machine holds the dpkg lock for a while: wait for it.
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
               "-o", "DPkg::Lock::Timeout=600", package]
    done = subprocess.run(install, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # a stale package list: update once, then it must work
        subprocess.run(["apt-get", "update", "-qq", "-o", "DPkg::Lock::Timeout=600"],
                       env=env, capture_output=True, check=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and wanted.exists(), (
        f"apt-get install {package} failed: {done.stderr[-2000:]}")
    return wanted


@pytest.fixture(scope="session", autouse=True)
def _worker_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """This worker's pytest temp dir reachable by the servers' user (PGLAB_HOME put back as
    it was at the end)."""
    _BASETEMP.append(tmp_path_factory.getbasetemp())
    make_reachable(_BASETEMP[0])
    spread_subdirs(_BASETEMP[0])  # each test's tmp_path (its runs' results) apart too
    yield
    if _USERS_HOME is None:
        os.environ.pop("PGLAB_HOME", None)
    else:
        os.environ["PGLAB_HOME"] = _USERS_HOME


@pytest.fixture(scope="module")
def pglab_home() -> Path:
    """The PGLAB_HOME of the module's tests: in RAM, or on the host's disk for those marked
    so (the tests of a module that use it are one or the other: _check_homes)."""
    return Path(os.environ["PGLAB_HOME"])


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's own, in RAM with the rest of pytest's temp dir; on the host's disk for a
    test whose servers are there (it may make its volumes' files in it)."""
    name = re.sub(r"\W", "_", request.node.name)[:30]
    if not _needs(request.node).on_disk:
        return tmp_path_factory.mktemp(name, numbered=True)
    path = Path(tempfile.mkdtemp(prefix=name, dir=_homes().disk_tmp))
    make_reachable(path)
    return path


@pytest.fixture(scope="session")
def pgbouncer_binary() -> str:
    """PgBouncer from Debian's package; installed here when root (as CI is)."""
    found = shutil.which("pgbouncer")
    return found or str(apt_install("pgbouncer", Path("/usr/sbin/pgbouncer")))


@pytest.fixture(scope="session")
def pg15_bin() -> Path:
    """Debian's PostgreSQL 15 (package postgresql-15): the other major version that the
    version-comparability test and the PG 15 probe variants run on."""
    return apt_install("postgresql-15", PG15_BIN / "postgres").parent


def processes_under(path: Path) -> list[str]:
    """postgres/pgbench/pgbouncer processes whose command line mentions `path`."""
    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if str(path) in cmd and any(n in cmd for n in ("postgres", "pgbench", "pgbouncer")):
            found.append(f"{proc.pid} {cmd}")
    return found


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 240,
            env: dict[str, str] | None = None) -> CliResult:
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120", **(env or {})}
    result = subprocess.run([sys.executable, "-m", "pglab", *args], capture_output=True,
                            text=True, cwd=cwd, timeout=timeout, env=full_env)
    return CliResult(result.returncode, result.stdout, result.stderr)


def write_scenario(directory: Path, body: str, name: str = "t") -> Path:
    path = directory / f"{name}.toml"
    path.write_text(f'name = "{name}"\n' + body)
    return path


# At a fixed rate: the tests that use it read what a run records, not what the machine
# can do, and flat out the same run took 10 s of CPU (pglab, the server and pgbench
# together) against 2.3 s at 200 TPS, in a phase of the suite bound by CPU. A test that
# needs the load's volume (the WAL of checkpoints every second) takes the rate out.
TINY = """
[workload]
scale = 1
clients = 2
jobs = 2
duration = "3s"
warmup = "1s"
rate = 200
"""


# sfdisk: a test writes a partition table
STORAGE_PACKAGES = {"nbdfuse": "libnbd-bin", "nbdcopy": "libnbd-bin", "fusermount3": "fuse3",
                    "mkfs.xfs": "xfsprogs", "mkfs.btrfs": "btrfs-progs", "zpool": "zfs-fuse",
                    "mkfs.ext4": "e2fsprogs", "sfdisk": "fdisk"}


@pytest.fixture(scope="session")
def storage_packages() -> None:
    """Debian's storage tools; installed here when missing and root (as CI is)."""
    if os.geteuid() != 0:
        pytest.skip("storage volumes need root")
    missing = sorted({pkg for tool, pkg in STORAGE_PACKAGES.items()
                      if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()})
    if missing:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=600",
                   *missing]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True,
                           check=True)
            subprocess.run(install, env=env, capture_output=True, check=True)
