"""FILESYSTEMS: the one list of filesystems a volume can have (filesystems.py, zfs.py).

It drives validation before anything starts, volume creation, `pglab storage` and the
docs/STORAGE.md's table (checked by a test). `host`, the lab's own directory, is no filesystem
pglab makes, but a valid choice, so names() lists it first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pglab.storage.filesystems import Btrfs, Ext4, Filesystem, Xfs
from pglab.storage.zfs import Zfs


@dataclass
class FilesystemRegistry:
    entries: dict[str, Filesystem] = field(default_factory=dict)

    def names(self) -> list[str]:
        return ["host", *self.entries]

    def get(self, name: str) -> Filesystem | None:
        return self.entries.get(name)


FILESYSTEMS = FilesystemRegistry({fs.name: fs for fs in (Ext4(), Xfs(), Btrfs(), Zfs())})
