"""The filesystem registry: what each accepts, how it is made and mounted, and read back.

One entry per filesystem drives validation (before anything starts), volume creation,
the manifest's "options as applied", `pglab storage` and docs/STORAGE.md's table (checked by
a test). Options are written in the scenario as `options = { key = value }`; booleans
mean on/off. Each option is applied either when the filesystem is made (mkfs) or when
it is mounted, and every one is read back from the kernel or the filesystem's own tool
after mounting: what the manifest records is what the filesystem says, not what was
asked.

ZFS is different in kind (a pool and a dataset with properties rather than mkfs and
mount), so it lives in storage/zfs.py under the same interface; storage/registry.py
holds the one list of all of them.
"""

from __future__ import annotations

import re
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pglab.processes import run_to_end
from pglab.system_parts import FILESYSTEM_PARTS, PARTS, Part

MB = 1024 * 1024


@dataclass(frozen=True)
class FsOption:
    name: str
    help: str
    choices: tuple[str, ...] = ()  # accepted values, or () with `pattern`
    pattern: str = ""  # a regex a value must match when there are no choices
    expects: str = ""  # what a value must be, for the error when `pattern` fails
    mount: Callable[[str], str] | None = None  # value -> a mount option
    mkfs: Callable[[str], list[str]] | None = None  # value -> mkfs arguments
    refused: str = ""  # why it cannot be used (e.g. not in zfs-fuse's pool version)

    def check(self, value: str) -> str | None:
        """None when the value is accepted, else what is expected."""
        if self.refused:
            return self.refused
        if self.choices:
            return None if value in self.choices else f"expected one of {', '.join(self.choices)}"
        if self.pattern and not re.fullmatch(self.pattern, value):
            return f"expected {self.expects}"
        return None


def option_text(value: bool | int | str) -> str:
    """A scenario's option value as the filesystem's tools write it (true -> 'on')."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value).lower() if isinstance(value, str) else str(value)


def run_tool(argv: list[str], what: str, timeout: float = 120) -> str:
    """A storage tool, run to its end (processes.run_to_end) within `timeout`: a mkfs or
    mount that hangs is a broken device, not a slow one."""
    return run_to_end(argv, what, timeout)


class Filesystem(ABC):
    name: str
    help: str
    min_size: int
    options: tuple[FsOption, ...] = ()
    shutdown_ioctl: bool = False  # supports FS_IOC_SHUTDOWN (a power cut, durability)

    def option(self, name: str) -> FsOption | None:
        return next((o for o in self.options if o.name == name), None)

    def check_value(self, name: str, value: str, own_pool: bool) -> str | None:
        """None when the option and value are accepted, else what is expected."""
        opt = self.option(name)
        return "no such option" if opt is None else opt.check(value)

    def conflict(self, options: dict[str, str]) -> str | None:
        """Options that are each valid but do not work together, said in one line."""
        return None

    @property
    def part(self) -> Part:
        """The system part with the tools that make and read back this filesystem."""
        return PARTS[FILESYSTEM_PARTS[self.name]]

    @property
    def package(self) -> str:
        return self.part.name

    @abstractmethod
    def create(self, device: Path, mountpoint: Path, options: dict[str, str],
               label: str) -> None:
        """Make the filesystem on `device` and mount it at `mountpoint`."""

    @abstractmethod
    def read_back(self, device: Path, mountpoint: Path,
                  options: dict[str, str]) -> dict[str, Any]:
        """What the filesystem says of itself once mounted: {'options': {...}, ...}."""

    @abstractmethod
    def remove(self, device: Path, mountpoint: Path, label: str) -> None:
        """Unmount (and for pools, destroy); safe to call on a half-made volume."""


def mount_entry(mountpoint: Path) -> tuple[str, str, list[str]] | None:
    """(device, fstype, options) of the mount at `mountpoint`, from /proc/self/mounts."""
    target = str(mountpoint)
    found = None
    try:
        text = Path("/proc/self/mounts").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1].replace("\\040", " ") == target:
            found = (parts[0], parts[2], parts[3].split(","))  # the last one is on top
    return found


def unmount(mountpoint: Path) -> None:
    """Unmount if mounted; a busy or dead mount is detached lazily rather than left."""
    if mount_entry(mountpoint) is None:
        return
    result = subprocess.run(["umount", str(mountpoint)], capture_output=True, text=True)
    if result.returncode != 0 and mount_entry(mountpoint) is not None:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, text=True)


class _Mkfs(Filesystem):
    """ext4, XFS and btrfs: mkfs on the block device, then mount with options."""

    mkfs_tool: str
    fstype: str
    base_mkfs: tuple[str, ...] = ()
    base_mount: tuple[str, ...] = ()

    def mkfs_argv(self, device: Path, options: dict[str, str], label: str) -> list[str]:
        argv = [self.mkfs_tool, *self.base_mkfs, "-L", label[:12]]
        for name, value in options.items():
            opt = self.option(name)
            if opt is not None and opt.mkfs is not None:
                argv += opt.mkfs(value)
        return [*argv, str(device)]

    def mount_options(self, options: dict[str, str]) -> list[str]:
        found = list(self.base_mount)
        for name, value in options.items():
            opt = self.option(name)
            if opt is not None and opt.mount is not None and (text := opt.mount(value)):
                found.append(text)
        return found

    def create(self, device: Path, mountpoint: Path, options: dict[str, str],
               label: str) -> None:
        run_tool(self.mkfs_argv(device, options, label), f"mkfs {self.name}", timeout=300)
        mountpoint.mkdir(parents=True, exist_ok=True)
        self.mount(device, mountpoint, options)

    def mount(self, device: Path, mountpoint: Path, options: dict[str, str]) -> None:
        """Mount a made filesystem (after a power cut: the journal is replayed here)."""
        argv = ["mount", "-t", self.fstype]
        if opts := self.mount_options(options):
            argv += ["-o", ",".join(opts)]
        run_tool([*argv, str(device), str(mountpoint)], f"mount {self.name}")

    def read_back(self, device: Path, mountpoint: Path,
                  options: dict[str, str]) -> dict[str, Any]:
        entry = mount_entry(mountpoint)
        mounted = entry[2] if entry else []
        applied = {name: self.applied(name, value, mounted, device)
                   for name, value in options.items()}
        return {"options": applied, "mount_options": ",".join(mounted)}

    def applied(self, name: str, value: str, mounted: list[str], device: Path) -> str:
        """The value the kernel or the filesystem reports for one asked option."""
        opt = self.option(name)
        if opt is not None and opt.mount is not None:
            return _from_mount(opt.mount(value), value, mounted)
        return value

    def remove(self, device: Path, mountpoint: Path, label: str) -> None:
        unmount(mountpoint)


def _from_mount(asked: str, value: str, mounted: list[str]) -> str:
    """An asked mount option read back from the kernel's list of the mount's options."""
    if "=" in asked:
        key = asked.split("=", 1)[0] + "="
        shown = next((o for o in mounted if o.startswith(key)), None)
        if shown is None:
            return "(not shown by the kernel)"
        return shown.split("=", 1)[1].split(":")[0]  # btrfs shows compress=zstd:3
    if not asked:
        return value
    return value if asked in mounted else f"(kernel shows no {asked})"


_ON_OFF = ("on", "off")
_SECONDS = r"[1-9][0-9]{0,3}"
_SIZE = r"[0-9]+[kmg]"


def _size_bytes(text: str) -> int:
    return int(text[:-1]) * {"k": 1024, "m": MB, "g": 1024 * MB}[text[-1]]


class Ext4(_Mkfs):
    name = "ext4"
    help = "ext4 (e2fsprogs); mkfs zeroes its tables up front, so no lazy init runs later"
    mkfs_tool = "mkfs.ext4"
    fstype = "ext4"
    min_size = 32 * MB
    shutdown_ioctl = True
    # Lazy init would zero inode tables in the background during the measured run.
    base_mkfs = ("-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard")
    options = (
        FsOption("data", "journalling mode", ("ordered", "journal", "writeback"),
                 mount=lambda v: f"data={v}"),
        FsOption("barrier", "cache flushes at journal commits", _ON_OFF,
                 mount=lambda v: "barrier=1" if v == "on" else "nobarrier"),
        FsOption("commit", "seconds between journal commits", pattern=_SECONDS,
                 expects="whole seconds from 1", mount=lambda v: f"commit={v}"),
        FsOption("atime", "update access times", _ON_OFF,
                 mount=lambda v: "" if v == "on" else "noatime"),
        FsOption("journal", "a journal at all (mkfs -O ^has_journal when off)", _ON_OFF,
                 mkfs=lambda v: [] if v == "on" else ["-O", "^has_journal"]),
        FsOption("block_size", "block size in bytes", ("1024", "2048", "4096"),
                 mkfs=lambda v: ["-b", v]),
    )

    def applied(self, name: str, value: str, mounted: list[str], device: Path) -> str:
        if name == "barrier":
            return "off" if "nobarrier" in mounted or "barrier=0" in mounted else "on"
        if name == "data" and not any(o.startswith("data=") for o in mounted):
            return "ordered"  # the default is not listed
        if name == "commit" and not any(o.startswith("commit=") for o in mounted):
            return "5"
        if name in ("journal", "block_size"):
            facts = _dumpe2fs(device)
            if name == "journal":
                return "on" if "has_journal" in facts.get("Filesystem features", "") else "off"
            return facts.get("Block size", "?")
        return super().applied(name, value, mounted, device)


def _dumpe2fs(device: Path) -> dict[str, str]:
    text = run_tool(["dumpe2fs", "-h", str(device)], "read back ext4")
    facts = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            facts[key.strip()] = value.strip()
    return facts


class Xfs(_Mkfs):
    name = "xfs"
    help = "XFS (xfsprogs); at least 300 MB"
    mkfs_tool = "mkfs.xfs"
    fstype = "xfs"
    min_size = 300 * MB  # mkfs.xfs refuses smaller
    shutdown_ioctl = True
    base_mkfs = ("-q", "-f", "-K")  # -K: no discard (the emulated device has none)
    options = (
        FsOption("logbsize", "in-memory log buffer size", ("32k", "64k", "128k", "256k"),
                 mount=lambda v: f"logbsize={v}"),
        FsOption("logbufs", "in-memory log buffers", tuple(str(n) for n in range(2, 9)),
                 mount=lambda v: f"logbufs={v}"),
        FsOption("allocsize", "preallocation size for buffered writes", pattern=_SIZE,
                 expects="a size like 64k or 1m", mount=lambda v: f"allocsize={v}"),
        FsOption("atime", "update access times", _ON_OFF,
                 mount=lambda v: "" if v == "on" else "noatime"),
        FsOption("reflink", "shared extents (mkfs -m reflink)", _ON_OFF,
                 mkfs=lambda v: ["-m", f"reflink={1 if v == 'on' else 0}"]),
    )

    def applied(self, name: str, value: str, mounted: list[str], device: Path) -> str:
        if name == "reflink":
            info = run_tool(["xfs_db", "-r", "-c", "version", str(device)], "read back xfs")
            return "on" if "REFLINK" in info.upper() else "off"
        if name in ("logbsize", "allocsize"):
            shown = super().applied(name, value, mounted, device)
            if shown.startswith("("):
                return shown
            # the kernel writes sizes in its own unit ("65536k" or "64k"); compare in bytes
            return value if _size_bytes(shown) == _size_bytes(value) else shown
        return super().applied(name, value, mounted, device)


class Btrfs(_Mkfs):
    name = "btrfs"
    help = "btrfs (btrfs-progs); copy-on-write, at least 256 MB"
    mkfs_tool = "mkfs.btrfs"
    fstype = "btrfs"
    min_size = 256 * MB
    base_mkfs = ("-q", "-f", "-K")
    options = (
        FsOption("compress", "compression", ("no", "zlib", "lzo", "zstd"),
                 mount=lambda v: f"compress={v}" if v != "no" else ""),
        FsOption("datacow", "copy-on-write of data (off: nodatacow)", _ON_OFF,
                 mount=lambda v: "" if v == "on" else "nodatacow"),
        FsOption("commit", "seconds between transaction commits", pattern=_SECONDS,
                 expects="whole seconds from 1", mount=lambda v: f"commit={v}"),
        FsOption("atime", "update access times", _ON_OFF,
                 mount=lambda v: "" if v == "on" else "noatime"),
        FsOption("barrier", "cache flushes at transaction commits and fsync", _ON_OFF,
                 mount=lambda v: "" if v == "on" else "nobarrier"),
    )

    def conflict(self, options: dict[str, str]) -> str | None:
        if options.get("datacow") == "off" and options.get("compress", "no") != "no":
            return ("compress and datacow = off: btrfs does not compress files without "
                    "copy-on-write (nodatacow)")
        return None

    def applied(self, name: str, value: str, mounted: list[str], device: Path) -> str:
        if name == "compress":
            shown = next((o for o in mounted if o.startswith("compress")), None)
            return shown.split("=", 1)[1].split(":")[0] if shown else "no"
        if name == "datacow":
            return "off" if "nodatasum" in mounted or "nodatacow" in mounted else "on"
        if name == "barrier":
            return "off" if "nobarrier" in mounted else "on"
        if name == "commit" and not any(o.startswith("commit=") for o in mounted):
            return "30"
        return super().applied(name, value, mounted, device)
