"""Fixtures for tests against real PostgreSQL servers and the real pglab CLI.

The whole session shares one PGLAB_HOME (binaries copy, template data dirs), so a
template is built once and reused, exactly as repeated runs reuse it for a user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

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


# mypy --strict over src, tests and bench takes 30-40 s of one CPU from cold, as in CI's
# fresh clone. Most of this suite waits on timed loads, so test_static's mypy is started
# with the session at the lowest CPU priority, in a session (and so a scheduling group)
# of its own: it takes only what the loads leave idle, and the test collects its verdict.
MYPY_TEST = ("test_static.py", "test_mypy_strict_is_clean")


@dataclass
class Background:
    proc: subprocess.Popen[bytes]
    output: IO[bytes]


_background: dict[str, Background] = {}


def _set_priority(pid: int, nice: int) -> None:
    # With autogroup scheduling only the group's nice value counts against other sessions
    # (the servers run in theirs); the process's own counts inside its group. Making
    # them 0 again needs root: otherwise the job finishes at low priority.
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, nice)


def pytest_collection_finish(session: pytest.Session) -> None:
    if any((item.path.name, item.name) == MYPY_TEST for item in session.items):
        output = tempfile.TemporaryFile()  # noqa: SIM115 (closed when the job is collected)
        proc = subprocess.Popen([sys.executable, "-m", "mypy"], cwd=ROOT, stdout=output,
                                stderr=subprocess.STDOUT, start_new_session=True)
        _set_priority(proc.pid, 19)
        _background["mypy"] = Background(proc, output)


def finish_background(name: str) -> tuple[int, str] | None:
    """The exit code and output of a job started with the session (None: not started)."""
    job = _background.pop(name, None)
    if job is None:
        return None
    _set_priority(job.proc.pid, 0)  # a test waits on it now
    code = job.proc.wait()
    job.output.seek(0)
    text = job.output.read().decode(errors="replace")
    job.output.close()
    return code, text


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for job in _background.values():  # a session cut short leaves nothing running
        job.proc.kill()
        job.proc.wait()
        job.output.close()
    _background.clear()
