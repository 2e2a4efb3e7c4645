"""Does pglab slow the load down? Plain pgbench vs `pglab run`, interleaved, one server.

One throwaway server and dataset serve both sides: plain `pgbench -c -j -T` against it,
and `pglab run` of the same workload pointed at it (target = "dsn", so pglab adds only
what it adds to every run: progress reports, per-transaction logs, -r, its parsing).
Pairs alternate which side goes first, to cancel drift on a shared, noisy machine.

    python bench/overhead_run.py [--pairs 5] [--duration 15] [--clients 8] [--scale 10]
    python bench/overhead_run.py --sides plain,on,off,on@/tmp/before/src --pairs 12

Prints each pair and the median ratio of pglab TPS to plain pgbench TPS (target ≥ 0.99).
`--telemetry off` (default) measures what pglab's load driver adds (progress reports,
per-transaction logs, -r); `--telemetry on` adds the probes as well. `--sides` runs more
than two sides in each round, rotating their order round by round: `plain`, `on` and
`off` (pglab with telemetry on or off), and `on@SRC` or `off@SRC`, pglab run from another
source tree (another version's src/, to compare two versions side by side in one run).
Both TPS figures are pgbench's own "tps = ..." line, so they are defined alike; the
machine's load average is printed with each round, and the observer's cost as each
telemetry-on run's manifest recorded it.
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
              scale: int, telemetry: bool, src: str | None = None) -> tuple[float, float | None]:
    """pglab's TPS, and the observer's cost in % of the machine as its manifest says."""
    scenario = results / "overhead.toml"
    scenario.write_text(
        f'name = "overhead"\n[server]\ntarget = "dsn"\ndsn = "{dsn}"\nallow_writes = true\n'
        f"[workload]\nscale = {scale}\nclients = {clients}\njobs = {jobs}\n"
        f'duration = "{duration}s"\nwarmup = "0s"\n'
        f"[telemetry]\nenabled = {'true' if telemetry else 'false'}\n"
    )
    env = {**os.environ, "PYTHONPATH": src} if src else None
    subprocess.run([sys.executable, "-m", "pglab", "run", str(scenario), "--results",
                    str(results)], check=True, capture_output=True, text=True, env=env)
    newest = sorted((results / "overhead").iterdir())[-1]
    manifest = json.loads((newest / "manifest.json").read_text())
    cost = (manifest.get("telemetry") or {}).get("observer_cpu_pct")
    return float(manifest["results"]["pgbench"]["tps"]), cost


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
    parser.add_argument("--sides", help="comma-separated sides of each round, beside "
                        "plain: on, off, on@SRC, off@SRC (default: plain and --telemetry)")
    args = parser.parse_args()
    sides = (args.sides or f"plain,{args.telemetry}").split(",")
    for side in sides:
        if side != "plain" and side.split("@", 1)[0] not in ("on", "off"):
            parser.error(f"--sides {side}: expected plain, on, off, on@SRC or off@SRC")
    if "plain" not in sides:
        parser.error("--sides: the ratios are to plain pgbench: name plain among them")

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
        ratios: dict[str, list[float]] = {side: [] for side in sides if side != "plain"}
        costs: dict[str, list[float]] = {side: [] for side in ratios}
        print(f"PostgreSQL {lab.bins.version}, scale {args.scale}, {args.clients} clients, "
              f"{args.jobs} jobs, {args.duration}s per side, {args.pairs} rounds of "
              f"{', '.join(sides)}", flush=True)
        for pair in range(args.pairs):
            shift = pair % len(sides)  # each side goes first as often as the others
            order = sides[shift:] + sides[:shift]
            tps: dict[str, float] = {}
            for side in order:
                with lab.connect() as conn:
                    conn.execute("CHECKPOINT")
                if side == "plain":
                    tps[side] = plain_pgbench(lab.bins.bin_dir, env, args.clients, args.jobs,
                                              args.duration)
                    continue
                telemetry, _, src = side.partition("@")
                tps[side], cost = pglab_run(dsn, Path(tmp), args.clients, args.jobs,
                                            args.duration, args.scale, telemetry == "on",
                                            src or None)
                if cost is not None:
                    costs[side].append(cost)
            for side, values in ratios.items():
                values.append(tps[side] / tps["plain"])
            print(f"round {pair + 1} (load average {os.getloadavg()[0]:.1f}; "
                  f"{' then '.join(order)}): "
                  + ", ".join(f"{side} {tps[side]:.1f}" for side in sides) + " tps; ratios "
                  + ", ".join(f"{side} {ratios[side][-1]:.3f}" for side in ratios), flush=True)
        for side, values in ratios.items():
            said = (f"; observer cost {statistics.median(costs[side]):.2f}% of the machine "
                    "(manifest, median)" if costs[side] else "")
            print(f"{side}: median ratio pglab/pgbench TPS {statistics.median(values):.3f} "
                  f"(min {min(values):.3f}, max {max(values):.3f}; target >= 0.99){said}")

if __name__ == "__main__":
    main()
