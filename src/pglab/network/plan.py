"""Which hosts a lab has, which links join them and the addresses on each: from the
scenario alone (no machine), so that it can be checked and tested offline.

Links are point-to-point veth pairs, one per pair of hosts (a full mesh), each a /30 of
its own: a link's limits and a partition of it then act on exactly its interface pair,
where a bridge would put every peer of a node behind one interface. The addresses are
pglab's own inside namespaces it made; no namespace has a default route or an interface
in the host's namespace, so nothing a run sends can leave them.
"""

from __future__ import annotations

import ipaddress
import itertools
from dataclasses import dataclass
from typing import Any

from pglab.probes.procfs.net import LINK_PREFIX
from pglab.scenario.model import Link, Scenario

# 10.213.0.0/16 cut into /30s: 16384 links, far above a full mesh of 10 hosts (45).
_BASE = ipaddress.IPv4Address("10.213.0.0")


@dataclass(frozen=True)
class PlannedLink:
    """One veth pair: `a` and `b` (hosts, in the plan's order) and each end's address."""

    index: int
    a: str
    b: str
    address_a: str
    address_b: str
    rtt_s: float = 0.0
    jitter_s: float = 0.0
    bandwidth_mbps: float = 0.0  # each direction; 0: unlimited
    # Carried by pglab's wire (a delay now, or one a network-latency fault adds), else a
    # veth pair.
    wired: bool = False

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"

    def iface(self, host: str) -> str:
        """The link's interface in `host`'s namespace (named after the other end)."""
        return LINK_PREFIX + (self.b if host == self.a else self.a)

    def address(self, host: str) -> str:
        return self.address_a if host == self.a else self.address_b

    def peer(self, host: str) -> str:
        return self.b if host == self.a else self.a


@dataclass(frozen=True)
class NetworkPlan:
    hosts: tuple[str, ...]
    links: tuple[PlannedLink, ...]

    def link(self, one: str, other: str) -> PlannedLink:
        for link in self.links:
            if {link.a, link.b} == {one, other}:
                return link
        raise KeyError(f"no link between {one} and {other}")

    def links_of(self, host: str) -> list[PlannedLink]:
        return [link for link in self.links if host in (link.a, link.b)]

    def address_of(self, host: str, seen_from: str) -> str:
        """The address `seen_from` reaches `host` at: `host`'s end of their link."""
        return self.link(host, seen_from).address(host)


# The fault that changes a link's delay (or bandwidth) for a while (lab/fault_actions.py;
# named here, as the plan does not import the lab).
LATENCY_ACTION = "network-latency"


def _fault_pairs(node: str, peer: Any, hosts: tuple[str, ...]) -> list[frozenset[str]]:
    """The links a network fault of `node` acts on: the one to `peer`, or all of them."""
    if isinstance(peer, str) and peer:
        return [frozenset((node, peer))]
    return [frozenset((node, other)) for other in hosts if other != node]


def plan_network(scenario: Scenario) -> NetworkPlan:
    """Every pair of hosts gets a link; the scenario's [[network.links]] give figures."""
    hosts = tuple(scenario.host_names())
    configured: dict[frozenset[str], Link] = {
        frozenset(link.between): link for link in scenario.network.links}
    # A fault that changes the bandwidth alone needs no wire: a veth takes a bucket too.
    delayed_later = {pair for fault in scenario.faults
                     if fault.action == LATENCY_ACTION and "rtt" in fault.args
                     for pair in _fault_pairs(fault.node, fault.args.get("peer"), hosts)}
    links = []
    for index, (a, b) in enumerate(itertools.combinations(hosts, 2)):
        net = _BASE + 4 * index
        pair = frozenset((a, b))
        spec = configured.get(pair)
        rtt, jitter = (spec.rtt, spec.jitter) if spec else (0.0, 0.0)
        links.append(PlannedLink(
            index=index, a=a, b=b, address_a=str(net + 1), address_b=str(net + 2),
            rtt_s=rtt, jitter_s=jitter, bandwidth_mbps=spec.bandwidth_mbps if spec else 0.0,
            wired=bool(rtt or jitter or pair in delayed_later)))
    return NetworkPlan(hosts, tuple(links))
