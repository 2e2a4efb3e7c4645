"""Pure parsers of Linux procfs text (and `ss -tinpm` output) into typed values.

Every function here takes the text of a file and returns numbers, so tests run on
committed samples and the probes in `os_probes` only read files and keep baselines.
Rates and percentages are computed from two snapshots and the seconds between them.

Units: MiB (2**20 bytes) wherever a name says `mb`/`mbps`, like PostgreSQL's own "MB".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

MIB = 1024 * 1024
SECTOR_BYTES = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size


def _ints(words: list[str]) -> list[int]:
    return [int(w) for w in words]


# /proc/stat ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuTimes:
    """Clock ticks spent in each state. `user`/`nice` already include guest time."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def total(self) -> int:
        return (
            self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
        )

    @property
    def busy(self) -> int:
        return self.total - self.idle - self.iowait


@dataclass(frozen=True)
class CpuStat:
    all: CpuTimes
    per_cpu: list[CpuTimes]


def _cpu_times(words: list[str]) -> CpuTimes:
    values = _ints(words[1:9]) + [0] * max(0, 8 - len(words[1:9]))  # old kernels: fewer
    return CpuTimes(*values)


def parse_stat(text: str) -> CpuStat | None:
    """The aggregate `cpu` line and one `cpuN` line per online CPU of /proc/stat."""
    total: CpuTimes | None = None
    per_cpu: list[CpuTimes] = []
    for line in text.splitlines():
        words = line.split()
        if not words or not words[0].startswith("cpu"):
            continue
        if words[0] == "cpu":
            total = _cpu_times(words)
        else:
            per_cpu.append(_cpu_times(words))
    return None if total is None else CpuStat(total, per_cpu)


def _share(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole > 0 else 0.0


def cpu_usage(before: CpuStat, after: CpuStat) -> dict[str, float]:
    """Percent of all CPU time in each state, cores' worth busy, and the busiest core.

    busy_cores is the busy share times the online CPUs, not ticks / USER_HZ / seconds: it
    needs no clock, so a late sample cannot inflate it.
    """
    d = {f.name: getattr(after.all, f.name) - getattr(before.all, f.name) for f in fields(CpuTimes)}
    total = sum(d.values())
    if total <= 0:
        return {}
    busy = total - d["idle"] - d["iowait"]
    usage = {
        "user_pct": _share(d["user"], total),
        "nice_pct": _share(d["nice"], total),
        "system_pct": _share(d["system"], total),
        "irq_pct": _share(d["irq"] + d["softirq"], total),
        "iowait_pct": _share(d["iowait"], total),
        "steal_pct": _share(d["steal"], total),
        "idle_pct": _share(d["idle"], total),
        "busy_cores": busy / total * max(1, len(after.per_cpu)),
    }
    if len(before.per_cpu) == len(after.per_cpu) and after.per_cpu:
        usage["busiest_core_pct"] = max(
            _share(a.busy - b.busy, a.total - b.total)
            for b, a in zip(before.per_cpu, after.per_cpu, strict=True)
        )
    return usage


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
    n = _ints(words[3:])
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


# /proc/meminfo and /proc/vmstat ----------------------------------------------------------

MEMINFO_MB = {
    "Dirty": "dirty_mb",
    "Writeback": "writeback_mb",
    "Cached": "cached_mb",
    "MemFree": "free_mb",
    "MemAvailable": "available_mb",
    "Shmem": "shmem_mb",
}
VMSTAT_RATES = (
    "pgscan_kswapd",
    "pgscan_direct",
    "pgsteal_kswapd",
    "pgsteal_direct",
    "allocstall",
    "pgmajfault",
)
VMSTAT_PAGES = ("nr_dirty", "nr_writeback")
# Kernels before 4.x split reclaim counters per zone (pgscan_kswapd_normal, ...), later
# ones split allocstall; a plain prefix match would also take pgscan_direct_throttle.
ZONE_SUFFIXES = ("dma", "dma32", "normal", "high", "highmem", "movable", "device")


def parse_meminfo(text: str) -> dict[str, int]:
    """Values in bytes (meminfo's "kB" is KiB); counts without a unit stay counts."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            values[key.strip()] = int(words[0]) * (1024 if words[1:] == ["kB"] else 1)
    return values


def parse_vmstat(text: str) -> dict[str, int]:
    values = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[1].lstrip("-").isdigit():
            values[words[0]] = int(words[1])
    return values


def memory_gauges(
    meminfo: dict[str, int], vmstat: dict[str, int], page_size: int
) -> dict[str, float]:
    gauges = {metric: meminfo[key] / MIB for key, metric in MEMINFO_MB.items() if key in meminfo}
    gauges.update({name: float(vmstat[name]) for name in VMSTAT_PAGES if name in vmstat})
    for key, metric in (
        ("nr_dirty_threshold", "dirty_threshold_mb"),
        ("nr_dirty_background_threshold", "dirty_background_threshold_mb"),
    ):
        if key in vmstat:
            gauges[metric] = vmstat[key] * page_size / MIB
    return gauges


def reclaim_counters(vmstat: dict[str, int]) -> dict[str, int]:
    """The cumulative vmstat counters behind VMSTAT_RATES, summed over zones."""
    counters = {}
    for name in VMSTAT_RATES:
        keys = [name, *(f"{name}_{zone}" for zone in ZONE_SUFFIXES)]
        present = [vmstat[k] for k in keys if k in vmstat]
        if present:
            counters[name] = sum(present)
    return counters


# /proc/pressure/{cpu,io,memory} ----------------------------------------------------------


@dataclass(frozen=True)
class Pressure:
    avg10: float
    total_us: int


def parse_pressure(text: str) -> dict[str, Pressure]:
    """{"some": ..., "full": ...} (cpu has "full" only since 5.13)."""
    lines = {}
    for line in text.splitlines():
        kind, *pairs = line.split()
        values = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        if "avg10" in values and "total" in values:
            lines[kind] = Pressure(float(values["avg10"]), int(values["total"]))
    return lines


def pressure_metrics(
    before: dict[str, Pressure], after: dict[str, Pressure], seconds: float
) -> dict[str, float]:
    """Kernel's 10 s averages plus our own stall share over exactly this interval."""
    metrics = {}
    for kind, now in after.items():
        metrics[f"{kind}_avg10"] = now.avg10
        previous = before.get(kind)
        if previous is not None and seconds > 0 and now.total_us >= previous.total_us:
            share = (now.total_us - previous.total_us) / (seconds * 1e6) * 100.0
            metrics[f"{kind}_pct"] = min(100.0, share)
    return metrics


# /proc/<pid>/stat, /proc/<pid>/cmdline, postmaster.pid -----------------------------------


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    ppid: int
    utime: int  # clock ticks, all threads
    stime: int
    cutime: int  # reaped children (and their reaped children), added when waited for
    cstime: int
    starttime: int  # ticks after boot: tells a reused pid from the process we knew

    @property
    def own_ticks(self) -> int:
        return self.utime + self.stime

    @property
    def tree_ticks(self) -> int:
        return self.utime + self.stime + self.cutime + self.cstime


def parse_pid_stat(text: str) -> ProcStat | None:
    # comm sits in parentheses and may hold spaces or ")": split at the last ")"
    head, sep, tail = text.rpartition(")")
    pid_text, _, comm = head.partition(" (")
    words = tail.split()
    if not sep or len(words) < 20 or not pid_text.strip().isdigit():
        return None
    return ProcStat(
        pid=int(pid_text),
        comm=comm,
        ppid=int(words[1]),
        utime=int(words[11]),
        stime=int(words[12]),
        cutime=int(words[13]),
        cstime=int(words[14]),
        starttime=int(words[19]),
    )


# Process titles ("postgres: [cluster_name: ]<what>") -> pglab's kinds. PostgreSQL 9.x
# named some "... process"; anything renamed and not listed is a client backend.
TITLE_KINDS = {
    "checkpointer": "checkpointer",
    "background writer": "bgwriter",
    "writer": "bgwriter",
    "walwriter": "walwriter",
    "wal writer": "walwriter",
    "autovacuum": "autovacuum",
    "walsender": "walsender",
    "wal sender": "walsender",
    "walreceiver": "walreceiver",
    "wal receiver": "walreceiver",
    "startup": "startup",
    "io worker": "io_worker",
    "parallel worker": "backends",
    "archiver": "other",
    "stats collector": "other",
    "logical replication": "other",
    "walsummarizer": "other",
    "slotsync worker": "other",
    "logger": "other",
}


def cmdline_text(raw: str) -> str:
    """/proc/<pid>/cmdline with its NUL separators and NUL padding as single spaces."""
    return " ".join(raw.replace("\0", " ").split())


def process_kind(raw_cmdline: str) -> str | None:
    """A PostgreSQL child's kind from its process title; None if not retitled (yet)."""
    title = cmdline_text(raw_cmdline)
    if not title.startswith("postgres: "):
        return None
    rest = title.removeprefix("postgres: ")
    first, _, after_first = rest.partition(" ")
    if first.endswith(":") and after_first:  # cluster_name prefix
        rest = after_first
    for prefix, kind in TITLE_KINDS.items():
        if rest == prefix or rest.startswith(prefix + " "):
            return kind
    return "backends"


def parse_postmaster_port(text: str) -> int | None:
    """Line 4 of postmaster.pid: the port the node listens on."""
    lines = text.splitlines()
    return int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None


# ss -tinpmH state established ------------------------------------------------------------


@dataclass
class TcpSocket:
    local: str  # "127.0.0.1:5432", "[::1]:5432"
    peer: str
    recv_q: int
    send_q: int
    pid: int | None  # the owning process, when ss may see it (-p, same user or root)
    info: dict[str, float] = field(default_factory=dict)  # -i and -m fields, numeric

    @property
    def local_port(self) -> int:
        return _port(self.local)

    @property
    def peer_port(self) -> int:
        return _port(self.peer)


def _port(address: str) -> int:
    port = address.rpartition(":")[2]
    return int(port) if port.isdigit() else -1


_NUMBER = r"-?\d+(?:\.\d+)?"
_INFO_FIELDS = {
    "rtt_ms": re.compile(rf"\brtt:({_NUMBER})/"),
    "rttvar_ms": re.compile(rf"\brtt:{_NUMBER}/({_NUMBER})"),
    "rcv_space": re.compile(rf"\brcv_space:({_NUMBER})"),
    "bytes_acked": re.compile(rf"\bbytes_acked:({_NUMBER})"),
    "bytes_received": re.compile(rf"\bbytes_received:({_NUMBER})"),
    "retrans_total": re.compile(rf"\bretrans:\d+/({_NUMBER})"),
}
_SKMEM = re.compile(r"skmem:\(([^)]*)\)")
_PID = re.compile(r"pid=(\d+)")


def _socket_info(text: str) -> dict[str, float]:
    info = {}
    for name, pattern in _INFO_FIELDS.items():
        match = pattern.search(text)
        if match:
            info[name] = float(match.group(1))
    skmem = _SKMEM.search(text)
    if skmem:  # r = receive queue memory, rb = receive buffer, w = send queue, tb = send buf
        for item in skmem.group(1).split(","):
            key = item.rstrip("0123456789")
            if key and item[len(key) :]:
                info[f"skmem_{key}"] = float(item[len(key) :])
    return info


def parse_ss(text: str) -> list[TcpSocket]:
    """Sockets of `ss -tinpmH state established` (no State column): header line + info line."""
    sockets: list[TcpSocket] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0].isspace():
            if sockets:
                sockets[-1].info.update(_socket_info(line))
            continue
        words = line.split()
        if len(words) < 4 or not words[0].isdigit():
            continue
        owner = _PID.search(line)
        sockets.append(
            TcpSocket(
                words[2],
                words[3],
                int(words[0]),
                int(words[1]),
                int(owner.group(1)) if owner else None,
            )
        )
    return sockets


def socket_gauges(sock: TcpSocket) -> dict[str, float]:
    gauges = {"recv_q_bytes": float(sock.recv_q), "send_q_bytes": float(sock.send_q)}
    for key, metric in (
        ("rtt_ms", "rtt_ms"),
        ("rttvar_ms", "rttvar_ms"),
        ("rcv_space", "rcv_space_bytes"),
    ):
        if key in sock.info:
            gauges[metric] = sock.info[key]
    for used, size, metric in (
        ("skmem_r", "skmem_rb", "rcv_buffer_fill_pct"),
        ("skmem_w", "skmem_tb", "send_buffer_fill_pct"),
    ):
        if sock.info.get(size, 0.0) > 0 and used in sock.info:
            gauges[metric] = 100.0 * sock.info[used] / sock.info[size]
    return gauges


def socket_rates(before: TcpSocket, after: TcpSocket, seconds: float) -> dict[str, float]:
    """MiB/s acknowledged by the peer and received, retransmitted segments per second.

    ss leaves a counter out while it is 0, so a missing counter counts as 0.
    """
    if seconds <= 0:
        return {}
    rates = {}
    for key, metric, scale in (
        ("bytes_acked", "sent_mbps", MIB),
        ("bytes_received", "received_mbps", MIB),
        ("retrans_total", "retrans_per_s", 1),
    ):
        delta = after.info.get(key, 0.0) - before.info.get(key, 0.0)
        if delta >= 0:
            rates[metric] = delta / scale / seconds
    return rates
