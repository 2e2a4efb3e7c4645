"""What does on-CPU profiling (os.profile) cost? 8 clients, profile_hz, on vs off, interleaved.

Each side is a complete `pglab run` of the same scenario (8 clients on a scale-1 pgbench
database, a fresh server from the same template): one with `telemetry.include =
["os.profile"]`, one without, alternating which goes first so both share the machine's
drift. Each run's manifest gives the CPU seconds of the probe (`probe_cpu_s["os.profile"]`:
split in
`telemetry["os.profile"].perf_cpu_s`: perf record, the filter that passes only the
profiled processes' events, perf script, the reading thread) and the seconds telemetry ran
(`observed_s`).

    python bench/profile_cost.py [--pairs 3] [--duration 20] [--clients 8] [--hz 49]

Prints, per pair and as medians: os.profile's CPU seconds per second (and as a share of
the machine's cores), the TPS ratio on/off. The targets (issue 32): at most 2% of the
machine at 49 Hz with 8 clients, a median TPS ratio of at least 0.98. Needs root and
Debian's linux-perf.
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

TARGET_PCT = 2.0
TARGET_RATIO = 0.98


def run(scenario: Path, results: Path, profile: bool, hz: int) -> tuple[float, dict[str, Any]]:
    os.sync()
    include = '["os.profile"]' if profile else "[]"
    subprocess.run(
        [sys.executable, "-m", "pglab", "run", str(scenario), "--results", str(results),
         "--set", f"telemetry.include={include}", "--set", f"telemetry.profile_hz={hz}"],
        check=True, capture_output=True, text=True,
    )
    newest = max((results / "profilecost").iterdir(), key=lambda p: p.stat().st_mtime)
    manifest = json.loads((newest / "manifest.json").read_text())
    return float(manifest["results"]["measured"]["tps"]), manifest.get("telemetry") or {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--hz", type=int, default=49)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    cost, ratios = [], []
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "profilecost.toml"
        scenario.write_text(
            f'name = "profilecost"\n[workload]\nscale = 1\nclients = {args.clients}\n'
            f'jobs = 2\nduration = "{args.duration}s"\nwarmup = "2s"\n')
        results = Path(tmp) / "results"
        print(f"scale 1, {args.clients} clients, {args.duration}s measured per side, "
              f"{args.hz} Hz, {cores} cores")
        for pair in range(args.pairs):
            order = [True, False] if pair % 2 == 0 else [False, True]
            sides = {profile: run(scenario, results, profile, args.hz) for profile in order}
            (tps_on, on), (tps_off, _) = sides[True], sides[False]
            record = on.get("os.profile") or {}
            if "unavailable" in record:
                print(f"os.profile did not run: {record['unavailable']}")
                return 3
            per_s = float(on["probe_cpu_s"]["os.profile"]) / float(on["observed_s"])
            cost.append(per_s)
            ratios.append(tps_on / tps_off)
            print(f"pair {pair + 1}: os.profile {per_s:.4f} CPU s/s ({100 * per_s / cores:.2f}% "
                  f"of the machine; {record.get('perf_cpu_s')}); TPS {tps_on:.0f} on, "
                  f"{tps_off:.0f} off")
    pct = 100 * statistics.median(cost) / cores
    ratio = statistics.median(ratios)
    print(f"median os.profile: {statistics.median(cost):.4f} CPU s/s = {pct:.2f}% of the "
          f"machine ({'within' if pct <= TARGET_PCT else 'OVER'} the {TARGET_PCT:.0f}% target)")
    print(f"median TPS ratio on/off: {ratio:.3f} (target at least {TARGET_RATIO})")
    print(json.dumps({"profile_cpu_s_per_s": round(statistics.median(cost), 5),
                      "profile_pct_of_machine": round(pct, 3), "tps_ratio": round(ratio, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
