"""Operating-system probes: CPU, disks, memory, pressure, process CPU and replication TCP.

Each probe reads Linux procfs (or `ss`) once per telemetry interval and reports
per-interval values: deltas since the previous call divided by the seconds between the
two reads, measured with time.monotonic() next to each read (not the runner's `now`, which
says when the sample is filed). The first call after start() only sets the baseline.
A missing file (no /proc/pressure, no `ss`, not Linux) means no samples for that part,
never an exception; start() records why in `unavailable`.

Metrics (node "host" unless said otherwise; MB = MiB = 2**20 bytes, as in PostgreSQL):
  os.cpu       label "": user_pct nice_pct system_pct irq_pct (irq+softirq) iowait_pct
               steal_pct idle_pct (% of all CPUs' time), busy_cores (cores' worth busy),
               busiest_core_pct (% busy of the busiest single CPU)
  os.disk      label = device; node = the node whose data dir or pg_wal it holds ("host"
               if shared or if nothing resolved and every disk with I/O is reported):
               read_iops write_iops (/s), read_mbps write_mbps (MiB/s), read_await_ms
               write_await_ms (ms per I/O), util_pct (% of time busy), queue_depth (average
               requests in flight), discard_iops discard_mbps flush_iops flush_await_ms
               (when the kernel counts them)
  os.memory    label "": dirty_mb writeback_mb cached_mb free_mb available_mb shmem_mb
               dirty_threshold_mb dirty_background_threshold_mb (MiB), nr_dirty
               nr_writeback (pages), pgscan_kswapd pgscan_direct pgsteal_kswapd
               pgsteal_direct allocstall pgmajfault (per second)
  os.pressure  label = cpu|io|memory: some_avg10 full_avg10 (kernel's 10 s average, %),
               some_pct full_pct (% of this interval with some/all tasks stalled)
  os.processes node = node, label "postgres": cpu_cores (postmaster and all descendants),
               processes (count); label = kind (backends checkpointer walwriter bgwriter
               autovacuum walsender walreceiver startup io_worker other): cpu_cores, which
               add up to the "postgres" value; node "client", label "pgbench": cpu_cores,
               max_thread_cores (the busiest pgbench thread)
  os.tcp       label "local->peer" of each replication socket (owned by a walsender or
               walreceiver) on a node's port; node = node owning the socket: rtt_ms
               rttvar_ms recv_q_bytes send_q_bytes rcv_space_bytes rcv_buffer_fill_pct
               send_buffer_fill_pct (gauges), sent_mbps received_mbps (MiB/s), retrans_per_s
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pglab.probes import procfs
from pglab.probes.base import NodeHandle, Probe, ProbeContext, ProbeOutput, Sample

PROC = Path("/proc")
SYS = Path("/sys")
HOST = "host"
CLIENT = "client"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
KINDS = (
    "backends",
    "checkpointer",
    "walwriter",
    "bgwriter",
    "autovacuum",
    "walsender",
    "walreceiver",
    "startup",
    "io_worker",
    "other",
)
REPLICATION_KINDS = frozenset({"walsender", "walreceiver"})


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except (OSError, ValueError):  # missing, unreadable, or PSI switched off (EOPNOTSUPP)
        return None


def read_timed(path: Path) -> tuple[str | None, float]:
    """The file's text and the monotonic time of the read, for rates."""
    text = read_text(path)
    return text, time.monotonic()


class OsProbe(Probe):
    """Shared by the OS probes: injectable roots, availability, baseline, emitting."""

    requires: ClassVar[tuple[str, ...]] = ()  # files under proc_root the probe cannot do without

    def __init__(self, proc_root: Path = PROC, sys_root: Path = SYS) -> None:
        self.proc_root = proc_root
        self.sys_root = sys_root
        self.unavailable: str | None = None

    def unavailable_reason(self, ctx: ProbeContext) -> str | None:
        for name in self.requires:
            if read_text(self.proc_root / name) is None:
                return f"{self.proc_root / name} is not readable"
        return None

    def start(self, ctx: ProbeContext) -> None:
        self.ctx = ctx
        self.unavailable = self.unavailable_reason(ctx)

    def emit(
        self,
        out: ProbeOutput,
        now: dt.datetime,
        node: str,
        label: str,
        metrics: Mapping[str, float],
    ) -> None:
        out.samples.extend(
            Sample(now, node, self.name, metric, label, float(value))
            for metric, value in metrics.items()
        )


class CpuProbe(OsProbe):
    name = "os.cpu"
    help = "CPU time by state (% of all cores), cores' worth busy, busiest core (/proc/stat)"
    requires = ("stat",)

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.previous: procfs.CpuStat | None = None

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        text = read_text(self.proc_root / "stat")
        current = procfs.parse_stat(text) if text else None
        if current is not None and self.previous is not None:
            self.emit(out, now, HOST, "", procfs.cpu_usage(self.previous, current))
        self.previous = current
        return out


# --- disks ----------------------------------------------------------------------------


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
            for path in (node.data_dir, node.data_dir / "pg_wal"):
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


class MemoryProbe(OsProbe):
    name = "os.memory"
    help = "Dirty/writeback/cached/free memory, dirty thresholds, reclaim and stall rates"
    requires = ("meminfo",)

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.previous: dict[str, int] | None = None
        self.previous_at = 0.0

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        meminfo = procfs.parse_meminfo(read_text(self.proc_root / "meminfo") or "")
        vmstat_text, at = read_timed(self.proc_root / "vmstat")
        vmstat = procfs.parse_vmstat(vmstat_text or "")
        counters = procfs.reclaim_counters(vmstat)
        if self.previous is not None:
            self.emit(out, now, HOST, "", procfs.memory_gauges(meminfo, vmstat, PAGE_SIZE))
            self.emit(out, now, HOST, "", rates(self.previous, counters, at - self.previous_at))
        self.previous, self.previous_at = counters, at
        return out


def rates(
    before: Mapping[str, float], after: Mapping[str, float], seconds: float
) -> dict[str, float]:
    """Per-second rates of the counters present in both; a counter that went back is left out."""
    if seconds <= 0:
        return {}
    return {
        key: (after[key] - before[key]) / seconds
        for key in after
        if key in before and after[key] >= before[key]
    }


class PressureProbe(OsProbe):
    name = "os.pressure"
    help = "Pressure stall information for cpu, io and memory (/proc/pressure, 4.20+)"
    requires = ("pressure/io",)
    resources = ("cpu", "io", "memory")

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.previous: dict[str, tuple[dict[str, procfs.Pressure], float]] = {}

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        for resource in self.resources:
            text, at = read_timed(self.proc_root / "pressure" / resource)
            if text is None:
                continue
            current = procfs.parse_pressure(text)
            if resource in self.previous:
                before, before_at = self.previous[resource]
                self.emit(
                    out,
                    now,
                    HOST,
                    resource,
                    procfs.pressure_metrics(before, current, at - before_at),
                )
            self.previous[resource] = (current, at)
        return out


# --- process CPU ------------------------------------------------------------------------


def scan_processes(proc_root: Path) -> dict[int, procfs.ProcStat]:
    """Every process's /proc/<pid>/stat (one pass; processes may vanish meanwhile)."""
    found = {}
    with contextlib.suppress(OSError):
        for entry in proc_root.iterdir():
            if entry.name.isdigit():
                text = read_text(entry / "stat")
                stat = procfs.parse_pid_stat(text) if text else None
                if stat is not None:
                    found[stat.pid] = stat
    return found


def tree_of(root: int, processes: dict[int, procfs.ProcStat]) -> dict[int, procfs.ProcStat]:
    """`root` and all its descendants (PostgreSQL forks everything from the postmaster)."""
    children: dict[int, list[int]] = {}
    for stat in processes.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in processes and pid not in tree:
            tree[pid] = processes[pid]
            todo += children.get(pid, [])
    return tree


@dataclass(frozen=True)
class Tree:
    """A process tree at one instant, with a kind for each process."""

    root: procfs.ProcStat
    procs: dict[int, procfs.ProcStat]
    kinds: dict[int, str]
    at: float


def _same_process(before: procfs.ProcStat | None, after: procfs.ProcStat | None) -> bool:
    return before is not None and after is not None and before.starttime == after.starttime


def own_ticks_since(before: procfs.ProcStat | None, after: procfs.ProcStat) -> int:
    """utime+stime since `before`; all of it for a process (or thread) born since."""
    if before is None or before.starttime != after.starttime:
        return after.own_ticks
    return after.own_ticks - before.own_ticks


def split_tree_cpu(before: Tree, after: Tree) -> dict[str, float]:
    """Clock ticks used in the interval, by kind.

    The total is exact even for processes that started and ended between two samples:
    the sum over the tree of utime+stime+cutime+cstime only moves from a child to its
    parent when the parent reaps it. Live processes give their own ticks to their kind;
    what the total has beyond that (the last moments of processes that exited) goes to
    the kinds that exited, by count, or to "backends" (short-lived connections).
    """
    total = sum(p.tree_ticks for p in after.procs.values()) - sum(
        p.tree_ticks for p in before.procs.values()
    )
    by_kind: dict[str, float] = {}
    for pid, proc in after.procs.items():
        kind = after.kinds[pid]
        by_kind[kind] = by_kind.get(kind, 0.0) + own_ticks_since(before.procs.get(pid), proc)
    residual = total - sum(by_kind.values())
    if residual > 0:
        exited = Counter(
            kind
            for pid, kind in before.kinds.items()
            if not _same_process(before.procs[pid], after.procs.get(pid))
        )
        shares = exited or Counter({"backends": 1})
        for kind, count in shares.items():
            by_kind[kind] = by_kind.get(kind, 0.0) + residual * count / shares.total()
    return by_kind


class ProcessesProbe(OsProbe):
    name = "os.processes"
    help = "CPU cores used by each node's PostgreSQL processes (by kind) and by pgbench"
    requires = ("stat",)

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.trees: dict[str, Tree] = {}  # by node name, and CLIENT for pgbench
        self.threads: dict[int, procfs.ProcStat] = {}  # pgbench's threads, by tid
        self.kind_cache: dict[tuple[int, int], str] = {}  # (pid, starttime) -> kind

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        roots = {node.name: node.postmaster_pid() for node in self.ctx.nodes}
        client = self.ctx.client_pid()
        if client is None and all(pid is None for pid in roots.values()):
            self.trees.clear()
            return out
        processes = scan_processes(self.proc_root)
        at = time.monotonic()
        live: set[tuple[int, int]] = set()
        for node, pid in roots.items():
            tree = self.tree(node, pid, processes, at, postgres=True)
            if tree is not None:
                live.update((p.pid, p.starttime) for p in tree.procs.values())
                self.report_postgres(out, now, node, tree)
        client_tree = self.tree(CLIENT, client, processes, at, postgres=False)
        if client_tree is not None:
            self.report_client(out, now, client_tree)
        self.kind_cache = {key: kind for key, kind in self.kind_cache.items() if key in live}
        return out

    def tree(
        self,
        key: str,
        root: int | None,
        processes: dict[int, procfs.ProcStat],
        at: float,
        postgres: bool,
    ) -> Tree | None:
        """The tree under `root` now; the previous one stays in self.trees until reported."""
        if root is None or root not in processes:
            self.trees.pop(key, None)
            return None
        procs = tree_of(root, processes)
        kinds = {
            pid: self.kind(proc, root) if postgres else "pgbench" for pid, proc in procs.items()
        }
        return Tree(processes[root], procs, kinds, at)

    def kind(self, proc: procfs.ProcStat, root: int) -> str:
        if proc.pid == root:
            return "other"  # the postmaster forks and reaps; it serves no queries
        key = (proc.pid, proc.starttime)
        if key not in self.kind_cache:
            raw = read_text(self.proc_root / str(proc.pid) / "cmdline") or ""
            kind = procfs.process_kind(raw)
            if kind is None:  # forked, not yet retitled: nearly always a new connection
                return "backends"
            self.kind_cache[key] = kind
        return self.kind_cache[key]

    def interval(self, key: str, tree: Tree) -> tuple[dict[str, float], float] | None:
        """Ticks by kind since the previous tree of `key` and the seconds between them."""
        previous = self.trees.get(key)
        self.trees[key] = tree
        if previous is None or not _same_process(previous.root, tree.root):
            return None  # first sample, or the node restarted / a new pgbench began
        seconds = tree.at - previous.at
        return (split_tree_cpu(previous, tree), seconds) if seconds > 0 else None

    def report_postgres(self, out: ProbeOutput, now: dt.datetime, node: str, tree: Tree) -> None:
        measured = self.interval(node, tree)
        if measured is None:
            return
        ticks, seconds = measured
        cores = {kind: ticks.get(kind, 0.0) / CLK_TCK / seconds for kind in (*KINDS, *ticks)}
        self.emit(
            out,
            now,
            node,
            "postgres",
            {"cpu_cores": sum(cores.values()), "processes": len(tree.procs)},
        )
        for kind, value in cores.items():
            self.emit(out, now, node, kind, {"cpu_cores": value})

    def report_client(self, out: ProbeOutput, now: dt.datetime, tree: Tree) -> None:
        threads = scan_processes(self.proc_root / str(tree.root.pid) / "task")
        previous_threads, self.threads = self.threads, threads
        measured = self.interval(CLIENT, tree)
        if measured is None:
            return
        ticks, seconds = measured
        busiest = max(
            (own_ticks_since(previous_threads.get(tid), thread) for tid, thread in threads.items()),
            default=0,
        )
        self.emit(
            out,
            now,
            CLIENT,
            "pgbench",
            {
                "cpu_cores": sum(ticks.values()) / CLK_TCK / seconds,
                "max_thread_cores": busiest / CLK_TCK / seconds,
            },
        )


# --- replication TCP --------------------------------------------------------------------

SS_FALLBACKS = ("/usr/sbin/ss", "/sbin/ss", "/usr/bin/ss", "/bin/ss")  # sbin is off some PATHs


def find_ss() -> str | None:
    return shutil.which("ss") or next((p for p in SS_FALLBACKS if os.access(p, os.X_OK)), None)


def port_from_server(node: NodeHandle) -> int | None:
    """`SHOW port` of a node pglab did not start (no data dir, so no postmaster.pid)."""
    if node.connect is None:
        return None
    try:
        with contextlib.closing(node.connect()) as conn:
            row = conn.execute("SHOW port").fetchone()
        return int(row[0]) if row else None
    except Exception:  # any connection or driver problem: this node just has no TCP stats
        return None


class TcpProbe(OsProbe):
    name = "os.tcp"
    help = "RTT, queues, socket buffers and throughput of replication TCP connections (ss)"

    def __init__(
        self, proc_root: Path = PROC, sys_root: Path = SYS, replication_only: bool = True
    ) -> None:
        super().__init__(proc_root, sys_root)
        # Sockets whose owner ss cannot name (another user's, when not root) are kept.
        self.replication_only = replication_only

    def unavailable_reason(self, ctx: ProbeContext) -> str | None:
        return None if find_ss() else "`ss` (iproute2) is not installed"

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.ss = find_ss()
        self.previous: dict[str, procfs.TcpSocket] | None = None
        self.previous_at = 0.0
        self.shown_ports = {
            node.name: port
            for node in ctx.nodes
            if node.data_dir is None and (port := port_from_server(node)) is not None
        }

    def node_ports(self) -> dict[int, str]:
        """Port -> node, read again each time: a restarted node may have moved."""
        ports = {port: name for name, port in self.shown_ports.items()}
        for node in self.ctx.nodes:
            text = read_text(node.data_dir / "postmaster.pid") if node.data_dir else None
            port = procfs.parse_postmaster_port(text) if text else None
            if port is not None:
                ports[port] = node.name
        return ports

    def run_ss(self, ports: dict[int, str]) -> str:
        if self.ss is None:
            return ""
        wanted = " or ".join(f"sport = :{p} or dport = :{p}" for p in sorted(ports))
        try:
            result = subprocess.run(
                [self.ss, "-tinpmH", "state", "established", f"( {wanted} )"],
                capture_output=True,
                text=True,
                timeout=2,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return result.stdout if result.returncode == 0 else ""

    def is_replication(self, sock: procfs.TcpSocket) -> bool:
        if not self.replication_only or sock.pid is None:
            return True
        raw = read_text(self.proc_root / str(sock.pid) / "cmdline") or ""
        return procfs.process_kind(raw) in REPLICATION_KINDS

    def owner_node(self, sock: procfs.TcpSocket, ports: dict[int, str]) -> str:
        """The node on the listening side, else the node whose postmaster is the owner's parent."""
        if sock.local_port in ports:
            return ports[sock.local_port]
        text = read_text(self.proc_root / str(sock.pid) / "stat") if sock.pid else None
        owner = procfs.parse_pid_stat(text) if text else None
        postmasters = {node.postmaster_pid(): node.name for node in self.ctx.nodes}
        return postmasters.get(owner.ppid, HOST) if owner else HOST

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        ports = self.node_ports()
        if not ports or self.ss is None:
            return out
        text = self.run_ss(ports)
        at = time.monotonic()
        current = {
            f"{s.local}->{s.peer}": s for s in procfs.parse_ss(text) if self.is_replication(s)
        }
        if self.previous is not None:
            for label, sock in current.items():
                node = self.owner_node(sock, ports)
                self.emit(out, now, node, label, procfs.socket_gauges(sock))
                if label in self.previous:
                    self.emit(
                        out,
                        now,
                        node,
                        label,
                        procfs.socket_rates(self.previous[label], sock, at - self.previous_at),
                    )
        self.previous, self.previous_at = current, at
        return out


OS_PROBES: tuple[type[OsProbe], ...] = (
    CpuProbe,
    DiskProbe,
    MemoryProbe,
    PressureProbe,
    ProcessesProbe,
    TcpProbe,
)


def available(
    ctx: ProbeContext, proc_root: Path = PROC, sys_root: Path = SYS
) -> dict[str, str | None]:
    """Each OS probe's name -> None if it can run here, else why not (for `pglab probes`)."""
    return {cls.name: cls(proc_root, sys_root).unavailable_reason(ctx) for cls in OS_PROBES}
