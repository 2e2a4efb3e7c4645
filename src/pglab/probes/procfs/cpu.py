"""CPU time by state from /proc/stat."""

from __future__ import annotations

from dataclasses import dataclass, fields

from pglab.probes.procfs.common import ints

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
    values = ints(words[1:9]) + [0] * max(0, 8 - len(words[1:9]))  # old kernels: fewer
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
