"""Does pglab slow sysbench down? Plain sysbench vs `pglab run` of the same workload.

sysbench runs only against servers pglab starts (pglab prepares its tables into a cached
template), so each side gets its own lab made the same way: the template copied into a
new data dir, the same settings, the server started from pglab's binaries. The plain side
starts that lab from Python (lab.Lab) and runs sysbench by hand with exactly the command
line `pglab run` would use (workload/sysbench.build_command); the other side is `pglab run`
of the scenario, telemetry off (what pglab adds to every sysbench run: reading its
per-second lines, the client series, the analysis after). Pairs alternate which side goes
first, to cancel drift on a shared, noisy machine.

    python bench/sysbench_overhead.py [--pairs 5] [--duration 15] [--threads 4]
                                      [--test oltp_read_write]

Prints each pair and the median ratio of pglab TPS to plain sysbench TPS (target ≥ 0.99).
Both TPS figures are sysbench's own summary line (`transactions: N (X per sec.)`), over
the same --time, so they are defined alike.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pglab.lab.lab import Lab
from pglab.scenario import load
from pglab.workload import sysbench


def scenario_text(test: str, duration: int, threads: int, tables: int,
                  table_size: int) -> str:
    # No checkpoint is due during a side: both start from a fresh copy of the template.
    return (f'name = "sysbench-overhead"\n[server.settings]\nmax_wal_size = "16GB"\n'
            f'checkpoint_timeout = "1h"\n[workload]\ndriver = "sysbench"\n'
            f'test = "{test}"\ntables = {tables}\ntable_size = {table_size}\n'
            f'threads = {threads}\nduration = "{duration}s"\nwarmup = "0s"\n'
            "[telemetry]\nenabled = false\n")


def plain_sysbench(scenario_path: Path) -> float:
    loaded = load(scenario_path)
    workload = loaded.scenario.workload
    tool = sysbench.for_workload(workload, loaded.base_dir)
    with Lab(loaded.scenario, str(scenario_path), "bench-sysbench-overhead",
             data_init=tool.data_init) as lab:
        cmd = sysbench.build_command(tool.binary, tool.version, workload,
                                     workload.threads[0], loaded.base_dir)
        env = lab.client_env()
        argv = [*cmd.argv, *sysbench.connection_options(env), "run"]
        out = subprocess.run(argv, capture_output=True, text=True, check=True,
                             env=sysbench.sysbench_env(env)).stdout
    match = re.search(r"transactions:\s+\d+\s+\(([\d.]+) per sec\.\)", out)
    assert match, out
    return float(match.group(1))


def pglab_run(scenario_path: Path, results: Path) -> float:
    subprocess.run([sys.executable, "-m", "pglab", "run", str(scenario_path), "--results",
                    str(results)], check=True, capture_output=True, text=True)
    newest = sorted(p for p in (results / "sysbench-overhead").iterdir() if p.is_dir())[-1]
    manifest = json.loads((newest / "manifest.json").read_text())
    return float(manifest["results"]["sysbench"]["transactions_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    # oltp_read_only leaves out the commits' WAL flushes: on a machine whose disk other
    # work keeps busy, they are most of the pair-to-pair noise
    parser.add_argument("--test", default="oltp_read_write")
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--tables", type=int, default=2)
    parser.add_argument("--table-size", type=int, default=10000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        scenario_path = Path(tmp) / "sysbench-overhead.toml"
        scenario_path.write_text(scenario_text(args.test, args.duration, args.threads,
                                               args.tables, args.table_size))
        print(f"sysbench {args.test}, {args.tables} x {args.table_size} rows, "
              f"{args.threads} threads, {args.duration}s (+1) per side, {args.pairs} pairs, "
              "pglab telemetry off")
        ratios = []
        for pair in range(args.pairs):
            sides = ["plain", "pglab"] if pair % 2 == 0 else ["pglab", "plain"]
            tps: dict[str, float] = {}
            for side in sides:
                tps[side] = (plain_sysbench(scenario_path) if side == "plain"
                             else pglab_run(scenario_path, Path(tmp) / "results"))
            ratio = tps["pglab"] / tps["plain"]
            ratios.append(ratio)
            print(f"pair {pair + 1} ({' then '.join(sides)}): plain {tps['plain']:.1f} tps, "
                  f"pglab {tps['pglab']:.1f} tps, ratio {ratio:.3f}")
        print(f"median ratio pglab/sysbench TPS: {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}; target >= 0.99)")


if __name__ == "__main__":
    main()
