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
  cache); a power loss drops what waits.
Both volatile caches are bounded and destage as a drive's does: a cached block is
written back once it has been dirty for `destage_s` (from its first write since it was
last clean, so a block rewritten all the time still goes out), oldest first when the
cache holds `cache_bytes` (the write that needs room waits for it). A power loss so
drops at most the last `destage_s` of writes (plus one write-back tick) and never more
than `cache_bytes`. Real drives' caches hold tens to hundreds of MB and write back
continuously within milliseconds: DEFAULT_CACHE_MB is a modest drive's size and
DEFAULT_DESTAGE_S a generous bound on its write-back delay. A destage longer than the
run and a cache as large as the volume give a cache that only a flush empties.

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
import select
import socket
import struct
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 4096
MIB = 1024 * 1024
DEFAULT_CACHE_MB = 64  # a volatile cache's size: drives have tens to hundreds of MB
DEFAULT_DESTAGE_S = 0.1  # how long a cached write waits before it is written back
MAX_TICK_S = 0.25  # the write-back loop's longest sleep (a quarter of the destage or less)
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
    cache_bytes: int = DEFAULT_CACHE_MB * MIB  # what a volatile cache holds at most
    destage_s: float = DEFAULT_DESTAGE_S  # how long a dirty block waits to be written back
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
        # held by whoever reads or changes the device's state: the connections' threads
        # and the event loop (control, write-back, requests that waited)
        self.lock = threading.Lock()
        self.buckets = {k: Bucket() for k in ("write_bps", "read_bps", "write_iops",
                                               "read_iops")}
        self.unpaused = asyncio.Event()
        self.unpaused.set()
        # block number -> (data, monotonic time it became dirty); dict order is that
        # time's order (a rewrite keeps the block's place), so the oldest come first
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
        out = bytearray(length)
        self.read_into(memoryview(out), offset)
        return bytes(out)

    def read_into(self, out: memoryview, offset: int) -> None:
        """Fill `out` (zeroed: a short read past the image's end leaves zeros) from the
        image and, over it, the blocks the cache holds."""
        os.preadv(self.fd, [out], offset)
        if not self.dirty:
            return
        length = len(out)
        first, last = offset // BLOCK, (offset + length - 1) // BLOCK
        for block in range(first, last + 1):
            held = self.dirty.get(block)
            if held is None:
                continue
            start = block * BLOCK
            lo, hi = max(start, offset), min(start + BLOCK, offset + length)
            out[lo - offset:hi - offset] = held[0][lo - start:hi - start]

    def write(self, offset: int, data: bytes | memoryview, fua: bool) -> None:
        """`data` may be a view of the connection's buffer: what is kept is copied."""
        if self.behaviour.cache == "honest" or (fua and self.behaviour.cache == "volatile"):
            self._write_through(offset, data)
            return
        now = time.monotonic()
        end = offset + len(data)
        for block in range(offset // BLOCK, (end - 1) // BLOCK + 1):
            start = block * BLOCK
            lo, hi = max(start, offset), min(start + BLOCK, end)
            if lo == start and hi == start + BLOCK:
                piece = bytes(data[lo - offset:hi - offset])
            else:  # a partial block: merge with what the device holds now
                whole = bytearray(self.read(start, BLOCK))
                whole[lo - start:hi - start] = data[lo - offset:hi - offset]
                piece = bytes(whole)
            held = self.dirty.get(block)
            if held is None:
                self.counters.cached_bytes += BLOCK
            self.dirty[block] = (piece, now if held is None else held[1])
        self.make_room()

    def make_room(self) -> None:
        """A full cache writes its oldest blocks back before it takes more: the write
        that overfilled it waits for that (a drive whose cache is full runs at the
        medium's pace)."""
        limit = max(BLOCK, int(self.behaviour.cache_bytes))
        excess = len(self.dirty) * BLOCK - limit
        if excess <= 0:
            return
        oldest: list[int] = []
        for block in self.dirty:
            if len(oldest) * BLOCK >= excess:
                break
            oldest.append(block)
        self._write_blocks(sorted(oldest))

    def _write_through(self, offset: int, data: bytes | memoryview) -> None:
        # A write-through must not be undone by an older cached copy of its blocks.
        if self.dirty:
            for block in range(offset // BLOCK, (offset + len(data) - 1) // BLOCK + 1):
                if self.dirty.pop(block, None) is not None:
                    self.counters.cached_bytes -= BLOCK
        os.pwrite(self.fd, data, offset)

    def write_back(self, older_than: float | None = None) -> int:
        """Write cached blocks to the image in block order (those dirty since
        `older_than` or before, else all); the bytes written."""
        if not self.dirty:
            return 0
        if older_than is None:
            blocks = sorted(self.dirty)
        else:  # the oldest come first: a prefix of the dict
            blocks = []
            for block, (_, since) in self.dirty.items():
                if since > older_than:
                    break
                blocks.append(block)
            blocks.sort()
        return self._write_blocks(blocks)

    def _write_blocks(self, blocks: list[int]) -> int:
        for block in blocks:
            data, _ = self.dirty.pop(block)
            os.pwrite(self.fd, data, block * BLOCK)
        self.counters.cached_bytes -= len(blocks) * BLOCK
        return len(blocks) * BLOCK

    def flush(self) -> None:
        if self.behaviour.cache == "volatile-ignores-flush":
            return
        self.write_back()

    def power_loss(self) -> dict[str, Any]:
        """The cache is dropped: what it held, and for how long its oldest block had
        been waiting (the loss window as the device saw it: held_s)."""
        oldest = next(iter(self.dirty.values()))[1] if self.dirty else None
        lost: dict[str, Any] = {"lost_blocks": len(self.dirty),
                                "lost_bytes": len(self.dirty) * BLOCK,
                                "held_s": round(time.monotonic() - oldest, 3)
                                if oldest is not None else 0.0}
        self.counters.lost_blocks += lost["lost_blocks"]
        self.counters.lost_bytes += lost["lost_bytes"]
        self.counters.power_losses += 1
        self.counters.cached_bytes = 0
        self.dirty.clear()
        self.behaviour.powered = False
        return lost

    async def lazy_writeback(self) -> None:
        """The destage: blocks dirty for `destage_s` go to the medium, checked every
        quarter of it (so a block waits at most 1.25 x destage_s)."""
        while True:
            delay = max(0.001, float(self.behaviour.destage_s))
            await asyncio.sleep(min(MAX_TICK_S, delay / 4))
            if self.dirty and self.behaviour.powered:
                with self.lock:
                    self.write_back(older_than=time.monotonic() - delay)


# --- NBD --------------------------------------------------------------------------------

REQUEST = struct.Struct(">IHHQQI")  # magic, flags, type, handle, offset, length
REPLY = struct.Struct(">IIQ")  # magic, error, handle
OPTION = struct.Struct(">QII")  # IHAVEOPT, option, length
READ_ROOM = 256 * 1024  # free buffer offered to each recv: a few requests at a time


def _transmission_flags() -> int:
    return T_HAS_FLAGS | T_SEND_FLUSH | T_SEND_FUA | T_SEND_WRITE_ZEROES | T_CAN_MULTI_CONN


def _option_reply(opt: int, kind: int, data: bytes = b"") -> bytes:
    return struct.pack(">QIII", OPT_REPLY_MAGIC, opt, kind, len(data)) + data


class NbdConnection:
    """One NBD client connection, served by a thread of its own: the newstyle handshake,
    then requests.

    The per-request cost is this process's CPU, which the load on the same machine would
    otherwise have, so the thread blocks in recv_into on the socket (no event loop's
    wake-up and bookkeeping per request): every request that one read brought is
    answered and their replies leave in one send. On a free device a request is answered
    right there, and a write goes from the read buffer to the image without a copy. A
    request that must wait (a limit, latency, pause, failure, or an earlier request still
    waiting) goes to the event loop as a task with its own copy of the payload; the task
    hands its reply back to this thread, which then waits for the socket or a reply,
    whichever comes first, until nothing waits any more. Only this thread writes to the
    socket: while the client leaves replies unread, it reads no more requests."""

    def __init__(self, device: Device, sock: socket.socket,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.device = device
        self.sock = sock
        self.loop = loop
        self.buffer = bytearray(READ_ROOM)
        self.start = 0  # first byte not yet parsed
        self.end = 0  # first byte not yet received
        self.wanted = 0  # bytes the next message needs in full
        self.stage = "flags"  # flags -> options -> requests
        self.client_flags = 0
        self.disconnecting = False
        # shared with the event loop's tasks: requests handed to them and not yet done
        # (only this thread adds to it), and the replies they left for this thread
        self.lock = threading.Lock()
        self.waiting = 0
        self.outbox: list[bytes | bytearray] = []
        self.wakeup = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.tasks: set[asyncio.Task[None]] = set()  # the event loop's side only
        self.either = select.poll()  # the socket or a reply, whichever comes first
        self.either.register(sock, select.POLLIN)
        self.either.register(self.wakeup, select.POLLIN)
        self.replies_only = select.poll()
        self.replies_only.register(self.wakeup, select.POLLIN)

    # --- this connection's thread ---------------------------------------------------------

    def serve(self) -> None:
        try:
            self.sock.sendall(struct.pack(">QQH", NBDMAGIC, IHAVEOPT,
                                          FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
            while True:
                # `waiting` before `outbox`: a task leaves its reply before it stops
                # waiting, so with none waiting every reply is in the outbox already
                if self.waiting or self.outbox or self.disconnecting:
                    readable = self._between_requests()
                    if readable is None:
                        break  # the client is done and every request answered
                    if not readable:
                        continue
                received = self.sock.recv_into(self._room())
                if not received:
                    self.disconnecting = True
                    continue
                self.end += received
                replies: list[bytes | bytearray] = []
                if self.stage != "requests":  # the handshake
                    while not self.disconnecting and self._parse_one(replies):
                        pass
                if self.stage == "requests":
                    self._parse_requests(replies)
                if replies:
                    self._send(replies)
        except OSError:
            self._hang_up()  # the client is gone: what waits has no one to answer
        finally:
            with contextlib.suppress(RuntimeError):  # the event loop has already stopped
                self.loop.call_soon_threadsafe(self._closed)

    def _between_requests(self) -> bool | None:
        """Send the replies tasks left, and wait for what comes next while requests wait
        in the event loop: whether the socket has a request to read now; None when the
        client is done and every request answered."""
        with self.lock:
            replies, self.outbox = self.outbox, []
            idle = not self.waiting
        if replies:
            self._send(replies)
            return False  # more may have come meanwhile
        if self.disconnecting:
            if idle:
                return None
            self.replies_only.poll()
            self._woken()
            return False
        if idle:
            return True
        ready = {fd for fd, _ in self.either.poll()}
        if self.wakeup in ready:
            self._woken()
        return self.sock.fileno() in ready

    def _room(self) -> memoryview:
        """The free end of the read buffer, at least READ_ROOM and the next message."""
        if self.start == self.end:
            self.start = self.end = 0
        if len(self.buffer) - self.end < READ_ROOM:
            # what is not parsed yet to the front, into a new buffer if the next message
            # would not fit (a bytearray with views cannot change size)
            unparsed = self.end - self.start
            size = max(len(self.buffer), self.wanted + READ_ROOM, unparsed + READ_ROOM)
            target = self.buffer if size <= len(self.buffer) else bytearray(size)
            target[:unparsed] = self.buffer[self.start:self.end]
            self.buffer, self.start, self.end = target, 0, unparsed
        return memoryview(self.buffer)[self.end:]

    def _send(self, replies: list[bytes | bytearray]) -> None:
        self.sock.sendall(replies[0] if len(replies) == 1 else b"".join(replies))

    def _woken(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.wakeup)

    def _hang_up(self) -> None:
        self.disconnecting = True
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._cancel_tasks)

    # --- parsing ------------------------------------------------------------------------

    def _parse_requests(self, replies: list[bytes | bytearray]) -> None:
        """Handle every whole request in the buffer."""
        buffer, start, end = self.buffer, self.start, self.end
        view = memoryview(buffer)
        while end - start >= REQUEST.size and not self.disconnecting:
            magic, flags, kind, handle, offset, length = REQUEST.unpack_from(buffer, start)
            if magic != REQUEST_MAGIC or (kind == CMD_WRITE and length > MAX_REQUEST):
                # out of step with the client, or a payload too large to take (the
                # protocol allows a hard disconnect for it)
                self._hang_up()
                break
            size = REQUEST.size + length if kind == CMD_WRITE else REQUEST.size
            if end - start < size:
                self.wanted = size
                break
            self.wanted = 0
            payload = view[start + REQUEST.size:start + size]
            start += size
            self._request(kind, flags, handle, offset, length, payload, replies)
        self.start = start

    def _parse_one(self, replies: list[bytes | bytearray]) -> bool:
        """Handle the next whole handshake message in the buffer; False when more bytes
        are needed or the handshake is over."""
        available = self.end - self.start
        if self.stage == "requests":
            return False
        if self.stage == "flags":
            if available < 4:
                return False
            (self.client_flags,) = struct.unpack_from(">I", self.buffer, self.start)
            self.start += 4
            self.stage = "options"
            return True
        if available < OPTION.size:
            return False
        magic, opt, length = OPTION.unpack_from(self.buffer, self.start)
        if magic != IHAVEOPT or length > 65536:
            self._hang_up()
            return False
        if available < OPTION.size + length:
            self.wanted = OPTION.size + length
            return False
        self.start += OPTION.size + length  # the export name and info requests: one export
        self.wanted = 0
        self._option(opt, replies)
        return True

    def _option(self, opt: int, replies: list[bytes | bytearray]) -> None:
        size = self.device.size
        if opt == OPT_EXPORT_NAME:
            replies.append(struct.pack(">QH", size, _transmission_flags()))
            if not self.client_flags & FLAG_NO_ZEROES:
                replies.append(bytes(124))
            self.stage = "requests"
        elif opt in (OPT_INFO, OPT_GO):
            replies.append(_option_reply(opt, REP_INFO, struct.pack(
                ">HQH", INFO_EXPORT, size, _transmission_flags())))
            replies.append(_option_reply(opt, REP_INFO, struct.pack(
                ">HIII", INFO_BLOCK_SIZE, 512, BLOCK, MAX_REQUEST)))
            replies.append(_option_reply(opt, REP_ACK))
            if opt == OPT_GO:
                self.stage = "requests"
        elif opt == OPT_ABORT:
            replies.append(_option_reply(opt, REP_ACK))
            self.disconnecting = True
        else:
            replies.append(_option_reply(opt, REP_ERR_UNSUP))

    # --- requests -----------------------------------------------------------------------

    def _request(self, kind: int, flags: int, handle: int, offset: int, length: int,
                 payload: memoryview, replies: list[bytes | bytearray]) -> None:
        device = self.device
        if kind == CMD_DISC:
            self.disconnecting = True
            return
        if kind not in (CMD_READ, CMD_WRITE, CMD_FLUSH, CMD_WRITE_ZEROES) or (
                length > MAX_REQUEST):
            replies.append(REPLY.pack(SIMPLE_REPLY_MAGIC, EINVAL, handle))
            return
        # in order and at once; nothing earlier is still waiting to overtake (only this
        # thread adds to `waiting`, so a 0 read here stays 0)
        if not self.waiting and offset + length <= device.size:
            with device.lock:
                if device.free:
                    replies.append(_answer_now(device, kind, flags, handle, offset, length,
                                               payload))
                    return
        with self.lock:
            self.waiting += 1
        try:
            self.loop.call_soon_threadsafe(self._start_task, kind, flags, handle, offset,
                                           length, bytes(payload))
        except RuntimeError:  # the event loop has stopped: the server is going down
            with self.lock:
                self.waiting -= 1

    # --- the event loop's side ----------------------------------------------------------

    def _start_task(self, kind: int, flags: int, handle: int, offset: int, length: int,
                    payload: bytes) -> None:
        task = asyncio.create_task(self._answer_later(kind, flags, handle, offset, length,
                                                      payload))
        self.tasks.add(task)
        task.add_done_callback(self._finished)

    async def _answer_later(self, kind: int, flags: int, handle: int, offset: int,
                            length: int, payload: bytes) -> None:
        device = self.device
        c = device.counters
        if offset + length > device.size:
            with device.lock:
                c.errors += 1
            self._reply(REPLY.pack(SIMPLE_REPLY_MAGIC, ENOSPC if kind != CMD_READ else EINVAL,
                                   handle))
            return
        if kind == CMD_FLUSH:
            if not device.behaviour.powered:
                with device.lock:
                    c.errors += 1
                self._reply(REPLY.pack(SIMPLE_REPLY_MAGIC, EIO, handle))
                return
            await device.unpaused.wait()
            if device.behaviour.latency_s > 0:
                await asyncio.sleep(device.behaviour.latency_s)
        else:
            error = await device.admit("read" if kind == CMD_READ else "write", length)
            if error:
                with device.lock:
                    c.errors += 1
                self._reply(REPLY.pack(SIMPLE_REPLY_MAGIC, error, handle))
                return
        # waited as the behaviour says: now as on a free device
        with device.lock:
            reply = _answer_now(device, kind, flags, handle, offset, length, payload)
        self._reply(reply)

    def _reply(self, reply: bytes | bytearray) -> None:
        with self.lock:
            self.outbox.append(reply)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        with self.lock:
            self.waiting -= 1
        self._wake()

    def _wake(self) -> None:
        if self.wakeup >= 0:
            with contextlib.suppress(BlockingIOError):
                os.eventfd_write(self.wakeup, 1)

    def _cancel_tasks(self) -> None:
        for task in self.tasks:
            task.cancel()

    def _closed(self) -> None:
        """The thread is done with the connection (closed here, where the tasks that
        would wake the thread run, so none writes to a closed descriptor)."""
        self._cancel_tasks()
        self.sock.close()
        os.close(self.wakeup)
        self.wakeup = -1


def _answer_now(device: Device, kind: int, flags: int, handle: int, offset: int,
                length: int, payload: bytes | memoryview) -> bytes | bytearray:
    """The reply to a request once nothing makes it wait: at once on a free device (no
    limit, latency, pause or failure), else after _answer_later's waits."""
    c = device.counters
    if kind == CMD_FLUSH:
        device.flush()
        c.flushes += 1
        return REPLY.pack(SIMPLE_REPLY_MAGIC, 0, handle)
    if kind == CMD_READ:
        c.reads += 1
        c.read_bytes += length
        reply = bytearray(REPLY.size + length)
        REPLY.pack_into(reply, 0, SIMPLE_REPLY_MAGIC, 0, handle)
        device.read_into(memoryview(reply)[REPLY.size:], offset)
        return reply
    device.write(offset, bytes(length) if kind == CMD_WRITE_ZEROES else payload,
                 bool(flags & CMD_FLAG_FUA))
    c.writes += 1
    c.written_bytes += length
    return REPLY.pack(SIMPLE_REPLY_MAGIC, 0, handle)


# --- control ----------------------------------------------------------------------------

BEHAVIOUR_KEYS = ("write_bps", "read_bps", "write_iops", "read_iops", "latency_s", "cache",
                  "cache_bytes", "destage_s", "paused", "failing", "powered")


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
        device.make_room()  # a smaller cache than it holds
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
                request = json.loads(line)
                with device.lock:
                    answer = _control(device, request)
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
                          cache: str = "honest", cache_mb: int = DEFAULT_CACHE_MB,
                          destage_ms: float = DEFAULT_DESTAGE_S * 1000) -> dict[str, Any]:
    """Scenario units (MB/s with 1 MB = 2^20 bytes, ms) -> the server's behaviour keys."""
    return {"write_bps": write_mbps * MIB, "read_bps": read_mbps * MIB,
            "write_iops": write_iops, "read_iops": read_iops,
            "latency_s": latency_ms / 1000, "cache": cache,
            "cache_bytes": int(cache_mb * MIB), "destage_s": destage_ms / 1000}


async def _accept(device: Device, listener: socket.socket) -> None:
    """A thread for each NBD connection (NbdConnection says why)."""
    loop = asyncio.get_running_loop()
    while True:
        sock, _ = await loop.sock_accept(listener)
        sock.setblocking(True)
        connection = NbdConnection(device, sock, loop)
        threading.Thread(target=connection.serve, name="nbd-connection", daemon=True).start()


async def _main(config: dict[str, Any]) -> None:
    image = Path(config["image"])
    device = Device(image, int(config["size"]), Behaviour(**config.get("behaviour", {})))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(config["socket"])  # a stale socket of an earlier server
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(config["socket"])
    listener.listen(64)
    listener.setblocking(False)
    ctl = await asyncio.start_unix_server(lambda r, w: _serve_control(device, r, w),
                                          path=config["control"])
    os.chmod(config["socket"], 0o600)
    os.chmod(config["control"], 0o600)
    writeback = asyncio.create_task(device.lazy_writeback())
    print("ready", flush=True)
    try:
        async with ctl:
            await asyncio.gather(_accept(device, listener), ctl.serve_forever())
    finally:
        writeback.cancel()
        listener.close()
        # A clean stop is a clean power-off: what an honouring cache holds is written.
        with device.lock:
            if device.behaviour.cache == "volatile" and device.behaviour.powered:
                device.write_back()
            os.close(device.fd)
            device.fd = -1  # a connection's thread still running fails, not a reused fd


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(config))


if __name__ == "__main__":
    main()

