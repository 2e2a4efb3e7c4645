"""The disk profile registry: named clouds' disks, as bandwidth and IOPS derived from a
volume size. Pure data, checked by the scenario model.

Used by a storage volume's device (`device = { profile = "cloud-ssd:300GB" }`, where the
limits hold for every byte) and by a node's cgroup envelope (`[envelope] disk_profile`,
where cgroup v1 cannot throttle the kernel flusher's writeback).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pglab.errors import did_you_mean
from pglab.units import parse_size

_GIB = 1024**3


@dataclass(frozen=True)
class DiskFigures:
    write_mbps: float = 0
    read_mbps: float = 0
    write_iops: int = 0
    read_iops: int = 0


@dataclass(frozen=True)
class DiskProfile:
    name: str
    help: str
    figures: Callable[[float], DiskFigures]  # volume size in GiB -> limits
    sized: bool = True  # needs ':SIZE'


def _cloud_ssd(gib: float) -> DiskFigures:
    # Throughput: pglab's model of a size-scaled cloud SSD, 120 MB/s + 0.5 MB/s per GiB
    # up to 350 MB/s (between AWS gp2, 128-250 MiB/s by size, and GCP pd-ssd, 0.48 MB/s per
    # GB). IOPS: AWS EBS gp2 baseline, 3 IOPS per GiB, at least 100, at most 16,000
    # (docs.aws.amazon.com/ebs/latest/userguide/general-purpose.html).
    mbps = min(120 + 0.5 * gib, 350)
    iops = int(min(max(3 * gib, 100), 16_000))
    return DiskFigures(mbps, mbps, iops, iops)


def _cloud_ssd_gp3(gib: float) -> DiskFigures:
    # AWS EBS gp3 baseline, whatever the size: 3,000 IOPS and 125 MiB/s (same page as gp2).
    return DiskFigures(125, 125, 3000, 3000)


def _cloud_hdd(gib: float) -> DiskFigures:
    # GCP pd-standard per-GB rates: 0.12 MB/s per GB both ways, 0.75 read and 1.5 write
    # IOPS per GB (cloud.google.com/compute/docs/disks/performance); the per-VM caps of
    # large volumes are left out, and a floor keeps tiny volumes usable at all.
    mbps = max(0.12 * gib, 1.0)
    return DiskFigures(mbps, mbps, int(max(1.5 * gib, 10)), int(max(0.75 * gib, 10)))


# The one list of profiles: validation, docs (docs/LAB.md) and tests use it.
DISK_PROFILES: tuple[DiskProfile, ...] = (
    DiskProfile("cloud-ssd", "min(120 + 0.5 x GB, 350) MB/s; IOPS 3 per GB, 100 to 16000",
                _cloud_ssd),
    DiskProfile("cloud-ssd-gp3", "125 MB/s, 3000 IOPS at any size (AWS gp3 baseline)",
                _cloud_ssd_gp3, sized=False),
    DiskProfile("cloud-hdd", "0.12 MB/s per GB (at least 1), IOPS 1.5 (write) / 0.75 (read) "
                "per GB (GCP pd-standard)", _cloud_hdd),
    DiskProfile("local-nvme", "unlimited: the machine's own disk", lambda gib: DiskFigures(),
                sized=False),
)
PROFILE_NAMES = tuple(p.name for p in DISK_PROFILES)


def profile_figures(spec: str) -> DiskFigures:
    """'cloud-ssd:300GB' -> its limits; ValueError saying what is expected."""
    name, sep, size = spec.partition(":")
    profile = next((p for p in DISK_PROFILES if p.name == name), None)
    if profile is None:
        raise ValueError(f"unknown disk profile '{name}'{did_you_mean(name, PROFILE_NAMES)}; "
                         f"known: {', '.join(PROFILE_NAMES)}")
    if not profile.sized:
        if sep:
            raise ValueError(f"disk profile '{name}' takes no size")
        return profile.figures(0)
    try:
        gib = parse_size(size) / _GIB
    except ValueError:
        gib = 0
    if not sep or gib <= 0:
        raise ValueError(f"expected '{name}:SIZE' with a volume size like '{name}:300GB'")
    return profile.figures(gib)
