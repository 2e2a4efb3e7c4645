"""A link with a delay: pglab's own wire between two TUN devices, one in each host's
namespace, run as a process of its own (`python -m pglab.network.wire`).

The kernel has no netem here, so the delay is added in user space, per packet, on a
layer-3 link: each host's TCP talks to the other's end to end (its RTT, window,
retransmissions and `ss` figures are real; no proxy terminates the session). Every packet
read from one device is written to the other `one_way` later, give or take `jitter`
(uniform), never before the one read ahead of it in the same direction (a wire does not
reorder). A token bucket (tbf) on each TUN device holds a bandwidth as on a veth, and a
partition drops at the devices' input as on a veth. The devices belong to this process:
when it ends (pglab's end, or its death: a parent-death signal) they are gone and the link
is cut, so nothing outlives the lab.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import fcntl
import os
import random
import select
import statistics
import struct
import sys
import time

from pglab.processes import enter_netns

IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
TUNSETIFF = 0x400454CA
PR_SET_TIMERSLACK = 29
READ_BATCH = 64  # packets read from one device before the other gets a turn
READY = b"ready "  # then the priority it runs at
WIRE_PRIORITY = 10  # SCHED_FIFO, 1-99
LATENESS_WINDOW = 64  # waits whose lateness the median is of


def open_tun(name: str) -> int:
    """A TUN device named `name` in the calling thread's namespace, made by this open."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def forward(fd_a: int, fd_b: int, one_way_s: float, jitter_s: float,
            control: int | None = None) -> None:
    """Carry packets both ways, each `one_way_s` (± `jitter_s`) after it was read. Lines
    "ONE_WAY_US JITTER_US" on `control` change the delay for the packets read after them;
    its end (pglab gone) ends the wire."""
    other = {fd_a: fd_b, fd_b: fd_a}
    watched = [fd_a, fd_b] + ([control] if control is not None else [])
    pending = b""
    queues: dict[int, collections.deque[tuple[float, bytes]]] = {
        fd_a: collections.deque(), fd_b: collections.deque()}
    last = {fd_a: 0.0, fd_b: 0.0}
    rng = random.Random()
    # How late the kernel wakes this process after a wait (the median of the last waits:
    # a stall of the whole machine is no wake-up cost): each wait ends that much early,
    # and a packet that wakes it is read that much after it arrived (the same wake-up),
    # so its departure is counted from that much before it was read.
    late = 0.0
    lateness: collections.deque[float] = collections.deque(maxlen=LATENESS_WINDOW)
    while True:
        due = [queue[0][0] for queue in queues.values() if queue]
        wake = min(due) - late if due else None
        timeout = max(0.0, wake - time.monotonic()) if wake is not None else None
        asleep = time.monotonic()
        readable, _, _ = select.select(watched, [], [], timeout)
        # A packet that woke this process was read a wake-up after it arrived; one found
        # waiting (a reply that came back while this process was still writing its
        # request) was read with none to count back: no more than the wait lasted.
        woken_after = time.monotonic() - asleep
        if not readable and wake is not None:
            lateness.append(max(0.0, time.monotonic() - wake))
            if len(lateness) % 8 == 0 or len(lateness) == LATENESS_WINDOW:
                late = statistics.median(lateness)
        if control is not None and control in readable:
            data = os.read(control, 4096)
            if not data:
                return
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                one_way_us, jitter_us = (float(v) for v in line.split())
                one_way_s, jitter_s = one_way_us / 1e6, jitter_us / 1e6
        for fd in readable:
            if fd == control:
                continue
            for _ in range(READ_BATCH):
                try:
                    packet = os.read(fd, 65536)
                except BlockingIOError:
                    break
                now = time.monotonic()
                spread = rng.uniform(-jitter_s, jitter_s) if jitter_s else 0.0
                depart = max(now - min(late, one_way_s, woken_after) + one_way_s + spread,
                             last[fd])
                last[fd] = depart
                queues[fd].append((depart, packet))
        now = time.monotonic() + late
        for fd, queue in queues.items():
            while queue and queue[0][0] <= now:
                _depart, packet = queue.popleft()
                # A device whose queue is full, or going down, loses it, as a wire would.
                with contextlib.suppress(OSError):
                    os.write(other[fd], packet)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pglab.network.wire")
    parser.add_argument("--if-a", required=True)  # made in this process's namespace
    parser.add_argument("--ns-b", required=True)
    parser.add_argument("--if-b", required=True)
    parser.add_argument("--one-way-us", type=float, required=True)
    parser.add_argument("--jitter-us", type=float, default=0.0)
    args = parser.parse_args(argv)
    # The kernel may wake a sleeper up to 50 us late by default: a delay of 0.25 ms
    # would be 20% off.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    # netem delays in the kernel, unaffected by a busy machine; a user-space wire waits
    # for the CPU like any process (a loaded 2-core machine held packets up to 0.4 s).
    # A real-time priority (root) puts it first when a packet is due; it blocks in
    # select between packets, and the kernel's real-time throttling bounds it anyway.
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(WIRE_PRIORITY))
        priority = "real-time"
    except OSError as exc:  # not root, or a cgroup with no real-time runtime (cgroup v1)
        priority = f"normal ({exc.strerror})"
    fd_a = open_tun(args.if_a)
    enter_netns(args.ns_b)
    fd_b = open_tun(args.if_b)
    sys.stdout.buffer.write(READY + priority.encode() + b"\n")
    sys.stdout.flush()
    forward(fd_a, fd_b, args.one_way_us / 1e6, args.jitter_us / 1e6, sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
