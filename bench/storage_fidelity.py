"""Does a device limit hold every second? A checkpoint-heavy run on a limited volume.

One `pglab run` on an ext4 volume whose emulated device writes at most LIMIT MB/s, with
a bulk UPDATE and forced checkpoints so the kernel flusher, the checkpointer and the
backends all write at once. The per-second write rate of the volume's device (os.disk,
from /proc/diskstats) is set against the limit. For reference, the same load runs with
the limit as a cgroup envelope on the host's directory (on cgroup v1 the flusher's
writeback escapes it), and its disk's per-second rates are printed beside.

    python bench/storage_fidelity.py [--limit 10] [--duration 40]

Target: the device's p99 within 5% of the limit and its maximum within 10%. Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

SCENARIO = '''name = "fidelity"
[server.settings]
shared_buffers = "256MB"
max_wal_size = "256MB"
checkpoint_completion_target = 0.1
[workload]
scale = 10
clients = 8
jobs = 2
duration = "{duration}s"
warmup = "2s"
[[faults]]
at = "5s"
action = "bulk-update"
args = {{ rows = 300000 }}
[[faults]]
at = "{half}s"
action = "checkpoint"
'''


def rates(folder: Path, device: str | None) -> list[float]:
    series = pl.read_parquet(folder / "timeseries.parquet").filter(
        (pl.col("source") == "os.disk") & (pl.col("metric") == "write_mbps")
        & (pl.col("node") == "primary"))
    if device is None:  # the busiest device the node's data is on
        totals = series.group_by("label").agg(pl.col("value").sum()).sort("value")
        device = str(totals["label"][-1])
    return series.filter(pl.col("label") == device).sort("t")["value"].to_list()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def one(tmp: Path, name: str, extra: list[str]) -> tuple[list[float], dict[str, Any]]:
    os.sync()
    results = tmp / name
    subprocess.run([sys.executable, "-m", "pglab", "run", str(tmp / "fidelity.toml"),
                    "--results", str(results), *extra], check=True, capture_output=True,
                   text=True)
    folder = next(results.glob("*/*/manifest.json")).parent
    manifest = json.loads((folder / "manifest.json").read_text())
    volumes = manifest["nodes"]["primary"].get("storage") or []
    device = volumes[0]["device"]["name"] if volumes else None
    return rates(folder, device), manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=10)
    parser.add_argument("--duration", type=int, default=40)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("storage volumes need root")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "fidelity.toml").write_text(SCENARIO.format(duration=args.duration,
                                                          half=args.duration // 2))
        device, _ = one(tmp, "device", ["--set", "storage.filesystem=ext4", "--set",
                                        "storage.size=2GB", "--set",
                                        f"storage.device.write_mbps={args.limit}"])
        cgroup, manifest = one(tmp, "cgroup", ["--set",
                                               f"envelope.disk.write_mbps={args.limit}",
                                               "--set", "envelope.disk_scope=own-io"])
    throttling = (manifest["nodes"]["primary"].get("envelope") or {}).get("disk_throttling")
    print(f"limit {args.limit:g} MB/s, {args.duration} s measured")
    for label, values in (("volume device", device), (f"cgroup ({throttling})", cgroup)):
        busy = [v for v in values if v > 0.5]
        print(f"{label:>28}: {len(values)} s, median {percentile(values, 0.5):.2f}, "
              f"p99 {percentile(values, 0.99):.2f} ({percentile(values, 0.99) / args.limit:.3f}"
              f" x limit), max {max(values):.2f} ({max(values) / args.limit:.3f} x limit), "
              f"seconds writing {len(busy)}")
    print("volume device per second: " + " ".join(f"{v:.1f}" for v in device))
    print("cgroup disk per second:   " + " ".join(f"{v:.1f}" for v in cgroup))


if __name__ == "__main__":
    main()
