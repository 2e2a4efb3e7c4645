"""What does db.statements cost? 50 distinct statements, probe on vs off, interleaved.

Each side is a complete `pglab run` of the same scenario: 50 pgbench scripts of one
statement each (`SELECT abalance, ... FROM pgbench_accounts WHERE aid = :aid` with 1 to
50 columns: 50 queryids), equal weights, on a scale-1 database. One side runs every
default probe, the other the same with `telemetry.exclude = ["db.statements"]`,
alternating which goes first. Each run's manifest gives the CPU seconds of pglab's reads
of each probe (`probe_cpu_s`), of the whole observer (`observer_cpu_s`) and of the
server backends serving telemetry's sessions (`observer_server_cpu_s`).

    python bench/statements_probe_cost.py [--pairs 3] [--duration 15] [--clients 8]

Prints per pair and as medians: db.statements' own CPU seconds per second (pglab's
side), the observer's (pglab + its server backends) with the probe and without, as a
share of the machine, and the TPS ratio on/off (target at least 0.99). Both sides have
pg_stat_statements preloaded (labs always do): its own cost inside each statement is not
the probe's.
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

STATEMENTS = 50


def run(scenario: Path, results: Path, probe: bool) -> tuple[float, dict[str, Any]]:
    os.sync()
    exclude = "[]" if probe else '["db.statements"]'
    subprocess.run(
        [sys.executable, "-m", "pglab", "run", str(scenario), "--results", str(results),
         "--set", f"telemetry.exclude={exclude}"],
        check=True, capture_output=True, text=True,
    )
    newest = max((results / "stmtcost").iterdir(), key=lambda p: p.stat().st_mtime)
    manifest = json.loads((newest / "manifest.json").read_text())
    events = newest / "events.parquet"
    if probe and events.is_file():
        import polars as pl

        texts = pl.read_parquet(events).filter(pl.col("kind") == "statement-text").height
        print(f"  statements named in the run: {texts}")
    return float(manifest["results"]["measured"]["tps"]), manifest.get("telemetry") or {}


def per_second(telemetry: dict[str, Any], seconds: float) -> float:
    return seconds / float(telemetry["observed_s"])


def observer(telemetry: dict[str, Any]) -> float:
    return per_second(telemetry, float(telemetry["observer_cpu_s"])
                      + float(telemetry.get("observer_server_cpu_s") or 0.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    probe_cost, observer_on, observer_off, ratios = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        names = []
        for width in range(1, STATEMENTS + 1):
            name = f"s{width}.sql"
            columns = ", ".join(["abalance"] * width)
            (Path(tmp) / name).write_text(
                "\\set aid random(1, 100000 * :scale)\n"
                f"SELECT {columns} FROM pgbench_accounts WHERE aid = :aid;\n")
            names.append(f'"{name}"')
        scenario = Path(tmp) / "stmtcost.toml"
        scenario.write_text(
            f'name = "stmtcost"\n[workload]\nscale = 1\nmix = []\n'
            f'scripts = [{", ".join(names)}]\nclients = {args.clients}\n'
            f'jobs = 2\nduration = "{args.duration}s"\nwarmup = "2s"\n')
        results = Path(tmp) / "results"
        print(f"{STATEMENTS} statements, scale 1, {args.clients} clients, {args.duration}s "
              f"measured per side, {cores} cores")
        for pair in range(args.pairs):
            order = [True, False] if pair % 2 == 0 else [False, True]
            sides = {probe: run(scenario, results, probe) for probe in order}
            (tps_on, on), (tps_off, off) = sides[True], sides[False]
            probe_s = per_second(on, float(on["probe_cpu_s"]["db.statements"]))
            probe_cost.append(probe_s)
            observer_on.append(observer(on))
            observer_off.append(observer(off))
            ratios.append(tps_on / tps_off)
            print(f"pair {pair + 1}: db.statements {probe_s:.4f} CPU s/s (pglab's reads); "
                  f"observer {observer_on[-1]:.4f} CPU s/s with it, {observer_off[-1]:.4f} "
                  f"without; TPS {tps_on:.0f} with, {tps_off:.0f} without")
    probe_pct = 100 * statistics.median(probe_cost) / cores
    on_pct = 100 * statistics.median(observer_on) / cores
    off_pct = 100 * statistics.median(observer_off) / cores
    print(f"median: db.statements {probe_pct:.3f}% of the machine (pglab's side); observer "
          f"(pglab + server) {on_pct:.2f}% with it, {off_pct:.2f}% without (+"
          f"{on_pct - off_pct:.2f} points); TPS ratio with/without "
          f"{statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
