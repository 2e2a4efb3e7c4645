"""How regular is the 10 Hz wait sampler under load? Lateness and achieved interval.

Runs one `pglab run` under a TPC-B-like load (both cores busy) and reads what the run
recorded about its own sampling: how late each wait sample was against its schedule, and
the achieved interval between samples (target: p99 lateness under 10 ms).

    python bench/sampler_accuracy.py [--duration 30] [--hz 10] [--clients 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=30)
    parser.add_argument("--hz", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "sampler.toml"
        scenario.write_text(
            f'name = "sampler"\n[workload]\nscale = 10\nclients = {args.clients}\njobs = 2\n'
            f'duration = "{args.duration}s"\nwarmup = "0s"\n'
            f"[telemetry]\nwait_sampling_hz = {args.hz}\n"
        )
        subprocess.run([sys.executable, "-m", "pglab", "run", str(scenario), "--results",
                        str(Path(tmp) / "r")], check=True, capture_output=True)
        run_dir = next((Path(tmp) / "r" / "sampler").iterdir())
        info = json.loads((run_dir / "manifest.json").read_text())["telemetry"]
        target = 1000 / args.hz
        print(f"{info['wait_samples']} wait samples at {args.hz} Hz (target interval "
              f"{target:.0f} ms) during a {args.duration}s load")
        print(f"achieved interval p50 {info['wait_interval_ms_p50']} ms, "
              f"p99 {info['wait_interval_ms_p99']} ms")
        print(f"lateness vs schedule p50 {info['wait_lateness_ms_p50']} ms, "
              f"p99 {info['wait_lateness_ms_p99']} ms (target p99 < 10 ms)")


if __name__ == "__main__":
    main()
