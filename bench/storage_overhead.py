"""What the storage stack costs: the same load on the host's directory and on volumes.

Three sides, interleaved (the order rotates each round, so all share the machine's
drift; dirty pages are synced before each): the lab's own directory (`host`), an ext4
volume on a plain loop device (`loop`), and an ext4 volume on pglab's emulated device
with no limit (`emulated`). Each side is a complete `pglab run` of the same scenario.

    python bench/storage_overhead.py [--rounds 5] [--duration 15] [--clients 8] [--scale 10]

Prints every round, the median TPS ratio of each volume side to the host (target >= 0.9
for the emulated device), then the time to make and remove one volume of each
filesystem on each device kind (target: under 3 s for ext4 and XFS, under 10 s for ZFS),
timed on LabStorage directly (median of 3). Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIDES = {
    "host": [],
    "loop": ["--set", "storage.filesystem=ext4", "--set", "storage.size=2GB"],
    "emulated": ["--set", "storage.filesystem=ext4", "--set", "storage.size=2GB",
                 "--set", "storage.device.kind=emulated"],
}


def run(scenario: Path, results: Path, extra: list[str]) -> float:
    os.sync()
    subprocess.run([sys.executable, "-m", "pglab", "run", str(scenario), "--results",
                    str(results), *extra], check=True, capture_output=True, text=True)
    newest = max((results / "overhead").iterdir(), key=lambda p: p.stat().st_mtime)
    manifest = json.loads((newest / "manifest.json").read_text())
    return float(manifest["results"]["measured"]["tps"])


def volume_times(work: Path) -> None:
    from pglab.scenario import load_text
    from pglab.storage.volume import LabStorage

    print("\nmake + remove one volume (median of 3):")
    for fs, size in (("ext4", "2GB"), ("xfs", "2GB"), ("btrfs", "2GB"), ("zfs", "2GB")):
        for kind in ("loop", "emulated"):
            times = []
            for attempt in range(3):
                text = (f'name = "t"\n[storage]\nfilesystem = "{fs}"\nsize = "{size}"\n'
                        f'device = {{ kind = "{kind}" }}\n')
                storage = LabStorage(load_text(text, "bench").scenario,
                                     work / f"lab-{fs}-{kind}-{attempt}", set())
                started = time.monotonic()
                try:
                    storage.make("primary", work / f"lab-{fs}-{kind}-{attempt}" / "primary")
                    storage.apply_limits("primary")
                finally:
                    storage.close()
                times.append(time.monotonic() - started)
            print(f"  {fs:6} {kind:9} {statistics.median(times):5.2f} s  "
                  f"(min {min(times):.2f}, max {max(times):.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--skip-load", action="store_true", help="only time the volumes")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("storage volumes need root")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        if not args.skip_load:
            scenario = Path(tmp) / "overhead.toml"
            scenario.write_text(
                f'name = "overhead"\n[workload]\nscale = {args.scale}\nclients = '
                f'{args.clients}\njobs = 2\nduration = "{args.duration}s"\nwarmup = "2s"\n')
            results = Path(tmp) / "results"
            names = list(SIDES)
            ratios: dict[str, list[float]] = {"loop": [], "emulated": []}
            print(f"scale {args.scale}, {args.clients} clients, {args.duration}s measured "
                  "per side")
            for index in range(args.rounds):
                order = names[index % 3:] + names[:index % 3]
                tps = {side: run(scenario, results, SIDES[side]) for side in order}
                for side, values in ratios.items():
                    values.append(tps[side] / tps["host"])
                print(f"round {index + 1} ({' '.join(order)}): " + ", ".join(
                    f"{side} {tps[side]:,.0f}" for side in names) + " TPS; ratios " + ", ".join(
                    f"{side}/host {ratios[side][-1]:.3f}" for side in ratios))
            for side, values in ratios.items():
                print(f"median TPS ratio {side}/host: {statistics.median(values):.3f} "
                      f"(min {min(values):.3f}, max {max(values):.3f})")
        volume_times(Path(tmp))


if __name__ == "__main__":
    main()
