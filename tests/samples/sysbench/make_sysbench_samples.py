"""Regenerates the sysbench output samples in this directory from REAL sysbench and a
real PostgreSQL (pglab's own lab: the binaries pglab uses, a throw-away server).

    sudo /path/to/venv/bin/python tests/samples/sysbench/make_sysbench_samples.py

Needs sysbench (Debian package `sysbench`) and root or a user that may run servers, as
pglab does. Each sample is sysbench's stdout, LC_ALL=C; README.md says which options
made which file. The server is stopped and removed at the end, also on failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pglab.lab.lab import Lab
from pglab.scenario.model import Scenario, ServerSpec, Workload

HERE = Path(__file__).resolve().parent
LUA = HERE / "lua"


def sysbench(env: dict[str, str], *args: str,
             timeout_s: int = 0) -> subprocess.CompletedProcess[str]:
    # `timeout`: a load whose every event hits an error sysbench ignores never ends
    # (sysbench re-runs the event without looking at --time), so it is killed
    argv = [*(["timeout", str(timeout_s)] if timeout_s else []), "sysbench", *args,
            "--db-driver=pgsql", f"--pgsql-host={env['PGHOST']}",
            f"--pgsql-port={env['PGPORT']}", f"--pgsql-user={env['PGUSER']}",
            f"--pgsql-db={env['PGDATABASE']}"]
    print("==", " ".join(args), file=sys.stderr)
    return subprocess.run(argv, capture_output=True, text=True,
                          env={**os.environ, "LC_ALL": "C"})


def save(name: str, done: subprocess.CompletedProcess[str]) -> None:
    (HERE / name).write_text(done.stdout)
    if done.stderr:
        (HERE / name.replace(".txt", ".stderr.txt")).write_text(done.stderr)
    print(f"   {name}: exit {done.returncode}", file=sys.stderr)


def main() -> None:
    scenario = Scenario(name="sysbench-samples", workload=Workload(scale=1),
                        server=ServerSpec(settings={"max_connections": 40,
                                                    "deadlock_timeout": "20ms"}))
    (HERE / "version.txt").write_text(
        subprocess.run(["sysbench", "--version"], capture_output=True, text=True).stdout)
    with Lab(scenario, "make_samples", "sysbench-samples") as lab:
        env = lab.client_env()
        table = ["--tables=2", "--table-size=10000"]
        save("prepare.txt", sysbench(env, "oltp_read_write", *table, "prepare"))
        common = ["--report-interval=1", "--histogram=off"]
        save("run_read_write.txt", sysbench(env, "oltp_read_write", *table, *common,
                                            "--threads=4", "--time=5", "run"))
        save("run_read_only_p99.txt", sysbench(env, "oltp_read_only", *table, *common,
                                               "--threads=2", "--time=3",
                                               "--percentile=99", "run"))
        save("run_point_select_rate.txt", sysbench(env, "oltp_point_select", *table, *common,
                                                   "--threads=4", "--time=4", "--rate=300",
                                                   "run"))
        save("run_write_only_p0.txt", sysbench(env, "oltp_write_only", *table, *common,
                                               "--threads=2", "--time=3", "--percentile=0",
                                               "run"))
        save("run_insert.txt", sysbench(env, "oltp_insert", *table, *common,
                                        "--threads=8", "--time=3",
                                        "--range_selects=off", "run"))
        save("run_deadlock.txt", sysbench(env, str(LUA / "deadlock.lua"), *table, *common,
                                          "--threads=4", "--time=5", "run"))
        save("run_unique_violation.txt", sysbench(env, str(LUA / "unique_violation.lua"),
                                                  *common, "--threads=2", "--time=5", "run",
                                                  timeout_s=8))
        save("run_division_by_zero.txt", sysbench(env, str(LUA / "division_by_zero.lua"),
                                                  *common, "--threads=2", "--time=5", "run"))
        save("cleanup.txt", sysbench(env, "oltp_read_write", *table, "cleanup"))


if __name__ == "__main__":
    main()
