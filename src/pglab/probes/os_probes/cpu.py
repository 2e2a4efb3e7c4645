"""os.cpu: CPU time by state from /proc/stat."""

from __future__ import annotations

import datetime as dt

from pglab.probes import procfs
from pglab.probes.base import ProbeContext, ProbeOutput
from pglab.probes.os_probes.common import (
    HOST,
    OsProbe,
    read_text,
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
