"""Block-device counters (/proc/diskstats) and mounts (/proc/self/mountinfo)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pglab.probes.procfs.common import MIB, ints

SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size


# /proc/diskstats -------------------------------------------------------------------------


@dataclass(frozen=True)
class DiskCounters:
    """One line of /proc/diskstats; discard (4.18+) and flush (5.5+) fields are 0 if absent."""

    major: int
    minor: int
    name: str
    reads: int
    read_sectors: int
    read_ms: int
    writes: int
    write_sectors: int
    write_ms: int
    io_ticks_ms: int
    weighted_ms: int
    discards: int = 0
    discard_sectors: int = 0
    flushes: int = 0
    flush_ms: int = 0
    has_discard: bool = False
    has_flush: bool = False

    @property
    def ios(self) -> int:
        return self.reads + self.writes + self.discards + self.flushes


DISK_COUNTERS = (
    "reads",
    "read_sectors",
    "read_ms",
    "writes",
    "write_sectors",
    "write_ms",
    "io_ticks_ms",
    "weighted_ms",
    "discards",
    "discard_sectors",
    "flushes",
    "flush_ms",
)


def _disk_line(words: list[str]) -> DiskCounters | None:
    if len(words) < 14:
        return None
    n = ints(words[3:])
    extra = n + [0] * (17 - len(n))
    return DiskCounters(
        major=int(words[0]),
        minor=int(words[1]),
        name=words[2],
        reads=n[0],
        read_sectors=n[2],
        read_ms=n[3],
        writes=n[4],
        write_sectors=n[6],
        write_ms=n[7],
        io_ticks_ms=n[9],
        weighted_ms=n[10],
        discards=extra[11],
        discard_sectors=extra[13],
        flushes=extra[15],
        flush_ms=extra[16],
        has_discard=len(n) >= 15,
        has_flush=len(n) >= 17,
    )


def parse_diskstats(text: str) -> dict[str, DiskCounters]:
    disks = {}
    for line in text.splitlines():
        disk = _disk_line(line.split())
        if disk is not None:
            disks[disk.name] = disk
    return disks


def _await(delta_ms: int, delta_ops: int) -> float:
    return delta_ms / delta_ops if delta_ops > 0 else 0.0


def disk_rates(before: DiskCounters, after: DiskCounters, seconds: float) -> dict[str, float]:
    """iostat-like figures of one device over an interval; {} if its counters went back."""
    d = {name: getattr(after, name) - getattr(before, name) for name in DISK_COUNTERS}
    if seconds <= 0 or any(v < 0 for v in d.values()):
        return {}
    rates = {
        "read_iops": d["reads"] / seconds,
        "write_iops": d["writes"] / seconds,
        "read_mbps": d["read_sectors"] * SECTOR_BYTES / MIB / seconds,
        "write_mbps": d["write_sectors"] * SECTOR_BYTES / MIB / seconds,
        "read_await_ms": _await(d["read_ms"], d["reads"]),
        "write_await_ms": _await(d["write_ms"], d["writes"]),
        # io_ticks can run a little ahead of our clock; a device is never more than 100% busy
        "util_pct": min(100.0, d["io_ticks_ms"] / (seconds * 1000.0) * 100.0),
        "queue_depth": d["weighted_ms"] / (seconds * 1000.0),
    }
    if after.has_discard:
        rates["discard_iops"] = d["discards"] / seconds
        rates["discard_mbps"] = d["discard_sectors"] * SECTOR_BYTES / MIB / seconds
    if after.has_flush:
        rates["flush_iops"] = d["flushes"] / seconds
        rates["flush_await_ms"] = _await(d["flush_ms"], d["flushes"])
    return rates


# /proc/self/mountinfo --------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    major: int
    minor: int
    mount_point: str
    fstype: str
    source: str


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def parse_mountinfo(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        words, rest = left.split(), right.split()
        if not sep or len(words) < 5 or len(rest) < 2 or ":" not in words[2]:
            continue
        major, minor = words[2].split(":", 1)
        mounts.append(
            Mount(int(major), int(minor), _unescape(words[4]), rest[0], _unescape(rest[1]))
        )
    return mounts


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding an absolute, symlink-free path: the longest matching mount point.

    Of equal mount points the last one listed wins: it is mounted over the earlier ones.
    """
    best: Mount | None = None
    for mount in mounts:
        point = mount.mount_point.rstrip("/")
        inside = path == mount.mount_point or path.startswith(point + "/")
        if inside and (best is None or len(mount.mount_point) >= len(best.mount_point)):
            best = mount
    return best
