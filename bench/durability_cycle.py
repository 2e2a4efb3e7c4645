"""How long one cut-recover-verify cycle takes, and what each cache mode loses.

One `pglab run` per cache mode (honest, volatile, volatile-ignores-flush) on an XFS volume
of pglab's emulated device at scale SCALE, with one power loss under load. Printed per
mode: the cycle's parts (the cut until the node is back: mount and recovery; the
integrity verdict: pg_amcheck and the ledger) and the acknowledged commits lost.

    python bench/durability_cycle.py [--scale 10] [--modes honest,volatile-ignores-flush]

Target (issue 13): a cycle under 15 s at scale 10, so 20 cuts take under 5 minutes.
Needs root.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pglab.results.manifest import read_manifest

SCENARIO = '''name = "cycle"
[storage]
filesystem = "xfs"
size = "1GB"
device = {{ cache = "{mode}" }}
[workload]
scale = {scale}
clients = 4
jobs = 2
duration = "{duration}s"
warmup = "1s"
[[faults]]
at = "5s"
action = "power-loss"
'''


def one(mode: str, scale: int, work: Path) -> dict[str, Any]:
    scenario = work / f"{mode}.toml"
    # long enough that the load restarts after the verdict: the whole cycle is measured
    scenario.write_text(SCENARIO.format(mode=mode, scale=scale, duration=40))
    results = work / f"r-{mode}"
    subprocess.run([sys.executable, "-m", "pglab", "run", str(scenario), "--results",
                    str(results)], check=True, capture_output=True, text=True)
    (run,) = [p for p in (results / "cycle").iterdir() if p.is_dir()]
    record = read_manifest(run).durability
    assert record is not None, f"{run}: no durability record"
    (cut,) = record["cuts"]
    return {"mode": mode, "downtime_s": cut.get("downtime_s"), "mount_s": cut.get("mount_s"),
            "recovery_s": cut.get("recovery_s"), "verify_s": cut.get("elapsed_s"),
            "amcheck_s": cut.get("amcheck", {}).get("elapsed_s"),
            "cycle_s": round(float(cut.get("downtime_s", 0)) + float(cut["elapsed_s"]), 2),
            "device_dropped_bytes": cut.get("lost_bytes"),
            "acknowledged": cut["commits"].get("acknowledged"),
            "lost": cut["commits"].get("lost"), "clean": cut["amcheck"].get("clean")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=10)
    parser.add_argument("--modes", default="honest,volatile,volatile-ignores-flush")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            print(json.dumps(one(mode, args.scale, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
