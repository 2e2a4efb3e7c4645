"""A lab's hosts on this machine: a network namespace per host, a veth pair per link (or,
for a link with a round trip to add, two TUN devices joined by pglab's wire process:
wire.py), token buckets (tbf) for bandwidth, nftables for partitions; all removed on every
path, and by the next pglab after a kill -9.

Names: each namespace is `pglab-<token>-<host>`; RUN_DIR/netns/<token>.json records the
pglab that owns them (pid and start time) before the first is made, so that a namespace
without a live owner is pglab's to remove. Every veth, qdisc and nft table lives only
inside these namespaces (both ends of a veth are made in them): deleting the namespaces
removes them with it, and nothing is ever added to the host's own namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from pglab.errors import EnvironmentProblem, PglabError
from pglab.network import measure
from pglab.network.plan import NetworkPlan, PlannedLink
from pglab.network.wire import READY
from pglab.paths import RUN_DIR
from pglab.processes import NETNS_DIR, spawn, stop_child
from pglab.results.files import write_text
from pglab.system_parts import PARTS, root_problem

PREFIX = "pglab-"
RECORDS = RUN_DIR / "netns"
WIRE_START_S = 10.0
TBF_LATENCY_MS = 100  # how long a packet may wait in a link's bucket before it is dropped
# A wired link's TUN device queues what the kernel sends until the wire reads it. At the
# TUN's own 500 packets, a burst of a few MB of WAL over an unlimited 2 ms link is partly
# dropped before the wire has read its first packet: a loss of the emulator, not of the
# link. A socket's send buffer holds at most 4 MB (tcp_wmem): under 3,000 packets.
WIRE_QUEUE_PACKETS = 10_000


def _run(argv: list[str], what: str, stdin: str | None = None) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, input=stdin)
    if result.returncode != 0:
        last = (result.stderr.strip() or result.stdout.strip() or "(no output)").splitlines()
        raise PglabError(f"{what}: {' '.join(argv)} failed: {last[-1]}")
    return result.stdout


def namespace_problem() -> str | None:
    """Why this machine cannot give a lab hosts of their own, or None: root, iproute2,
    and a namespace with a veth pair actually made (and removed)."""
    if why := root_problem("network.hosts = 'separate' (network namespaces)"):
        return why
    if why := PARTS["iproute2"].missing_problem("network.hosts = 'separate'"):
        return why
    token = f"probe{secrets.token_hex(3)}"
    name = f"{PREFIX}{token}"
    record = _write_record(token, [name])
    try:
        made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
        if made.returncode != 0:
            return ("network.hosts = 'separate' needs network namespaces, and this machine "
                    f"cannot make one: {made.stderr.strip() or 'ip netns add failed'}")
        veth = subprocess.run(["ip", "-n", name, "link", "add", "pglab-a", "type", "veth",
                               "peer", "name", "pglab-b"], capture_output=True, text=True)
        if veth.returncode != 0:
            return ("network.hosts = 'separate' needs veth links, and this kernel cannot "
                    f"make one: {veth.stderr.strip()}")
    finally:
        remove_namespace(name)
        record.unlink(missing_ok=True)
    return None


def _write_record(token: str, namespaces: list[str]) -> Path:
    """The owner of namespaces about to be made: written before the first of them, so that
    a pglab namespace without a record, or with a dead owner, is an orphan."""
    RECORDS.mkdir(parents=True, exist_ok=True)
    record = RECORDS / f"{token}.json"
    # Whole or not at all: a reaper reading half a record would take its owner for dead.
    write_text(record, json.dumps({"pid": os.getpid(),
                                   "started": psutil.Process().create_time(),
                                   "namespaces": namespaces}))
    return record


def _burst_bytes(mbps: float) -> int:
    """A token bucket's depth: 2 ms of the rate, and at least 16 KB (tbf cuts a larger
    GSO packet into segments that each fit)."""
    return max(16 * 1024, int(mbps * 1e6 / 8 * 0.002))


# The most a round trip across the wire's TUN devices costs besides its delay (idle:
# 0.05-0.1 ms): more is the machine's load, not the link's.
FIXED_COST_MAX_S = 0.15e-3


class LabNetwork:
    """The namespaces and links of one lab. `create()`, then `shape()` once the cluster is
    up (copies of the data are setup, not the experiment), `close()` on every path."""

    def __init__(self, plan: NetworkPlan, on_status: Callable[[str], None]) -> None:
        self.plan = plan
        self.on_status = on_status
        self.token = secrets.token_hex(4)
        self.record = RECORDS / f"{self.token}.json"
        self.made: list[str] = []
        self.wires: dict[str, subprocess.Popen[bytes]] = {}  # link name -> its wire process
        self.wire_priority: dict[str, str] = {}  # link name -> "real-time" or why not
        self.fixed_s: dict[str, float] = {}  # link name -> a round trip's cost besides delay
        self.measured: dict[str, dict[str, Any]] = {}
        self._partitions: dict[str, list[str]] = {}  # table -> namespaces it is in
        self._next_partition = 0

    def netns(self, host: str) -> str:
        return f"{PREFIX}{self.token}-{host}"

    def address_of(self, host: str, seen_from: str) -> str:
        return self.plan.address_of(host, seen_from)

    def addresses(self, host: str) -> list[str]:
        return [link.address(host) for link in self.plan.links_of(host)]

    # --- up ------------------------------------------------------------------------------

    def create(self) -> None:
        names = [self.netns(h) for h in self.plan.hosts]
        self.record = _write_record(self.token, names)
        links = len(self.plan.links)
        self.on_status(f"making {len(names)} hosts and {links} link{'s' if links > 1 else ''}")
        for host, name in zip(self.plan.hosts, names, strict=True):
            _run(["ip", "netns", "add", name], f"the namespace of {host}")
            self.made.append(name)
            _run(["ip", "-n", name, "link", "set", "lo", "up"], f"{host}'s loopback")
        for link in self.plan.links:
            ns_a, ns_b = self.netns(link.a), self.netns(link.b)
            if link.wired:
                self._start_wire(link)
            else:
                _run(["ip", "link", "add", link.iface(link.a), "netns", ns_a, "type", "veth",
                      "peer", "name", link.iface(link.b), "netns", ns_b], f"link {link.name}")
            for host, ns in ((link.a, ns_a), (link.b, ns_b)):
                iface = link.iface(host)
                _run(["ip", "-n", ns, "addr", "add", f"{link.address(host)}/30", "dev",
                      iface], f"link {link.name}")
                queue = ["txqueuelen", str(WIRE_QUEUE_PACKETS)] if link.wired else []
                _run(["ip", "-n", ns, "link", "set", iface, *queue, "up"], f"link {link.name}")

    def _start_wire(self, link: PlannedLink) -> None:
        """A delayed link: pglab's wire process (wire.py) makes a TUN device in each end's
        namespace and carries packets between them, rtt/2 (± jitter/2) each way."""
        argv = [sys.executable, "-m", "pglab.network.wire", "--if-a", link.iface(link.a),
                "--ns-b", self.netns(link.b), "--if-b", link.iface(link.b),
                "--one-way-us", f"{link.rtt_s / 2 * 1e6:.1f}",
                "--jitter-us", f"{link.jitter_s / 2 * 1e6:.1f}"]
        proc = spawn(argv, netns=self.netns(link.a), stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.wires[link.name] = proc
        assert proc.stdout is not None and proc.stderr is not None
        ready, _, _ = select.select([proc.stdout], [], [], WIRE_START_S)
        line = proc.stdout.readline() if ready else b""
        if line.startswith(READY):
            self.wire_priority[link.name] = line[len(READY):].decode().strip()
        else:
            stop_child(proc)
            said = proc.stderr.read().decode(errors="replace").strip().splitlines()
            raise PglabError(f"link {link.name}: pglab's delaying wire did not start: "
                             f"{said[-1] if said else f'not ready in {WIRE_START_S:g} s'}")

    def set_delay(self, link: PlannedLink, rtt_s: float, jitter_s: float) -> None:
        """The wired link's round trip from now on (jitter: its spread, ± half each way),
        less the link's fixed cost where `shape` measured it."""
        proc = self.wires[link.name]
        assert proc.stdin is not None
        one_way = max(0.0, rtt_s - self.fixed_s.get(link.name, 0.0)) / 2
        proc.stdin.write(f"{one_way * 1e6:.1f} {jitter_s / 2 * 1e6:.1f}\n".encode())
        proc.stdin.flush()

    def set_rate(self, link: PlannedLink, mbps: float) -> None:
        """The link's bucket on both ends (each direction) at `mbps`; 0 takes it off."""
        for host in (link.a, link.b):
            ns, iface = self.netns(host), link.iface(host)
            if mbps:
                _run(["tc", "-n", ns, "qdisc", "replace", "dev", iface, "root", "tbf",
                      "rate", f"{mbps * 1000:g}kbit", "burst", str(_burst_bytes(mbps)),
                      "latency", f"{TBF_LATENCY_MS}ms"], f"the bandwidth of link {link.name}")
            elif self.rate_mbps(host, iface) is not None:
                _run(["tc", "-n", ns, "qdisc", "del", "dev", iface, "root"],
                     f"the bandwidth of link {link.name}")

    def rate_mbps(self, host: str, iface: str) -> float | None:
        """The rate of the bucket on `host`'s `iface` as the kernel holds it (tc reads it
        back), in Mbit/s; None when it has none."""
        shown = json.loads(_run(["tc", "-j", "-n", self.netns(host), "qdisc", "show", "dev",
                                 iface], f"the bandwidth on {host}'s {iface}") or "[]")
        for qdisc in shown:
            if qdisc.get("root") and qdisc.get("kind") == "tbf":
                return round(float(qdisc["options"]["rate"]) * 8 / 1e6, 3)  # bytes/s
        return None

    def shape(self) -> None:
        """Each limited link's bucket on both ends (each direction), then every link's
        figures measured."""
        for link in self.plan.links:
            if link.bandwidth_mbps:
                self.set_rate(link, link.bandwidth_mbps)
        self.on_status("measuring the links")
        for link in self.plan.links:
            if link.wired and link.rtt_s:
                self._take_off_fixed_cost(link)
            self.measured[link.name] = self.measure(link)

    def _take_off_fixed_cost(self, link: PlannedLink) -> None:
        """What a round trip across the wire costs besides its delay: two TUN devices and
        a copy of each packet each way, 0.05-0.1 ms on an idle machine. The fastest of
        ROUND_TRIPS round trips with no delay, at most FIXED_COST_MAX_S: a busy machine
        makes every one of them slower, and what it adds is not the wire's (taken off
        for good, a busy minute at setup would shorten the link for the whole run). It
        is taken off the delay from now on (`wire_fixed_ms` in the manifest)."""
        self.set_delay(link, 0.0, 0.0)
        fastest = measure.round_trip_ms(self.netns(link.a), link.address_a,
                                        self.netns(link.b))["min"]
        self.fixed_s[link.name] = min(fastest / 1000, FIXED_COST_MAX_S, link.rtt_s)
        self.set_delay(link, link.rtt_s, link.jitter_s)

    def measure(self, link: PlannedLink) -> dict[str, Any]:
        ns_a, ns_b = self.netns(link.a), self.netns(link.b)
        burst = _burst_bytes(link.bandwidth_mbps)
        try:
            figures: dict[str, Any] = {"rtt_ms": measure.round_trip_ms(
                ns_a, link.address_a, ns_b)}
            if link.name in self.wire_priority:
                figures["wire_priority"] = self.wire_priority[link.name]
            if link.name in self.fixed_s:
                figures["wire_fixed_ms"] = round(self.fixed_s[link.name] * 1000, 4)
            if link.bandwidth_mbps:
                ways = {f"{link.a}->{link.b}": measure.throughput_mbps(
                            ns_b, link.address_b, link.iface(link.b), ns_a,
                            link.bandwidth_mbps, burst),
                        f"{link.b}->{link.a}": measure.throughput_mbps(
                            ns_a, link.address_a, link.iface(link.a), ns_b,
                            link.bandwidth_mbps, burst)}
                figures["mbps"] = {way: f["wire"] for way, f in ways.items()}
                figures["payload_mbps"] = {way: f["payload"] for way, f in ways.items()}
        except OSError as exc:
            raise PglabError(f"link {link.name} does not carry pglab's own test traffic: "
                             f"{exc}") from None
        return figures

    def manifest(self) -> dict[str, Any]:
        links = []
        for link in self.plan.links:
            links.append({
                "between": [link.a, link.b],
                "addresses": {link.a: link.address_a, link.b: link.address_b},
                "configured": {"rtt_ms": link.rtt_s * 1000, "jitter_ms": link.jitter_s * 1000,
                               "bandwidth_mbps": link.bandwidth_mbps},
                "measured": self.measured.get(link.name, {}),
            })
        return {"hosts": "separate", "links": links,
                "namespaces": {host: self.netns(host) for host in self.plan.hosts}}

    # --- faults --------------------------------------------------------------------------

    def links_for(self, host: str, peer: str | None) -> list[PlannedLink]:
        """The links a fault of `host` acts on: the one to `peer`, or all of its links."""
        return [self.plan.link(host, peer)] if peer else self.plan.links_of(host)

    def delay(self, host: str, peer: str | None, rtt_s: float | None,
              jitter_s: float = 0.0) -> dict[str, Any]:
        """Change the round trip of `host`'s wired links (to `peer` alone if given); None
        puts each link's own back. Each link's round trip is measured then (20 round
        trips), independently of what was asked: link name -> p50 and p99 in ms."""
        measured = {}
        for link in self.links_for(host, peer):
            if rtt_s is None:
                self.set_delay(link, link.rtt_s, link.jitter_s)
            else:
                self.set_delay(link, rtt_s, jitter_s)
            measured[link.name] = measure.round_trip_ms(
                self.netns(link.a), link.address_a, self.netns(link.b), count=20)
        return measured

    def limit(self, host: str, peer: str | None, mbps: float | None) -> dict[str, Any]:
        """Change the bandwidth of `host`'s links (to `peer` alone if given), each
        direction; None puts each link's own back (none: unlimited). What the kernel then
        holds is read back from each end's bucket: link name -> {"a->b": Mbit/s, ...}, 0
        for unlimited (no traffic is sent to measure it: that would load the link in the
        middle of the run)."""
        held = {}
        for link in self.links_for(host, peer):
            self.set_rate(link, link.bandwidth_mbps if mbps is None else mbps)
            held[link.name] = {f"{h}->{link.peer(h)}": self.rate_mbps(h, link.iface(h)) or 0.0
                               for h in (link.a, link.b)}
        return held

    def partition(self, host: str, peer: str | None) -> str:
        """Drop every packet arriving over `host`'s links (to `peer` alone if given), on
        both ends: the sockets stay open and retransmit, as across a real network. The
        partition's name, for `heal`."""
        links = self.links_for(host, peer)
        self._next_partition += 1
        table = f"pglab_partition{self._next_partition}"
        done: list[str] = []
        self._partitions[table] = done
        nft = str(PARTS["nftables"].require("faults: network-partition"))
        ends = [(h, link.iface(h)) for link in links for h in (link.a, link.b)]
        by_ns: dict[str, list[str]] = {}
        for h, iface in ends:
            by_ns.setdefault(self.netns(h), []).append(iface)
        for ns, ifaces in by_ns.items():
            names = ", ".join(f'"{i}"' for i in ifaces)
            rules = (f"table inet {table} {{\n chain input {{\n  type filter hook input "
                     f"priority -10; policy accept;\n  iifname {{ {names} }} drop\n }}\n}}\n")
            done.append(ns)  # before: a table half made is deleted by heal too
            _run(["ip", "netns", "exec", ns, nft, "-f", "-"], f"the partition of {host}",
                 rules)
        return table

    def heal(self, table: str) -> None:
        nft = PARTS["nftables"].locate("nft")
        for ns in self._partitions.pop(table, []):
            if nft is not None:
                subprocess.run(["ip", "netns", "exec", ns, str(nft), "delete", "table",
                                "inet", table], capture_output=True, check=False)

    # --- down ----------------------------------------------------------------------------

    def close(self) -> None:
        """Remove every namespace (their veths, qdiscs and nft tables go with them), then
        the record."""
        for proc in self.wires.values():  # its TUN devices hold their namespaces
            stop_child(proc)
        self.wires = {}
        for name in reversed(self.made):
            remove_namespace(name)
        self.made = []
        self.record.unlink(missing_ok=True)


def remove_namespace(name: str) -> None:
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _owner_alive(record: dict[str, Any]) -> bool:
    try:
        proc = psutil.Process(int(record["pid"]))
        return bool(abs(proc.create_time() - float(record["started"])) < 1.0)
    except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError, ValueError, TypeError):
        return False


def pglab_namespaces() -> list[str]:
    """The network namespaces pglab made that exist on this machine (by name)."""
    if not NETNS_DIR.is_dir():
        return []
    with contextlib.suppress(OSError):
        return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(PREFIX))
    return []


def reap_stale_networks() -> list[str]:
    """Remove the namespaces (and with them the links) of labs whose pglab died; the
    names removed."""
    found = pglab_namespaces()
    records = sorted(RECORDS.glob("*.json")) if RECORDS.is_dir() else []
    if not found and not records:
        return []
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return []
    owners: dict[str, bool] = {}
    for path in records:
        try:
            alive = _owner_alive(json.loads(path.read_text()))
        except (OSError, ValueError):
            alive = False
        owners[path.stem] = alive
        if not alive:
            path.unlink(missing_ok=True)
    reaped = []
    for name in found:
        token = name[len(PREFIX):].split("-", 1)[0]
        if owners.get(token):
            continue
        _kill_inside(name)
        remove_namespace(name)
        reaped.append(name)
    return reaped


def _kill_inside(name: str, timeout_s: float = 5.0) -> None:
    """Kill what still runs in a dead lab's namespace: only pglab puts processes there
    (its servers, load and wire), and one left running without its pglab (a load
    generator, a backend still exiting) keeps the namespace and its links alive after
    its name is removed."""
    listed = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True,
                            check=False)
    killed = []
    for pid in (int(p) for p in listed.stdout.split() if p.isdigit()):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            proc.kill()
            killed.append(proc)
    psutil.wait_procs(killed, timeout=timeout_s)


def require_namespaces() -> None:
    """EnvironmentProblem (exit 3) when this machine cannot make a lab's hosts."""
    if problem := namespace_problem():
        raise EnvironmentProblem(problem)
