"""Where tests put things: the suite's dirs, each worker's PGLAB_HOMEs, the tests' temp
dirs, and the check that a test not marked live made no server or template.

The controller makes the suite's two dirs, `/dev/shm/pglab-tests-<pid>` (in RAM) and
`$TMPDIR/pglab-tests-<pid>` (on the host's disk); each worker makes its homes in them
(binaries copy, template data dirs, labs): a template is built once per home and reused,
as repeated runs reuse it for a user, and one worker's servers never count as another's
leftovers. pytest's temp dir is in the first (unless --basetemp says where), the temp dirs
of the tests on the disk in the second. Not under pytest's default temp root: every pytest
that starts on the machine makes /tmp/pytest-of-USER 0700 again, and a server running as
another user then lost its data dir in mid-run.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from pglab.paths import ensure_dir, spread_subdirs
from plugins.cpu_weight import stale
from plugins.needs import RAM_ROOT, in_ram_possible, needs_of

# The suite's own dirs, in RAM_ROOT and in $TMPDIR, that the controller makes (the workers
# inherit their paths): the workers' homes and temp dirs are in them.
RAM_ENV, DISK_ENV = "PGLAB_TEST_RAM", "PGLAB_TEST_DISK"
SUITE_DIR_PREFIX = "pglab-tests-"
# In the suite's dirs: what is kept for the failed tests (pytest's temp dir in RAM, and the
# temp dirs of the tests on the disk); the rest, the workers' homes, goes.
KEPT = "tmp"
_KEY = pytest.StashKey["Homes"]()
_FOOTPRINT = pytest.StashKey[tuple[tuple[bool, int], ...]]()


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


def remove_unmounted(path: Path) -> None:
    """`path` removed, unless a mount a failed test left is under it: never through one."""
    if f" {path}/" not in Path("/proc/self/mounts").read_text():
        shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class WorkerHomes:
    """This worker's two PGLAB_HOMEs: one in RAM for most live tests, one on the host's disk
    for those that need it; and the dir of the latter's tmp_path dirs (the others' are under
    pytest's temp dir, in RAM too)."""

    ram: Path
    disk: Path
    disk_tmp: Path

    def all(self) -> list[Path]:
        return list(dict.fromkeys((self.ram, self.disk)))


class Homes:
    """The suite's dirs (controller) and this worker's homes (made by its first test)."""

    def __init__(self) -> None:
        self.made: WorkerHomes | None = None
        self.users_home = os.environ.get("PGLAB_HOME")  # put back at the end
        self.basetemp: Path | None = None
        self.failed = False  # the controller's: some test failed

    @staticmethod
    def of(config: pytest.Config) -> Homes:
        if _KEY not in config.stash:
            config.stash[_KEY] = Homes()
        return config.stash[_KEY]

    def make_suite_dirs(self, config: pytest.Config) -> None:
        """The controller's part: the suite's dirs, and those of suites that were killed,
        or kept for their failed tests, removed."""
        roots = [(DISK_ENV, Path(tempfile.gettempdir()))]
        if in_ram_possible():
            roots.append((RAM_ENV, RAM_ROOT))
        for env, root in roots:
            for found in root.glob(f"{SUITE_DIR_PREFIX}*"):
                if stale(found.name, SUITE_DIR_PREFIX, psutil.pid_exists):
                    remove_unmounted(found)
            suite = root / f"{SUITE_DIR_PREFIX}{os.getpid()}"
            suite.mkdir(mode=0o711, exist_ok=True)
            os.environ[env] = str(suite)  # the workers, started later, inherit it
        if config.option.basetemp is None and RAM_ENV in os.environ:
            config.option.basetemp = str(Path(os.environ[RAM_ENV]) / KEPT)

    def worker(self) -> WorkerHomes:
        """This worker's homes, made on first use."""
        if self.made is not None:
            return self.made
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        disk_dir = Path(os.environ[DISK_ENV])  # made by the controller
        disk = Path(tempfile.mkdtemp(prefix=f"home-{worker}-", dir=disk_dir))
        disk_tmp = disk_dir / KEPT
        disk_tmp.mkdir(exist_ok=True)
        ram_dir = os.environ.get(RAM_ENV)
        ram = Path(tempfile.mkdtemp(prefix=f"home-{worker}-", dir=ram_dir)) if ram_dir else disk
        for home in dict.fromkeys((ram, disk)):
            home.chmod(0o711)
            # As pglab marks them when it makes them (paths.spread_subdirs), before the
            # tests that make their servers here by hand: each data dir's files in a block
            # group of its own
            for name in ("labs", "templates"):
                ensure_dir(home / name, spread=True)
            make_reachable(home)
        disk_tmp.chmod(0o711)
        make_reachable(disk_tmp)
        spread_subdirs(disk_tmp)  # each test's tmp_path (its runs' results) apart too
        self.made = WorkerHomes(ram, disk, disk_tmp)
        return self.made

    def footprint(self) -> tuple[tuple[bool, int], ...]:
        """What making a server or a template changes in a PGLAB_HOME: its labs and
        templates dirs (an entry added or removed)."""
        out = []
        for home in self.worker().all():
            for name in ("labs", "templates"):
                try:
                    out.append((True, (home / name).stat().st_mtime_ns))
                except FileNotFoundError:
                    out.append((False, 0))
        return tuple(out)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        homes = self.worker()
        # set before its fixtures are: a module fixture's servers are where its tests' are
        os.environ["PGLAB_HOME"] = str(homes.disk if needs_of(item).on_disk else homes.ram)
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        item.stash[_FOOTPRINT] = self.footprint()  # before any fixture: module ones count too
        if self.basetemp:  # each pytest that starts makes /tmp/pytest-of-USER 0700 again:
            make_reachable(self.basetemp)  # undo it (for servers using a dir of tmp_path)
        yield

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        yield
        if not item.get_closest_marker("live") and self.footprint() != item.stash[_FOOTPRINT]:
            raise AssertionError("this test (or its fixture) made a server or a template: "
                                 "mark it @pytest.mark.live (tests/README.md)")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for home in self.made.all() if self.made else ():  # its fixtures are torn down
            remove_unmounted(home)
        if not os.environ.get("PYTEST_XDIST_WORKER"):
            self.failed = self.failed or bool(session.testsfailed)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.failed:
            kept = [str(Path(os.environ[env]) / KEPT) for env in (RAM_ENV, DISK_ENV)
                    if env in os.environ and (Path(os.environ[env]) / KEPT).exists()]
            if kept:
                terminalreporter.write_line(f"the failed tests' temp dirs are kept until the "
                                            f"next suite starts: {' and '.join(kept)}")


@pytest.hookimpl(tryfirst=True)  # before pytest's tmpdir plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    homes = Homes.of(config)
    config.pluginmanager.register(homes, "pglab-homes")
    if not hasattr(config, "workerinput"):
        homes.make_suite_dirs(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    failed = Homes.of(config).failed
    for env in (RAM_ENV, DISK_ENV):
        if suite := os.environ.get(env):
            # the temp dirs of failed tests kept (until the next suite starts), the homes
            # removed (the workers removed their own)
            for path in (Path(suite).iterdir() if failed else [Path(suite)]):
                if not path.name.startswith(KEPT):
                    remove_unmounted(path)


@pytest.fixture(scope="session", autouse=True)
def _worker_dirs(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """This worker's pytest temp dir reachable by the servers' user (PGLAB_HOME put back as
    it was at the end)."""
    homes = Homes.of(request.config)
    homes.basetemp = tmp_path_factory.getbasetemp()
    make_reachable(homes.basetemp)
    spread_subdirs(homes.basetemp)  # each test's tmp_path (its runs' results) apart too
    yield
    if homes.users_home is None:
        os.environ.pop("PGLAB_HOME", None)
    else:
        os.environ["PGLAB_HOME"] = homes.users_home


@pytest.fixture(scope="module")
def pglab_home() -> Path:
    """The PGLAB_HOME of the module's tests: in RAM, or on the host's disk for those marked
    so (the tests of a module that use it are one or the other: units._check_homes)."""
    return Path(os.environ["PGLAB_HOME"])


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pytest's own, in RAM with the rest of pytest's temp dir; on the host's disk for a
    test whose servers are there (it may make its volumes' files in it)."""
    name = re.sub(r"\W", "_", request.node.name)[:30]
    if not needs_of(request.node).on_disk:
        return tmp_path_factory.mktemp(name, numbered=True)
    path = Path(tempfile.mkdtemp(prefix=name, dir=Homes.of(request.config).worker().disk_tmp))
    make_reachable(path)
    return path
