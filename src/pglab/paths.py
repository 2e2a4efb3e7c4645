"""Where pglab keeps its own state: copies of binaries, template data dirs, lab dirs.

Results go where the user says (./results by default); everything here is a cache or a
throwaway and can be deleted at any time when no run is in progress.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

# Machine-wide state, for what is machine-wide itself (kernel knobs, the zfs-fuse daemon):
# pglabs with different PGLAB_HOMEs must see each other there. /run is emptied by a reboot,
# which also resets the knobs and ends the daemon.
RUN_DIR = Path("/run/pglab")


def pglab_home() -> Path:
    """PGLAB_HOME, else a per-user cache dir; as root a world-traversable one.

    As root the server runs as an unprivileged user, who must reach the data dirs and
    binaries pglab prepares, and root's home is usually private (mode 700).
    """
    explicit = os.environ.get("PGLAB_HOME")
    if explicit:
        return Path(explicit)
    if os.geteuid() == 0:
        return Path("/var/tmp/pglab")
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "pglab"


def ensure_dir(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    # mkdir's mode is filtered by the umask; the unprivileged server user needs o+x here.
    os.chmod(path, mode)
    return path


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """An exclusive flock on RUN_DIR/<name>.lock for the body: one pglab at a time on the
    machine (root only, as everything under RUN_DIR is)."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with open(RUN_DIR / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def labs_dir() -> Path:
    """Parent of the throwaway servers' dirs (PGLAB_WORKDIR puts data on another disk)."""
    explicit = os.environ.get("PGLAB_WORKDIR")
    return Path(explicit) if explicit else pglab_home() / "labs"
