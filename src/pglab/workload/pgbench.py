"""Driving pgbench: initialisation, the command line for a workload, a run with progress.

pglab asks pgbench for three things and never for options that conflict: the summary
(stdout), per-second progress with epoch timestamps (stderr, feeds the live bar and the
exact total TPS), and the per-transaction log (latency percentiles per second and job).
Aggregated logs are not used, so their constraints (-T a multiple of the interval, no
--sampling-rate) never reach the user.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from pglab.durability.ledger import LEDGER_SCRIPTS
from pglab.errors import BadInput
from pglab.lab.binaries import PgBinaries
from pglab.lab.pgbench_init import pgbench_env
from pglab.processes import run_pumping
from pglab.scenario import Workload
from pglab.scenario.model import PGLAB_SCRIPTS
from pglab.workload.pgbench_output import (
    ProgressLine,
    parse_progress_line,
)
from pglab.workload.txlog import TxLogSpec

TXLOG_PREFIX = "txlog"
SPOOL_PARENT = Path("/dev/shm")
EXTRA_SECONDS = 2
# pgbench keeps running past -T until in-flight transactions finish; a stuck commit (a
# paused synchronous standby) could hold it forever, so pglab waits this much longer.
FINISH_GRACE_S = 60.0


def txlog_spool_dir() -> Path | None:
    """A private dir in memory (tmpfs) for pgbench's transaction logs during the load.

    Appending them on the disk under test would entangle them with PostgreSQL's WAL
    fsyncs (ext4's ordered mode flushes other files' new blocks at each journal commit),
    which measurably lowers TPS; in memory they cost nothing. None where there is none.
    The spools of pglab processes that died (kill -9) are removed first: memory is scarce.
    """
    if not (SPOOL_PARENT.is_dir() and os.access(SPOOL_PARENT, os.W_OK)):
        return None
    reap_stale_spools()
    spool = Path(tempfile.mkdtemp(prefix="pglab-txlog-", dir=SPOOL_PARENT))
    (spool / "owner.pid").write_text(str(os.getpid()))  # for the reaper, after a kill -9
    return spool


def reap_stale_spools() -> list[Path]:
    """Remove spool dirs whose pglab process is gone."""
    reaped = []
    for spool in SPOOL_PARENT.glob("pglab-txlog-*") if SPOOL_PARENT.is_dir() else []:
        try:
            pid = int((spool / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        if not psutil.pid_exists(pid):
            shutil.rmtree(spool, ignore_errors=True)
            reaped.append(spool)
    return reaped


@dataclass(frozen=True)
class PgbenchCommand:
    argv: list[str]
    txlog_spec: TxLogSpec
    total_s: int  # warmup + duration + EXTRA_SECONDS: one pgbench process for it all
    jobs: int
    txlog_dir: Path  # where pgbench writes its transaction logs (moved to raw/ after)
    # Script numbers (as in the transaction log) of the ledger scripts, when used.
    ledger_scripts: tuple[int, ...] = ()
    segment: int = 1  # the load's nth pgbench process (after a crash, the load restarts)

    @property
    def txlog_prefix(self) -> str:
        return segment_prefix(self.segment)

    def continued(self, seconds: int) -> PgbenchCommand:
        """The same load for `seconds` more, as the next segment (after a crash)."""
        segment = self.segment + 1
        argv = list(self.argv)
        argv[argv.index("-T") + 1] = str(seconds)
        for i, arg in enumerate(argv):
            if arg.startswith("--log-prefix="):
                argv[i] = f"--log-prefix={self.txlog_dir / segment_prefix(segment)}"
            if arg == f"segment={self.segment}" and argv[i - 1] == "-D":
                argv[i] = f"segment={segment}"
        if "-n" not in argv:  # pgbench's own vacuum would truncate pgbench_history
            argv.insert(1, "-n")
        return dataclasses.replace(self, argv=argv, total_s=seconds, segment=segment)


def segment_prefix(segment: int) -> str:
    return TXLOG_PREFIX if segment == 1 else f"{TXLOG_PREFIX}-{segment}"


def build_command(bins: PgBinaries, workload: Workload, clients: int, raw_dir: Path,
                  scripts_base: Path, txlog_dir: Path | None = None,
                  ledger: bool = False) -> PgbenchCommand:
    jobs = min(workload.jobs, clients)  # pgbench refuses more threads than clients
    # Two more seconds than asked: only whole seconds are measured, the load starts
    # mid-second, and pgbench's -T clock starts before its clients have connected; the
    # measured window is then cut to exactly `duration` whole seconds after the warmup.
    total = int(workload.warmup + workload.duration) + EXTRA_SECONDS
    argv = [
        str(bins.tool("pgbench")),
        "-c", str(clients), "-j", str(jobs), "-T", str(total),
        "-M", workload.protocol,
        "-P", "1", "--progress-timestamp",
        "-l", f"--log-prefix={(txlog_dir or raw_dir) / TXLOG_PREFIX}",
    ]
    ledger_scripts: list[int] = []
    for script_no, (name, weight) in enumerate(workload.expanded_mix()):
        if ledger and name in LEDGER_SCRIPTS:
            ledger_file = raw_dir / f"ledger-{name}.sql"
            ledger_file.write_text(LEDGER_SCRIPTS[name])
            argv += ["-f", f"{ledger_file}@{weight}"]
            ledger_scripts.append(script_no)
        elif name in PGLAB_SCRIPTS:  # a builtin of pglab's, not pgbench's: a script file
            script_file = raw_dir / f"{name}.sql"
            script_file.write_text(PGLAB_SCRIPTS[name])
            argv += ["-f", f"{script_file}@{weight}"]
        else:
            argv += ["-b", f"{name}@{weight}"]
    for path, weight in workload.script_files():
        argv += ["-f", f"{(scripts_base / path).resolve()}@{weight}"]
    if ledger_scripts:
        # pgbench sets :scale from pgbench_branches only when a built-in script runs
        argv += ["-D", f"scale={workload.scale}", "-D", "seq=0", "-D", "segment=1"]
    if workload.rate > 0:
        argv += ["-R", f"{workload.rate:g}"]
    if workload.latency_limit > 0:
        argv += ["-L", f"{workload.latency_limit * 1000:g}"]
    if workload.per_statement:
        argv.append("-r")
    if workload.reconnect:
        argv.append("-C")
    if workload.max_tries != 1:
        if bins.major < 15:
            raise BadInput(f"workload.max_tries needs pgbench 15 or newer (found {bins.version})")
        argv.append(f"--max-tries={workload.max_tries}")
    if workload.log_sampling < 1:
        argv.append(f"--sampling-rate={workload.log_sampling:g}")
    spec = TxLogSpec(
        has_lag=workload.rate > 0,
        has_retries=workload.max_tries != 1,
        sampling_rate=workload.log_sampling,
    )
    return PgbenchCommand(argv, spec, total, jobs, txlog_dir or raw_dir, tuple(ledger_scripts))


@dataclass(frozen=True)
class PgbenchRun:
    returncode: int
    stdout: str
    stderr_tail: list[str]
    progress: list[ProgressLine]
    started_at: float  # epoch seconds, just before the process started
    ended_at: float
    timed_out: bool


def collect_txlogs(cmd: PgbenchCommand, raw_dir: Path) -> None:
    """Move the transaction logs from their spool dir into raw/ (no-op if already there)."""
    if cmd.txlog_dir == raw_dir or not cmd.txlog_dir.exists():
        return
    for path in cmd.txlog_dir.glob(f"{TXLOG_PREFIX}*"):
        shutil.move(str(path), raw_dir / path.name)
    shutil.rmtree(cmd.txlog_dir, ignore_errors=True)


def txlog_files(raw_dir: Path, prefix: str = TXLOG_PREFIX) -> dict[int, Path]:
    """Job index -> per-transaction log: PREFIX.<pid> is job 0, PREFIX.<pid>.N is job N."""
    files: dict[int, Path] = {}
    for path in raw_dir.glob(f"{prefix}.*"):
        parts = path.name.split(".")
        if len(parts) == 2 and parts[1].isdigit():
            files[0] = path
        elif len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            files[int(parts[2])] = path
    return dict(sorted(files.items()))



def run(
    cmd: PgbenchCommand,
    conn_env: dict[str, str],
    raw_dir: Path,
    on_progress: Callable[[ProgressLine], None] | None = None,
    on_started: Callable[[int], None] | None = None,
    cgroup_procs: list[Path] | None = None,
    netns: str | None = None,
) -> PgbenchRun:
    """Run pgbench to completion, streaming its progress lines to `on_progress`."""
    # The first segment's files keep their names; a restarted load's get its number.
    stem = "pgbench" if cmd.segment == 1 else f"pgbench-{cmd.segment}"
    stdout_path = raw_dir / f"{stem}.stdout"
    stderr_path = raw_dir / f"{stem}.stderr"
    (raw_dir / f"{stem}.argv").write_text(" ".join(cmd.argv) + "\n")
    progress: list[ProgressLine] = []
    tail: list[str] = []
    started = time.time()

    def on_line(line: str, _at: float) -> None:
        # stderr carries the progress lines; raw/ keeps it all as well
        parsed = parse_progress_line(line)
        if parsed is not None:
            progress.append(parsed)
            if on_progress is not None:
                on_progress(parsed)
        else:
            tail.append(line.rstrip("\n"))
            del tail[:-20]

    with open(stdout_path, "wb") as out:
        returncode, timed_out = run_pumping(
            cmd.argv, cwd=raw_dir, env=pgbench_env(conn_env),
            limit_s=cmd.total_s + FINISH_GRACE_S, copy_to=stderr_path, on_line=on_line,
            name="pgbench-stderr", stdout=out, on_started=on_started,
            cgroup_procs=cgroup_procs, netns=netns)
    return PgbenchRun(
        returncode=returncode,
        stdout=stdout_path.read_text(errors="replace"),
        stderr_tail=tail,
        progress=progress,
        started_at=started,
        ended_at=time.time(),
        timed_out=timed_out,
    )
