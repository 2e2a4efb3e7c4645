"""Processes: /proc/<pid>/stat, process titles to pglab's kinds, postmaster.pid."""

from __future__ import annotations

from dataclasses import dataclass

# /proc/<pid>/stat, /proc/<pid>/cmdline, postmaster.pid -----------------------------------


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    ppid: int
    utime: int  # clock ticks, all threads
    stime: int
    cutime: int  # reaped children (and their reaped children), added when waited for
    cstime: int
    starttime: int  # ticks after boot: tells a reused pid from the process we knew
    threads: int = 1
    state: str = "?"  # R running, S sleeping, D uninterruptible (disk), T stopped, ...

    @property
    def own_ticks(self) -> int:
        return self.utime + self.stime

    @property
    def tree_ticks(self) -> int:
        return self.utime + self.stime + self.cutime + self.cstime


def parse_pid_stat(text: str) -> ProcStat | None:
    # comm sits in parentheses and may hold spaces or ")": split at the last ")"
    head, sep, tail = text.rpartition(")")
    pid_text, _, comm = head.partition(" (")
    words = tail.split()
    if not sep or len(words) < 20 or not pid_text.strip().isdigit():
        return None
    return ProcStat(
        pid=int(pid_text),
        comm=comm,
        ppid=int(words[1]),
        utime=int(words[11]),
        stime=int(words[12]),
        cutime=int(words[13]),
        cstime=int(words[14]),
        starttime=int(words[19]),
        threads=int(words[17]),
        state=words[0],
    )


def parse_children(text: str) -> list[int]:
    """/proc/<pid>/task/<tid>/children: the pids that thread forked, space-separated."""
    return [int(word) for word in text.split() if word.isdigit()]


# Process titles ("postgres: [cluster_name: ]<what>") -> pglab's kinds. PostgreSQL 9.x
# named some "... process"; anything renamed and not listed is a client backend.
TITLE_KINDS = {
    "checkpointer": "checkpointer",
    "background writer": "bgwriter",
    "writer": "bgwriter",
    "walwriter": "walwriter",
    "wal writer": "walwriter",
    "autovacuum": "autovacuum",
    "walsender": "walsender",
    "wal sender": "walsender",
    "walreceiver": "walreceiver",
    "wal receiver": "walreceiver",
    "startup": "startup",
    "io worker": "io_worker",
    "parallel worker": "backends",
    "archiver": "archiver",
    "stats collector": "other",
    "logical replication": "other",
    "walsummarizer": "other",
    "slotsync worker": "other",
    "logger": "other",
}


def cmdline_text(raw: str) -> str:
    """/proc/<pid>/cmdline with its NUL separators and NUL padding as single spaces."""
    return " ".join(raw.replace("\0", " ").split())


def process_kind(raw_cmdline: str) -> str | None:
    """A PostgreSQL child's kind from its process title; None if not retitled (yet)."""
    title = cmdline_text(raw_cmdline)
    if not title.startswith("postgres: "):
        return None
    rest = title.removeprefix("postgres: ")
    first, _, after_first = rest.partition(" ")
    if first.endswith(":") and after_first:  # cluster_name prefix
        rest = after_first
    for prefix, kind in TITLE_KINDS.items():
        if rest == prefix or rest.startswith(prefix + " "):
            return kind
    return "backends"


def parse_postmaster_port(text: str) -> int | None:
    """Line 4 of postmaster.pid: the port the node listens on."""
    lines = text.splitlines()
    return int(lines[3]) if len(lines) > 3 and lines[3].strip().isdigit() else None
