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
               autovacuum walsender walreceiver startup io_worker archiver other): cpu_cores, which
               add up to the "postgres" value; node "client", label "pgbench": cpu_cores,
               max_thread_cores (the busiest pgbench thread)
  os.tcp       label "local->peer" of each replication socket (owned by a walsender or
               walreceiver) on a node's port; node = node owning the socket: rtt_ms
               rttvar_ms min_rtt_ms recv_q_bytes send_q_bytes rcv_space_bytes
               rcv_buffer_fill_pct send_buffer_fill_pct (gauges), sent_mbps received_mbps
               (MiB/s), retrans_per_s; with network.hosts = "separate", the load
               generator's sockets as one series per end and pair of hosts: node "client",
               label "clients:client->primary", and node "primary", label
               "clients:primary->client": the same metrics (rtt_ms the median, rtt_max_ms
               the largest, min_rtt_ms the smallest; queues, rates and retransmissions
               summed; buffer fill the fullest socket's) and sockets (how many)
  os.links     with network.hosts = "separate": node = node, label = the host at the link's
               other end: sent_mbit_s received_mbit_s (10**6 bits a second, as links are
               sized), dropped_per_s

One module per source: common (OsProbe, reading files), cpu, disk, memory (memory and
pressure), processes, tcp, links. The registry is pglab.probes.PROBES.
"""

from __future__ import annotations

from pathlib import Path

from pglab.probes.base import ProbeContext
from pglab.probes.os_probes.common import (
    CLIENT,
    CLK_TCK,
    HOST,
    PAGE_SIZE,
    PROC,
    SYS,
    OsProbe,
    read_text,
    read_timed,
)
from pglab.probes.os_probes.cpu import (
    CpuProbe,
)
from pglab.probes.os_probes.disk import (
    DeviceResolver,
    DiskProbe,
    device_of_mount,
)
from pglab.probes.os_probes.kernel import (
    KernelProbe,
)
from pglab.probes.os_probes.links import LinksProbe
from pglab.probes.os_probes.memory import (
    MemoryProbe,
    PressureProbe,
    rates,
)
from pglab.probes.os_probes.processes import (
    KINDS,
    ProcessesProbe,
    Tree,
    own_ticks_since,
    scan_processes,
    split_tree_cpu,
    tree_of,
    walk_tree,
)
from pglab.probes.os_probes.profile import (
    ProfileProbe,
)
from pglab.probes.os_probes.tcp import (
    SS_FALLBACKS,
    TcpProbe,
    find_ss,
    port_from_server,
)

OS_PROBES: tuple[type[OsProbe], ...] = (
    CpuProbe,
    DiskProbe,
    MemoryProbe,
    PressureProbe,
    ProcessesProbe,
    TcpProbe,
    LinksProbe,
    KernelProbe,
    ProfileProbe,
)


def available(
    ctx: ProbeContext, proc_root: Path = PROC, sys_root: Path = SYS
) -> dict[str, str | None]:
    """Each OS probe's name -> None if it can run here, else why not (for `pglab probes`)."""
    return {cls.name: cls(proc_root, sys_root).unavailable_reason(ctx) for cls in OS_PROBES}


__all__ = [
    "CLIENT",
    "CLK_TCK",
    "HOST",
    "KINDS",
    "OS_PROBES",
    "PAGE_SIZE",
    "PROC",
    "SS_FALLBACKS",
    "SYS",
    "CpuProbe",
    "DeviceResolver",
    "DiskProbe",
    "KernelProbe",
    "LinksProbe",
    "MemoryProbe",
    "OsProbe",
    "PressureProbe",
    "ProcessesProbe",
    "ProfileProbe",
    "TcpProbe",
    "Tree",
    "available",
    "device_of_mount",
    "find_ss",
    "own_ticks_since",
    "port_from_server",
    "rates",
    "read_text",
    "read_timed",
    "scan_processes",
    "split_tree_cpu",
    "tree_of",
    "walk_tree",
]
