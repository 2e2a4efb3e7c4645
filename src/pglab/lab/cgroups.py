"""Linux control groups for one node: create, limit, join, measure, destroy, reap.

Both hierarchies are supported, chosen by detection:
- v1 (one mount per controller): a directory per controller (cpu, cpuacct, cpuset,
  memory, blkio), placed under pglab's own cgroup in that hierarchy so the node stays
  inside whatever limits pglab itself runs under.
- v2 (unified): one directory under `<mount>/pglab/`, with the controllers enabled in
  `cgroup.subtree_control` on the way down. It sits near the root because v2 forbids
  processes in a cgroup that hands controllers to its children, and pglab's own cgroup
  holds pglab.

Every directory is named `pglab-<owner pid>-<name>`, so a later pglab can recognise the
ones whose owner died (`reap_stale_cgroups`) without any state file.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from pglab import system_parts
from pglab.errors import EnvironmentProblem

V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "blkio")
V2_CONTROLLERS = ("cpu", "cpuset", "memory", "io")
_PREFIX = "pglab-"
_NAME = re.compile(r"pglab-(\d+)-[A-Za-z0-9_.-]+")
_MOUNTS = Path("/proc/self/mounts")
_SELF = Path("/proc/self/cgroup")


@dataclass(frozen=True)
class CgroupSupport:
    """What this machine offers; `problem` says in one line why envelopes cannot work."""

    version: int | None  # 1, 2, or None when neither is usable
    controllers: tuple[str, ...]
    # v1: controller -> its mount; v2: "" -> the unified mount
    mounts: dict[str, Path] = field(default_factory=dict)
    problem: str = ""

    @property
    def usable(self) -> bool:
        return not self.problem

    def require(self, what: str) -> None:
        if self.problem:
            raise EnvironmentProblem(f"{what}: {self.problem}")


def _mount_table() -> list[tuple[str, str, list[str]]]:
    rows = []
    for line in _MOUNTS.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            mount = parts[1].replace("\\040", " ")
            rows.append((parts[2], mount, parts[3].split(",")))
    return rows


def detect_cgroups() -> CgroupSupport:
    """v1 when the controllers pglab needs are on v1 mounts, else v2, else why not."""
    table = _mount_table()
    v1 = {opt: Path(mount) for kind, mount, opts in table if kind == "cgroup" for opt in opts
          if opt in V1_CONTROLLERS}
    v2 = [Path(mount) for kind, mount, _ in table if kind == "cgroup2"]
    root_problem = system_parts.root_problem("a cgroup limit") or ""
    if {"cpu", "memory", "blkio"} <= set(v1):
        missing = [c for c in V1_CONTROLLERS if c not in v1]
        problem = root_problem or (f"cgroup v1 controller(s) {', '.join(missing)} not mounted"
                                   if missing else "")
        return CgroupSupport(1, tuple(sorted(v1)), v1, problem)
    for mount in v2:
        available = (mount / "cgroup.controllers").read_text().split()
        missing = [c for c in V2_CONTROLLERS if c not in available]
        if missing and len(v2) > 1:
            continue
        problem = root_problem or (f"cgroup v2 at {mount} lacks controller(s) {', '.join(missing)}"
                                   if missing else "")
        return CgroupSupport(2, tuple(available), {"": mount}, problem)
    return CgroupSupport(None, (), {}, "no cgroup v1 controllers (cpu, memory, blkio) nor a "
                         "cgroup v2 mount found in /proc/self/mounts")


def own_cgroup(controller: str) -> str:
    """This process's cgroup path in a v1 hierarchy ('' for v2), like '/process_api/ab12'."""
    for line in _SELF.read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller and controller in names.split(",")) or (not controller and names == ""):
            return path
    return "/"


@dataclass(frozen=True)
class CgroupLimits:
    """Limits for one cgroup; None or 0 means unlimited. Bandwidth in bytes per second."""

    cpus: float | None = None
    cpuset: str | None = None
    memory: int | None = None
    device: str | None = None  # "major:minor" of the disk that the bandwidth limits apply to
    read_bps: int = 0
    write_bps: int = 0
    read_iops: int = 0
    write_iops: int = 0

    @property
    def has_disk(self) -> bool:
        return bool(self.read_bps or self.write_bps or self.read_iops or self.write_iops)


_CFS_PERIOD_US = 100_000


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise EnvironmentProblem(f"cgroup: cannot write '{value}' to {path}: "
                                 f"{exc.strerror or exc}") from None


class NodeCgroup:
    """The cgroup directories of one node (one per v1 controller, or one v2 directory)."""

    def __init__(self, support: CgroupSupport, name: str, dirs: dict[str, Path]) -> None:
        self.support = support
        self.name = name
        self.dirs = dirs  # controller -> directory ("" -> directory on v2)

    @classmethod
    def create(cls, name: str, support: CgroupSupport | None = None) -> NodeCgroup:
        support = support or detect_cgroups()
        support.require("envelope")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"cgroup name {name!r}: letters, digits, '_', '.', '-' only")
        leaf = f"{_PREFIX}{os.getpid()}-{name}"
        dirs: dict[str, Path] = {}
        group = cls(support, name, dirs)
        try:
            if support.version == 1:
                for ctl, mount in support.mounts.items():
                    path = mount / own_cgroup(ctl).lstrip("/") / leaf
                    if path not in dirs.values():  # co-mounted, like systemd's cpu,cpuacct
                        path.mkdir()
                    dirs[ctl] = path
                    if ctl == "cpuset":  # v1 leaves these empty, and then no task may join
                        for knob in ("cpuset.cpus", "cpuset.mems"):
                            _write(path / knob, (path.parent / knob).read_text().strip())
            else:
                dirs[""] = _make_v2(support.mounts[""], leaf)
        except FileExistsError:
            group.destroy()
            raise EnvironmentProblem(f"cgroup {leaf} exists already (name used twice?)") from None
        except OSError as exc:
            group.destroy()
            raise EnvironmentProblem(f"cgroup: cannot create {leaf}: {exc}") from None
        except BaseException:
            group.destroy()
            raise
        return group

    def _dir(self, v1: str) -> Path:
        return self.dirs[v1] if self.support.version == 1 else self.dirs[""]

    def apply(self, limits: CgroupLimits) -> None:
        """Write the limits; unlimited values are written too, so apply() can loosen."""
        v1 = self.support.version == 1
        quota = int(limits.cpus * _CFS_PERIOD_US) if limits.cpus else None
        # A cgroup competes for CPU as ONE scheduling entity, weighted like one process by
        # default: on a busy machine a whole postmaster tree would then get no more than a
        # single pgbench thread. Weight it like as many processes as it may use CPUs.
        width = math.ceil(limits.cpus or len(os.sched_getaffinity(0)))
        if v1:
            _write(self.dirs["cpu"] / "cpu.cfs_period_us", str(_CFS_PERIOD_US))
            _write(self.dirs["cpu"] / "cpu.cfs_quota_us", str(quota or -1))
            _write(self.dirs["cpu"] / "cpu.shares", str(1024 * width))
        else:
            _write(self.dirs[""] / "cpu.max", f"{quota or 'max'} {_CFS_PERIOD_US}")
            _write(self.dirs[""] / "cpu.weight", str(min(100 * width, 10_000)))
        cpuset = self._dir("cpuset")
        parent_cpus = (cpuset.parent / "cpuset.cpus").read_text().strip()
        if v1 or limits.cpuset:  # v2: an empty cpuset.cpus already means the parent's
            _write(cpuset / "cpuset.cpus", limits.cpuset or parent_cpus)
        # No swapping past the limit, like a pod: v1 memsw (memory + swap) equal to the
        # limit, v2 swap.max 0. Those files exist only when swap accounting is on.
        memory = self._dir("memory")
        if v1:
            files = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
            # memsw may never be below the plain limit: when raising, memsw goes first.
            current = int((memory / files[0]).read_text())
            for name in files[::-1] if (limits.memory or 1 << 63) > current else files:
                if (memory / name).exists():
                    _write(memory / name, str(limits.memory or -1))
        else:
            _write(memory / "memory.max", str(limits.memory or "max"))
            if (memory / "memory.swap.max").exists():
                _write(memory / "memory.swap.max", "0" if limits.memory else "max")
        if limits.device:
            self._apply_disk(limits)

    def _apply_disk(self, limits: CgroupLimits) -> None:
        dev = limits.device
        if self.support.version == 1:
            blkio = self.dirs["blkio"]
            # v1 deletes a rule when its value is 0, which is exactly "unlimited".
            for knob, value in (("read_bps", limits.read_bps), ("write_bps", limits.write_bps),
                                ("read_iops", limits.read_iops),
                                ("write_iops", limits.write_iops)):
                _write(blkio / f"blkio.throttle.{knob}_device", f"{dev} {value}")
        else:
            parts = [f"{k}={v or 'max'}" for k, v in (
                ("rbps", limits.read_bps), ("wbps", limits.write_bps),
                ("riops", limits.read_iops), ("wiops", limits.write_iops))]
            _write(self.dirs[""] / "io.max", f"{dev} {' '.join(parts)}")

    def procs_files(self) -> list[Path]:
        """The cgroup.procs files a process writes its pid into to join (spawn hook)."""
        return [d / "cgroup.procs" for d in dict.fromkeys(self.dirs.values())]

    def add_pid(self, pid: int) -> None:
        for procs in self.procs_files():
            _write(procs, str(pid))

    def pids(self) -> list[int]:
        """Processes inside (read from the memory controller's directory)."""
        text = (self._dir("memory") / "cgroup.procs").read_text()
        return sorted(int(p) for p in text.split())

    def read(self, v1: str, v1_file: str, v2_file: str) -> str:
        """One statistics file, e.g. read('memory', 'memory.max_usage_in_bytes', 'memory.peak')."""
        name = v1_file if self.support.version == 1 else v2_file
        return (self._dir(v1) / name).read_text()

    def cpu_usage_seconds(self) -> float:
        if self.support.version == 1:
            return int((self.dirs["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
        stat = dict(line.split() for line in (self.dirs[""] / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6

    def written_bytes(self, device: str) -> int:
        """Bytes the cgroup's processes submitted for writing to `device` ("major:minor")."""
        if self.support.version == 1:
            text = (self.dirs["blkio"] / "blkio.throttle.io_service_bytes").read_text()
            return sum(int(f[2]) for f in map(str.split, text.splitlines())
                       if len(f) == 3 and f[0] == device and f[1] == "Write")
        for line in (self.dirs[""] / "io.stat").read_text().splitlines():
            dev, *pairs = line.split()
            if dev == device:
                return int(dict(p.split("=") for p in pairs).get("wbytes", 0))
        return 0

    def destroy(self, timeout: float = 5.0) -> None:
        """Move leftover processes to the parent, then remove every directory."""
        for ctl, path in list(self.dirs.items()):
            _remove(path, _evict_to(path, self.support), timeout)  # once per co-mount
            del self.dirs[ctl]
            if self.support.version == 2:
                with contextlib.suppress(OSError):  # still holds other pglab runs' cgroups
                    path.parent.rmdir()


def _make_v2(mount: Path, leaf: str) -> Path:
    available = set((mount / "cgroup.controllers").read_text().split())
    wanted = " ".join(f"+{c}" for c in V2_CONTROLLERS if c in available)
    parent = mount / "pglab"
    for _attempt in range(3):  # another pglab may remove an empty `pglab/` between our steps
        try:
            parent.mkdir(exist_ok=True)
            for level in (mount, parent):
                if wanted:
                    (level / "cgroup.subtree_control").write_text(wanted)
            (parent / leaf).mkdir()
            return parent / leaf
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            raise EnvironmentProblem(
                f"cgroup v2: cannot enable {wanted} below {level}: processes live in it (a "
                "container sharing its cgroup? give pglab a delegated cgroup)") from None
    raise EnvironmentProblem(f"cgroup v2: {parent} keeps disappearing")


def _evict_to(path: Path, support: CgroupSupport) -> Path:
    # v2: the parent `pglab/` hands controllers down and so may hold no process; the root may.
    return path.parent if support.version == 1 else support.mounts[""]


def _remove(path: Path, evict_to: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(FileNotFoundError):
            for pid in (path / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):  # it may have exited meanwhile
                    (evict_to / "cgroup.procs").write_text(pid)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:  # EBUSY while an exiting task is still accounted
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise EnvironmentProblem(f"cgroup: cannot remove {path}: {exc.strerror}") from None
            time.sleep(0.05)


def pglab_cgroups(support: CgroupSupport | None = None, depth: int = 4) -> list[Path]:
    """Every pglab cgroup directory on this machine, of any owner.

    An owner runs in whatever cgroup its shell has (systemd puts a session 3 levels down),
    so this walks each hierarchy a few levels deep rather than looking only beside us.
    """
    support = support or detect_cgroups()
    if support.version is None:
        return []
    roots = [support.mounts[""] / "pglab"] if support.version == 2 else list(
        support.mounts.values())
    found: list[Path] = []
    for root in roots:
        for top, dirs, _ in os.walk(root):
            level = len(Path(top).relative_to(root).parts)
            found += [Path(top) / d for d in dirs if _NAME.fullmatch(d)]
            dirs[:] = [] if level >= depth else [d for d in dirs if not d.startswith(_PREFIX)]
    return sorted(found)


def reap_stale_cgroups(support: CgroupSupport | None = None) -> list[Path]:
    """Remove pglab cgroups whose owning pglab process is gone; returns what was removed."""
    support = support or detect_cgroups()
    if support.version is None or os.geteuid() != 0:
        return []
    removed = []
    for path in pglab_cgroups(support):
        match = _NAME.fullmatch(path.name)
        if match and not psutil.pid_exists(int(match.group(1))):
            with contextlib.suppress(EnvironmentProblem):
                _remove(path, _evict_to(path, support), timeout=2.0)
                removed.append(path)
            if support.version == 2:
                with contextlib.suppress(OSError):
                    path.parent.rmdir()
    return removed
