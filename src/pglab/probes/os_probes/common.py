"""What the OS probes share: where procfs is, reading it, emitting samples."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from pglab.probes import procfs
from pglab.probes.base import Probe, ProbeContext, ProbeOutput, Sample

PROC = Path("/proc")
SYS = Path("/sys")
HOST = "host"
CLIENT = "client"
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_text(path: str | Path) -> str | None:
    try:
        with open(path, errors="replace") as file:
            return file.read()
    except (OSError, ValueError):  # missing, unreadable, or PSI switched off (EOPNOTSUPP)
        return None


READ_CHUNK = 65536


def read_proc_file(path: str) -> bytes | None:
    """A procfs file, by plain os calls: os.processes reads two for each process of each
    node every second, and Python's file objects take half again as much CPU as the
    kernel's read itself. None when it is gone or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        # to the end: a postmaster's children can fill more than a chunk, and procfs
        # returns whole records, so a short read is no sign of the end
        chunks = [os.read(fd, READ_CHUNK)]
        while chunks[-1]:
            chunks.append(os.read(fd, READ_CHUNK))
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_stat(path: str) -> procfs.ProcStat | None:
    """One /proc/<pid>/stat."""
    raw = read_proc_file(path)
    if raw is None:  # gone meanwhile
        return None
    try:
        return procfs.parse_pid_stat(raw.decode(errors="replace"))
    except ValueError:
        return None


def read_children(proc_root: Path, pid: int, threads: int = 1) -> list[int]:
    """The pids a process has forked: each of its threads lists its own (a
    single-threaded process, like every PostgreSQL process, has one list)."""
    tids = [str(pid)]
    if threads > 1:
        with contextlib.suppress(OSError):
            tids = os.listdir(f"{proc_root}/{pid}/task")
    children: list[int] = []
    for tid in tids:
        raw = read_proc_file(f"{proc_root}/{pid}/task/{tid}/children")
        children += procfs.parse_children(raw.decode()) if raw else []
    return children


def children_listed(proc_root: Path) -> bool:
    """Whether the kernel lists each thread's children (CONFIG_PROC_CHILDREN), so that a
    process tree can be walked from its root instead of reading every process."""
    me = os.getpid()
    return (proc_root / str(me) / "task" / str(me) / "children").exists()


def read_timed(path: Path) -> tuple[str | None, float]:
    """The file's text and the monotonic time of the read, for rates."""
    text = read_text(path)
    return text, time.monotonic()


class OsProbe(Probe):
    """Shared by the OS probes: injectable roots, availability, baseline, emitting."""

    requires: ClassVar[tuple[str, ...]] = ()  # files under proc_root the probe cannot do without

    def __init__(self, proc_root: Path = PROC, sys_root: Path = SYS) -> None:
        self.proc_root = proc_root
        self.sys_root = sys_root
        self.unavailable: str | None = None

    def unavailable_reason(self, ctx: ProbeContext) -> str | None:
        for name in self.requires:
            if read_text(self.proc_root / name) is None:
                return f"{self.proc_root / name} is not readable"
        return None

    def start(self, ctx: ProbeContext) -> None:
        self.ctx = ctx
        self.unavailable = self.unavailable_reason(ctx)

    def emit(
        self,
        out: ProbeOutput,
        now: dt.datetime,
        node: str,
        label: str,
        metrics: Mapping[str, float],
    ) -> None:
        out.samples.extend(
            Sample(now, node, self.name, metric, label, float(value))
            for metric, value in metrics.items()
        )
