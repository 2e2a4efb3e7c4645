"""Block devices under volumes: a plain loop device, or the emulated device.

The emulated device is storage/device_server.py (an NBD server pglab controls) exposed
as a file by nbdfuse (Debian `libnbd-bin`) and made a block device by `losetup` with
direct I/O, so neither the FUSE file nor the loop device keeps a page cache of its own
and every write of the filesystem on top reaches the server. The loop device's requests
are capped at 128 KiB, so a second's count of written bytes moves in small steps and a
bandwidth limit can be checked per second.

While the emulated device's flushes have nothing to do and nothing to wait for (an
honest cache, no latency, powered, not paused), its loop device says it has no
volatile write cache (queue/write_cache = write through), as a disk without one does:
the block layer then answers flushes itself instead of sending each through FUSE,
nbdfuse and the server to be acknowledged there (half the requests of a commit's
write + fdatasync, and their CPU, which the load on the same cores would have). Any
other behaviour turns it back to write back before the server takes it, so from then
on every flush reaches the server, to wait, fail or write a volatile cache back.

DEVICE_BEHAVIOURS is the one list of what a device can be told (validation, docs/STORAGE.md's
table, `pglab storage`); faults change the same behaviours mid-run.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pglab.errors import PglabError
from pglab.scenario import DeviceSpec
from pglab.storage.device_server import (
    DEFAULT_CACHE_MB,
    DEFAULT_DESTAGE_S,
    behaviour_from_limits,
    control,
)
from pglab.storage.filesystems import run_tool, unmount
from pglab.system_parts import EMULATED_DEVICE_PARTS, PARTS

LOOP_MAX_REQUEST_KB = 128
SOCKET_DIR_PREFIX = "pglab-dev-"


@dataclass(frozen=True)
class DeviceBehaviour:
    name: str  # the key in `device = { ... }`
    help: str


DEVICE_BEHAVIOURS: tuple[DeviceBehaviour, ...] = (
    DeviceBehaviour("profile", "a disk profile's bandwidth and IOPS (cloud-ssd:300GB, ...); "
                    "explicit keys override it"),
    DeviceBehaviour("write_mbps", "write bandwidth in MB/s (1 MB = 2^20 bytes), every byte "
                    "whoever writes it (kernel flusher and journal included)"),
    DeviceBehaviour("read_mbps", "read bandwidth in MB/s"),
    DeviceBehaviour("iops", "requests per second, each direction"),
    DeviceBehaviour("write_iops", "write requests per second (overrides iops)"),
    DeviceBehaviour("read_iops", "read requests per second (overrides iops)"),
    DeviceBehaviour("latency", "time added to every read, write and flush, like '1ms'"),
    DeviceBehaviour("cache", "honest (durable when acknowledged) | volatile (a write cache "
                    "that honours flushes) | volatile-ignores-flush (a cache that lies)"),
    DeviceBehaviour("cache_mb", f"a volatile cache's size in MB (default {DEFAULT_CACHE_MB}); "
                    "when full, a write waits while its oldest blocks are written back "
                    "(an honest cache ignores it, as it does destage)"),
    DeviceBehaviour("destage", "how long a write waits in a volatile cache before it is "
                    f"written back, like '100ms' (default {DEFAULT_DESTAGE_S * 1000:g}ms): a "
                    "power loss drops at most the writes of its last 1.25 x that"),
    DeviceBehaviour("kind", "auto (emulated when any of the above is set or a device fault "
                    "needs it, else a plain loop device) | loop | emulated"),
)


@dataclass(frozen=True)
class DeviceLimits:
    """A device's behaviour in scenario units (0 = unlimited)."""

    write_mbps: float = 0
    read_mbps: float = 0
    write_iops: int = 0
    read_iops: int = 0
    latency_ms: float = 0
    cache: str = "honest"
    profile: str | None = None
    cache_mb: int = DEFAULT_CACHE_MB  # a volatile cache's size and destage delay
    destage_ms: float = DEFAULT_DESTAGE_S * 1000

    def is_plain(self) -> bool:
        return not (self.write_mbps or self.read_mbps or self.write_iops or self.read_iops
                    or self.latency_ms) and self.cache == "honest"

    def behaviour(self) -> dict[str, Any]:
        return behaviour_from_limits(self.write_mbps, self.read_mbps, self.write_iops,
                                     self.read_iops, self.latency_ms, self.cache,
                                     self.cache_mb, self.destage_ms)

    def to_manifest(self) -> dict[str, Any]:
        volatile = ({"cache_mb": self.cache_mb, "destage_ms": self.destage_ms}
                    if self.cache != "honest" else {})
        return {"write_mbps": self.write_mbps, "read_mbps": self.read_mbps,
                "write_iops": self.write_iops, "read_iops": self.read_iops,
                "latency_ms": self.latency_ms, "cache": self.cache, **volatile,
                "profile": self.profile}


def resolve_device(spec: DeviceSpec) -> DeviceLimits:
    """A profile's figures with explicit keys over them; ValueError naming a bad profile."""
    figures = spec.figures()
    return DeviceLimits(
        write_mbps=figures.write_mbps, read_mbps=figures.read_mbps,
        write_iops=figures.write_iops, read_iops=figures.read_iops,
        latency_ms=(spec.latency or 0) * 1000,
        cache=spec.cache,
        profile=spec.profile,
        cache_mb=spec.cache_mb if spec.cache_mb is not None else DEFAULT_CACHE_MB,
        destage_ms=(spec.destage * 1000 if spec.destage is not None
                    else DEFAULT_DESTAGE_S * 1000),
    )


def make_image(path: Path, size: int) -> None:
    """A sparse image file: it takes disk space only as the volume fills."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


def attach_loop(backing: Path, direct_io: bool) -> Path:
    # 512-byte logical sectors, as most disks present (512e): pg_test_fsync and other
    # O_DIRECT users write 512-byte-aligned pieces, which a 4Kn device refuses (EINVAL).
    argv = ["losetup", "-f", "--show"]
    if direct_io:
        argv.append("--direct-io=on")
    device = Path(run_tool([*argv, str(backing)], "losetup").strip())
    with contextlib.suppress(OSError):
        Path(f"/sys/block/{device.name}/queue/max_sectors_kb").write_text(
            str(LOOP_MAX_REQUEST_KB))
    _reset_write_cache(device)
    return device


def _reset_write_cache(device: Path) -> None:
    """A loop device keeps a write_cache set by hand across detach and attach: an
    emulated device's write through (EmulatedDevice) must not outlive it, whoever gets
    the device next (pglab's plain loop volume, whose flushes reach the host's disk)."""
    with contextlib.suppress(OSError):
        Path(f"/sys/block/{device.name}/queue/write_cache").write_text("write back")


def detach_loop(device: Path) -> None:
    _reset_write_cache(device)
    for _attempt in range(20):
        result = subprocess.run(["losetup", "-d", str(device)], capture_output=True, text=True)
        if result.returncode == 0 or "No such device" in result.stderr:
            return
        time.sleep(0.1)  # briefly busy right after an unmount


def loops_backed_under(root: Path) -> list[Path]:
    """Loop devices whose backing file lies under `root` (for the reaper)."""
    try:
        out = subprocess.run(["losetup", "-l", "-J"], capture_output=True, text=True,
                             timeout=10).stdout
        devices = json.loads(out or '{"loopdevices": []}')["loopdevices"]
    except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
        return []
    found = []
    for dev in devices:
        backing = str(dev.get("back-file") or "").removesuffix(" (deleted)")
        if backing.startswith(str(root) + "/"):
            found.append(Path(dev["name"]))
    return found


class EmulatedDevice:
    """An image file behind pglab's NBD server, as /dev/loopN; stop() on every path."""

    def __init__(self, work_dir: Path, image: Path, size: int) -> None:
        self.work_dir = work_dir
        self.image = image
        self.size = size
        # The sockets live in a short private dir under /tmp: a Unix socket path may not
        # exceed 107 bytes and the lab dir can be deep (device.json names it for the reaper).
        self.socket_dir = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX, dir="/tmp"))
        self.socket = self.socket_dir / "nbd.sock"
        self.control_socket = self.socket_dir / "control.sock"
        self.fuse_dir = work_dir / "fuse"
        self.server: subprocess.Popen[bytes] | None = None
        self.fuse: subprocess.Popen[bytes] | None = None
        self.loop: Path | None = None
        self.write_cache = "write back"  # the loop device's queue/write_cache
        # faults change behaviours from threads of their own: one change at a time, so
        # the write cache follows the server's latest behaviour
        self.changing = threading.Lock()

    def start(self, behaviour: dict[str, Any]) -> Path:
        for part in EMULATED_DEVICE_PARTS:
            PARTS[part].require("the emulated device")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "device.json"
        config.write_text(json.dumps({
            "image": str(self.image), "size": self.size, "socket": str(self.socket),
            "control": str(self.control_socket), "behaviour": behaviour}))
        # Own session, no parent-death signal: after a kill -9 of pglab the filesystem on
        # top stays consistent until the next pglab unmounts it and stops this server.
        self.server = subprocess.Popen(
            [sys.executable, "-m", "pglab.storage.device_server", str(config)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        assert self.server.stdout is not None
        line = self.server.stdout.readline()
        if line.strip() != b"ready":
            err = self.server.stderr.read().decode() if self.server.stderr else ""
            raise PglabError(f"the emulated device did not start: {err.strip()[-300:]}")
        return self.attach()

    def attach(self) -> Path:
        """nbdfuse and a loop device over the running server (again after detach())."""
        self.fuse_dir.mkdir(exist_ok=True)
        self.fuse = subprocess.Popen(
            ["nbdfuse", "-o", "allow_other", str(self.fuse_dir / "disk"), "--unix",
             str(self.socket)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True)
        disk = self.fuse_dir / "disk"
        deadline = time.monotonic() + 15
        while not _is_file(disk):
            if self.fuse.poll() is not None or time.monotonic() > deadline:
                err = self.fuse.stderr.read().decode() if self.fuse.stderr else ""
                raise PglabError(f"nbdfuse did not expose the device: {err.strip()[-300:]}")
            time.sleep(0.02)
        self.loop = attach_loop(disk, direct_io=True)
        with self.changing:
            self.write_cache = "write back"  # what attach_loop gives
            self._flushes_to_server(self.stats()["behaviour"])
        return self.loop

    def control(self, request: dict[str, Any]) -> dict[str, Any]:
        return control(self.control_socket, request)

    def set_behaviour(self, behaviour: dict[str, Any]) -> dict[str, Any]:
        with self.changing:
            self._set_write_cache("write back")
            answer = self.control({"op": "set", "behaviour": behaviour})
            self._flushes_to_server(answer["behaviour"])
        return answer

    def _flushes_to_server(self, behaviour: dict[str, Any]) -> None:
        """Write through while a flush would return at once having done nothing (limits
        and failures do not apply to flushes), else write back (the module says why)."""
        idle = (behaviour["cache"] == "honest" and behaviour["latency_s"] <= 0
                and behaviour["powered"] and not behaviour["paused"])
        self._set_write_cache("write through" if idle else "write back")

    def _set_write_cache(self, mode: str) -> None:
        # Only ever switched to write back from write through, i.e. on a device whose
        # requests are answered at once: the switch waits for the requests in flight.
        if self.loop is None or mode == self.write_cache:
            return
        with contextlib.suppress(OSError):  # a kernel that refuses: flushes reach the server
            Path(f"/sys/block/{self.loop.name}/queue/write_cache").write_text(mode)
            self.write_cache = mode

    def stats(self) -> dict[str, Any]:
        return self.control({"op": "stats"})

    def power_loss(self) -> dict[str, Any]:
        """The device loses power: its volatile cache is dropped (what it held is
        returned: lost_bytes, lost_blocks) and every request fails until power_on()."""
        with self.changing:
            self._set_write_cache("write back")
            return self.control({"op": "power-loss"})

    def power_on(self) -> None:
        self.set_behaviour({"powered": True})

    def detach(self) -> None:
        """Loop device and FUSE file gone, the server still up (a power cut's reboot)."""
        if self.loop is not None:
            detach_loop(self.loop)
            self.loop = None
        if self.fuse is not None:
            subprocess.run(["fusermount3", "-u", "-z", str(self.fuse_dir)],
                           capture_output=True)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.fuse.wait(timeout=10)
            if self.fuse.poll() is None:
                self.fuse.kill()
            self.fuse = None

    def stop(self) -> None:
        self.detach()
        if self.server is not None:
            if self.server.poll() is None:
                self.server.send_signal(signal.SIGTERM)
                try:
                    self.server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.server.kill()
                    self.server.wait()
            self.server = None
        unmount(self.fuse_dir)
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def stop_device_servers_under(root: Path) -> None:
    """The reaper's part: device servers and nbdfuse processes of a lab dir, and their
    socket dirs (named in each device.json)."""
    import psutil

    for config in root.glob("*/*-device/device.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            sockets = Path(json.loads(config.read_text())["socket"]).parent
            if sockets.name.startswith(SOCKET_DIR_PREFIX):
                shutil.rmtree(sockets, ignore_errors=True)
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if str(root) + "/" in cmd and ("pglab.storage.device_server" in cmd or
                                       cmd.startswith("nbdfuse")):
            with contextlib.suppress(psutil.Error):
                proc.kill()

