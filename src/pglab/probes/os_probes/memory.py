"""os.memory (dirty pages, reclaim) and os.pressure (PSI stalls)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from pglab.probes import procfs
from pglab.probes.base import ProbeContext, ProbeOutput
from pglab.probes.os_probes.common import (
    HOST,
    PAGE_SIZE,
    OsProbe,
    read_text,
    read_timed,
)


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
