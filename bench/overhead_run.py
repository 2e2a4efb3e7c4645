"""Does pglab slow the load down? Plain pgbench vs `pglab run`, interleaved, one server.

One throwaway server and dataset serve both sides: plain `pgbench -c -j -T` against it,
and `pglab run` of the same workload pointed at it (target = "dsn", so pglab adds only
what it adds to every run: progress reports, per-transaction logs, -r, its parsing).
Pairs alternate which side goes first, to cancel drift on a shared, noisy machine.

    python bench/overhead_run.py [--pairs 5] [--duration 15] [--clients 8] [--scale 10]

Prints each pair and the median ratio of pglab TPS to plain pgbench TPS (target ≥ 0.99).
`--telemetry off` (default) measures what pglab's load driver adds (progress reports,
per-transaction logs, -r); `--telemetry on` adds the probes as well.
Both TPS figures are pgbench's own "tps = ..." line, so they are defined alike.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pglab.lab.lab import Lab
from pglab.scenario import load_text


def plain_pgbench(bin_dir: Path, env: dict[str, str], clients: int, jobs: int,
                  duration: int) -> float:
    out = subprocess.run(
        [str(bin_dir / "pgbench"), "-c", str(clients), "-j", str(jobs), "-T", str(duration)],
        capture_output=True, text=True, env={**os.environ, **env}, check=True,
    ).stdout
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    assert match, out
    return float(match.group(1))


def pglab_run(dsn: str, results: Path, clients: int, jobs: int, duration: int,
              scale: int, telemetry: bool) -> float:
    scenario = results / "overhead.toml"
    scenario.write_text(
        f'name = "overhead"\n[server]\ntarget = "dsn"\ndsn = "{dsn}"\nallow_writes = true\n'
        f"[workload]\nscale = {scale}\nclients = {clients}\njobs = {jobs}\n"
        f'duration = "{duration}s"\nwarmup = "0s"\n'
        f"[telemetry]\nenabled = {'true' if telemetry else 'false'}\n"
    )
    subprocess.run([sys.executable, "-m", "pglab", "run", str(scenario), "--results",
                    str(results)], check=True, capture_output=True, text=True)
    newest = sorted((results / "overhead").iterdir())[-1]
    manifest = json.loads((newest / "manifest.json").read_text())
    return float(manifest["results"]["pgbench"]["tps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--telemetry", choices=["on", "off"], default="off",
                        help="off measures the load driver alone (the default); on adds the "
                             "probes (bench/observer_overhead.py isolates their cost)")
    args = parser.parse_args()

    # Both sides write to one dataset: a checkpoint landing inside one side would decide
    # the pair. So no checkpoint is due during a side, and each side starts from a fresh one.
    scenario = load_text(f'name = "overhead-server"\n[workload]\nscale = {args.scale}\n'
                         '[server.settings]\nmax_wal_size = "16GB"\n'
                         'checkpoint_timeout = "1h"\n', "bench")
    with tempfile.TemporaryDirectory() as tmp, Lab(scenario.scenario, "bench",
                                                   "bench-overhead") as lab:
        assert lab.primary is not None and lab.bins is not None
        info = lab.primary.conninfo()
        dsn = " ".join(f"{k}={v}" for k, v in info.items())
        env = lab.primary.libpq_env()
        ratios = []
        print(f"PostgreSQL {lab.bins.version}, scale {args.scale}, {args.clients} clients, "
              f"{args.jobs} jobs, {args.duration}s per side, {args.pairs} pairs, "
              f"pglab telemetry {args.telemetry}")
        for pair in range(args.pairs):
            sides = ["plain", "pglab"] if pair % 2 == 0 else ["pglab", "plain"]
            tps: dict[str, float] = {}
            for side in sides:
                with lab.connect() as conn:
                    conn.execute("CHECKPOINT")
                if side == "plain":
                    tps[side] = plain_pgbench(lab.bins.bin_dir, env, args.clients, args.jobs,
                                              args.duration)
                else:
                    tps[side] = pglab_run(dsn, Path(tmp), args.clients, args.jobs,
                                          args.duration, args.scale, args.telemetry == "on")
            ratio = tps["pglab"] / tps["plain"]
            ratios.append(ratio)
            print(f"pair {pair + 1} ({' then '.join(sides)}): plain {tps['plain']:.1f} tps, "
                  f"pglab {tps['pglab']:.1f} tps, ratio {ratio:.3f}")
        print(f"median ratio pglab/pgbench TPS: {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}; target >= 0.99)")


if __name__ == "__main__":
    main()
