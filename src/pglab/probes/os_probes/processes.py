"""os.processes: CPU of each node's PostgreSQL processes by kind, and of pgbench."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from pglab.probes import procfs
from pglab.probes.base import ProbeContext, ProbeOutput
from pglab.probes.os_probes.common import (
    CLIENT,
    CLK_TCK,
    OsProbe,
    children_listed,
    read_children,
    read_stat,
    read_text,
)

KINDS = (
    "backends",
    "checkpointer",
    "walwriter",
    "bgwriter",
    "autovacuum",
    "walsender",
    "walreceiver",
    "startup",
    "io_worker",
    "archiver",
    "other",
)


def scan_processes(proc_root: Path) -> dict[int, procfs.ProcStat]:
    """Every process's (or thread's) stat under a /proc-like directory, in one pass."""
    found = {}
    with contextlib.suppress(OSError):
        for name in os.listdir(proc_root):
            if name.isdigit() and (stat := read_stat(f"{proc_root}/{name}/stat")) is not None:
                found[stat.pid] = stat
    return found


def tree_of(root: int, processes: dict[int, procfs.ProcStat]) -> dict[int, procfs.ProcStat]:
    """`root` and all its descendants (PostgreSQL forks everything from the postmaster)."""
    children: dict[int, list[int]] = {}
    for stat in processes.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in processes and pid not in tree:
            tree[pid] = processes[pid]
            todo += children.get(pid, [])
    return tree


def walk_tree(proc_root: Path, root: int) -> dict[int, procfs.ProcStat]:
    """`root` and its descendants, found from each one's children file: it reads the
    tree's processes only, where tree_of needs every process on the host."""
    tree: dict[int, procfs.ProcStat] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        stat = None if pid in tree else read_stat(f"{proc_root}/{pid}/stat")
        if stat is None:
            continue
        tree[pid] = stat
        todo += read_children(proc_root, pid, stat.threads)
    return tree


@dataclass(frozen=True)
class Tree:
    """A process tree at one instant, with a kind for each process."""

    root: procfs.ProcStat
    procs: dict[int, procfs.ProcStat]
    kinds: dict[int, str]
    at: float


def _same_process(before: procfs.ProcStat | None, after: procfs.ProcStat | None) -> bool:
    return before is not None and after is not None and before.starttime == after.starttime


def own_ticks_since(before: procfs.ProcStat | None, after: procfs.ProcStat) -> int:
    """utime+stime since `before`; all of it for a process (or thread) born since."""
    if before is None or before.starttime != after.starttime:
        return after.own_ticks
    return after.own_ticks - before.own_ticks


def split_tree_cpu(before: Tree, after: Tree) -> dict[str, float]:
    """Clock ticks used in the interval, by kind.

    The total is exact even for processes that started and ended between two samples:
    the sum over the tree of utime+stime+cutime+cstime only moves from a child to its
    parent when the parent reaps it. Live processes give their own ticks to their kind;
    what the total has beyond that (the last moments of processes that exited) goes to
    the kinds that exited, by count, or to "backends" (short-lived connections).
    """
    total = sum(p.tree_ticks for p in after.procs.values()) - sum(
        p.tree_ticks for p in before.procs.values()
    )
    by_kind: dict[str, float] = {}
    for pid, proc in after.procs.items():
        kind = after.kinds[pid]
        by_kind[kind] = by_kind.get(kind, 0.0) + own_ticks_since(before.procs.get(pid), proc)
    residual = total - sum(by_kind.values())
    if residual > 0:
        exited = Counter(
            kind
            for pid, kind in before.kinds.items()
            if not _same_process(before.procs[pid], after.procs.get(pid))
        )
        shares = exited or Counter({"backends": 1})
        for kind, count in shares.items():
            by_kind[kind] = by_kind.get(kind, 0.0) + residual * count / shares.total()
    return by_kind


class ProcessesProbe(OsProbe):
    name = "os.processes"
    help = "CPU cores used by each node's PostgreSQL processes (by kind) and by pgbench"
    requires = ("stat",)

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.trees: dict[str, Tree] = {}  # by node name, and CLIENT for pgbench
        self.threads: dict[int, procfs.ProcStat] = {}  # pgbench's threads, by tid
        self.kind_cache: dict[tuple[int, int], str] = {}  # (pid, starttime) -> kind
        self.children_listed = children_listed(self.proc_root)

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        roots = {node.name: node.postmaster_pid() for node in self.ctx.nodes}
        client = self.ctx.client_pid()
        if client is None and all(pid is None for pid in roots.values()):
            self.trees.clear()
            return out
        processes = None if self.children_listed else scan_processes(self.proc_root)
        at = time.monotonic()
        live: set[tuple[int, int]] = set()
        for node, pid in roots.items():
            tree = self.tree(node, pid, processes, at, postgres=True)
            if tree is not None:
                live.update((p.pid, p.starttime) for p in tree.procs.values())
                self.report_postgres(out, now, node, tree)
        client_tree = self.tree(CLIENT, client, processes, at, postgres=False)
        if client_tree is not None:
            self.report_client(out, now, client_tree)
        self.kind_cache = {key: kind for key, kind in self.kind_cache.items() if key in live}
        return out

    def tree(
        self,
        key: str,
        root: int | None,
        processes: dict[int, procfs.ProcStat] | None,
        at: float,
        postgres: bool,
    ) -> Tree | None:
        """The tree under `root` now; the previous one stays in self.trees until reported.
        `processes`: every process on the host, or None to walk the tree from its root."""
        procs = {} if root is None else (
            walk_tree(self.proc_root, root) if processes is None else tree_of(root, processes))
        if root not in procs:
            self.trees.pop(key, None)
            return None
        kinds = {
            pid: self.kind(proc, root) if postgres else "pgbench" for pid, proc in procs.items()
        }
        return Tree(procs[root], procs, kinds, at)

    def kind(self, proc: procfs.ProcStat, root: int) -> str:
        if proc.pid == root:
            return "other"  # the postmaster forks and reaps; it serves no queries
        key = (proc.pid, proc.starttime)
        if key not in self.kind_cache:
            raw = read_text(f"{self.proc_root}/{proc.pid}/cmdline") or ""
            kind = procfs.process_kind(raw)
            if kind is None:  # forked, not yet retitled: nearly always a new connection
                return "backends"
            self.kind_cache[key] = kind
        return self.kind_cache[key]

    def interval(self, key: str, tree: Tree) -> tuple[dict[str, float], float] | None:
        """Ticks by kind since the previous tree of `key` and the seconds between them."""
        previous = self.trees.get(key)
        self.trees[key] = tree
        if previous is None or not _same_process(previous.root, tree.root):
            return None  # first sample, or the node restarted / a new pgbench began
        seconds = tree.at - previous.at
        return (split_tree_cpu(previous, tree), seconds) if seconds > 0 else None

    def report_postgres(self, out: ProbeOutput, now: dt.datetime, node: str, tree: Tree) -> None:
        measured = self.interval(node, tree)
        if measured is None:
            return
        ticks, seconds = measured
        cores = {kind: ticks.get(kind, 0.0) / CLK_TCK / seconds for kind in (*KINDS, *ticks)}
        self.emit(
            out,
            now,
            node,
            "postgres",
            {"cpu_cores": sum(cores.values()), "processes": len(tree.procs)},
        )
        for kind, value in cores.items():
            self.emit(out, now, node, kind, {"cpu_cores": value})

    def report_client(self, out: ProbeOutput, now: dt.datetime, tree: Tree) -> None:
        threads = scan_processes(self.proc_root / str(tree.root.pid) / "task")
        previous_threads, self.threads = self.threads, threads
        measured = self.interval(CLIENT, tree)
        if measured is None:
            return
        ticks, seconds = measured
        busiest = max(
            (own_ticks_since(previous_threads.get(tid), thread) for tid, thread in threads.items()),
            default=0,
        )
        self.emit(
            out,
            now,
            CLIENT,
            "pgbench",
            {
                "cpu_cores": sum(ticks.values()) / CLK_TCK / seconds,
                "max_thread_cores": busiest / CLK_TCK / seconds,
            },
        )
