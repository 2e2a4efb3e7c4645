"""Reaping what a pglab killed with -9 left: its labs (servers, storage, socket dirs),
cgroups, kernel knobs and network namespaces. A lab's owner is its pid and start time,
since busy machines reuse pids; what cannot go yet, such as a pool zfs-fuse calls busy,
stays for the next pglab, said on a status line."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from pglab.errors import PglabError
from pglab.lab.local import SOCKET_PARENT, kill_server_tree, remove_socket_dir
from pglab.network.hosts import reap_stale_networks
from pglab.paths import labs_dir
from pglab.storage.volume import reap_storage_under

StatusCallback = Callable[[str], None]


def _owner_alive(pid: int, started: float | None) -> bool:
    """The pglab that made a lab is still running: its pid, and (where recorded) the
    same start time, since a busy machine reuses a dead pglab's pid within minutes."""
    try:
        proc = psutil.Process(pid)
        return started is None or abs(proc.create_time() - float(started)) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, TypeError):
        return bool(psutil.pid_exists(pid))


def _postmaster_pid_files(lab: Path) -> list[Path]:
    found: list[Path] = []
    for pattern in ("*/data/postmaster.pid", "*/data-volume/data/postmaster.pid"):
        # A volume left mid-power-loss (pglab killed during the cut) is a filesystem
        # shut down: any look inside fails with EIO, and its server is dead already.
        with contextlib.suppress(OSError):
            found += lab.glob(pattern)
    return found


# A socket dir under /tmp outlives its record when its pglab dies between making it and
# writing the record, or when the lab dir it is recorded in went (a test's home removed, a
# lab dir deleted by hand). Empty for this long, it is no one's: a live server, pooler or
# device server has its socket in it a moment after it is made.
ORPHAN_SOCKET_DIR_S = 3600.0


def reap_orphan_socket_dirs() -> list[Path]:
    """Remove pglab's empty socket dirs under /tmp older than ORPHAN_SOCKET_DIR_S."""
    reaped = []
    for path in Path(SOCKET_PARENT).glob("pglab-*"):
        with contextlib.suppress(OSError):
            if (path.is_dir() and not path.is_symlink() and not any(path.iterdir())
                    and time.time() - path.stat().st_mtime > ORPHAN_SOCKET_DIR_S):
                path.rmdir()
                reaped.append(path)
    return reaped


def reap_stale_labs(on_problem: StatusCallback | None = None) -> list[Path]:
    """Stop servers and remove dirs of labs whose pglab process no longer exists.

    What cannot be removed yet (a pool zfs-fuse still calls busy) stays, with its lab dir,
    for the next pglab to try again: `on_problem` is told, and the command that reaps goes
    on. Without `on_problem` that is a PglabError."""
    from pglab.lab.cgroups import reap_stale_cgroups
    from pglab.lab.kernel import restore_stale_knobs
    reap_stale_cgroups()
    restore_stale_knobs()
    reap_stale_networks()
    reap_orphan_socket_dirs()
    root = labs_dir()
    reaped: list[Path] = []
    if not root.is_dir():
        return reaped
    for lab in root.iterdir():
        owner = lab / "owner.json"
        try:
            record = json.loads(owner.read_text())
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _owner_alive(pid, record.get("started")) or (lab / "keep").exists():
            continue
        for pid_file in _postmaster_pid_files(lab):
            with contextlib.suppress(OSError, ValueError, IndexError):
                postmaster = int(pid_file.read_text().splitlines()[0])
                proc = psutil.Process(postmaster)
                if str(pid_file.parent) in " ".join(proc.cmdline()):
                    os.kill(postmaster, signal.SIGQUIT)
                    kill_server_tree(postmaster)
        for node_dir in lab.iterdir():
            remove_socket_dir(node_dir)
        try:
            reap_storage_under(lab)  # unmounted before the dir goes: never through a mount
        except PglabError as exc:
            if on_problem is None:
                raise
            on_problem(f"left for the next pglab: what pglab {pid} left in {lab} "
                       f"({exc})")
            continue
        shutil.rmtree(lab, ignore_errors=True)
        reaped.append(lab)
    return reaped
