"""Fixtures for tests against real PostgreSQL servers and the real pglab CLI, and the
rules that let the suite run in parallel (tests/README.md explains them).

Each xdist worker has its own PGLAB_HOME (binaries copy, template data dirs, labs), so a
template is built once per worker and reused, exactly as repeated runs reuse it for a
user, and one worker's servers never count as another's leftovers.

Markers: `live` (starts servers, spawns loads, touches cgroups or kernel knobs) and
`exclusive` (needs the machine alone: kernel knobs, limits measured from inside a
cgroup, timing-sensitive scenario checks). Every test holds a shared flock on one
machine-wide file while it runs; an exclusive one holds it exclusively, so it overlaps no
other test of any pglab suite on the machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

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
)

# --- the machine lock: live tests share it, exclusive tests hold it alone ------------------

LOCK_PATH = Path(tempfile.gettempdir()) / "pglab-tests.lock"
# A waiting exclusive test takes the gate first, so that a stream of shared holders (two
# workers, or other suites) cannot starve it: new shared holders queue behind the gate.
GATE_PATH = Path(tempfile.gettempdir()) / "pglab-tests.gate"


def _lock_file(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    with contextlib.suppress(PermissionError):  # made by another user's suite
        os.fchmod(fd, 0o666)  # the first suite to run may be root's or a user's
    return fd


def _acquire(exclusive: bool) -> int:
    gate, lock = _lock_file(GATE_PATH), _lock_file(LOCK_PATH)
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    fcntl.flock(gate, mode)
    fcntl.flock(lock, mode)
    os.close(gate)  # closing drops the gate's lock
    return lock


def _release(lock: int) -> None:
    os.close(lock)  # and the machine lock's


# The lock this worker holds: (fd, exclusive). An exclusive test followed by another one
# on the same worker keeps it: the other worker is drained once for the batch, not once
# per test (each drain waits out whatever test it is running, a tune of a minute, say).
_HELD: list[tuple[int, bool]] = []


def _exclusive(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("exclusive") is not None


@contextlib.contextmanager
def machine_alone() -> Iterator[None]:
    """For a module fixture that measures (real runs compared by its tests, which only
    read them): the machine alone while it is made, the shared lock again after."""
    if not _HELD or _HELD[0][1]:
        yield  # no lock to trade (run without the protocol hook) or already alone
        return
    lock = _HELD[0][0]
    # Shared lock first dropped, so that two workers trading up at once cannot each hold
    # what the other waits for; then as an exclusive test takes it.
    fcntl.flock(lock, fcntl.LOCK_UN)
    gate = _lock_file(GATE_PATH)
    fcntl.flock(gate, fcntl.LOCK_EX)
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.close(gate)
    try:
        yield
    finally:
        fcntl.flock(lock, fcntl.LOCK_SH)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: starts servers or loads, touches cgroups, "
                            "kernel knobs or the machine (deselect with -m 'not live')")
    config.addinivalue_line("markers", "exclusive: needs the machine alone (kernel knobs, "
                            "limits measured from inside a cgroup, timing-sensitive runs); "
                            "implies live")


SECONDS_KEY = "pglab/module-seconds"  # each test module's time in the last run, in .pytest_cache


def _module(nodeid: str) -> str:
    return nodeid.split("::", maxsplit=1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("exclusive") and not item.get_closest_marker("live"):
            item.add_marker(pytest.mark.live)
    # Longest modules first (xdist hands out whole modules, in this order), so that no
    # long module starts last while the other worker has nothing left. Without a record
    # of the last run: modules with exclusive tests, then live ones, then the rest.
    cache = getattr(config, "cache", None)
    seconds: dict[str, float] = cache.get(SECONDS_KEY, {}) if cache else {}
    rank: dict[str, tuple[float, int]] = {}
    for item in items:
        kind = 0 if item.get_closest_marker("exclusive") else 1 if item.get_closest_marker(
            "live") else 2
        module = _module(item.nodeid)
        rank[module] = (-seconds.get(module, 0.0), min(kind, rank.get(module, (0, 2))[1]))
    # Within a module its exclusive tests first, one batch under one drain of the other
    # worker (see _HELD); otherwise in file order.
    items.sort(key=lambda item: (rank[_module(item.nodeid)], not _exclusive(item)))


_spent: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _spent[_module(report.nodeid)] = _spent.get(_module(report.nodeid), 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if getattr(session.config, "cache", None) is not None and _spent and not os.environ.get(
            "PYTEST_XDIST_WORKER"):
        known: dict[str, float] = session.config.cache.get(SECONDS_KEY, {})
        session.config.cache.set(SECONDS_KEY, {**known, **_spent})


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item,
                            nextitem: pytest.Item | None) -> Generator[None, object, object]:
    # Outside pytest-timeout's wrapper: waiting for the lock is not the test's time.
    exclusive = _exclusive(item)
    if _HELD and _HELD[0][1] != exclusive:
        _release(_HELD.pop()[0])
    if not _HELD:
        _HELD.append((_acquire(exclusive), exclusive))
    try:
        return (yield)
    finally:
        if not (exclusive and _exclusive(nextitem)):
            _release(_HELD.pop()[0])


_HOME: list[Path] = []  # this session's PGLAB_HOME, once the pglab_home fixture made it
_FRESH = ((False, 0), (False, 0))  # a PGLAB_HOME before anything ran
_FOOTPRINT = pytest.StashKey[tuple[tuple[bool, int], ...]]()


def _footprint() -> tuple[tuple[bool, int], ...]:
    """What making a server or a template changes in PGLAB_HOME: its labs and templates
    dirs (created, or an entry added or removed)."""
    if not _HOME:
        return _FRESH
    out = []
    for name in ("labs", "templates"):
        try:
            out.append((True, (_HOME[0] / name).stat().st_mtime_ns))
        except FileNotFoundError:
            out.append((False, 0))
    return tuple(out)


def _reachable(path: Path) -> None:
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
    if _HOME:  # each pytest that starts makes /tmp/pytest-of-USER 0700 again: undo it
        _reachable(_HOME[0])
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
def pglab_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("pglab-home")
    _reachable(home)
    old = os.environ.get("PGLAB_HOME")
    os.environ["PGLAB_HOME"] = str(home)
    _HOME.append(home)
    yield home
    if old is None:
        del os.environ["PGLAB_HOME"]
    else:
        os.environ["PGLAB_HOME"] = old


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


TINY = """
[workload]
scale = 1
clients = 2
jobs = 2
duration = "3s"
warmup = "1s"
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
