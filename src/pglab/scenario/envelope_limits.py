"""What a scenario's envelope comes to: the limits of one node once a disk profile
(disk_profiles.py) and explicit values are merged, and CPU lists.

Pure data and arithmetic, used by the scenario model to validate `[envelope]` and by
lab/envelope.py to apply the limits with cgroups.
"""

from __future__ import annotations

from dataclasses import dataclass

MB = 1024 * 1024


@dataclass(frozen=True)
class EnvelopeLimits:
    """The limits of one node after profile and explicit values are merged (0 = none)."""

    cpus: float | None = None
    cpuset: str | None = None
    memory: int | None = None  # bytes, page cache included
    write_mbps: float = 0
    read_mbps: float = 0
    write_iops: int = 0
    read_iops: int = 0
    disk_profile: str | None = None
    disk_scope: str = "all"  # "all" the bytes that reach the disk, or "own-io" (model.py)

    @property
    def has_disk(self) -> bool:
        return bool(self.write_mbps or self.read_mbps or self.write_iops or self.read_iops)

    def is_unlimited(self) -> bool:
        return self.cpus is None and self.cpuset is None and self.memory is None and (
            not self.has_disk)


def cpu_list(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5}; ValueError when malformed."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or (dash and int(high) < int(low)):
            raise ValueError("expected CPU numbers and ranges like '0', '0-1' or '0,2-3'")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus
