"""Fixtures for tests against real PostgreSQL servers and the real pglab CLI, and the
rules that let the suite run in parallel (tests/README.md explains them).

Each xdist worker has its own PGLAB_HOME (binaries copy, template data dirs, labs), so a
template is built once per worker and reused, exactly as repeated runs reuse it for a
user, and one worker's servers never count as another's leftovers.

Markers: `live` (starts servers, spawns loads, touches cgroups or kernel knobs),
`exclusive` (needs the machine alone: kernel knobs, limits measured from inside a
cgroup, timing-sensitive scenario checks) and `cpu_exclusive` (one at a time, the other
tests beside it at a low CPU weight: a signal their disk writes do not change). Every live
test holds a shared flock on one machine-wide file while it runs; an exclusive one holds
it exclusively, so it overlaps no other live test of any pglab suite on the machine (the
tests not marked live, which touch nothing of the machine's, run beside it at a low CPU
weight).
"""

from __future__ import annotations

import compileall
import contextlib
import fcntl
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

# --- the machine locks: live tests share the machine, exclusive tests have it alone ---------

LOCK_PATH = Path(tempfile.gettempdir()) / "pglab-tests.lock"
# A waiting exclusive test takes the gate first, so that a stream of shared holders (the
# other workers, or other suites) cannot starve it: new shared holders queue behind the gate.
GATE_PATH = Path(tempfile.gettempdir()) / "pglab-tests.gate"
# Held by the cpu_exclusive test running (of any pglab suite on the machine): one at a time.
CPU_PATH = Path(tempfile.gettempdir()) / "pglab-tests.cpu"

SHARED, CPU_EXCLUSIVE, EXCLUSIVE = "shared", "cpu_exclusive", "exclusive"
# A test not marked live (parsers, analysis of committed samples, lint, types) touches
# nothing of the machine's (the footprint check below holds it to that): it holds no lock,
# and runs beside the exclusive tests, on the CPU they leave.
OFFLINE = "offline"


def _lock_file(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(PermissionError):  # made by another user's suite
        os.fchmod(fd, 0o666)  # the first suite to run may be root's or a user's
    return fd


def _acquire(mode: str) -> list[int]:
    """The locks a test of `mode` holds while it runs (released by closing them)."""
    if mode == OFFLINE:
        return []
    gate, lock = _lock_file(GATE_PATH), _lock_file(LOCK_PATH)
    flag = fcntl.LOCK_EX if mode == EXCLUSIVE else fcntl.LOCK_SH
    fcntl.flock(gate, flag)
    fcntl.flock(lock, flag)
    os.close(gate)  # closing drops the gate's lock
    if mode == EXCLUSIVE:
        _SUITE_CPU.favour(True)  # over the offline tests beside it
    if mode != CPU_EXCLUSIVE:
        return [lock]
    cpu = _lock_file(CPU_PATH)
    fcntl.flock(cpu, fcntl.LOCK_EX)
    _SUITE_CPU.favour(True)
    return [lock, cpu]


def _release(mode: str, locks: list[int]) -> None:
    if mode in (EXCLUSIVE, CPU_EXCLUSIVE):
        _SUITE_CPU.favour(False)
    for fd in reversed(locks):
        os.close(fd)


# The locks this worker holds: (mode, fds). An exclusive test followed by another of its
# mode on the same worker keeps them: the other workers are drained once for the batch,
# not once per test (each drain waits out whatever test it is running, a tune of a
# minute, say).
_HELD: list[tuple[str, list[int]]] = []
_STARTED: list[str] = []  # this worker's first test, once it has begun
FIRST_SHARED_DELAY_S = 2.0


def _mode(item: pytest.Item | None) -> str:
    if item is None:
        return SHARED
    for mode in (EXCLUSIVE, CPU_EXCLUSIVE):
        if item.get_closest_marker(mode) is not None:
            return mode
    return SHARED if item.get_closest_marker("live") is not None else OFFLINE


def _exclusive(item: pytest.Item | None) -> bool:
    """An exclusive or cpu_exclusive test: one of the exclusive unit."""
    return _mode(item) in (EXCLUSIVE, CPU_EXCLUSIVE)


# --- CPU weight: the rest of the suite beside an exclusive or cpu_exclusive test ----------
#
# A cpu_exclusive test runs one at a time, and the other workers go on beside it at a low
# CPU weight (cgroup v1 cpu.shares): they get the CPU it leaves, and a fifth of what it
# wants (an exclusive test is favoured the same way, over the offline tests beside it).
# Its signal must not depend on what the other tests' writes do to the host's disk (they
# still reach it): the CPU alone, an emulated device, a process's own fdatasync under a
# disk limit (tests/README.md). On cgroup v1 the kernel's background writeback they set
# off flushes a throttled node's dirty pages past its limit (a checkpoint-flush-storm run
# beside them saw 633 MB/s on its 16 MB/s disk, and no stall). The controller puts itself in
# `<its cgroup>/pglabtests-<pid>/shared` of the cpu and cpuacct hierarchies before the
# workers start (they inherit it, and pglab places a lab's cgroups under its own); the worker
# running an exclusive or cpu_exclusive test moves to `.../exclusive` and turns every
# suite's `shared` group down (other pglab suites on the machine too), and back up when
# its batch ends. Without root or the v1 cpu controller nothing moves, and the
# cpu_exclusive tests run beside the others at full weight.

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
            (suite / "shared" / "cgroup.procs").write_text(str(os.getpid()))
            self.suites.append(suite)
        # the workers, started later, inherit it
        os.environ[SUITE_CGROUP_ENV] = ":".join(map(str, self.suites))

    def favour(self, exclusive: bool) -> None:
        """A worker's part: into `exclusive` with the shared groups turned down, or back."""
        for suite in filter(None, os.environ.get(SUITE_CGROUP_ENV, "").split(":")):
            shares = BESIDE_SHARES if exclusive else FULL_SHARES
            for shared in Path(suite).parent.glob(f"{SUITE_PREFIX}*/shared"):
                if (shared / "cpu.shares").exists():
                    with contextlib.suppress(OSError):  # a suite that ended meanwhile
                        (shared / "cpu.shares").write_text(str(shares))
            home = Path(suite) / ("exclusive" if exclusive else "shared")
            (home / "cgroup.procs").write_text(str(os.getpid()))

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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: starts servers or loads, touches cgroups, "
                            "kernel knobs or the machine (deselect with -m 'not live')")
    config.addinivalue_line("markers", "exclusive: needs the machine alone (kernel knobs, "
                            "limits measured from inside a cgroup, timing-sensitive runs); "
                            "implies live")
    config.addinivalue_line("markers", "cpu_exclusive: one at a time, the rest of the suite "
                            "beside it at a low CPU weight (a signal their disk writes "
                            "do not change: tests/README.md); implies live")
    if not hasattr(config, "workerinput"):
        _SUITE_CPU.make()
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


# --- work units: which tests go to one xdist worker together -------------------------------
#
# xdist hands out work units in queue order, one at a time to whichever worker is free. A
# unit is every exclusive test, with the tests that share a module fixture with one (one
# unit: the other workers are drained once, and the exclusive tests run back to back under
# one hold of the lock); or the tests of a module that share a module- or class-scoped
# fixture of that module (a real run made once); or else one test, so that a long module
# spreads over all workers. The workers know markers and fixtures, the controller only
# node ids: each worker writes the map to a file.

UNITS_ENV = "PGLAB_TEST_UNITS"
EXCLUSIVE_UNIT = "exclusive"
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
    alone = {root(keys[0]) for item in items if _exclusive(item)
             for keys in [uses[item.nodeid]] if keys}
    units = {}
    for item in items:
        keys = uses[item.nodeid]
        shared = root(keys[0]) if keys else None
        units[item.nodeid] = (EXCLUSIVE_UNIT if _exclusive(item) or shared in alone
                              else shared or item.nodeid)
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
        if _exclusive(item) and not item.get_closest_marker("live"):
            item.add_marker(pytest.mark.live)
    units = _units(items)
    # The queue: the exclusive unit first; the offline units next, which the other
    # workers run beside the exclusive tests; then the longest units by their times in the
    # last run (.pytest_cache, over the committed tests/durations.json for a fresh clone),
    # so that no long one starts last while the other workers have nothing left; then
    # shared-fixture units, live tests, the rest.
    cache = getattr(config, "cache", None)
    seconds: dict[str, float] = {**json.loads(DURATIONS.read_text()),
                                 **(cache.get(SECONDS_KEY, {}) if cache else {})}
    total: dict[str, float] = {}
    kind: dict[str, int] = {}
    offline: dict[str, bool] = {}
    for item in items:
        unit = units[item.nodeid]
        total[unit] = total.get(unit, 0.0) + seconds.get(item.nodeid, 0.0)
        offline[unit] = offline.get(unit, True) and _mode(item) == OFFLINE
        kind[unit] = min(kind.get(unit, 2), 0 if unit != item.nodeid
                         else 1 if item.get_closest_marker("live") else 2)
    # In the exclusive unit the exclusive tests go first, while the other workers have not
    # begun (they wait FIRST_SHARED_DELAY_S): none has to be waited out; the cpu_exclusive
    # ones then run with the others beside them.
    items.sort(key=lambda item: (units[item.nodeid] != EXCLUSIVE_UNIT,
                                 not offline[units[item.nodeid]],
                                 -total[units[item.nodeid]], kind[units[item.nodeid]],
                                 _mode(item) != EXCLUSIVE))
    path = os.environ.get(UNITS_ENV)
    if path and hasattr(config, "workerinput"):
        written = Path(f"{path}.{config.workerinput['workerid']}")
        written.write_text(json.dumps(units))
        written.replace(path)  # every worker writes the same map


_spent: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _spent[report.nodeid] = _spent.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _spent or os.environ.get("PYTEST_XDIST_WORKER"):
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
    mode = _mode(item)
    if _HELD and _HELD[0][0] != mode:
        _release(*_HELD.pop())
    if not _HELD:
        if (mode == SHARED and not _STARTED
                and any(_mode(i) == EXCLUSIVE for i in item.session.items)):
            # The workers start their first units at once: the exclusive unit, first in
            # the queue, begins with its exclusive tests, which take the machine before the
            # others (else they wait out the others' first tests with the machine half used).
            time.sleep(FIRST_SHARED_DELAY_S)
        _HELD.append((mode, _acquire(mode)))
    if not _STARTED:
        _STARTED.append(item.nodeid)
    try:
        return (yield)
    finally:
        if mode in (SHARED, OFFLINE) or _mode(nextitem) != mode:
            _release(*_HELD.pop())


_HOME: list[Path] = []  # this session's PGLAB_HOME, once the pglab_home fixture made it
_BASETEMP: list[Path] = []  # this worker's pytest temp dir
# PGLAB_HOME as the pglab_home fixture makes it (its empty labs and templates dirs): what
# the first test of a worker, set up before the fixture ran, is compared with
_FRESH: list[tuple[tuple[bool, int], ...]] = []
_FOOTPRINT = pytest.StashKey[tuple[tuple[bool, int], ...]]()


def _footprint() -> tuple[tuple[bool, int], ...]:
    """What making a server or a template changes in PGLAB_HOME: its labs and templates
    dirs (created, or an entry added or removed)."""
    if not _HOME:
        return ()  # before the pglab_home fixture: _FRESH once it ran
    out = []
    for name in ("labs", "templates"):
        try:
            out.append((True, (_HOME[0] / name).stat().st_mtime_ns))
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
    before = item.stash[_FOOTPRINT] or (_FRESH[0] if _FRESH else ())
    if not item.get_closest_marker("live") and _footprint() != before:
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
def pglab_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Outside pytest's own temp root: every pytest that starts on the machine makes
    # /tmp/pytest-of-USER 0700 again, and a server running as another user then loses
    # its data dir in mid-run (a second suite, or a single test run beside the suite).
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    home = Path(tempfile.mkdtemp(prefix=f"pglab-test-home-{worker}-"))
    home.chmod(0o711)
    # As pglab marks them when it makes them (paths.spread_subdirs), before the tests that
    # make their servers here by hand: each data dir's files in a block group of its own
    for name in ("labs", "templates"):
        ensure_dir(home / name, spread=True)
    make_reachable(home)
    _HOME.append(home)
    _FRESH.append(_footprint())
    _BASETEMP.append(tmp_path_factory.getbasetemp())
    make_reachable(_BASETEMP[0])
    spread_subdirs(_BASETEMP[0])  # each test's tmp_path (its runs' results) apart too
    old = os.environ.get("PGLAB_HOME")
    os.environ["PGLAB_HOME"] = str(home)
    yield home
    if old is None:
        del os.environ["PGLAB_HOME"]
    else:
        os.environ["PGLAB_HOME"] = old
    mounts = Path("/proc/self/mounts").read_text()
    if f" {home}/" not in mounts:  # never remove through a mount a failed test left
        shutil.rmtree(home, ignore_errors=True)


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
