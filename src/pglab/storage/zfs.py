"""ZFS volumes: a pool of pglab's own on the volume's device (Debian's zfs-fuse), or a
dataset of the user's existing pool (kernel OpenZFS or zfs-fuse; the same commands).

zfs-fuse is userspace ZFS at pool version 23: recordsize up to 128K, compression
on/lzjb/gzip/zle, no `sync` property, no lz4 or zstd. Its absolute timings do not carry
over to kernel OpenZFS; what it is for is A/B directions (recordsize 8K vs 16K, logbias,
compression). Its daemon is machine-wide: pglab starts one when none answers, records
it in /run/pglab/zfs-fuse.json, and stops it when the last pglab using it is done (or
the next pglab does, after a kill). A daemon pglab did not start is never stopped.

Names carry pglab's pid (`pglab-<pid>-<node>-<role>`), so the reaper can tell the pools
and datasets of a dead pglab from everyone else's without a state file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from pglab.errors import EnvironmentProblem, PglabError
from pglab.paths import RUN_DIR, machine_lock
from pglab.storage.filesystems import MB, Filesystem, FsOption, mount_entry, run_tool
from pglab.system_parts import PARTS

_ON_OFF = ("on", "off")
_FUSE_RECORDSIZES = tuple(f"{n}k" for n in (1, 2, 4, 8, 16, 32, 64, 128))
_COMPRESSION = ("on", "off", "lzjb", "gzip", *(f"gzip-{n}" for n in range(1, 10)), "zle")
NAME_RE = re.compile(r"(?:^|/)pglab-(\d+)-[a-z0-9-]+$")

# What kernel OpenZFS has and zfs-fuse (pool version 23) has not: allowed only on the
# user's own pool (storage.pool), where the zfs command itself has the last word.
FUSE_ONLY_REFUSED = {
    "sync": "zfs-fuse (pool version 23) has no sync property; use storage.pool with a "
            "pool of kernel OpenZFS",
}
POOL_EXTRA_VALUES = {
    "compression": ("lz4", "zstd"),
    "recordsize": ("256k", "512k", "1m"),
}


def zfs_name(owner_pid: int, node: str, role: str) -> str:
    return f"pglab-{owner_pid}-{node}-{role}"


class Zfs(Filesystem):
    name = "zfs"
    help = ("ZFS: a pool of its own through zfs-fuse (userspace, pool version 23), or a "
            "dataset of storage.pool; A/B directions carry over, absolute numbers do not")
    min_size = 128 * MB
    options = (
        FsOption("recordsize", "record size (zfs-fuse: 1k to 128k)", _FUSE_RECORDSIZES),
        FsOption("compression", "compression (zfs-fuse: no lz4 or zstd)", _COMPRESSION),
        FsOption("logbias", "ZIL use for synchronous writes", ("latency", "throughput")),
        FsOption("primarycache", "what the ARC caches", ("all", "none", "metadata")),
        FsOption("secondarycache", "what the L2ARC caches", ("all", "none", "metadata")),
        FsOption("atime", "update access times", _ON_OFF),
        FsOption("copies", "copies of each block", ("1", "2", "3")),
        FsOption("checksum", "block checksums", ("on", "off", "fletcher2", "fletcher4",
                                                 "sha256")),
        FsOption("sync", "synchronous write semantics (kernel OpenZFS pools only)",
                 ("standard", "always", "disabled")),
    )

    def check_value(self, name: str, value: str, own_pool: bool) -> str | None:
        """None when accepted; what is expected otherwise (the pool changes the answer)."""
        if not own_pool and name in FUSE_ONLY_REFUSED:
            return FUSE_ONLY_REFUSED[name]
        if own_pool and value in POOL_EXTRA_VALUES.get(name, ()):
            return None
        opt = self.option(name)
        if opt is None:
            return "no such option"
        problem = opt.check(value)
        if problem and not own_pool and value in POOL_EXTRA_VALUES.get(name, ()):
            return f"zfs-fuse (pool version 23) has no {name} = {value}; {problem}"
        return problem

    # --- a pool of pglab's own, on the volume's device ----------------------------------

    def create(self, device: Path, mountpoint: Path, options: dict[str, str],
               label: str) -> None:
        ensure_daemon()
        mountpoint.mkdir(parents=True, exist_ok=True)
        props = [a for name, value in options.items() for a in ("-O", f"{name}={value}")]
        run_tool(["zpool", "create", "-f", "-m", str(mountpoint), *props, label, str(device)],
                 "zpool create")
        _wait_mounted(mountpoint)

    def create_dataset(self, pool: str, mountpoint: Path, options: dict[str, str],
                       label: str) -> str:
        """A dataset of the user's pool; its full name."""
        ensure_daemon_if_fuse()
        mountpoint.mkdir(parents=True, exist_ok=True)
        name = f"{pool}/{label}"
        props = [a for k, v in options.items() for a in ("-o", f"{k}={v}")]
        run_tool(["zfs", "create", "-o", f"mountpoint={mountpoint}", *props, name],
                 "zfs create")
        _wait_mounted(mountpoint)
        return name

    def read_back(self, device: Path, mountpoint: Path,
                  options: dict[str, str]) -> dict[str, Any]:
        return {}  # see read_dataset: a ZFS volume is read back by its dataset name

    def read_dataset(self, dataset: str, options: dict[str, str]) -> dict[str, Any]:
        wanted = sorted({*options, "recordsize", "compression", "logbias", "primarycache",
                         "atime"})
        text = run_tool(["zfs", "get", "-H", "-o", "property,value", ",".join(wanted),
                         dataset], "zfs get")
        values = dict(line.split("\t", 1) for line in text.splitlines() if "\t" in line)
        facts: dict[str, Any] = {"options": {k: values.get(k, "?").lower() for k in options},
                                 "properties": {k: v.lower() for k, v in values.items()},
                                 "dataset": dataset}
        with contextlib.suppress(PglabError):
            pool = dataset.split("/", maxsplit=1)[0]
            version = run_tool(["zpool", "get", "-H", "-o", "value", "version", pool],
                               "zpool get").strip()
            facts["pool_version"] = version
        daemon = _daemon_args()
        if daemon is not None:
            facts["zfs_fuse_args"] = daemon
        return facts

    def remove(self, device: Path, mountpoint: Path, label: str) -> None:
        destroy(label)


def _zfs_ok() -> bool:
    try:
        return subprocess.run(["zpool", "list", "-H"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _daemon_args() -> list[str] | None:
    """The running zfs-fuse daemon's options (its ARC size, its block cache): a daemon
    pglab did not start may have others, and the run's caches depend on them."""
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "zfs-fuse" and proc.info["cmdline"]:
            return [str(a) for a in proc.info["cmdline"][1:]]
    return None


def _wait_mounted(mountpoint: Path, timeout: float = 10) -> None:
    # zfs-fuse mounts asynchronously: the command returns before the FUSE mount is up.
    deadline = time.monotonic() + timeout
    while mount_entry(mountpoint) is None:
        if time.monotonic() > deadline:
            raise PglabError(f"ZFS did not mount {mountpoint} within {timeout:.0f} s")
        time.sleep(0.05)


def _daemon_file() -> Path:
    return RUN_DIR / "zfs-fuse.json"


def _users_dir() -> Path:
    return RUN_DIR / "zfs-fuse-users"


# Held while the daemon is checked and started, or found unused and stopped: otherwise a
# pglab could find the daemon another is stopping still there (and use it as it goes), or
# start a second one while the first has not exited (which refuses to run beside it).
DAEMON_LOCK = "zfs-fuse"

# The daemon's caches, fixed whatever /etc/zfs/zfsrc says, so that a run's data can be
# made larger than every cache between PostgreSQL and the device (docs/STORAGE.md): the
# ARC at 128 MB, and no kernel block cache of the pool's device (zfs-fuse reads its vdev
# buffered by default, a page cache no envelope bounds, where kernel ZFS has only the ARC).
ARC_MAX_MB = 128
DAEMON_ARGS = ("--no-daemon", "--max-arc-size", str(ARC_MAX_MB), "--disable-block-cache")


def ensure_daemon_if_fuse() -> None:
    """Kernel OpenZFS needs no daemon; zfs-fuse does."""
    if not _zfs_ok() and Path("/usr/sbin/zfs-fuse").exists():
        ensure_daemon()


def ensure_daemon() -> None:
    """A zfs-fuse daemon that answers, started (and recorded) when none does."""
    with machine_lock(DAEMON_LOCK):
        _ensure_daemon()


def _ensure_daemon() -> None:
    users = _users_dir()
    users.mkdir(parents=True, exist_ok=True)
    (users / str(os.getpid())).touch()
    if _zfs_ok():
        return
    binary = "/usr/sbin/zfs-fuse"
    if not Path(binary).exists():
        raise EnvironmentProblem(f"ZFS without the kernel's OpenZFS needs zfs-fuse ({binary} "
                                 f"not found): {PARTS['zfs-fuse'].install}")
    # Its own session and no parent-death signal: if pglab is killed, the pools stay
    # consistent until the next pglab destroys them and stops the daemon.
    proc = subprocess.Popen([binary, *DAEMON_ARGS], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    _daemon_file().write_text(json.dumps({"pid": proc.pid}))
    deadline = time.monotonic() + 15
    while not _zfs_ok():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise EnvironmentProblem("zfs-fuse did not start (is /dev/fuse there, and "
                                     "another zfs daemon not running?)")
        time.sleep(0.1)


def destroy(name: str) -> None:
    """Destroy a pool (no '/') or a dataset; nothing if it is not there."""
    if not _zfs_ok():
        return
    argv = ["zfs", "destroy", "-r", "-f", name] if "/" in name else ["zpool", "destroy", "-f", name]
    message = ""
    deadline = time.monotonic() + 20
    while True:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        message = (result.stderr or result.stdout).strip()
        if result.returncode == 0 or "no such" in message or "does not exist" in message:
            return
        if time.monotonic() > deadline:
            raise PglabError(f"could not destroy ZFS {name}: {message}")
        # zfs-fuse releases a dataset's FUSE mount a moment after its last user is gone
        subprocess.run(["zfs", "unmount", "-f", name], capture_output=True, timeout=60)
        time.sleep(0.5)


def release_daemon() -> None:
    """This pglab is done with ZFS: stop the daemon pglab started once nobody uses it."""
    with contextlib.suppress(FileNotFoundError):
        (_users_dir() / str(os.getpid())).unlink()
    _stop_unused_daemon()


def _stop_unused_daemon() -> None:
    with machine_lock(DAEMON_LOCK):
        _stop_if_unused()


def _stop_if_unused() -> None:
    users = _users_dir()
    live = []
    if users.is_dir():
        for entry in users.iterdir():
            if entry.name.isdigit() and psutil.pid_exists(int(entry.name)):
                live.append(entry)
            else:
                entry.unlink(missing_ok=True)
    if live:
        return
    try:
        pid = int(json.loads(_daemon_file().read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    if any(psutil.pid_exists(owner) for _, owner in _pglab_names()):
        return  # a pool of another pglab is still up
    # Only dead pglabs' pools left, which could not be destroyed: a daemon that called one
    # busy for good (its dataset unmounted, nothing using it) was wedged, and answered
    # SIGTERM with nothing. Stopped, it lets the next pglab remove what is under them.
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.05)
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
            # what it mounts for itself stays after a SIGKILL, and would be in the way of
            # the next daemon
            subprocess.run(["fusermount3", "-u", "-z", "/zfs-kstat"], capture_output=True)
    _daemon_file().unlink(missing_ok=True)


def _pglab_names() -> list[tuple[str, int]]:
    if not _zfs_ok():
        return []
    out = subprocess.run(["zfs", "list", "-H", "-o", "name"], capture_output=True, text=True,
                         timeout=30).stdout
    found = []
    for name in out.split():
        match = NAME_RE.search(name)
        if match:
            found.append((name, int(match.group(1))))
    return found


def reap_stale_zfs() -> list[str]:
    """Destroy the pools and datasets of pglabs that died; stop a daemon left unused."""
    reaped: list[str] = []
    if not _daemon_file().exists() and not _zfs_ok():
        return reaped
    # A user of the daemon while it destroys: else a pglab done with ZFS meanwhile finds no
    # user and no pool left once the pool is gone, and stops the daemon under the destroy's
    # retry, which then fails ("connect: No such file or directory").
    entry = _users_dir() / str(os.getpid())
    with machine_lock(DAEMON_LOCK):
        registered = not entry.exists()
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.touch()
    failed: list[str] = []
    try:
        for name, pid in _pglab_names():
            if pid != os.getpid() and not psutil.pid_exists(pid):
                try:
                    destroy(name)
                except PglabError as exc:  # the others are still destroyed
                    failed.append(str(exc))
                    continue
                reaped.append(name)
    finally:
        if registered:  # not a user before: it uses ZFS for no volume of its own
            entry.unlink(missing_ok=True)
        _stop_unused_daemon()
    if failed:
        raise PglabError("; ".join(failed))
    return reaped
