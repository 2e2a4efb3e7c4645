"""Memory gauges and reclaim counters (/proc/meminfo, /proc/vmstat) and pressure
stall information (/proc/pressure/*)."""

from __future__ import annotations

from dataclasses import dataclass

from pglab.probes.procfs.common import MIB

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
