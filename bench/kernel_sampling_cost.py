"""What does kernel sampling (os.kernel) cost? 10 Hz, 32 backends, on vs off, interleaved.

Each side is a complete `pglab run` of the same scenario (32 clients on a scale-1 pgbench
database, a fresh server from the same template): one with `telemetry.include =
["os.kernel"]`, one without, alternating which goes first so both share the machine's
drift. Each run's manifest gives the CPU seconds of pglab's reads of each probe
(`probe_cpu_s`), of all its sampling loops (`observer_cpu_s`) and the seconds telemetry
ran (`observed_s`).

    python bench/kernel_sampling_cost.py [--pairs 3] [--duration 15] [--clients 32]

Prints, per pair and as medians: os.kernel's CPU seconds per second (and as a share of
the machine's cores), the whole observer's CPU seconds per second on and off, and the
TPS ratio on/off. The budget: the whole observer within about 1% of the machine, or the
probe stays opt-in (docs/TELEMETRY.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BUDGET_PCT = 1.0


def run(scenario: Path, results: Path, kernel: bool) -> tuple[float, dict[str, Any]]:
    os.sync()
    include = '["os.kernel"]' if kernel else "[]"
    subprocess.run(
        [sys.executable, "-m", "pglab", "run", str(scenario), "--results", str(results),
         "--set", f"telemetry.include={include}"],
        check=True, capture_output=True, text=True,
    )
    newest = max((results / "kernelcost").iterdir(), key=lambda p: p.stat().st_mtime)
    manifest = json.loads((newest / "manifest.json").read_text())
    return float(manifest["results"]["measured"]["tps"]), manifest.get("telemetry") or {}


def per_second(telemetry: dict[str, Any], seconds: float) -> float:
    return seconds / float(telemetry["observed_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    kernel_cost, observer_on, observer_off, ratios = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "kernelcost.toml"
        scenario.write_text(
            f'name = "kernelcost"\n[workload]\nscale = 1\nclients = {args.clients}\n'
            f'jobs = 2\nduration = "{args.duration}s"\nwarmup = "2s"\n')
        results = Path(tmp) / "results"
        print(f"scale 1, {args.clients} clients, {args.duration}s measured per side, "
              f"{cores} cores")
        for pair in range(args.pairs):
            order = [True, False] if pair % 2 == 0 else [False, True]
            sides = {kernel: run(scenario, results, kernel) for kernel in order}
            (tps_on, on), (tps_off, off) = sides[True], sides[False]
            kernel_s = per_second(on, float(on["probe_cpu_s"]["os.kernel"]))
            kernel_cost.append(kernel_s)
            observer_on.append(per_second(on, float(on["observer_cpu_s"])))
            observer_off.append(per_second(off, float(off["observer_cpu_s"])))
            ratios.append(tps_on / tps_off)
            print(f"pair {pair + 1}: os.kernel {kernel_s:.4f} CPU s/s "
                  f"({100 * kernel_s / cores:.2f}% of the machine); observer "
                  f"{observer_on[-1]:.4f} CPU s/s on, {observer_off[-1]:.4f} off; "
                  f"TPS {tps_on:.0f} on, {tps_off:.0f} off")
    kernel_pct = 100 * statistics.median(kernel_cost) / cores
    on_pct = 100 * statistics.median(observer_on) / cores
    off_pct = 100 * statistics.median(observer_off) / cores
    print(f"median os.kernel: {statistics.median(kernel_cost):.4f} CPU s/s = "
          f"{kernel_pct:.2f}% of the machine")
    print(f"median observer (pglab's loops): {statistics.median(observer_on):.4f} CPU s/s "
          f"= {on_pct:.2f}% with os.kernel, {statistics.median(observer_off):.4f} = "
          f"{off_pct:.2f}% without (ratio {on_pct / off_pct:.2f}x)")
    print(f"observer budget {BUDGET_PCT:.0f}% of the machine: with os.kernel "
          f"{'within' if on_pct <= BUDGET_PCT else 'OVER'}, so os.kernel is "
          f"{'fit to be on by default' if on_pct <= BUDGET_PCT else 'opt-in'}")
    print(f"median TPS ratio on/off: {statistics.median(ratios):.3f}")
    print(json.dumps({"kernel_cpu_s_per_s": round(statistics.median(kernel_cost), 5),
                      "kernel_pct_of_machine": round(kernel_pct, 3),
                      "observer_on_cpu_s_per_s": round(statistics.median(observer_on), 5),
                      "observer_off_cpu_s_per_s": round(statistics.median(observer_off), 5),
                      "tps_ratio": round(statistics.median(ratios), 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
