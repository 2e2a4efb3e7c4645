"""Where pglab keeps its own state: copies of binaries, template data dirs, lab dirs.

Results go where the user says (./results by default); everything here is a cache or a
throwaway and can be deleted at any time when no run is in progress.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
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


def ensure_dir(path: Path, mode: int = 0o755, spread: bool = False) -> Path:
    """`path` made with its parents, at `mode`; with `spread`, a parent of throwaway
    directories (labs, templates): see spread_subdirs."""
    path.mkdir(parents=True, exist_ok=True)
    # mkdir's mode is filtered by the umask; the unprivileged server user needs o+x here.
    os.chmod(path, mode)
    if spread:
        spread_subdirs(path)
    return path


# ioctl numbers and the flag of chattr +T (linux/fs.h); the flags are a C int.
FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_TOPDIR_FL = 0x80086601, 0x40086602, 0x00020000


def spread_subdirs(path: Path) -> None:
    """Mark `path` a top of directory hierarchies (chattr +T) where the filesystem has the
    flag (ext2/3/4): ext4 then places each new subdirectory in a block group of its own,
    as it does those of /, starting its search from a hash of the name (a run id: a new
    one each time), instead of next to `path`. Why it matters: a lab's data dir is some
    1,300 files made and removed within minutes, and ext4 without a journal avoids
    reusing an inode deleted in the last hours; a new file made where many were deleted
    first looks past each of them (0.4 ms of kernel CPU a file on a 2-core VM once a few
    labs had come and gone, against 0.02 ms in a group of its own: bench/lab_dir_churn.py).
    Elsewhere, or without the right to set it, nothing changes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        (flags,) = struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 4))
        if not flags & FS_TOPDIR_FL:
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags | FS_TOPDIR_FL))
    except OSError:  # tmpfs, xfs, ...: no such flag; a directory of another user's
        pass
    finally:
        os.close(fd)


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
