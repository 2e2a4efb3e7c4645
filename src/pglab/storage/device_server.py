"""The emulated block device: an NBD server over an image file whose behaviour pglab sets.

Run as its own process (`python -m pglab.storage.device_server CONFIG.json`), out of
pglab's interpreter, so telemetry threads never delay a disk request. nbdfuse exposes the
export as a file and a loop device makes a block device of it (storage/volume.py), so
every byte a filesystem writes reaches this server, whoever submitted it: backends, the
checkpointer, the kernel's flusher and the filesystem journal alike. That is why limits
hold here where cgroup v1's blkio throttle misses buffered writeback.

What a request goes through, in order: the power state (off: EIO), a pause (waits), the
error switch (EIO), the IOPS and bandwidth buckets of its direction (waits), the fixed
latency (waits, concurrently with other requests), then the I/O. A flush waits the
latency too (a disk's cache flush is a request like the others). The write cache:
- honest: a write is in the image file when acknowledged; a flush has nothing to do.
- volatile: writes wait in memory until a flush or FUA write (a drive's cache that
  honours flushes); a power loss drops them.
- volatile-ignores-flush: flushes are acknowledged at once and do nothing (the lying
  cache); what waits is written back in block order once it is older than
  WRITEBACK_DELAY_S, and a power loss drops the rest.

Durability is the image file's content: the host machine never loses power, so the
image file (in the host's page cache or on its disk) is the medium, and only what this
process holds in memory can be lost. So a flush never waits for the host's disk: the
device's timing is what its behaviour says (bandwidth, IOPS, latency), not the host's
noise; a plain loop device (storage/devices.py) is the way to measure the host's disk.
The NBD protocol is the fixed-newstyle handshake with NBD_OPT_GO and simple replies,
the part nbdfuse (libnbd) needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 4096
WRITEBACK_DELAY_S = 1.0  # how long a lying cache sits on a write before writing it back
BUCKET_S = 0.02  # a bucket holds this many seconds of its rate: bursts stay within 2%

# NBD protocol numbers (the NBD project's doc/proto.md)
NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
OPT_REPLY_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
FLAG_FIXED_NEWSTYLE = 1
FLAG_NO_ZEROES = 2
OPT_EXPORT_NAME, OPT_ABORT, OPT_INFO, OPT_GO = 1, 2, 6, 7
REP_ACK, REP_INFO, REP_ERR_UNSUP = 1, 3, 0x80000001
INFO_EXPORT, INFO_BLOCK_SIZE = 0, 3
T_HAS_FLAGS, T_SEND_FLUSH, T_SEND_FUA, T_SEND_WRITE_ZEROES, T_CAN_MULTI_CONN = (
    1, 4, 8, 64, 256)
CMD_READ, CMD_WRITE, CMD_DISC, CMD_FLUSH, CMD_WRITE_ZEROES = 0, 1, 2, 3, 6
CMD_FLAG_FUA = 1
EIO, EINVAL, ENOSPC = 5, 22, 28
MAX_REQUEST = 32 * 1024 * 1024
REPLY_BUFFER = 1024 * 1024  # replies queued unsent before the fast path waits for the socket

CACHE_MODES = ("honest", "volatile", "volatile-ignores-flush")


@dataclass
class Behaviour:
    """What the device does now; the control socket changes it mid-run."""

    write_bps: float = 0  # bytes per second, 0 = unlimited
    read_bps: float = 0
    write_iops: float = 0
    read_iops: float = 0
    latency_s: float = 0  # added to every read, write and flush
    cache: str = "honest"
    paused: bool = False
    failing: bool = False  # every read and write fails with EIO
    powered: bool = True


@dataclass
class Counters:
    reads: int = 0
    writes: int = 0
    flushes: int = 0
    read_bytes: int = 0
    written_bytes: int = 0  # acknowledged to the client
    errors: int = 0
    cached_bytes: int = 0  # acknowledged, not yet in the image (volatile caches)
    lost_bytes: int = 0  # dropped by power losses
    lost_blocks: int = 0
    power_losses: int = 0


class Bucket:
    """A token bucket that lets requests through in arrival order at `rate` per second.

    A request may take more than the bucket holds: the bucket goes into debt and the
    request waits it off, so a long run never exceeds the rate by more than the bucket's
    small capacity."""

    def __init__(self) -> None:
        self.rate = 0.0
        self.tokens = 0.0
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    def set_rate(self, rate: float) -> None:
        self.rate = rate
        self.tokens = min(self.tokens, rate * BUCKET_S)

    async def take(self, amount: float) -> None:
        if self.rate <= 0:
            return
        async with self.lock:
            now = time.monotonic()
            capacity = self.rate * BUCKET_S
            self.tokens = min(capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            self.tokens -= amount
            if self.tokens < 0:
                # Paid off at `due`; a sleep that wakes late (a busy machine: often by
                # milliseconds) is credited to the next request, not lost, or the device
                # would run 10-20% under its rate.
                due = now - self.tokens / self.rate
                await asyncio.sleep(due - now)
                self.tokens = 0.0
                self.stamp = due


@dataclass
class Device:
    image: Path
    size: int
    behaviour: Behaviour = field(default_factory=Behaviour)
    counters: Counters = field(default_factory=Counters)

    def __post_init__(self) -> None:
        self.fd = os.open(self.image, os.O_RDWR)
        self.buckets = {k: Bucket() for k in ("write_bps", "read_bps", "write_iops",
                                               "read_iops")}
        self.unpaused = asyncio.Event()
        self.unpaused.set()
        # block number -> (data, monotonic time written); dict order is write order
        self.dirty: dict[int, tuple[bytes, float]] = {}
        self.apply()

    def apply(self) -> None:
        b = self.behaviour
        for key, bucket in self.buckets.items():
            bucket.set_rate(float(getattr(b, key)))
        if b.paused:
            self.unpaused.clear()
        else:
            self.unpaused.set()
        # Nothing to wait for: a request is answered where it is read, without a task, a
        # lock or a drain each (the device's own cost is CPU the load would otherwise have).
        self.free = (b.powered and not b.paused and not b.failing and b.latency_s <= 0
                     and not any(bucket.rate > 0 for bucket in self.buckets.values()))

    # --- the request path ---------------------------------------------------------------

    async def admit(self, direction: str, length: int) -> int:
        """Wait as the behaviour says; 0 to go on, or the errno to fail with."""
        b = self.behaviour
        if not b.powered:
            return EIO
        await self.unpaused.wait()
        if b.failing or not b.powered:
            return EIO
        await self.buckets[f"{direction}_iops"].take(1)
        await self.buckets[f"{direction}_bps"].take(length)
        if b.latency_s > 0:
            await asyncio.sleep(b.latency_s)
        return 0

    def read(self, offset: int, length: int) -> bytes:
        data = os.pread(self.fd, length, offset)
        data += bytes(length - len(data))
        if not self.dirty:
            return data
        out = bytearray(data)
        first, last = offset // BLOCK, (offset + length - 1) // BLOCK
        for block in range(first, last + 1):
            held = self.dirty.get(block)
            if held is None:
                continue
            start = block * BLOCK
            lo, hi = max(start, offset), min(start + BLOCK, offset + length)
            out[lo - offset:hi - offset] = held[0][lo - start:hi - start]
        return bytes(out)

    def write(self, offset: int, data: bytes, fua: bool) -> None:
        if self.behaviour.cache == "honest" or (fua and self.behaviour.cache == "volatile"):
            self._write_through(offset, data)
            return
        now = time.monotonic()
        end = offset + len(data)
        for block in range(offset // BLOCK, (end - 1) // BLOCK + 1):
            start = block * BLOCK
            lo, hi = max(start, offset), min(start + BLOCK, end)
            if lo == start and hi == start + BLOCK:
                piece = data[lo - offset:hi - offset]
            else:  # a partial block: merge with what the device holds now
                whole = bytearray(self.read(start, BLOCK))
                whole[lo - start:hi - start] = data[lo - offset:hi - offset]
                piece = bytes(whole)
            if block not in self.dirty:
                self.counters.cached_bytes += BLOCK
            self.dirty.pop(block, None)
            self.dirty[block] = (piece, now)

    def _write_through(self, offset: int, data: bytes) -> None:
        # A write-through must not be undone by an older cached copy of its blocks.
        if self.dirty:
            for block in range(offset // BLOCK, (offset + len(data) - 1) // BLOCK + 1):
                if self.dirty.pop(block, None) is not None:
                    self.counters.cached_bytes -= BLOCK
        os.pwrite(self.fd, data, offset)

    def write_back(self, older_than: float | None = None) -> int:
        """Write cached blocks to the image in block order; the bytes written."""
        if older_than is None:
            blocks = sorted(self.dirty)
        else:
            blocks = sorted(b for b, (_, t) in self.dirty.items() if t <= older_than)
        for block in blocks:
            data, _ = self.dirty.pop(block)
            os.pwrite(self.fd, data, block * BLOCK)
        self.counters.cached_bytes -= len(blocks) * BLOCK
        return len(blocks) * BLOCK

    def flush(self) -> None:
        if self.behaviour.cache == "volatile-ignores-flush":
            return
        self.write_back()

    def power_loss(self) -> dict[str, int]:
        lost = {"lost_blocks": len(self.dirty), "lost_bytes": len(self.dirty) * BLOCK}
        self.counters.lost_blocks += lost["lost_blocks"]
        self.counters.lost_bytes += lost["lost_bytes"]
        self.counters.power_losses += 1
        self.counters.cached_bytes = 0
        self.dirty.clear()
        self.behaviour.powered = False
        return lost

    async def lazy_writeback(self) -> None:
        while True:
            await asyncio.sleep(WRITEBACK_DELAY_S / 4)
            if self.dirty and self.behaviour.cache == "volatile-ignores-flush" and (
                    self.behaviour.powered):
                self.write_back(older_than=time.monotonic() - WRITEBACK_DELAY_S)


# --- NBD --------------------------------------------------------------------------------

async def _option_reply(writer: asyncio.StreamWriter, opt: int, kind: int,
                        data: bytes = b"") -> None:
    writer.write(struct.pack(">QIII", OPT_REPLY_MAGIC, opt, kind, len(data)) + data)
    await writer.drain()


def _transmission_flags() -> int:
    return T_HAS_FLAGS | T_SEND_FLUSH | T_SEND_FUA | T_SEND_WRITE_ZEROES | T_CAN_MULTI_CONN


async def _handshake(device: Device, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> bool:
    """Newstyle negotiation; True when the client goes on to transmission."""
    writer.write(struct.pack(">QQH", NBDMAGIC, IHAVEOPT, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
    await writer.drain()
    (client_flags,) = struct.unpack(">I", await reader.readexactly(4))
    while True:
        magic, opt, length = struct.unpack(">QII", await reader.readexactly(16))
        if magic != IHAVEOPT or length > 65536:
            return False
        await reader.readexactly(length)  # the export name and info requests: one export
        if opt == OPT_EXPORT_NAME:
            writer.write(struct.pack(">QH", device.size, _transmission_flags()))
            if not client_flags & FLAG_NO_ZEROES:
                writer.write(bytes(124))
            await writer.drain()
            return True
        if opt in (OPT_INFO, OPT_GO):
            await _option_reply(writer, opt, REP_INFO, struct.pack(
                ">HQH", INFO_EXPORT, device.size, _transmission_flags()))
            await _option_reply(writer, opt, REP_INFO, struct.pack(
                ">HIII", INFO_BLOCK_SIZE, 512, BLOCK, MAX_REQUEST))
            await _option_reply(writer, opt, REP_ACK)
            if opt == OPT_GO:
                return True
        elif opt == OPT_ABORT:
            await _option_reply(writer, opt, REP_ACK)
            return False
        else:
            await _option_reply(writer, opt, REP_ERR_UNSUP)


async def _serve(device: Device, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    send_lock = asyncio.Lock()
    pending: set[asyncio.Task[None]] = set()

    async def send(message: bytes) -> None:
        async with send_lock:
            writer.write(message)
            await writer.drain()

    async def reply(handle: int, error: int) -> None:
        await send(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, error, handle))

    async def handle_request(kind: int, flags: int, handle: int, offset: int, length: int,
                             payload: bytes) -> None:
        c = device.counters
        if offset + length > device.size:
            c.errors += 1
            await reply(handle, ENOSPC if kind != CMD_READ else EINVAL)
            return
        if kind == CMD_FLUSH:
            if not device.behaviour.powered:
                c.errors += 1
                await reply(handle, EIO)
                return
            await device.unpaused.wait()
            if device.behaviour.latency_s > 0:
                await asyncio.sleep(device.behaviour.latency_s)
        else:
            error = await device.admit("read" if kind == CMD_READ else "write", length)
            if error:
                c.errors += 1
                await reply(handle, error)
                return
        # waited as the behaviour says: now as on a free device
        await send(_answer_now(device, kind, flags, handle, offset, length, payload))

    try:
        if not await _handshake(device, reader, writer):
            return
        while True:
            header = await reader.readexactly(28)
            magic, flags, kind, handle, offset, length = struct.unpack(">IHHQQI", header)
            if magic != REQUEST_MAGIC:
                return
            if kind == CMD_DISC:
                break
            payload = b""
            if kind == CMD_WRITE:
                payload = await reader.readexactly(length)
            if kind not in (CMD_READ, CMD_WRITE, CMD_FLUSH, CMD_WRITE_ZEROES) or (
                    length > MAX_REQUEST):
                await reply(handle, EINVAL)
                continue
            if device.free and not pending and offset + length <= device.size:
                # in order and at once; nothing earlier is still waiting to overtake
                writer.write(_answer_now(device, kind, flags, handle, offset, length,
                                         payload))
                if writer.transport.get_write_buffer_size() > REPLY_BUFFER:
                    await writer.drain()
                continue
            task = asyncio.create_task(handle_request(kind, flags, handle, offset, length,
                                                      payload))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        for task in pending:
            task.cancel()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def _answer_now(device: Device, kind: int, flags: int, handle: int, offset: int,
                length: int, payload: bytes) -> bytes:
    """The reply to a request once nothing makes it wait: at once on a free device (no
    limit, latency, pause or failure), else after handle_request's waits."""
    c = device.counters
    header = struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, 0, handle)
    if kind == CMD_FLUSH:
        device.flush()
        c.flushes += 1
        return header
    if kind == CMD_READ:
        c.reads += 1
        c.read_bytes += length
        return header + device.read(offset, length)
    device.write(offset, bytes(length) if kind == CMD_WRITE_ZEROES else payload,
                 bool(flags & CMD_FLAG_FUA))
    c.writes += 1
    c.written_bytes += length
    return header


# --- control ----------------------------------------------------------------------------

BEHAVIOUR_KEYS = ("write_bps", "read_bps", "write_iops", "read_iops", "latency_s", "cache",
                  "paused", "failing", "powered")


def _control(device: Device, request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    if op == "set":
        changes = request.get("behaviour", {})
        for key, value in changes.items():
            if key not in BEHAVIOUR_KEYS:
                return {"error": f"unknown behaviour '{key}'"}
            if key == "cache" and value not in CACHE_MODES:
                return {"error": f"unknown cache mode '{value}'"}
            setattr(device.behaviour, key, value)
        if changes.get("cache") == "honest" or changes.get("powered") is False:
            device.write_back()
        device.apply()
        return {"behaviour": asdict(device.behaviour)}
    if op == "power-loss":
        lost = device.power_loss()
        device.apply()
        return lost
    if op == "stats":
        return {"counters": asdict(device.counters), "behaviour": asdict(device.behaviour)}
    return {"error": f"unknown op '{op}'"}


async def _serve_control(device: Device, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            try:
                answer = _control(device, json.loads(line))
            except (ValueError, TypeError, AttributeError) as exc:
                answer = {"error": f"bad request: {exc}"}
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def control(path: Path, request: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send one request to a device's control socket; its answer (raises OSError)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError(f"device control {path} closed without an answer")
            data += chunk
    answer: dict[str, Any] = json.loads(data)
    if "error" in answer:
        raise OSError(f"device control {path}: {answer['error']}")
    return answer


def behaviour_from_limits(write_mbps: float = 0, read_mbps: float = 0, write_iops: float = 0,
                          read_iops: float = 0, latency_ms: float = 0,
                          cache: str = "honest") -> dict[str, Any]:
    """Scenario units (MB/s with 1 MB = 2^20 bytes, ms) -> the server's behaviour keys."""
    mb = 1024 * 1024
    return {"write_bps": write_mbps * mb, "read_bps": read_mbps * mb,
            "write_iops": write_iops, "read_iops": read_iops,
            "latency_s": latency_ms / 1000, "cache": cache}


async def _main(config: dict[str, Any]) -> None:
    image = Path(config["image"])
    device = Device(image, int(config["size"]), Behaviour(**config.get("behaviour", {})))
    nbd = await asyncio.start_unix_server(lambda r, w: _serve(device, r, w),
                                          path=config["socket"])
    ctl = await asyncio.start_unix_server(lambda r, w: _serve_control(device, r, w),
                                          path=config["control"])
    os.chmod(config["socket"], 0o600)
    os.chmod(config["control"], 0o600)
    writeback = asyncio.create_task(device.lazy_writeback())
    print("ready", flush=True)
    try:
        async with nbd, ctl:
            await asyncio.gather(nbd.serve_forever(), ctl.serve_forever())
    finally:
        writeback.cancel()
        # A clean stop is a clean power-off: what an honouring cache holds is written.
        if device.behaviour.cache == "volatile" and device.behaviour.powered:
            device.write_back()
        os.close(device.fd)


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(config))


if __name__ == "__main__":
    main()

