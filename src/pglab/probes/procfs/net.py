"""/proc/net/dev: the byte, packet and drop counters of each interface of a network
namespace (the namespace of whoever opened the file)."""

from __future__ import annotations

from dataclasses import dataclass

# a link's interface in a host's namespace is named pglab-<peer> (network/plan.py names
# them; os.links reads only those)
LINK_PREFIX = "pglab-"


@dataclass(frozen=True)
class NetDevCounters:
    rx_bytes: int
    rx_packets: int
    rx_drop: int
    tx_bytes: int
    tx_packets: int
    tx_drop: int


def parse_net_dev(text: str) -> dict[str, NetDevCounters]:
    """Interface name -> its counters (the two header lines skipped)."""
    found = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 16:
            continue
        values = [int(v) for v in fields]
        found[name.strip()] = NetDevCounters(
            rx_bytes=values[0], rx_packets=values[1], rx_drop=values[3],
            tx_bytes=values[8], tx_packets=values[9], tx_drop=values[11])
    return found


def link_rates(before: NetDevCounters, after: NetDevCounters,
               seconds: float) -> dict[str, float]:
    """One interface between two reads: Mbit/s each way (10**6 bits, as links are sized)
    and packets dropped a second."""
    if seconds <= 0:
        return {}
    return {
        "sent_mbit_s": (after.tx_bytes - before.tx_bytes) * 8 / seconds / 1e6,
        "received_mbit_s": (after.rx_bytes - before.rx_bytes) * 8 / seconds / 1e6,
        "dropped_per_s": ((after.rx_drop - before.rx_drop)
                          + (after.tx_drop - before.tx_drop)) / seconds,
    }
