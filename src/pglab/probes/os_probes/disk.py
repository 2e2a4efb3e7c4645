"""os.disk: per-device I/O, attributed to the node whose data or WAL is on it."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path

from pglab.probes import procfs
from pglab.probes.base import NodeHandle, ProbeContext, ProbeOutput
from pglab.probes.os_probes.common import (
    HOST,
    OsProbe,
    read_text,
    read_timed,
)


def device_of_mount(
    mount: procfs.Mount, path: Path, disks: dict[str, procfs.DiskCounters]
) -> str | None:
    """The diskstats name behind a mount: by major:minor, by st_dev, then by source."""
    numbers = {(d.major, d.minor): d.name for d in disks.values()}
    if (mount.major, mount.minor) in numbers:
        return numbers[(mount.major, mount.minor)]
    with contextlib.suppress(OSError):  # btrfs & co. show an anonymous 0:N in mountinfo
        st_dev = path.stat().st_dev
        if (os.major(st_dev), os.minor(st_dev)) in numbers:
            return numbers[(os.major(st_dev), os.minor(st_dev))]
    if mount.source.startswith("/dev/"):  # /dev/mapper/vg-lv -> /dev/dm-3
        name = Path(os.path.realpath(mount.source)).name
        return name if name in disks else None
    return None


@dataclass
class DeviceResolver:
    """Which block devices hold a path, including what they sit on (disk, dm, md, loop)."""

    mounts: list[procfs.Mount]
    disks: dict[str, procfs.DiskCounters]
    sys_root: Path

    def devices(self, path: Path, depth: int = 0) -> list[str]:
        real = Path(os.path.realpath(path))  # follows a pg_wal symlink to its own disk
        if real.parent == Path("/dev") and real.name in self.disks:  # a device node itself
            return list(dict.fromkeys([real.name, *self.underlying(real.name, depth)]))
        mount = procfs.mount_of(str(real), self.mounts)
        name = device_of_mount(mount, real, self.disks) if mount else None
        if name is None:
            return []
        return list(dict.fromkeys([name, *self.underlying(name, depth)]))

    def underlying(self, name: str, depth: int) -> list[str]:
        block = self.sys_root / "class" / "block" / name
        found: list[str] = []
        if (block / "partition").exists():  # sda2 -> sda: the queue is the whole disk's
            found.append(Path(os.path.realpath(block)).parent.name)
        slaves = block / "slaves"  # device-mapper, md: the devices they are built on
        if slaves.is_dir() and depth < 4:
            for slave in sorted(slaves.iterdir()):
                found += [slave.name, *self.underlying(slave.name, depth + 1)]
        backing = read_text(block / "loop" / "backing_file")
        if backing and depth < 4:  # a loop device's I/O lands on its file's device
            found += self.devices(Path(backing.strip()), depth + 1)
        return [n for n in found if n in self.disks]

    def fallback(self) -> list[str]:
        """Every whole disk that has done I/O (skips idle loop/ram/zram and partitions)."""
        return [
            d.name
            for d in self.disks.values()
            if d.ios > 0 and not (self.sys_root / "class" / "block" / d.name / "partition").exists()
        ]


class DiskProbe(OsProbe):
    name = "os.disk"
    help = "IOPS, MiB/s, await, utilisation and queue depth of the nodes' disks (diskstats)"
    requires = ("diskstats",)

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.previous: dict[str, procfs.DiskCounters] = {}
        self.previous_at = 0.0
        self.owners: dict[str, str] = {}  # device -> node, or "host" when shared
        if self.unavailable is None:
            self.owners = self.resolve_owners(ctx.nodes)

    def resolver(self) -> DeviceResolver:
        mounts = procfs.parse_mountinfo(read_text(self.proc_root / "self" / "mountinfo") or "")
        disks = procfs.parse_diskstats(read_text(self.proc_root / "diskstats") or "")
        return DeviceResolver(mounts, disks, self.sys_root)

    def resolve_owners(self, nodes: list[NodeHandle]) -> dict[str, str]:
        resolver = self.resolver()
        users: dict[str, set[str]] = {}
        for node in nodes:
            if node.data_dir is None:
                continue
            for path in (node.data_dir, node.data_dir / "pg_wal", *node.storage_paths):
                for device in resolver.devices(path):
                    users.setdefault(device, set()).add(node.name)
        return {dev: next(iter(names)) if len(names) == 1 else HOST for dev, names in users.items()}

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        text, at = read_timed(self.proc_root / "diskstats")
        current = procfs.parse_diskstats(text or "")
        owners = self.owners or dict.fromkeys(
            DeviceResolver([], current, self.sys_root).fallback(), HOST
        )
        for device, node in owners.items():
            before, after = self.previous.get(device), current.get(device)
            if before is not None and after is not None:
                self.emit(
                    out, now, node, device, procfs.disk_rates(before, after, at - self.previous_at)
                )
        self.previous, self.previous_at = current, at
        return out
