"""os.links: the traffic on each link of a node that is a host of its own
(network.hosts = "separate"), from the kernel's counters of its interfaces."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from typing import IO

from pglab.probes.base import ProbeContext, ProbeOutput
from pglab.probes.os_probes.common import OsProbe
from pglab.probes.procfs.net import LINK_PREFIX, NetDevCounters, link_rates, parse_net_dev
from pglab.processes import in_netns


class LinksProbe(OsProbe):
    name = "os.links"
    help = ("Mbit/s each way and drops on each link of a node on a host of its own "
            "(network.hosts = 'separate'; /proc/net/dev in its namespace)")
    requires = ("net/dev",)

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        # /proc/net/dev opened in each node's namespace keeps showing that namespace's.
        self.files: dict[str, IO[bytes]] = {}
        path = self.proc_root / "thread-self" / "net" / "dev"
        for node in ctx.nodes:
            if node.netns and self.unavailable is None:
                with contextlib.suppress(OSError):
                    self.files[node.name] = in_netns(node.netns, lambda: open(  # noqa: SIM115
                        path, "rb", buffering=0))
        self.previous: dict[str, tuple[float, dict[str, NetDevCounters]]] = {}

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        for node, file in self.files.items():
            try:
                file.seek(0)
                counters = parse_net_dev(file.read().decode())
            except OSError:
                continue
            at = time.monotonic()
            if node in self.previous:
                then, before = self.previous[node]
                for iface, after in counters.items():
                    if iface.startswith(LINK_PREFIX) and iface in before:
                        self.emit(out, now, node, iface[len(LINK_PREFIX):],
                                  link_rates(before[iface], after, at - then))
            self.previous[node] = (at, counters)
        return out

    def stop(self) -> ProbeOutput:
        for file in self.files.values():
            file.close()
        self.files = {}
        return ProbeOutput()
