"""Pure parsers of Linux procfs text (and `ss -tinpm` output) into typed values.

Every function here takes the text of a file and returns numbers, so tests run on
committed samples and the probes in `os_probes` only read files and keep baselines.
Rates and percentages are computed from two snapshots and the seconds between them.

Units: MiB (2**20 bytes) wherever a name says `mb`/`mbps`, like PostgreSQL's own "MB".

One module per source: cpu (/proc/stat), disk (diskstats, mountinfo), memory
(meminfo, vmstat, pressure), processes (/proc/<pid>, postmaster.pid), tcp (`ss`).
"""

from __future__ import annotations

from pglab.probes.procfs.common import (
    MIB,
)
from pglab.probes.procfs.cpu import (
    CpuStat,
    CpuTimes,
    cpu_usage,
    parse_stat,
)
from pglab.probes.procfs.disk import (
    DISK_COUNTERS,
    SECTOR_BYTES,
    DiskCounters,
    Mount,
    disk_rates,
    mount_of,
    parse_diskstats,
    parse_mountinfo,
)
from pglab.probes.procfs.memory import (
    MEMINFO_MB,
    VMSTAT_PAGES,
    VMSTAT_RATES,
    ZONE_SUFFIXES,
    Pressure,
    memory_gauges,
    parse_meminfo,
    parse_pressure,
    parse_vmstat,
    pressure_metrics,
    reclaim_counters,
)
from pglab.probes.procfs.processes import (
    TITLE_KINDS,
    ProcStat,
    cmdline_text,
    parse_children,
    parse_pid_stat,
    parse_postmaster_port,
    process_kind,
)
from pglab.probes.procfs.tcp import (
    TcpSocket,
    parse_ss,
    socket_gauges,
    socket_inode,
    socket_rates,
)

__all__ = [
    "DISK_COUNTERS",
    "MEMINFO_MB",
    "MIB",
    "SECTOR_BYTES",
    "TITLE_KINDS",
    "VMSTAT_PAGES",
    "VMSTAT_RATES",
    "ZONE_SUFFIXES",
    "CpuStat",
    "CpuTimes",
    "DiskCounters",
    "Mount",
    "Pressure",
    "ProcStat",
    "TcpSocket",
    "cmdline_text",
    "cpu_usage",
    "disk_rates",
    "memory_gauges",
    "mount_of",
    "parse_children",
    "parse_diskstats",
    "parse_meminfo",
    "parse_mountinfo",
    "parse_pid_stat",
    "parse_postmaster_port",
    "parse_pressure",
    "parse_ss",
    "parse_stat",
    "parse_vmstat",
    "pressure_metrics",
    "process_kind",
    "reclaim_counters",
    "socket_gauges",
    "socket_inode",
    "socket_rates",
]
