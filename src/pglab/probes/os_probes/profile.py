"""os.profile: on-CPU stacks of each node's processes by kind and of pgbench, from perf.

`perf record -e cpu-clock -F <profile_hz> --call-graph dwarf -a -k CLOCK_MONOTONIC -o -`
samples every CPU at profile_hz (so each process at that rate of its time on a CPU) and
pipes its data to `perf script --no-inline`, whose text a thread of the probe reads as it
comes: each sample's process is placed (node and kind, as os.kernel places them: the
postmaster's children by process title; pgbench's threads under node `client`), its chain
folded, and counted per second of pglab's clock (perf's monotonic time plus the offset
of pglab's clock taken at start). At the end the counts become profile.parquet (second,
node, kind, stack, samples: docs/RESULTS.md).

Why these choices (bench/profile_cost.py measures them): the wheel's postgres has no
frame pointers, so `--call-graph fp` names the leaf function and no caller; DWARF
unwinding names the whole chain. It copies 8 KB of user stack per sample (about 1.4 MB/s
at 49 Hz on two busy cores, through the pipe, never on disk), which perf script unwinds;
with `--no-inline` (no addr2line per frame, which cost 40 times as much) unwinding costs
about what fp's script does. The whole machine is sampled (-a): `-p` follows no process
forked after it starts (every new backend). Between record and script a thread of the
probe passes only the profiled processes' events (probes/perf_filter.py): perf script
otherwise spent most of its CPU on the maps of every other process of the machine and on
unwinding their samples.

Where perf is missing or may not sample the machine (not root, perf_event_paranoid above
-1) the probe says why once (a `probe-unreadable` event, the manifest, a status line of
the run) and the run goes on. Its cost is the CPU of perf record, perf script and the
filtering and reading threads: `tool_cpu_s`, in the manifest's observer cost.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import math
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import polars as pl

from pglab.events import Event
from pglab.probes import procfs
from pglab.probes.base import ProbeContext, ProbeOutput
from pglab.probes.os_probes.common import CLIENT, CLK_TCK, OsProbe, read_children, read_text
from pglab.probes.perf_filter import PerfDataError, ProcessFilter
from pglab.probes.perf_script import Resolution, fold, parse_perf_script
from pglab.processes import spawn, wait_child
from pglab.results import files
from pglab.results.files import write_parquet
from pglab.results.schemas import PROFILE_SCHEMA
from pglab.system_parts import PARTS, is_root

POSTMASTER = "postmaster"
PGBENCH = "pgbench"
# What perf script prints of each sample (perf_script.py parses exactly this).
SCRIPT_FIELDS = "comm,pid,tid,time,ip,sym,dso"
# How long the end waits for perf script to unwind what perf record had still queued.
DRAIN_S = 30.0
# How long the start waits for perf record's first sample. Its start (describing every
# process of the machine, enabling the events on each CPU) takes a loaded server's TPS
# down by 10-30% for a second or two; telemetry starts before the load, so waiting here
# puts that second before the load's first transaction (docs/TELEMETRY.md).
START_WAIT_S = 10.0


def perf_command(perf: str, hz: int) -> tuple[list[str], list[str]]:
    """perf record's and perf script's argument lists (record's data piped to script)."""
    record = [perf, "record", "-e", "cpu-clock", "-F", str(hz), "--call-graph", "dwarf",
              "-a", "-k", "CLOCK_MONOTONIC", "-q", "-o", "-"]
    script = [perf, "script", "-i", "-", "--no-inline", "-F", SCRIPT_FIELDS]
    return record, script


def _paranoid(proc_root: Path) -> int | None:
    text = read_text(proc_root / "sys" / "kernel" / "perf_event_paranoid")
    return int(text) if text and text.strip().lstrip("-").isdigit() else None


def _cpu_of_zombie(pid: int, proc_root: Path) -> float:
    """CPU seconds of an ended child not yet reaped (its stat stays until then)."""
    stat = procfs.parse_pid_stat(read_text(proc_root / str(pid) / "stat") or "")
    return stat.own_ticks / CLK_TCK if stat is not None else 0.0


class Attribution:
    """pid -> (node, kind) for the processes profiled: each node's postmaster and its
    children by process title (as os.kernel), pgbench under node `client`. Refreshed
    once a second; a pid first seen in a sample is looked up then (a backend younger than
    a second), and a pid seen once stays known, for the samples that arrive after it ended."""

    def __init__(self, proc_root: Path) -> None:
        self.proc_root = proc_root
        self.known: dict[int, tuple[str, str]] = {}
        self.titled: set[int] = set()
        self.roots: dict[int, str] = {}  # postmaster pid -> node
        self.client: int | None = None
        self.own: frozenset[int] = frozenset()
        self.not_ours: set[int] = set()
        self.gone = 0  # samples of a postgres or pgbench process gone before it was placed

    def refresh(self, roots: dict[int, str], client: int | None, own: frozenset[int]) -> None:
        self.roots, self.client, self.own = dict(roots), client, own
        self.not_ours = set()
        children_now: set[int] = set()
        for root, node in roots.items():
            self.known[root] = (node, POSTMASTER)
            for pid in read_children(self.proc_root, root):
                children_now.add(pid)
                if pid not in self.titled:
                    self._title(pid, node)
        self.titled &= children_now  # a pid gone: its kind is looked up again if reused
        if client is not None:
            self.known[client] = (CLIENT, PGBENCH)

    def _title(self, pid: int, node: str) -> None:
        kind = procfs.process_kind(read_text(self.proc_root / str(pid) / "cmdline") or "")
        if kind is not None:
            self.titled.add(pid)
        self.known[pid] = (node, kind or "backends")  # not yet retitled: a new connection

    def lookup(self, pid: int, comm: str) -> tuple[str, str] | None:
        if pid in self.own:  # telemetry's own sessions (os.kernel leaves them out too)
            return None
        found = self.known.get(pid)
        if found is not None or pid in self.not_ours:
            return found
        stat = procfs.parse_pid_stat(read_text(self.proc_root / str(pid) / "stat") or "")
        if stat is not None and stat.ppid in self.roots:
            self._title(pid, self.roots[stat.ppid])
            return self.known[pid]
        if stat is None and comm in ("postgres", PGBENCH):
            self.gone += 1  # ended before it was placed: perhaps ours, perhaps not
        else:
            self.not_ours.add(pid)
        return None


class StackCounts:
    """Samples counted by second (pglab's clock), node, kind and folded stack; written by
    the reading thread, read at the end."""

    def __init__(self, offset: float) -> None:
        self.offset = offset  # pglab's clock minus perf's (CLOCK_MONOTONIC)
        self.counts: Counter[tuple[int, str, str, str]] = Counter()
        self.by_kind: Counter[tuple[str, str]] = Counter()
        self.resolution = Resolution()
        self.seen = 0  # every process's samples, ours or not
        self.lock = threading.Lock()
        # one string per distinct chain: a long run repeats the same few thousand chains
        # in every second, and the counts would otherwise hold a copy of each per second
        self.chains: dict[str, str] = {}

    def take(self, lines: Iterable[str], attribution: Attribution) -> None:
        """Count perf script's samples of the processes `attribution` places."""
        for sample in parse_perf_script(lines):
            self.seen += 1
            placed = attribution.lookup(sample.pid, sample.comm)
            if placed is None:
                continue
            node, kind = placed
            stack = fold(sample.frames)
            stack = self.chains.setdefault(stack, stack)
            second = math.floor(sample.time + self.offset)
            with self.lock:
                self.counts[second, node, kind, stack] += 1
                self.by_kind[node, kind] += 1
                self.resolution.add(sample.frames)

    def frame(self) -> pl.DataFrame:
        """The counts as profile.parquet's rows, by second, node, kind, stack."""
        with self.lock:
            rows = sorted(self.counts.items())
        return pl.DataFrame(
            {"t": [dt.datetime.fromtimestamp(k[0], dt.timezone.utc) for k, _ in rows],
             "node": [k[1] for k, _ in rows], "kind": [k[2] for k, _ in rows],
             "stack": [k[3] for k, _ in rows], "samples": [n for _, n in rows]},
            schema=PROFILE_SCHEMA)


class ProfileProbe(OsProbe):
    name = "os.profile"
    help = ("on-CPU stacks (perf, DWARF call chains) of each node's processes by kind and of "
            "pgbench at telemetry.profile_hz, per second, into profile.parquet")
    cadence = "interval"
    # Opt-in (telemetry.include): perf's own CPU is above the observer's budget.
    opt_in = True

    # a sample's process is placed by its /proc files (its parent, its title)
    requires = ("self/stat",)

    def unavailable_reason(self, ctx: ProbeContext) -> str | None:
        if (unreadable := super().unavailable_reason(ctx)) is not None:
            return f"{unreadable}: processes cannot be placed"
        missing = PARTS["linux-perf"].missing_problem(self.name)
        if missing is not None:
            return missing
        paranoid = _paranoid(self.proc_root)
        if not is_root() and (paranoid is None or paranoid > -1):
            return (f"{self.name} samples the whole machine, which needs root "
                    f"(kernel.perf_event_paranoid is {paranoid}): run pglab as root")
        return None

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.hz = ctx.profile_hz
        self.events: list[tuple[str, str]] = []
        self.said: set[str] = set()
        self.cpu = {"record": 0.0, "filter": 0.0, "script": 0.0, "reader": 0.0}
        self.ended: str | None = None
        self.record_proc: subprocess.Popen[bytes] | None = None
        self.script_proc: subprocess.Popen[bytes] | None = None
        self.reader: threading.Thread | None = None
        self.passer: threading.Thread | None = None
        self.filter = ProcessFilter(set(), set(), set())
        self.errors: list[IO[bytes]] = []
        self.attribution = Attribution(self.proc_root)
        self.stacks = StackCounts(0.0)
        if self.unavailable is not None:
            self.note(self.unavailable + ": no profile")
            return
        self.stacks = StackCounts(ctx.clock() - time.monotonic())
        self.refresh()
        perf = str(PARTS["linux-perf"].require(self.name))
        record, script = perf_command(perf, self.hz)
        # perf's stderr, read only to say why it failed (closed in _stop_perf)
        self.errors = [tempfile.TemporaryFile() for _ in range(2)]  # noqa: SIM115
        # perf dies with pglab (spawn's parent-death signal), so a kill -9 leaves none running
        self.record_proc = spawn(record, stdout=subprocess.PIPE, stderr=self.errors[0],
                                 stdin=subprocess.DEVNULL)
        try:
            self.script_proc = spawn(script, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errors[1])
        except BaseException:
            # a probe whose start failed is never stopped: its perf record, sampling the
            # whole machine, must not outlive this
            with contextlib.suppress(ProcessLookupError):
                self.record_proc.kill()
            wait_child(self.record_proc, 5.0)
            self.record_proc = None
            raise
        self.filter = ProcessFilter(self.profiled(), {os.getpid()},
                                    {self.record_proc.pid, self.script_proc.pid})
        self.passer = threading.Thread(target=self._pass, name="os.profile-filter",
                                       daemon=True)
        self.passer.start()
        self.reader = threading.Thread(target=self._read, name="os.profile-reader",
                                       daemon=True)
        self.reader.start()
        if not self.filter.sampling.wait(START_WAIT_S):
            self.note(f"perf record took over {START_WAIT_S:.0f} s to start sampling: the "
                      "load's first seconds bear its start")

    def profiled(self) -> set[int]:
        """The processes profiled as perf starts: each node's postmaster and its children,
        pgbench (later ones are followed through their forks)."""
        pids = set(self.attribution.roots)
        for root in self.attribution.roots:
            pids.update(read_children(self.proc_root, root))
        if self.attribution.client is not None:
            pids.add(self.attribution.client)
        return pids

    # --- the threads: record's data filtered into script, script's text counted -------

    def _pass(self) -> None:
        assert self.record_proc is not None and self.record_proc.stdout is not None
        assert self.script_proc is not None and self.script_proc.stdin is not None
        try:
            self.filter.copy(self.record_proc.stdout, self.script_proc.stdin)
        except PerfDataError as exc:
            self.note(str(exc))
        except (BrokenPipeError, ValueError):  # script ended (its stderr says why)
            pass
        finally:
            self.filter.sampling.set()  # record ended: the start waits no longer
            with contextlib.suppress(BrokenPipeError, ValueError):
                self.script_proc.stdin.close()  # script's end of stream: it finishes
            self.record_proc.stdout.close()  # a record still writing ends (broken pipe)
            self.cpu["filter"] = time.thread_time()


    def _read(self) -> None:
        assert self.script_proc is not None and self.script_proc.stdout is not None
        try:
            self.stacks.take(io.TextIOWrapper(self.script_proc.stdout, errors="replace"),
                             self.attribution)
        finally:
            self.cpu["reader"] = time.thread_time()

    # --- the telemetry loop -----------------------------------------------------------

    def refresh(self) -> None:
        roots = {pid: node.name for node in self.ctx.nodes
                 if (pid := node.postmaster_pid()) is not None}
        own = self.ctx.db.backend_pids if self.ctx.db is not None else frozenset()
        self.attribution.refresh(roots, self.ctx.client_pid(), own)

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        if self.record_proc is not None and self.ended is None:
            self.refresh()
            # ended on its own: say why, once (not reaped: its CPU is read at the stop)
            if _wait_unreaped(self.record_proc, 0.0):
                self.ended = f"perf record ended early: {self._stderr(0)}"
                self.note(self.ended)
        self.say(out, now)
        return out

    def stop(self) -> ProbeOutput:
        out = ProbeOutput()
        if self.record_proc is not None and self.script_proc is not None:
            self._stop_perf()
        self.say(out, dt.datetime.now(dt.timezone.utc))
        if self.ctx.results_dir is not None and self.unavailable is None:
            write_parquet(self.ctx.results_dir / files.PROFILE, self.stacks.frame())
        return out

    def _stop_perf(self) -> None:
        assert self.record_proc is not None and self.script_proc is not None
        record, script = self.record_proc, self.script_proc
        with contextlib.suppress(ProcessLookupError):
            record.send_signal(signal.SIGINT)  # perf record writes what it holds, then ends
        for key, proc, wait in (("record", record, 5.0), ("script", script, DRAIN_S)):
            if not _wait_unreaped(proc, wait):
                self.note(f"perf {key} did not end within {wait:.0f} s: stopped, its last "
                          "samples lost")
                proc.kill()
                _wait_unreaped(proc, 5.0)
            self.cpu[key] = _cpu_of_zombie(proc.pid, self.proc_root)
            wait_child(proc, 5.0)
            if key == "record" and self.passer is not None:
                self.passer.join(timeout=5.0)  # record's end is the stream's: script's too
        if self.reader is not None:
            self.reader.join(timeout=5.0)
            if self.reader.is_alive():  # what it has counted so far is written
                self.note("the profile's reading thread had not finished 5 s after perf "
                          "ended: its last samples are not in profile.parquet")
        if record.returncode not in (0, -signal.SIGINT) and self.ended is None:
            self.note(f"perf record failed: {self._stderr(0)}")
        if script.returncode not in (0, None) and not self.stacks.seen:
            self.note(f"perf script failed: {self._stderr(1)}")
        for handle in self.errors:
            handle.close()

    def _stderr(self, which: int) -> str:
        handle = self.errors[which]
        handle.seek(0)
        lines = [line.strip() for line in handle.read().decode(errors="replace").splitlines()
                 if line.strip()]
        return lines[-1] if lines else "(nothing on stderr)"

    def note(self, reason: str) -> None:
        if reason not in self.said:
            self.said.add(reason)
            self.events.append(("host", reason))

    def say(self, out: ProbeOutput, now: dt.datetime) -> None:
        for node, reason in self.events:
            out.events.append(Event(now, "probe-unreadable", node, attrs={
                "probe": self.name, "file": "perf", "reason": reason}))
        self.events.clear()

    # --- what the run keeps -------------------------------------------------------------

    def closing_line(self) -> str | None:
        """What perf could not name and why, once per run, for the run's status lines."""
        if self.unavailable is not None:
            return None
        record = self.record() or {}
        return f"os.profile: {record.get('unresolved')}"

    def tool_cpu_s(self) -> float:
        # perf record, perf script, and the filtering and reading threads
        return sum(self.cpu.values())

    def record(self) -> dict[str, Any] | None:
        if self.unavailable is not None:
            return {"unavailable": self.unavailable}
        with self.stacks.lock:
            by_kind = {f"{node} {kind}": n for (node, kind), n in
                       sorted(self.stacks.by_kind.items())}
            resolution = self.stacks.resolution.record()
            resolution["why_unnamed"] = {
                Path(dso).name or dso: why_unnamed(dso)
                for dso, _ in self.stacks.resolution.unknown_frames.most_common(8)}
        return {
            "hz": self.hz,
            "call_graph": "dwarf",
            "samples_seen": self.stacks.seen,
            "samples_by_kind": by_kind,
            "unplaced_samples": self.attribution.gone,
            # perf record's events passed to perf script, and those of other processes
            # dropped before it (maps and samples)
            "events_passed": self.filter.passed,
            "events_dropped": self.filter.dropped,
            "resolution": resolution,
            "unresolved": unresolved_line(resolution),
            "perf_cpu_s": {key: round(value, 3) for key, value in self.cpu.items()},
            **({"problems": sorted(self.said)} if self.said else {}),
        }


def unresolved_line(resolution: dict[str, Any]) -> str:
    """What perf could not name, and why, in one line (the manifest's `unresolved`)."""
    if not resolution.get("samples"):
        return "no samples of the profiled processes"
    why = resolution.get("why_unnamed") or {}
    files_ = ", ".join(f"{name} {pct}% of its frames" + (f": {why[name]}" if name in why else "")
                       for name, pct in (resolution.get("unresolved_by_file") or {}).items())
    return (f"{resolution['unresolved_frames_pct']}% of frames unnamed"
            + (f" ({files_})" if files_ else "")
            + f"; {resolution['broken_chains_pct']}% of chains end in an unnamed frame (the "
            "8 KB stack copy ends before the first frame, or code without unwind tables)")


def why_unnamed(dso: str) -> str:
    """Why perf could not name addresses of one file, from its ELF section headers: a
    stripped file has no .symtab (only its exported functions are named), a file with one
    has code between its functions' symbols; no file: an address in no mapping."""
    if dso == "[unknown]":
        return "addresses in no mapping (an unwinder's guess past the copied stack)"
    sections = elf_sections(Path(dso))
    if sections is None:
        return "not an ELF file pglab can read here (gone, or in another mount namespace)"
    if ".symtab" not in sections:
        return "stripped (no .symtab: only its exported functions have names)"
    if ".eh_frame" not in sections and ".debug_frame" not in sections:
        return "no unwind tables (.eh_frame)"
    return "has a symbol table: addresses outside its functions' symbols (PLT, assembly)"


def elf_sections(path: Path) -> set[str] | None:
    """The names of an ELF file's sections (64-bit, little-endian), None if unreadable."""
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            shoff = int.from_bytes(head[40:48], "little")
            entsize, count, names_at = (int.from_bytes(head[i:i + 2], "little")
                                        for i in (58, 60, 62))
            handle.seek(shoff)
            table = handle.read(entsize * count)
            if entsize < 64 or len(table) < entsize * count or names_at >= count:
                return None
            strings_entry = table[names_at * entsize:(names_at + 1) * entsize]
            offset = int.from_bytes(strings_entry[24:32], "little")
            size = int.from_bytes(strings_entry[32:40], "little")
            handle.seek(offset)
            strings = handle.read(min(size, 1 << 20))
    except OSError:
        return None
    found = set()
    for index in range(count):
        start = int.from_bytes(table[index * entsize:index * entsize + 4], "little")
        end = strings.find(b"\0", start)
        if 0 <= start < len(strings) and end >= 0:
            found.add(strings[start:end].decode(errors="replace"))
    return found


def _wait_unreaped(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until the child has ended without reaping it, so its CPU can still be read."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG):
                return True
        except ChildProcessError:  # reaped already (by Popen.poll)
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)

