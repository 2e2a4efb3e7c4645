"""What do hosts of their own cost? The same load with `network.hosts = "separate"` (links
with no delay: veth pairs) against "shared" (the host's loopback), interleaved, and the CPU
that pglab's wire (the process behind a link with a delay) spends per MB it carries.

    python bench/separate_hosts_cost.py [--pairs 3] [--duration 15] [--clients 4]

Each side is a complete `pglab run` of one scenario: tpcb-like on scale 10 over TCP, a
synchronous standby, the given clients; the order of the two sides alternates pair by
pair. Prints each pair's TPS and the median ratio separate / shared (target at least
0.95). Then a link of 0.5 ms between two namespaces carries 16 MB each time (3 times) and
the wire process's CPU seconds per MB are printed (a veth's own cost is the kernel's,
in softirq on both ends, not a process's: it is inside the TPS ratio). The load average
is printed: the machine may be shared. Needs root. Exit 0 when the ratio meets its
target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

from pglab.network import measure
from pglab.network.hosts import LabNetwork
from pglab.network.plan import plan_network
from pglab.scenario import load_text

SCENARIO = """name = "hosts-cost"
[server.settings]
shared_buffers = "256MB"
[topology]
standbys = 1
synchronous = "on"
[workload]
scale = 10
mix = ["tpcb-like"]
path = "tcp"
clients = {clients}
jobs = 2
duration = "{duration}s"
warmup = "2s"
"""


def run(scenario: Path, results: Path, hosts: str) -> float:
    os.sync()
    subprocess.run([sys.executable, "-m", "pglab", "run", str(scenario), "--results",
                    str(results), "--set", f'network.hosts="{hosts}"'],
                   check=True, stdout=subprocess.DEVNULL)
    latest = max((results / "hosts-cost").iterdir(), key=lambda p: p.stat().st_mtime)
    manifest = json.loads((latest / "manifest.json").read_text())
    return float(manifest["results"]["measured"]["tps"])


def wire_cpu_per_mb(repeat: int) -> list[float]:
    text = ('name = "wire"\n[topology]\nstandbys = 1\n[network]\nhosts = "separate"\n'
            '[[network.links]]\nbetween = ["primary", "standby1"]\nrtt = "0.5ms"\n')
    network = LabNetwork(plan_network(load_text(text, "wire.toml").scenario),
                         lambda _msg: None)
    network.create()
    network.shape()
    per_mb = []
    try:
        link = network.plan.link("primary", "standby1")
        wire = psutil.Process(network.wires[link.name].pid)
        for _ in range(repeat):
            before = wire.cpu_times()
            measure.throughput_mbps(network.netns(link.b), link.address_b, link.iface(link.b),
                                    network.netns(link.a), 0.0, 0)
            after = wire.cpu_times()
            cpu = (after.user - before.user) + (after.system - before.system)
            per_mb.append(cpu / (measure.UNLIMITED_BYTES / 1e6))
    finally:
        network.close()
    return per_mb


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory(prefix="pglab-hosts-cost-") as scratch:
        scenario = Path(scratch) / "hosts-cost.toml"
        scenario.write_text(SCENARIO.format(clients=args.clients, duration=args.duration))
        results = Path(scratch) / "results"
        for pair in range(args.pairs):
            order = ("shared", "separate") if pair % 2 == 0 else ("separate", "shared")
            tps = {hosts: run(scenario, results, hosts) for hosts in order}
            ratios.append(tps["separate"] / tps["shared"])
            print(f"pair {pair + 1} ({order[0]} first): shared {tps['shared']:.0f} TPS, "
                  f"separate {tps['separate']:.0f} TPS, ratio {ratios[-1]:.3f}  (load "
                  f"{os.getloadavg()[0]:.1f})", flush=True)
    median = statistics.median(ratios)
    print(f"median TPS ratio separate / shared: {median:.3f} (target >= 0.95)")
    cpu = wire_cpu_per_mb(3)
    print("wire CPU per MB carried (0.5 ms link, 16 MB each): "
          + ", ".join(f"{v * 1000:.2f} ms" for v in cpu)
          + f"  (load {os.getloadavg()[0]:.1f})")
    return 0 if median >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
