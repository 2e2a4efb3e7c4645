#!/usr/bin/env python3
"""Regenerates the run folders under tests/samples/runs/ with real runs on THIS machine.

    python tests/samples/runs/make_runs.py [NAME ...]     (default: every pathology)

Each pathology of tests/test_analysis_live.py (a scenario plus an action on a side
connection during the load) runs for real with PostgreSQL 18 from the embedded wheel.
The folder is copied here without the big raw files (per-transaction logs), so a sample
stays small; analysis needs only manifest.json, client.parquet, timeseries.parquet and
events.parquet. The analysis of each sample is rewritten by the next `pglab analyze`.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/, for the pathologies

from test_analysis_live import PATHOLOGIES, run_pathology  # noqa: E402

KEEP_RAW = ("pgbench.stdout", "pgbench.argv")  # small; server logs and txlogs are not


def record(name: str, scratch: Path) -> Path:
    folder = run_pathology(PATHOLOGIES[name], scratch)
    target = HERE / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(folder, target,
                    ignore=shutil.ignore_patterns("telemetry", "analysis.json", "report.html"))
    for path in (target / "raw").iterdir():
        if path.name not in KEEP_RAW:
            path.unlink() if path.is_file() else shutil.rmtree(path)
    return target


def main() -> None:
    names = sys.argv[1:] or list(PATHOLOGIES)
    with tempfile.TemporaryDirectory(prefix="pglab-samples-") as scratch:
        for name in names:
            target = record(name, Path(scratch))
            size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
            print(f"{name}: {target} ({size / 1024:.0f} kB)")


if __name__ == "__main__":
    main()
