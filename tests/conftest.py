"""Fixtures for tests against real PostgreSQL servers and the real pglab CLI.

The whole session shares one PGLAB_HOME (binaries copy, template data dirs), so a
template is built once and reused, exactly as repeated runs reuse it for a user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "samples"


@pytest.fixture(scope="session", autouse=True)
def pglab_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("pglab-home")
    if os.geteuid() == 0:
        # As root the server runs as an unprivileged user, who must reach the data dirs.
        for parent in [home, *home.parents]:
            if parent == Path("/"):
                break
            os.chmod(parent, os.stat(parent).st_mode | 0o011)
    old = os.environ.get("PGLAB_HOME")
    os.environ["PGLAB_HOME"] = str(home)
    yield home
    if old is None:
        del os.environ["PGLAB_HOME"]
    else:
        os.environ["PGLAB_HOME"] = old


@pytest.fixture(scope="session")
def pgbouncer_binary() -> str:
    """PgBouncer from Debian's package; installed here when root (as CI is)."""
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer"
                                          if Path("/usr/sbin/pgbouncer").is_file() else None)
    if found is None and shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "-o", "DPkg::Lock::Timeout=600",
                        "pgbouncer"], capture_output=True, check=False)
        found = "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").is_file() else None
    if found is None:
        pytest.skip("PgBouncer is not installed (apt-get install pgbouncer) and not root")
    return found


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


STORAGE_PACKAGES = {"nbdfuse": "libnbd-bin", "fusermount3": "fuse3", "mkfs.xfs": "xfsprogs",
                    "mkfs.btrfs": "btrfs-progs", "zpool": "zfs-fuse", "mkfs.ext4": "e2fsprogs",
                    "sfdisk": "fdisk"}  # sfdisk: a test writes a partition table


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
