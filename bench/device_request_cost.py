"""What one request costs on the emulated device: a commit-like load, device vs host.

Threads each write 8 KiB and fdatasync it, over and over (a WAL flush), on an ext4
volume of the emulated device with no limit, and then in the host's directory, taken in
turn. Prints ops/s on each side and their ratio (the device's round trips through the
loop device, FUSE, nbdfuse and the server, against the host's disk), the CPU the
device server and nbdfuse spend per request (what the load on the same cores loses),
the requests per op (a write, and a flush unless the block layer answers it) and the
two processes' CPU per op.

    python bench/device_request_cost.py [--seconds 4] [--threads 1 8] [--rounds 3]

Needs root. The machine's other load moves ops/s much more than the CPU per request.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from pglab.storage.devices import EmulatedDevice, make_image

FILE_MB = 16
BLOCK = 8192


def commit_load(files: list[Path], seconds: float) -> tuple[float, int]:
    """ops/s of len(files) threads each writing 8 KiB and fdatasync-ing its own file, and
    the ops done."""
    counts = [0] * len(files)
    block = os.urandom(BLOCK)
    stop = time.monotonic() + seconds

    def worker(index: int) -> None:
        fd = os.open(files[index], os.O_WRONLY)
        try:
            while time.monotonic() < stop:
                os.pwrite(fd, block, (counts[index] % (FILE_MB * 1024 * 1024 // BLOCK))
                          * BLOCK)
                os.fdatasync(fd)
                counts[index] += 1
        finally:
            os.close(fd)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(files))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - started), sum(counts)


def preallocated(directory: Path, count: int) -> list[Path]:
    files = []
    for index in range(count):
        path = directory / f"wal-{index}"
        with path.open("wb") as f:
            f.write(bytes(FILE_MB * 1024 * 1024))
            f.flush()
            os.fsync(f.fileno())
        files.append(path)
    return files


def cpu_seconds(procs: list[psutil.Process]) -> list[float]:
    return [sum(p.cpu_times()[:2]) for p in procs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("the emulated device needs root")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        work = Path(tmp)
        size = 1 << 30
        make_image(work / "image", size)
        device = EmulatedDevice(work / "device", work / "image", size)
        mount = work / "mnt"
        mount.mkdir()
        host = work / "host"
        host.mkdir()
        try:
            loop = device.start({})
            subprocess.run(["mkfs.ext4", "-q", str(loop)], check=True)
            subprocess.run(["mount", str(loop), str(mount)], check=True)
            most = max(args.threads)
            on_device, on_host = preallocated(mount, most), preallocated(host, most)
            assert device.server is not None and device.fuse is not None
            procs = [psutil.Process(device.server.pid), psutil.Process(device.fuse.pid)]
            for threads in args.threads:
                ratios, server_us, fuse_us, per_op, op_us = [], [], [], [], []
                for index in range(args.rounds):
                    counters = device.stats()["counters"]
                    cpu = cpu_seconds(procs)
                    # the order alternates, so both sides share the machine's drift
                    sides = [("device", on_device), ("host", on_host)][::-1 if index % 2 else 1]
                    ops = {side: commit_load(files[:threads], args.seconds)
                           for side, files in sides}
                    (device_ops, done), (host_ops, _) = ops["device"], ops["host"]
                    after = device.stats()["counters"]
                    requests = sum(after[k] - counters[k] for k in ("reads", "writes",
                                                                    "flushes"))
                    spent = [b - a for a, b in zip(cpu, cpu_seconds(procs), strict=True)]
                    ratios.append(device_ops / host_ops)
                    server_us.append(spent[0] / requests * 1e6)
                    fuse_us.append(spent[1] / requests * 1e6)
                    per_op.append(requests / done)
                    op_us.append(sum(spent) / done * 1e6)
                    print(f"{threads} thread(s), round {index + 1}: device {device_ops:,.0f} "
                          f"ops/s, host {host_ops:,.0f} ops/s, device/host "
                          f"{ratios[-1]:.3f}; per request: server {server_us[-1]:.0f} us, "
                          f"nbdfuse {fuse_us[-1]:.0f} us CPU; {per_op[-1]:.2f} requests "
                          f"and {op_us[-1]:.0f} us CPU per op", flush=True)
                print(f"{threads} thread(s): median device/host {statistics.median(ratios):.3f} "
                      f"(min {min(ratios):.3f}, max {max(ratios):.3f}); median CPU per "
                      f"request: server {statistics.median(server_us):.0f} us, nbdfuse "
                      f"{statistics.median(fuse_us):.0f} us; per op: "
                      f"{statistics.median(per_op):.2f} requests, server + nbdfuse "
                      f"{statistics.median(op_us):.0f} us CPU")
        finally:
            subprocess.run(["umount", str(mount)], capture_output=True)
            device.stop()


if __name__ == "__main__":
    main()
