"""Keep only the profiled processes' events in perf record's piped data, before perf script.

`perf record -a` describes every process of the machine at its start (one MMAP event per
executable mapping of each, from /proc: thousands on a busy host) and samples all of them;
`perf script` spent most of its CPU building maps of processes pglab drops, and unwinding
their samples. Between the two, this filter passes an event of a process only if that
process is one of the profiled: a node's postmaster and its descendants, and the children
pglab starts (pgbench, the pooler), followed through the FORK events perf records. Every
other kind of event (the attributes, the kernel's maps, the rounds that order the stream)
passes untouched, so perf script reads a valid stream.

The pipe format (tools/perf/Documentation/perf.data-file-format.txt, "pipe mode"): a
16-byte header (`PERFILE2`, its size), then events, each a `perf_event_header` (u32 type,
u16 misc, u16 size, size counting the header) and its body. The bodies read here:
MMAP/MMAP2/COMM start with u32 pid, u32 tid; FORK/EXIT with u32 pid, ppid, tid, ptid; a
SAMPLE's pid follows the optional u64 identifier and the u64 ip (its attribute's
sample_type says which are there: the HEADER_ATTR event, whose perf_event_attr holds
sample_type at byte 24).
"""

from __future__ import annotations

import struct
import threading
from typing import IO

PIPE_HEADER = 16
MAGIC = b"PERFILE2"

MMAP, COMM, EXIT, FORK, SAMPLE, MMAP2 = 1, 3, 4, 7, 9, 10
HEADER_ATTR = 64
SAMPLE_IP, SAMPLE_TID, SAMPLE_IDENTIFIER = 1 << 0, 1 << 1, 1 << 16
KERNEL_PID = 0xFFFFFFFF  # the kernel's and its modules' maps: pid -1
_HEAD = struct.Struct("<IHH")
_TWO = struct.Struct("<II")
_FOUR = struct.Struct("<IIII")
_U64 = struct.Struct("<Q")


class PerfDataError(ValueError):
    """The stream is not perf's pipe format."""


class ProcessFilter:
    """Which processes' events pass: `ours` (followed through forks) and the children of
    `parents` (pglab itself: pgbench and the pooler start after perf does). `never` are
    processes never profiled though ours by descent (perf itself)."""

    def __init__(self, ours: set[int], parents: set[int], never: set[int]) -> None:
        self.ours = set(ours) - never
        self.parents = set(parents)
        self.never = set(never)
        self.sample_pid_at: int | None = None  # offset of a sample's pid in its body
        self.passed = 0
        self.dropped = 0
        # set at the first sample of any process: perf record has described the machine's
        # processes (its costly start) and samples
        self.sampling = threading.Event()

    def wants(self, pid: int) -> bool:
        return pid in self.ours or pid == KERNEL_PID

    def keep(self, kind: int, body: bytes) -> bool:
        """Whether an event passes (and follow forks)."""
        if kind in (MMAP, MMAP2, COMM, EXIT):
            return self.wants(_TWO.unpack_from(body)[0])
        if kind == FORK:
            pid, ppid, _tid, _ptid = _FOUR.unpack_from(body)
            if pid != ppid and pid not in self.never and (
                    ppid in self.ours or ppid in self.parents):
                self.ours.add(pid)
            return self.wants(pid)
        if kind == SAMPLE and self.sample_pid_at is not None:
            if not self.sampling.is_set():  # set() takes a lock: once, not per sample
                self.sampling.set()
            return self.wants(_TWO.unpack_from(body, self.sample_pid_at)[0])
        if kind == HEADER_ATTR:
            (sample_type,) = _U64.unpack_from(body, 24)
            if sample_type & SAMPLE_TID:
                self.sample_pid_at = (8 if sample_type & SAMPLE_IDENTIFIER else 0) + (
                    8 if sample_type & SAMPLE_IP else 0)
        return True

    def copy(self, source: IO[bytes], sink: IO[bytes]) -> None:
        """Pass the stream from `source` to `sink` until its end, dropping the events of
        processes not ours. Raises PerfDataError if it does not start as perf's pipe data."""
        head = _read(source, PIPE_HEADER)
        if len(head) < PIPE_HEADER:
            return  # perf record wrote nothing (it failed: its stderr says why)
        if head[:8] != MAGIC:
            raise PerfDataError(f"perf record's output starts with {head[:8]!r}, not "
                                f"{MAGIC!r}: not perf's pipe format")
        sink.write(head)
        while True:
            header = _read(source, 8)
            if len(header) < 8:
                break
            kind, _misc, size = _HEAD.unpack(header)
            if size < 8:
                raise PerfDataError(f"perf event of type {kind} says it is {size} bytes long")
            body = _read(source, size - 8)
            if len(body) < size - 8:
                break  # perf record was stopped mid-event
            if self.keep(kind, body):
                self.passed += 1
                sink.write(header)
                sink.write(body)
            else:
                self.dropped += 1
        sink.flush()


def _read(source: IO[bytes], size: int) -> bytes:
    """Exactly `size` bytes, or fewer at the stream's end."""
    data = source.read(size)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = source.read(size - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)
