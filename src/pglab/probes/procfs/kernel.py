"""What a process is doing in the kernel: /proc/<pid>/syscall, wchan, stack, stat's state,
and its I/O counters (/proc/<pid>/io)."""

from __future__ import annotations

import platform
from dataclasses import dataclass

from pglab.probes.procfs.syscall_names import SYSCALL_NAMES
from pglab.results.kernel_series import FRAME_SEPARATOR, ON_CPU, USER

# /proc/<pid>/stat's state letter -> a word (proc(5)); "uninterruptible" is D, the sleep
# a process cannot be woken from: waiting for a disk, a journal commit, a page lock.
STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "uninterruptible",
    "T": "stopped",
    "t": "stopped",
    "Z": "zombie",
    "X": "dead",
    "I": "idle",
    "P": "parked",
    "W": "paging",
}

# How every syscall enters the kernel: the same at the bottom of every stack, so they say
# nothing about where a process waits.
_ENTRY_PREFIXES = ("entry_SYSCALL", "do_syscall_64", "__x64_sys_", "__arm64_sys_",
                   "__do_sys_", "__se_sys_", "el0_svc", "el0t_64_sync", "invoke_syscall",
                   "do_el0_svc", "x64_sys_call", "ret_from_fork")


def parse_state(stat_text: str) -> str | None:
    """/proc/<pid>/stat -> its state letter (the word after the command's parentheses)."""
    _, sep, tail = stat_text.rpartition(")")
    words = tail.split(maxsplit=1)
    return words[0] if sep and words else None


def state_name(letter: str) -> str:
    return STATES.get(letter, "other")


def syscall_table(machine: str | None = None) -> dict[int, str]:
    """Syscall numbers -> names of this machine's architecture (empty if not known)."""
    machine = machine or platform.machine()
    return SYSCALL_NAMES.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine), {})


def parse_syscall(text: str, names: dict[int, str]) -> str | None:
    """/proc/<pid>/syscall -> the call a process is blocked in, by name (`syscall_N` when
    the table lacks it); ON_CPU while it runs, USER outside any call; None if unreadable.

    The file is "running", or "-1 SP PC" outside a call, or "NR ARG1..ARG6 SP PC"."""
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    if first == "running":
        return ON_CPU
    try:
        number = int(first)
    except ValueError:
        return None
    if number < 0:
        return USER
    return names.get(number, f"syscall_{number}")


def _function(symbol: str) -> str:
    """A kernel symbol without the compiler's clone suffix (`.constprop.0`, `.isra.0`,
    `.part.0`): the same function, whichever copy of it the build made."""
    return symbol.split(".", 1)[0]


def parse_wchan(text: str) -> str | None:
    """/proc/<pid>/wchan: the kernel function a sleeping process waits in; "0" (or nothing)
    when it is not waiting."""
    symbol = text.strip()
    return None if symbol in ("", "0") else _function(symbol)


def parse_stack(text: str) -> list[str]:
    """/proc/<pid>/stack -> function names, innermost first, without offsets, modules and
    clone suffixes.

    Lines are "[<0>] jbd2_log_wait_commit+0xb6/0x130" or "... [zfs]" for a module."""
    frames = []
    for line in text.splitlines():
        _, _, rest = line.partition("] ")
        name = _function(rest.split("+", 1)[0].split(" ", 1)[0].strip())
        if name:
            frames.append(name)
    return frames


def top_frames(frames: list[str], depth: int = 6) -> str:
    """Where a process waits, innermost first, as "a < b < c": the frames above the
    syscall entry code (which every stack shares), deep enough to reach the filesystem's
    own (ext4_sync_file under folio_wait_bit < folio_wait_writeback < ...)."""
    useful = [f for f in frames if not f.startswith(_ENTRY_PREFIXES)]
    return FRAME_SEPARATOR.join(useful[:depth])


@dataclass(frozen=True)
class ProcIo:
    """/proc/<pid>/io: bytes through read/write calls (`rchar`, `wchar`, page cache hits
    included), the calls, and what reached or would reach storage (`read_bytes`,
    `write_bytes`: charged when a page is dirtied; `cancelled_write_bytes`: dirty pages
    dropped before writeback, e.g. a truncated file)."""

    rchar: int
    wchar: int
    syscr: int
    syscw: int
    read_bytes: int
    write_bytes: int
    cancelled_write_bytes: int

    def minus(self, other: ProcIo) -> ProcIo:
        return ProcIo(*(a - b for a, b in zip(self.values(), other.values(), strict=True)))

    def values(self) -> tuple[int, ...]:
        return (self.rchar, self.wchar, self.syscr, self.syscw, self.read_bytes,
                self.write_bytes, self.cancelled_write_bytes)


ZERO_IO = ProcIo(0, 0, 0, 0, 0, 0, 0)


def parse_pid_io(text: str) -> ProcIo | None:
    fields: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if value.strip().isdigit():
            fields[key.strip()] = int(value)
    try:
        return ProcIo(**{name: fields[name] for name in ProcIo.__dataclass_fields__})
    except KeyError:  # not an io file (or a kernel without task I/O accounting)
        return None
