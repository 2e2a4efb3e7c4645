"""A node's resource envelope: scenario limits -> cgroup limits, applied and verified.

Bandwidth is in MB/s with pglab's 1024-based units (1 MB = 2^20 bytes), IOPS in I/O
requests per second; 0 means unlimited. A named disk profile derives disk limits from a
volume size (`cloud-ssd:300GB`); an explicit `disk` value overrides the profile's.

What the disk limits throttle depends on the cgroup version, and is recorded:
- v1 (blkio): only I/O submitted in the context of the node's own processes: direct I/O,
  and the writeback that fsync/fdatasync/sync_file_range start. PostgreSQL's WAL flushes
  and the checkpointer's fsyncs and flushes (checkpoint_flush_after) are of that kind.
  Buffered writeback done later by the kernel's flusher threads is NOT throttled, nor
  the filesystem journal (jbd2), since v1 cannot tell whose pages those were.
- v2 (io.max with the memory controller): writeback is attributed to the cgroup that
  dirtied the pages, so flusher writeback is throttled too.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pglab.errors import BadInput, EnvironmentProblem
from pglab.lab.cgroups import CgroupLimits, CgroupSupport, NodeCgroup, detect_cgroups
from pglab.storage.profiles import (
    DiskFigures,
    profile_figures,
)

if TYPE_CHECKING:
    from pglab.scenario import Envelope

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

    @property
    def has_disk(self) -> bool:
        return bool(self.write_mbps or self.read_mbps or self.write_iops or self.read_iops)

    def is_unlimited(self) -> bool:
        return self.cpus is None and self.cpuset is None and self.memory is None and (
            not self.has_disk)


def resolve_envelope(envelope: Envelope) -> EnvelopeLimits:
    """Merge the profile's disk figures with explicit `disk` values (explicit wins)."""
    base = profile_figures(envelope.disk_profile) if envelope.disk_profile else DiskFigures()
    disk = envelope.disk
    return EnvelopeLimits(
        cpus=envelope.cpus, cpuset=envelope.cpuset, memory=envelope.memory,
        write_mbps=base.write_mbps if disk.write_mbps is None else disk.write_mbps,
        read_mbps=base.read_mbps if disk.read_mbps is None else disk.read_mbps,
        write_iops=base.write_iops if disk.write_iops is None else disk.write_iops,
        read_iops=base.read_iops if disk.read_iops is None else disk.read_iops,
        disk_profile=envelope.disk_profile,
    )


def cpu_list(text: str) -> set[int]:
    """'0-2,5' -> {0, 1, 2, 5}; ValueError when malformed."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()) or (dash and int(high) < int(low)):
            raise ValueError("expected CPU numbers and ranges like '0', '0-1' or '0,2-3'")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


@dataclass(frozen=True)
class BlockDevice:
    name: str  # e.g. "vda"
    major_minor: str  # the whole disk's "major:minor", which throttle rules name
    partition: str | None  # the partition holding the path, when there is one


def block_device_for(path: Path) -> BlockDevice:
    """The disk (not the partition) under the filesystem that holds `path`."""
    dev = path.stat().st_dev
    major, minor = os.major(dev), os.minor(dev)
    sysdir = Path(f"/sys/dev/block/{major}:{minor}")
    if major == 0 or not sysdir.exists():
        raise EnvironmentProblem(
            f"envelope: disk limits need a block device, but {path} is on a filesystem without "
            f"one (device {major}:{minor}: tmpfs, overlay, NFS?); put PGLAB_WORKDIR on a real disk")
    real = sysdir.resolve()
    partition = None
    if (real / "partition").exists():
        # Throttle rules name whole disks: the kernel's blkcg config rejects a partition's
        # number (ENODEV). This machine has no partitions, so that path is untested here.
        partition, real = real.name, real.parent
    return BlockDevice(real.name, (real / "dev").read_text().strip(), partition)


def cgroup_limits(limits: EnvelopeLimits, device: BlockDevice | None) -> CgroupLimits:
    return CgroupLimits(
        cpus=limits.cpus, cpuset=limits.cpuset, memory=limits.memory,
        device=device.major_minor if device else None,
        read_bps=int(limits.read_mbps * MB), write_bps=int(limits.write_mbps * MB),
        read_iops=limits.read_iops, write_iops=limits.write_iops)


def check_possible(limits: EnvelopeLimits, support: CgroupSupport | None = None) -> CgroupSupport:
    """The cgroup support to use, or a one-line EnvironmentProblem why the limits cannot be."""
    support = support or detect_cgroups()
    support.require("envelope")
    if limits.cpuset:
        allowed = os.sched_getaffinity(0)
        extra = cpu_list(limits.cpuset) - allowed
        if extra:
            raise BadInput(f"envelope.cpuset = '{limits.cpuset}': CPU(s) {sorted(extra)} do not "
                           f"exist here; this machine offers {sorted(allowed)}")
    return support


# Two writers, run from a process inside the cgroup:
# - "mbps": 1 MiB writes, each made durable with fdatasync like WAL, so the kernel's
#   flusher never holds our data (its writeback would escape v1 throttling);
# - "iops": 4 KiB O_DIRECT writes, one I/O request each, as the IOPS limit counts them.
_WRITER = """
import json, mmap, os, sys, time
path, seconds, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
size = 1 << 20 if mode == "mbps" else 4096
block = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT requires
block.write(b"\\xa5" * size)
flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if mode == "iops" else 0)
fd = os.open(path, flags, 0o600)
ops, start = 0, time.monotonic()
try:
    while time.monotonic() - start < seconds or ops < 2:
        os.pwrite(fd, block, (ops % 1024) * size if mode == "iops" else ops * size)
        if mode == "mbps":
            os.fdatasync(fd)
        ops += 1
        if ops * size >= 1 << 30:
            break
    elapsed = time.monotonic() - start
finally:
    os.close(fd)
    os.unlink(path)
print(json.dumps({"ops": ops, "bytes": ops * size, "seconds": elapsed}))
"""


@dataclass(frozen=True)
class DiskCheck:
    """What a writer inside the envelope achieved; `limit` is what was asked (0: none)."""

    measured: float  # MB/s or IOPS
    unit: str  # "MB/s" or "IOPS"
    limit: float
    seconds: float
    method: str

    @property
    def reached_limit(self) -> bool:
        """False when the disk itself is slower than the limit (the limit never bound)."""
        return bool(self.limit) and self.measured >= 0.9 * self.limit


_METHODS = {
    "mbps": "1 MiB writes, each followed by fdatasync, from a process in the cgroup",
    "iops": "4 KiB O_DIRECT writes from a process in the cgroup",
}


def _run_writer(cgroup: NodeCgroup, path: Path, mode: str, seconds: float) -> dict[str, float]:
    from pglab.lab.processes import spawn

    target = path / f".pglab-disk-check-{os.getpid()}"
    proc = spawn([sys.executable, "-c", _WRITER, str(target), str(seconds), mode],
                 cgroup_procs=cgroup.procs_files(), stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=seconds * 4 + 60)
    except BaseException:  # Ctrl-C or a timeout: the writer must not outlive the check
        proc.kill()
        proc.wait()
        target.unlink(missing_ok=True)
        raise
    if proc.returncode != 0:
        last = (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise EnvironmentProblem(f"envelope: disk check in {path} failed: {last}")
    data: dict[str, float] = json.loads(out)
    return data


def verify_disk(cgroup: NodeCgroup, path: Path, seconds: float = 2.5,
                limit_mbps: float = 0) -> DiskCheck:
    """Write throughput (MB/s) measured inside the cgroup, on the filesystem holding `path`."""
    data = _run_writer(cgroup, path, "mbps", seconds)
    return DiskCheck(round(data["bytes"] / MB / data["seconds"], 2), "MB/s", limit_mbps,
                     round(data["seconds"], 3), _METHODS["mbps"])


def verify_iops(cgroup: NodeCgroup, path: Path, seconds: float = 2.0,
                limit_iops: int = 0) -> DiskCheck:
    """Write requests per second measured inside the cgroup (direct I/O, 4 KiB)."""
    data = _run_writer(cgroup, path, "iops", seconds)
    return DiskCheck(round(data["ops"] / data["seconds"], 1), "IOPS", limit_iops,
                     round(data["seconds"], 3), _METHODS["iops"])


_SPINNER = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\n" \
           "while time.monotonic() < end: pass\n"


def verify_cpu(cgroup: NodeCgroup, seconds: float = 1.0, workers: int | None = None) -> float:
    """CPUs used by busy processes inside the cgroup over `seconds` (quota check)."""
    from pglab.lab.processes import spawn

    count = workers or (os.cpu_count() or 1)
    procs = [spawn([sys.executable, "-c", _SPINNER, str(seconds + 2)],
                   cgroup_procs=cgroup.procs_files()) for _ in range(count)]
    try:
        time.sleep(0.3)  # past interpreter start-up
        used0, t0 = cgroup.cpu_usage_seconds(), time.monotonic()
        time.sleep(seconds)
        used1, t1 = cgroup.cpu_usage_seconds(), time.monotonic()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return round((used1 - used0) / (t1 - t0), 3)


def disk_throttling(support: CgroupSupport) -> str:
    """Which writes the disk limits throttle, for the manifest."""
    if support.version == 2:
        return "all writes, flusher writeback included (cgroup v2 io + memory)"
    return ("only I/O the node's processes submit: direct I/O and fsync/fdatasync writeback "
            "(WAL, checkpointer); kernel flusher writeback is not throttled (cgroup v1 blkio)")


@dataclass
class AppliedEnvelope:
    """An envelope in force; `procs_files` go to processes.spawn(cgroup_procs=...)."""

    cgroup: NodeCgroup
    limits: EnvelopeLimits
    device: BlockDevice | None
    disk_throttling: str
    checks: list[DiskCheck] = field(default_factory=list)

    @property
    def disk_check(self) -> DiskCheck | None:
        """The write throughput check, when a write MB/s limit was verified."""
        return next((c for c in self.checks if c.unit == "MB/s"), None)

    def procs_files(self) -> list[Path]:
        return self.cgroup.procs_files()

    def to_manifest(self) -> dict[str, Any]:
        iops = next((c for c in self.checks if c.unit == "IOPS"), None)
        return {
            "cgroup_version": self.cgroup.support.version,
            "cgroup": [str(d) for d in dict.fromkeys(self.cgroup.dirs.values())],
            "limits": asdict(self.limits),
            "device": asdict(self.device) if self.device else None,
            "disk_throttling": self.disk_throttling if self.device else None,
            "measured_write_mbps": self.disk_check.measured if self.disk_check else None,
            "measured_write_iops": iops.measured if iops else None,
            "checks": [{**asdict(c), "reached_limit": c.reached_limit} for c in self.checks],
        }


@contextlib.contextmanager
def applied_envelope(
    name: str, limits: EnvelopeLimits, data_path: Path | None = None, verify: bool = True,
    always: bool = False,
) -> Iterator[AppliedEnvelope | None]:
    """A cgroup with `limits` for the body, destroyed after on every path (None: unlimited).

    `data_path` is an existing directory on the node's data filesystem: the disk limits
    apply to its device and the checks write there (needed only with disk limits). Spawn
    the node's processes with `cgroup_procs=applied.procs_files()`. With `always`, the
    cgroup is made even without limits (a throttle-disk fault will set some mid-run).
    """
    from pglab.lab.processes import deliver_pending, shielded

    if limits.is_unlimited() and not always:
        yield None
        return
    support = check_possible(limits)
    device = None
    if limits.has_disk or (always and data_path is not None):
        if data_path is None:
            raise ValueError("applied_envelope: disk limits need the data path")
        device = block_device_for(data_path)
    with shielded():
        cgroup = NodeCgroup.create(name, support)
    try:
        deliver_pending()
        cgroup.apply(cgroup_limits(limits, device))
        applied = AppliedEnvelope(cgroup, limits, device, disk_throttling(support))
        if verify and data_path is not None and limits.write_mbps:
            applied.checks.append(verify_disk(cgroup, data_path, limit_mbps=limits.write_mbps))
        if verify and data_path is not None and limits.write_iops:
            applied.checks.append(verify_iops(cgroup, data_path, limit_iops=limits.write_iops))
        yield applied
    finally:
        with shielded():
            cgroup.destroy()
