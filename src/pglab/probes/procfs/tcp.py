"""TCP sockets as `ss -tinpmH state established` prints them."""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from pglab.probes.procfs.common import MIB

# ss -tinpmH state established ------------------------------------------------------------


@dataclass
class TcpSocket:
    local: str  # "127.0.0.1:5432", "[::1]:5432"
    peer: str
    recv_q: int
    send_q: int
    pid: int | None  # the owning process, when ss may see it (-p, same user or root)
    inode: int | None = None  # the socket's inode (-e), to find its owner without -p
    info: dict[str, float] = field(default_factory=dict)  # -i and -m fields, numeric

    @property
    def local_port(self) -> int:
        return _port(self.local)

    @property
    def peer_port(self) -> int:
        return _port(self.peer)


def _port(address: str) -> int:
    port = address.rpartition(":")[2]
    return int(port) if port.isdigit() else -1


_NUMBER = r"-?\d+(?:\.\d+)?"
_INFO_FIELDS = {
    "rtt_ms": re.compile(rf"\brtt:({_NUMBER})/"),
    "rttvar_ms": re.compile(rf"\brtt:{_NUMBER}/({_NUMBER})"),
    "minrtt_ms": re.compile(rf"\bminrtt:({_NUMBER})"),
    "rcv_space": re.compile(rf"\brcv_space:({_NUMBER})"),
    "bytes_acked": re.compile(rf"\bbytes_acked:({_NUMBER})"),
    "bytes_received": re.compile(rf"\bbytes_received:({_NUMBER})"),
    "retrans_total": re.compile(rf"\bretrans:\d+/({_NUMBER})"),
}
_SKMEM = re.compile(r"skmem:\(([^)]*)\)")
_PID = re.compile(r"pid=(\d+)")
_INODE = re.compile(r"\bino:(\d+)")


def _socket_info(text: str) -> dict[str, float]:
    info = {}
    for name, pattern in _INFO_FIELDS.items():
        match = pattern.search(text)
        if match:
            info[name] = float(match.group(1))
    skmem = _SKMEM.search(text)
    if skmem:  # r = receive queue memory, rb = receive buffer, w = send queue, tb = send buf
        for item in skmem.group(1).split(","):
            key = item.rstrip("0123456789")
            if key and item[len(key) :]:
                info[f"skmem_{key}"] = float(item[len(key) :])
    return info


def parse_ss(text: str) -> list[TcpSocket]:
    """Sockets of `ss -tinmH[p][e] state established` (no State column): header + info line."""
    sockets: list[TcpSocket] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[0].isspace():
            if sockets:
                sockets[-1].info.update(_socket_info(line))
            continue
        words = line.split()
        if len(words) < 4 or not words[0].isdigit():
            continue
        owner = _PID.search(line)
        inode = _INODE.search(line)
        sockets.append(
            TcpSocket(
                words[2],
                words[3],
                int(words[0]),
                int(words[1]),
                int(owner.group(1)) if owner else None,
                int(inode.group(1)) if inode else None,
            )
        )
    return sockets


def socket_inode(fd_link: str) -> int | None:
    """The inode of a /proc/<pid>/fd/<n> link to a socket ("socket:[12345]")."""
    if fd_link.startswith("socket:[") and fd_link.endswith("]"):
        inode = fd_link[8:-1]
        return int(inode) if inode.isdigit() else None
    return None


def socket_gauges(sock: TcpSocket) -> dict[str, float]:
    gauges = {"recv_q_bytes": float(sock.recv_q), "send_q_bytes": float(sock.send_q)}
    for key, metric in (
        ("rtt_ms", "rtt_ms"),
        ("rttvar_ms", "rttvar_ms"),
        ("minrtt_ms", "min_rtt_ms"),
        ("rcv_space", "rcv_space_bytes"),
    ):
        if key in sock.info:
            gauges[metric] = sock.info[key]
    for used, size, metric in (
        ("skmem_r", "skmem_rb", "rcv_buffer_fill_pct"),
        ("skmem_w", "skmem_tb", "send_buffer_fill_pct"),
    ):
        if sock.info.get(size, 0.0) > 0 and used in sock.info:
            gauges[metric] = 100.0 * sock.info[used] / sock.info[size]
    return gauges


def socket_rates(before: TcpSocket, after: TcpSocket, seconds: float) -> dict[str, float]:
    """MiB/s acknowledged by the peer and received, retransmitted segments per second.

    ss leaves a counter out while it is 0, so a missing counter counts as 0.
    """
    if seconds <= 0:
        return {}
    rates = {}
    for key, metric, scale in (
        ("bytes_acked", "sent_mbps", MIB),
        ("bytes_received", "received_mbps", MIB),
        ("retrans_total", "retrans_per_s", 1),
    ):
        delta = after.info.get(key, 0.0) - before.info.get(key, 0.0)
        if delta >= 0:
            rates[metric] = delta / scale / seconds
    return rates


# Many sockets of one pair of hosts as one series (a load generator opens dozens) --------

CLIENTS = "clients:"  # the label's prefix: "clients:client->primary", from each end


def clients_label(local_host: str, peer_host: str) -> str:
    """The label of the load generator's sockets between two hosts, seen from `local_host`
    (the node of the series): local->peer, like a replication socket's label."""
    return f"{CLIENTS}{local_host}->{peer_host}"


def aggregate_gauges(sockets: list[TcpSocket]) -> dict[str, float]:
    """The sockets' figures as one: the median and the largest smoothed RTT (`rtt_ms`,
    `rtt_max_ms`), the smallest minimum RTT (`min_rtt_ms`: the link's own round trip,
    without the server's work that a reply's ACK waits for), the queues summed (the bytes
    waiting on the pair), the fullest socket's buffer fill, and how many sockets."""
    if not sockets:
        return {}
    gauges = [socket_gauges(sock) for sock in sockets]
    out = {"sockets": float(len(sockets)),
           "recv_q_bytes": sum(g["recv_q_bytes"] for g in gauges),
           "send_q_bytes": sum(g["send_q_bytes"] for g in gauges)}
    rtts = sorted(g["rtt_ms"] for g in gauges if "rtt_ms" in g)
    if rtts:
        out["rtt_ms"] = statistics.median(rtts)
        out["rtt_max_ms"] = rtts[-1]
    for metric, pick in (("min_rtt_ms", min), ("rcv_buffer_fill_pct", max),
                         ("send_buffer_fill_pct", max)):
        values = [g[metric] for g in gauges if metric in g]
        if values:
            out[metric] = pick(values)
    return out


def aggregate_rates(pairs: list[tuple[TcpSocket, TcpSocket]], seconds: float
                    ) -> dict[str, float]:
    """The sum of each socket's rates (before, after): MiB/s sent and received,
    retransmissions a second, over the sockets seen at both times."""
    out: dict[str, float] = {}
    for before, after in pairs:
        for metric, value in socket_rates(before, after, seconds).items():
            out[metric] = out.get(metric, 0.0) + value
    return out
