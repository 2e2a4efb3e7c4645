"""Helpers and fixtures for tests against real PostgreSQL servers and the real pglab CLI.

The rules that let the suite run in parallel (tiers, machine locks, CPU weight, work units,
homes) are plugins in tests/plugins/, each with its decisions as pure functions that
test_harness.py tests; tests/README.md says which marker a new test takes.
"""

from __future__ import annotations

import compileall
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

pytest_plugins = ["plugins.needs", "plugins.cpu_weight", "plugins.locks", "plugins.durations",
                  "plugins.units", "plugins.xdist_units", "plugins.homes", "plugins.skips"]

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "samples"
PG15_BIN = Path("/usr/lib/postgresql/15/bin")
ROOT_USER = os.geteuid() == 0


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        # pglab's modules as bytecode, for the hundreds of `python -m pglab` the tests
        # start: where PYTHONDONTWRITEBYTECODE is set (as in this machine's environment)
        # each of them compiled all of pglab again, half a second of CPU a command, a
        # minute and a half of a suite bound by CPU. Python reads bytecode all the same.
        compileall.compile_dir(ROOT / "src" / "pglab", quiet=1)


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
