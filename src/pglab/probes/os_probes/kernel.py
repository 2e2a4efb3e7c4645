"""os.kernel: what each node's processes (by kind) and pgbench do in the kernel, sampled
at wait_sampling_hz, and their I/O per second.

At each read, every process's state (/proc/<pid>/stat), current syscall
(/proc/<pid>/syscall, named by number for this architecture) and, when it is blocked in
a call, its top kernel frames (/proc/<pid>/stack; /proc/<pid>/wchan where the stack is
not readable) are tallied per node and kind; once a second the tallies become shares of
that second's samples, like the wait-event shares, so the files stay small. At the same
moment /proc/<pid>/io gives bytes and calls per second by kind.

Cost: the files of each process are opened once and re-read with pread (procfs
regenerates them at offset 0); open + read + close cost about seven times as much here.
A kept descriptor also cannot be fooled by a reused pid: once its process is gone, reads
fail with ESRCH. Each node's processes are found from the postmaster's `children` file at
every read (PostgreSQL forks everything from the postmaster), pgbench's threads once a
second.

Whatever cannot be read (not root, a kernel without /proc/<pid>/stack, a process that
ended between two reads) is said once, as a `probe-unreadable` event; the rest goes on.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pglab.events import Event
from pglab.probes import procfs
from pglab.probes.base import ProbeContext, ProbeOutput
from pglab.probes.os_probes.common import (
    CLIENT,
    CLK_TCK,
    OsProbe,
    children_listed,
    read_children,
    read_text,
)
from pglab.probes.os_probes.processes import scan_processes, tree_of
from pglab.probes.procfs import kernel as kproc
from pglab.results.kernel_series import ON_CPU, USER

IO_METRICS = ("read_mbps", "write_mbps", "cancelled_write_mbps", "rchar_mbps", "wchar_mbps",
              "syscr_per_s", "syscw_per_s")


def _pread(fd: int | None) -> str | None:
    """The file's text now; None when it cannot be read (its process is gone: ESRCH)."""
    if fd is None:
        return None
    try:
        return os.pread(fd, 8192, 0).decode(errors="replace")
    except OSError:
        return None


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass
class Watched:
    """One process (or pgbench thread) with its procfs files kept open."""

    node: str
    kind: str
    fds: dict[str, int]  # "stat", "syscall", "stack" or "wchan", "io" -> descriptor
    born: float  # boot-time seconds when it started
    titled: bool  # its kind was read from its process title (else: looked up again)
    io_base: kproc.ProcIo | None = None

    def close(self) -> None:
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


@dataclass
class Tally:
    """One node's and kind's reads in the current second."""

    samples: int = 0
    processes: set[int] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)


class KernelProbe(OsProbe):
    name = "os.kernel"
    help = ("state, current syscall and kernel frames of each node's processes by kind and "
            "of pgbench, at wait_sampling_hz, as shares per second; /proc/<pid>/io rates")
    cadence = "fast"
    # Opt-in (telemetry.include): its cost at 10 Hz is above the observer's budget
    # with many backends (bench/kernel_sampling_cost.py).
    opt_in = True

    def unavailable_reason(self, ctx: ProbeContext) -> str | None:
        if read_text(self.proc_root / "self" / "syscall") is None:
            return f"{self.proc_root}/self/syscall is not readable (a kernel without it)"
        return None

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.names = kproc.syscall_table()
        self.children_listed = children_listed(self.proc_root)
        self.watched: dict[int, Watched] = {}
        self.tallies: dict[tuple[str, str], Tally] = {}
        self.second: int | None = None
        self.io_read_at: tuple[float, float] | None = None  # (monotonic, boot time)
        self.said: set[str] = set()
        self.events: list[tuple[str, str, str]] = []  # (node, file, reason) to say once
        self.client_threads: set[int] = set()
        # raw text -> what it counts as: the same few texts come back at every read
        self.calls: dict[bytes, tuple[str, bool]] = {}  # -> key, blocked in a call
        self.stacks: dict[bytes, str] = {}

    # --- sampling -------------------------------------------------------------------

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        if self.unavailable is not None:
            self.note("host", "syscall", self.unavailable + ": nothing sampled")
            self.say(out, now)
            return out
        second = math.floor(now.timestamp())
        new_second = second != self.second
        if new_second and self.second is not None:
            self.flush(out, self.second)
        self.second = second
        self.find_processes(refresh_client=new_second)
        for pid, proc in list(self.watched.items()):
            self.read(pid, proc)
        self.say(out, now)
        return out

    def stop(self) -> ProbeOutput:
        out = ProbeOutput()
        if self.unavailable is None and self.second is not None:
            self.flush(out, self.second)
            self.say(out, dt.datetime.now(dt.timezone.utc))
        for proc in self.watched.values():
            proc.close()
        self.watched.clear()
        return out

    def read(self, pid: int, proc: Watched) -> None:
        """One process's state, call and frames, into its kind's tally. Bytes and caches
        keyed by the raw text: this runs for every process ten times a second."""
        fds = proc.fds
        try:
            stat = os.pread(fds["stat"], 1024, 0)
        except OSError:
            stat = b""
        close = stat.rfind(b")")
        if close < 0 or len(stat) < close + 3:
            self.forget(pid, "stat", "the process ended between two reads; its samples stop "
                        "there (said for the first one only)")
            return
        tally = self.tallies.get((proc.node, proc.kind))
        if tally is None:
            tally = self.tallies[proc.node, proc.kind] = Tally()
        tally.samples += 1
        tally.processes.add(pid)
        counts = tally.counts
        letter = stat[close + 2:close + 3].decode(errors="replace")
        counts["state:" + kproc.state_name(letter)] += 1
        fd = fds.get("syscall")
        if fd is None:
            return
        try:
            raw = os.pread(fd, 512, 0)
        except OSError:
            return
        call = self.calls.get(raw.split(b" ", 1)[0])
        if call is None:
            name = kproc.parse_syscall(raw.decode(errors="replace"), self.names)
            if name is None:
                return
            call = self.calls[raw.split(b" ", 1)[0]] = (
                "syscall:" + name, name not in (ON_CPU, USER))
        counts[call[0]] += 1
        if not call[1]:  # on a CPU or in user space: no kernel wait to name
            return
        if "stack" in fds:
            self.read_stack(pid, proc, counts)
        elif (wchan := kproc.parse_wchan(_pread(fds.get("wchan")) or "")) is not None:
            counts["wchan:" + wchan] += 1

    def read_stack(self, pid: int, proc: Watched, counts: Counter[str]) -> None:
        try:
            raw = os.pread(proc.fds["stack"], 8192, 0)
        except OSError as exc:  # the check is made at each read (CAP_SYS_ADMIN)
            if exc.errno == errno.ESRCH:
                return
            self.note(proc.node, "stack", _why("stack", exc))
            os.close(proc.fds.pop("stack"))
            with contextlib.suppress(OSError):
                proc.fds["wchan"] = os.open(self.proc_root / str(pid) / "wchan",
                                            os.O_RDONLY | os.O_CLOEXEC)
            return
        key = self.stacks.get(raw)
        if key is None:
            frames = kproc.top_frames(kproc.parse_stack(raw.decode(errors="replace")))
            if len(self.stacks) > 4096:  # a bound: offsets make few distinct texts
                self.stacks.clear()
            key = self.stacks[raw] = "stack:" + frames if frames else ""
        if key:
            counts[key] += 1

    def forget(self, pid: int, file: str, reason: str) -> None:
        proc = self.watched.pop(pid, None)
        if proc is not None:
            proc.close()
            self.note(proc.node, file, reason)

    def note(self, node: str, file: str, reason: str) -> None:
        if file + reason not in self.said:
            self.said.add(file + reason)
            self.events.append((node, file, reason))

    def say(self, out: ProbeOutput, now: dt.datetime) -> None:
        for node, file, reason in self.events:
            out.events.append(Event(now, "probe-unreadable", node, attrs={
                "probe": self.name, "file": f"/proc/<pid>/{file}", "reason": reason}))
        self.events.clear()

    # --- which processes --------------------------------------------------------------

    def find_processes(self, refresh_client: bool) -> None:
        # pid -> node, kind (None: forked, not yet retitled), its procfs dir if not /proc/pid
        wanted: dict[int, tuple[str, str | None, Path | None]] = {}
        everything = None if self.children_listed or not refresh_client else (
            scan_processes(self.proc_root))
        # telemetry's own sessions are no backends of the load (db.waits leaves them out too)
        own = self.ctx.db.backend_pids if self.ctx.db is not None else frozenset()
        for node in self.ctx.nodes:
            root = node.postmaster_pid()
            if root is None:
                continue
            if everything is not None:
                children = [p for p in tree_of(root, everything) if p != root]
            elif self.children_listed:
                children = read_children(self.proc_root, root)
            else:  # no children files: the tree is refreshed once a second
                children = [p for p, w in self.watched.items() if w.node == node.name]
            for pid in children:
                if pid in own:
                    continue
                known = self.watched.get(pid)
                kind = known.kind if known is not None and known.titled else (
                    procfs.process_kind(read_text(f"{self.proc_root}/{pid}/cmdline") or ""))
                wanted[pid] = (node.name, kind, None)
        client = self.ctx.client_pid()
        if refresh_client:
            self.client_threads = set()
            if client is not None:
                with contextlib.suppress(OSError):
                    self.client_threads = {int(t) for t in os.listdir(
                        f"{self.proc_root}/{client}/task") if t.isdigit()}
        for tid in self.client_threads:
            wanted[tid] = (CLIENT, "pgbench", self.proc_root / str(client) / "task" / str(tid))
        for pid in [p for p in self.watched if p not in wanted]:
            self.watched.pop(pid).close()
        for pid, (name, kind, where) in wanted.items():
            known = self.watched.get(pid)
            if known is None:
                self.watch(pid, name, kind, where or self.proc_root / str(pid),
                           io=pid == client or name != CLIENT)
            elif kind is not None:
                known.kind, known.titled = kind, True

    def watch(self, pid: int, node: str, kind: str | None, where: Path, io: bool) -> None:
        fds: dict[str, int] = {}
        files = ["stat", "syscall", "stack", "io"] if io else ["stat", "syscall", "stack"]
        for file in files:
            path = (where.parent.parent if file == "io" and node == CLIENT else where) / file
            try:
                fds[file] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ESRCH) and file == "stat":
                    return  # gone before it was read: nothing to say
                self.note(node, file, _why(file, exc))
                if file == "stack":
                    with contextlib.suppress(OSError):
                        fds["wchan"] = os.open(where / "wchan", os.O_RDONLY | os.O_CLOEXEC)
        if "stat" not in fds:
            for fd in fds.values():
                os.close(fd)
            return
        stat = procfs.parse_pid_stat(_pread(fds["stat"]) or "")
        born = stat.starttime / CLK_TCK if stat is not None else 0.0
        # not yet retitled: nearly always a new connection
        self.watched[pid] = Watched(node, kind or "backends", fds, born, kind is not None)

    # --- once a second ----------------------------------------------------------------

    def flush(self, out: ProbeOutput, second: int) -> None:
        """The second's tallies as shares, and each kind's I/O since the last flush."""
        t = dt.datetime.fromtimestamp(second, dt.timezone.utc)
        for (node, kind), tally in sorted(self.tallies.items()):
            shares = {key: 100 * count / tally.samples for key, count in tally.counts.items()}
            self.emit(out, t, node, kind, {"samples": tally.samples,
                                           "processes": len(tally.processes), **shares})
        self.tallies.clear()
        self.flush_io(out, t)

    def flush_io(self, out: ProbeOutput, t: dt.datetime) -> None:
        at, boot = time.monotonic(), _boottime()
        previous, self.io_read_at = self.io_read_at, (at, boot)
        moved: dict[tuple[str, str], list[int]] = {}
        for proc in self.watched.values():
            if "io" not in proc.fds:
                continue
            now_io = kproc.parse_pid_io(_pread(proc.fds["io"]) or "")
            if now_io is None:
                continue
            base = proc.io_base
            if base is None and previous is not None and proc.born >= previous[1]:
                base = kproc.ZERO_IO  # started since the last read: all of it is new
            proc.io_base = now_io
            if base is not None:
                total = moved.setdefault((proc.node, proc.kind), [0] * 7)
                for i, value in enumerate(now_io.minus(base).values()):
                    total[i] += max(0, value)
        if previous is None or at <= previous[0]:
            return
        seconds = at - previous[0]
        mib = procfs.MIB * seconds
        for (node, kind), (rchar, wchar, syscr, syscw, rd, wr, cancelled) in sorted(
                moved.items()):
            self.emit(out, t, node, kind, dict(zip(IO_METRICS, (
                rd / mib, wr / mib, cancelled / mib, rchar / mib, wchar / mib,
                syscr / seconds, syscw / seconds), strict=True)))


def _why(file: str, exc: OSError) -> str:
    what = {"stack": "no kernel frames (wchan instead)", "syscall": "no syscalls",
            "io": "no I/O rates"}.get(file, "not sampled")
    cause = {errno.EACCES: "permission denied (root reads every process's)",
             errno.EPERM: "not permitted (root reads every process's)",
             errno.ENOENT: "this kernel has no such file",
             errno.EMFILE: "too many open files"}.get(exc.errno or 0, exc.strerror or str(exc))
    return f"{cause}: {what}"
