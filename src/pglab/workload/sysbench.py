"""Driving sysbench: what it cannot do in a lab (yet), where it is, its command lines.

sysbench is the second workload driver (`workload.driver = "sysbench"`). pglab runs
`sysbench TEST prepare` into the lab's database (once per template, lab/template.py),
then one `sysbench TEST run` for warmup + duration with a report every second; its stdout
is the whole record (workload/sysbench_output.py reads it): sysbench writes no
per-transaction log.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pglab.errors import BadInput, EnvironmentProblem, PglabError
from pglab.lab.template import DataInit
from pglab.processes import run_pumping
from pglab.scenario import Scenario, Workload
from pglab.scenario.fault_kinds import CUT_ACTIONS
from pglab.scenario.sysbench_tests import PGLAB_TESTS, SYSBENCH_TESTS
from pglab.system_parts import PARTS
from pglab.workload.sysbench_output import IntervalLine, parse_interval_line

# pglab's own Lua tests (sysbench_tests.PGLAB_TESTS), shipped in the package.
LUA_DIR = Path(__file__).parent / "sysbench_lua"
# A load whose every event hits an error sysbench ignores (a deadlock, a unique violation)
# never ends: sysbench re-runs the event without looking at --time. pglab stops it this
# long after its time is up.
FINISH_GRACE_S = 30.0
# One second more than asked: sysbench prints whole intervals only, so the last measured
# second is there even when the clock ends a hair early.
EXTRA_SECONDS = 1


def find_sysbench() -> Path:
    """The sysbench binary (PGLAB_SYSBENCH, else PATH); EnvironmentProblem if missing."""
    return PARTS["sysbench"].require("workload.driver = 'sysbench'")


def sysbench_version(binary: Path) -> str:
    """`sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)` -> "1.0.20"."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                          timeout=30)
    words = done.stdout.split()
    if done.returncode != 0 or len(words) < 2:
        raise EnvironmentProblem(f"{binary} --version failed: "
                                 f"{(done.stderr or done.stdout).strip()[:200]}")
    return words[1]



def check_scenario(scenario: Scenario, where: str) -> None:
    """Refuse, before anything starts, what a sysbench workload cannot do in this slice."""
    workload = scenario.workload
    if workload.driver != "sysbench":
        return
    # A cut (crash, power loss) restarts pgbench after it and counts lost commits through
    # pgbench's transaction log: sysbench has neither the log nor a restart.
    for index, fault in enumerate(scenario.faults):
        if fault.action in CUT_ACTIONS:
            raise BadInput(f"{where}: faults[{index}]: '{fault.action}' cannot be used with "
                           "workload.driver = 'sysbench' yet: a cut ends every sysbench "
                           "thread for good (it does not reconnect), and acknowledged commits "
                           "are counted from pgbench's transaction log, which sysbench lacks")
    scenario.require_local(where, "workload.driver = 'sysbench'",
                           "pglab prepares sysbench's tables only in servers it starts")
    if workload.on != "primary":
        raise BadInput(f"{where}: workload.on = '{workload.on}' cannot be used with "
                       "workload.driver = 'sysbench' yet: sysbench connects to one host")


def script_path(workload: Workload, scripts_base: Path) -> Path | None:
    """The Lua script of a test that is not sysbench's own (pglab's, or the user's)."""
    if workload.test in SYSBENCH_TESTS:
        return None
    if workload.test in PGLAB_TESTS:
        return LUA_DIR / PGLAB_TESTS[workload.test]
    return (scripts_base / workload.test).resolve()


def test_argument(workload: Workload, scripts_base: Path) -> str:
    """What sysbench is given as its test: a bundled name, or the Lua script's full path."""
    script = script_path(workload, scripts_base)
    return workload.test if script is None else str(script)


def connection_options(conn_env: dict[str, str]) -> list[str]:
    """--pgsql-* from the lab's libpq environment: sysbench passes its own defaults
    (localhost, sbtest) to libpq, so the environment alone would not reach the lab."""
    options = ["--db-driver=pgsql", f"--pgsql-host={conn_env['PGHOST']}",
               f"--pgsql-port={conn_env['PGPORT']}", f"--pgsql-user={conn_env['PGUSER']}",
               f"--pgsql-db={conn_env['PGDATABASE']}"]
    return options  # a password stays in the environment, where libpq reads it


def option_value(value: bool | int | float | str) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def data_options(workload: Workload) -> list[str]:
    """The options that decide what `prepare` makes (part of the template's key)."""
    return [f"--tables={workload.tables}", f"--table-size={workload.table_size}",
            *(f"--{name}={option_value(value)}" for name, value in
              sorted(workload.options.items()))]


@dataclass(frozen=True)
class SysbenchCommand:
    argv: list[str]  # without the connection options (they name the lab's socket)
    total_s: int  # warmup + duration + EXTRA_SECONDS: one sysbench process for it all
    threads: int
    version: str


def build_command(binary: Path, version: str, workload: Workload, threads: int,
                  scripts_base: Path) -> SysbenchCommand:
    total = int(workload.warmup + workload.duration) + EXTRA_SECONDS
    argv = [str(binary), test_argument(workload, scripts_base), *data_options(workload),
            f"--threads={threads}", f"--time={total}", "--report-interval=1",
            f"--percentile={workload.percentile}", f"--rate={int(workload.rate)}",
            "--histogram=off"]
    if workload.path == "pooler" and not {"db-ps-mode", "db_ps_mode"} & set(workload.options):
        # Server-side prepared statements do not survive PgBouncer's transaction mode (the
        # next transaction may get another server connection): sysbench then sends each
        # statement whole, as pgbench's simple protocol does through the pooler.
        argv.append("--db-ps-mode=disable")
    return SysbenchCommand(argv, total, threads, version)


def manifest_record(cmd: SysbenchCommand, workload: Workload,
                    conn_env: dict[str, str]) -> dict[str, Any]:
    """manifest.workload of a sysbench run: what ran, and what its data can say."""
    return {
        "driver": "sysbench",
        "argv": [*cmd.argv, *connection_options(conn_env), "run"],
        "version": cmd.version,
        "test": workload.test,
        "threads": cmd.threads,
        "tables": workload.tables,
        "table_size": workload.table_size,
        "percentile": workload.percentile,
        "rate": int(workload.rate),
        "options": {k: option_value(v) for k, v in sorted(workload.options.items())},
        # sysbench writes no per-transaction log: the client series and the measured
        # statistics come from its per-second lines (a percentile per second, no average)
        "per_transaction_log": False,
    }


def sysbench_env(conn_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(conn_env)
    env["LC_ALL"] = "C"  # the decimal separators as parsed
    return env


def prepare(binary: Path, workload: Workload, scripts_base: Path,
            conn_env: dict[str, str]) -> dict[str, Any]:
    """`sysbench TEST prepare` into the database of `conn_env`: what the template's
    meta.json keeps of it (time taken, the last lines it printed)."""
    argv = [str(binary), test_argument(workload, scripts_base), *data_options(workload),
            *connection_options(conn_env), "prepare"]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=sysbench_env(conn_env))
    lines = (done.stdout + done.stderr).strip().splitlines() or ["(no output)"]
    if done.returncode != 0 and "does not implement the 'prepare' command" in done.stderr:
        # a Lua script that makes its own tables, or needs none: nothing to prepare
        return {"total_s": 0.0, "prepare": "not implemented by the test"}
    if done.returncode != 0:
        fatal = next((line for line in lines if line.startswith("FATAL:")), lines[-1])
        raise PglabError(f"sysbench {workload.test} prepare failed: {fatal}")
    return {"total_s": round(time.monotonic() - started, 3), "output": lines[-3:]}


def data_ident(version: str, workload: Workload, scripts_base: Path) -> dict[str, Any]:
    """What decides the prepared data, for the template's key: sysbench's version, the
    test (a Lua script by name and content), tables, table_size and every option (an
    option that only the run reads makes a template of its own: harmless, and no list of
    which options `prepare` reads has to be kept)."""
    test: Any = workload.test
    script = script_path(workload, scripts_base)
    if script is not None:
        test = {"script": script.name,
                "sha256": hashlib.sha256(script.read_bytes()).hexdigest()}
    return {"tool": "sysbench", "version": version, "test": test, "tables": workload.tables,
            "table_size": workload.table_size,
            "options": {k: option_value(v) for k, v in sorted(workload.options.items())}}


@dataclass(frozen=True)
class Sysbench:
    """The binary a run uses, its version, and how it prepares a template's data."""

    binary: Path
    version: str
    data_init: DataInit


def for_workload(workload: Workload, scripts_base: Path) -> Sysbench:
    binary = find_sysbench()
    version = sysbench_version(binary)
    data = DataInit(
        ident=data_ident(version, workload, scripts_base),
        status=f"sysbench {workload.test} prepare ({workload.tables} x "
               f"{workload.table_size} rows)",
        fill=lambda env: prepare(binary, workload, scripts_base, env))
    return Sysbench(binary, version, data)


@dataclass(frozen=True)
class SysbenchRun:
    returncode: int
    stdout: str
    started_at: float  # epoch seconds, just before the process started
    threads_started_at: float | None  # when sysbench printed `Threads started!`
    ended_at: float
    timed_out: bool
    # The first FATAL line, and when it came (seconds after the threads started).
    first_fatal: tuple[str, float] | None = None


def run(cmd: SysbenchCommand, conn_env: dict[str, str], raw_dir: Path,
        on_interval: Callable[[IntervalLine], None] | None = None,
        on_started: Callable[[int], None] | None = None,
        cgroup_procs: list[Path] | None = None, netns: str | None = None) -> SysbenchRun:
    """Run sysbench to completion, streaming its per-second lines to `on_interval`;
    stdout goes to raw/sysbench.stdout as it comes."""
    stdout_path = raw_dir / "sysbench.stdout"
    argv = [*cmd.argv, *connection_options(conn_env), "run"]
    (raw_dir / "sysbench.argv").write_text(" ".join(argv) + "\n")
    threads_started: list[float] = []
    fatal: list[tuple[str, float]] = []
    started = time.time()
    def on_line(line: str, at: float) -> None:
        if line.startswith("Threads started!"):
            threads_started.append(at)
        elif line.startswith("FATAL: ") and not fatal:
            fatal.append((line.removeprefix("FATAL: ").strip(),
                          at - (threads_started[0] if threads_started else started)))
        elif on_interval is not None and (parsed := parse_interval_line(line)):
            on_interval(parsed)

    returncode, timed_out = run_pumping(
        argv, cwd=raw_dir, env=sysbench_env(conn_env), limit_s=cmd.total_s + FINISH_GRACE_S,
        copy_to=stdout_path, on_line=on_line, name="sysbench-stdout", on_started=on_started,
        cgroup_procs=cgroup_procs, netns=netns)
    return SysbenchRun(
        returncode=returncode,
        stdout=stdout_path.read_text(errors="replace") if stdout_path.exists() else "",
        started_at=started, threads_started_at=threads_started[0] if threads_started else None,
        ended_at=time.time(), timed_out=timed_out,
        first_fatal=fatal[0] if fatal else None)


