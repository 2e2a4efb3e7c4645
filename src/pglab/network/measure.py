"""A link measured from pglab's own sockets, one end in each host's namespace.

A socket belongs to the network namespace of the thread that made it: a short thread
enters a host's namespace, makes the socket and ends, and pglab's main thread then uses
it. The figures are those of the link itself: the round trip of one byte each way (TCP
with Nagle off: what a commit's confirmation waits for at least), and the bytes a second
that cross it once a token bucket's burst is spent.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time

from pglab.probes.procfs.net import parse_net_dev
from pglab.processes import in_netns

ROUND_TRIPS = 50
MEASURE_S = 0.4  # seconds of a limited link's rate, after its burst
UNLIMITED_BYTES = 16 * 2**20
TIMEOUT_S = 10.0


def _pair(server_ns: str, server_addr: str, client_ns: str) -> tuple[socket.socket,
                                                                     socket.socket]:
    listener = in_netns(server_ns, lambda: socket.create_server((server_addr, 0)))
    try:
        port = listener.getsockname()[1]
        client = in_netns(client_ns, socket.socket)
        client.settimeout(TIMEOUT_S)
        client.connect((server_addr, port))
        listener.settimeout(TIMEOUT_S)
        accepted, _ = listener.accept()
        accepted.settimeout(TIMEOUT_S)
    finally:
        listener.close()
    for sock in (client, accepted):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, accepted


def round_trip_ms(ns_a: str, addr_a: str, ns_b: str,
                  count: int = ROUND_TRIPS) -> dict[str, float]:
    """p50, p99 and the fastest of `count` one-byte round trips from b to a, in
    milliseconds."""
    client, server = _pair(ns_a, addr_a, ns_b)
    times = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            client.sendall(b"p")
            server.recv(1)
            server.sendall(b"q")
            client.recv(1)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        client.close()
        server.close()
    times.sort()
    return {"p50": round(statistics.median(times), 4),
            "p99": round(statistics.quantiles(times, n=100, method="inclusive")[98], 4),
            "min": round(times[0], 4)}


class _RxCounter:
    """The bytes an interface has received so far, from the kernel's counters of its own
    namespace (/proc/net/dev, opened there, keeps showing that namespace's)."""

    def __init__(self, netns: str, iface: str) -> None:
        self.netns, self.iface = netns, iface
        self.dev = in_netns(netns, lambda: open("/proc/thread-self/net/dev", "rb",  # noqa: SIM115
                                                buffering=0))

    def read(self) -> int:
        self.dev.seek(0)
        counters = parse_net_dev(self.dev.read().decode()).get(self.iface)
        if counters is None:
            raise OSError(f"no interface {self.iface} in network namespace {self.netns}")
        return counters.rx_bytes

    def close(self) -> None:
        self.dev.close()


def throughput_mbps(ns_to: str, addr_to: str, iface_to: str, ns_from: str,
                    limit_mbps: float, burst_bytes: int) -> dict[str, float]:
    """From `ns_from` to `ns_to`, MEASURE_S of the limit's worth after the bucket's burst
    (or UNLIMITED_BYTES on an unlimited link): Mbit/s on the wire (what the receiving
    interface `iface_to` counted: payload and headers, what a link's rate is a rate of)
    and of payload (what the receiver read), both from a fifth of the way on."""
    sender, receiver = _pair(ns_to, addr_to, ns_from)
    counter = _RxCounter(ns_to, iface_to)
    skip = burst_bytes if limit_mbps else 0
    total = (skip + int(limit_mbps * 1e6 / 8 * MEASURE_S)) if limit_mbps else UNLIMITED_BYTES
    failed: list[BaseException] = []

    def send() -> None:
        chunk = b"\0" * 65536
        left = total
        try:
            while left > 0:
                left -= sender.send(chunk[:min(left, len(chunk))])
        except OSError as exc:
            failed.append(exc)

    thread = threading.Thread(target=send, name="link-measure", daemon=True)
    thread.start()
    got, started, counted_from, wire_from = 0, 0.0, 0, 0
    try:
        while got < total:
            data = receiver.recv(1 << 20)
            if not data:
                break
            got += len(data)
            # The slope from a fifth of the way on: the bucket's burst spent, and the
            # bytes a delay holds in flight at both ends of the window alike.
            if not started and got >= skip + (total - skip) // 5:
                wire_from = counter.read()
                started, counted_from = time.perf_counter(), got
        wire_to = counter.read()
        elapsed = time.perf_counter() - started
    finally:
        thread.join(TIMEOUT_S)
        sender.close()
        receiver.close()
        counter.close()
    if failed:
        raise failed[0]
    if elapsed <= 0:
        return {"payload": 0.0, "wire": 0.0}
    return {"payload": round((got - counted_from) * 8 / elapsed / 1e6, 2),
            "wire": round((wire_to - wire_from) * 8 / elapsed / 1e6, 2)}
