"""Does observing slow the load down? Telemetry at defaults vs off, interleaved.

Each side is a complete `pglab run` of the same scenario (fresh server from the same
template), alternating which side goes first, so both sides share the machine's drift.
Dirty pages are written out (sync) before each side, so that one run's leftovers are not
written back during the next one's load.

    python bench/observer_overhead.py [--pairs 5] [--duration 15] [--clients 8] [--scale 10]

Prints each pair and the median TPS ratio on/off (target >= 0.98), and what observing
cost directly, as each run with telemetry recorded it in its manifest: CPU seconds of
pglab's sampling loops and of the server backends answering them, as a share of all the
machine's cores over the time telemetry ran.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def run(scenario: Path, results: Path, telemetry: bool) -> tuple[float, dict[str, Any]]:
    os.sync()
    subprocess.run(
        [sys.executable, "-m", "pglab", "run", str(scenario), "--results", str(results),
         "--set", f"telemetry.enabled={'true' if telemetry else 'false'}"],
        check=True, capture_output=True, text=True,
    )
    newest = max((results / "observer").iterdir(), key=lambda p: p.stat().st_mtime)
    manifest = json.loads((newest / "manifest.json").read_text())
    return float(manifest["results"]["measured"]["tps"]), manifest.get("telemetry") or {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--scale", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "observer.toml"
        scenario.write_text(
            f'name = "observer"\n[workload]\nscale = {args.scale}\nclients = {args.clients}\n'
            f'jobs = 2\nduration = "{args.duration}s"\nwarmup = "2s"\n'
        )
        results = Path(tmp) / "results"
        ratios, costs = [], []
        print(f"scale {args.scale}, {args.clients} clients, {args.duration}s measured per side")
        for pair in range(args.pairs):
            order = [True, False] if pair % 2 == 0 else [False, True]
            tps: dict[bool, float] = {}
            for side in order:
                tps[side], info = run(scenario, results, side)
                if side:
                    costs.append(float(info["observer_cpu_pct"]))
                    print(f"  telemetry: {info.get('samples')} samples, wait sampler p99 "
                          f"lateness {info.get('wait_lateness_ms_p99')} ms, CPU "
                          f"{info['observer_cpu_s']:.2f} s pglab + "
                          f"{info['observer_server_cpu_s']:.2f} s server = "
                          f"{info['observer_cpu_pct']:.2f}% of the machine", flush=True)
            ratio = tps[True] / tps[False]
            ratios.append(ratio)
            print(f"pair {pair + 1}: on {tps[True]:.1f} tps, off {tps[False]:.1f} tps, "
                  f"ratio {ratio:.3f}", flush=True)
        geometric = math.exp(statistics.fmean(math.log(r) for r in ratios))
        print(f"median TPS ratio telemetry on/off: {statistics.median(ratios):.3f} "
              f"(geometric mean {geometric:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}; "
              "target >= 0.98)")
        print(f"observer CPU: median {statistics.median(costs):.2f}% of the machine "
              f"(max {max(costs):.2f}%)")


if __name__ == "__main__":
    main()
