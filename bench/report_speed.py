"""How fast is report.html for a one-hour run, how big, and how soon is it usable?

A real run (made here with `pglab run`, or given with --run) is replicated along time
into a one-hour run folder: its client series, telemetry (10 Hz wait samples included)
and events are copied back to back, shifted by the real run's span. Then:

- generation: build the model from the folder and write report.html (median of 3),
- size of report.html,
- time to interactive in headless Chromium (/usr/bin/chromium): performance.now() when
  the page has drawn every chart and wired zoom/pan/tooltips (median of 3 fresh loads).

    python bench/report_speed.py [--run DIR] [--hours 1] [--screenshot PNG]

Budgets (issue 6): generation < 3 s, size < 5 MB, interactive < 2 s. With --screenshot,
the real run's report (not the replicated one) is saved as a first-screen PNG.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from pglab.report.model import build_model
from pglab.report.page import render
from pglab.results.files import write_text

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SCENARIO = """name = "report-bench"
description = "TPC-B-like with frequent checkpoints: material for the report benchmark"
[server.settings]
max_wal_size = "32MB"
checkpoint_timeout = "30s"
[workload]
scale = 5
clients = 4
jobs = 2
duration = "40s"
warmup = "5s"
[telemetry]
wait_sampling_hz = 10
"""


def make_real_run(work: Path) -> Path:
    (work / "bench.toml").write_text(SCENARIO)
    subprocess.run([sys.executable, "-m", "pglab", "run", str(work / "bench.toml"),
                    "--results", str(work / "results")], check=True, capture_output=True)
    return sorted((work / "results" / "report-bench").iterdir())[-1]


def replicate(src: Path, dst: Path, seconds: int) -> int:
    """dst: src's data repeated back to back until it covers `seconds`; returns copies."""
    dst.mkdir(parents=True)
    for name in ("manifest.json", "scenario.toml"):
        shutil.copy(src / name, dst / name)
    client = pl.read_parquet(src / "client.parquet")
    ts = pl.read_parquet(src / "timeseries.parquet")
    events = pl.read_parquet(src / "events.parquet")
    bounds = pl.concat([client.select("t"), ts.select("t")]).select(
        (pl.col("t").max() - pl.col("t").min()).dt.total_seconds().alias("span"))
    span = int(bounds.item()) + 1
    copies = -(-seconds // span)

    def shifted(frame: pl.DataFrame, columns: list[str], k: int) -> pl.DataFrame:
        shift = pl.duration(seconds=k * span)
        return frame.with_columns([pl.col(c) + shift for c in columns])

    parts = [shifted(client, ["t"], k).with_columns(pl.col("warmup") & (k == 0))
             for k in range(copies)]
    pl.concat(parts).write_parquet(dst / "client.parquet")
    pl.concat([shifted(ts, ["t"], k) for k in range(copies)]).write_parquet(
        dst / "timeseries.parquet")
    pl.concat([shifted(events, ["t_start", "t_end"], k) for k in range(copies)]).write_parquet(
        dst / "events.parquet")
    return copies


def generate(run: Path) -> float:
    began = time.perf_counter()
    write_text(run / "report.html", render(build_model(run)))
    return time.perf_counter() - began


def open_in_chromium(report: Path, loads: int, screenshot: Path | None = None
                     ) -> list[tuple[float, float]]:
    """(time to interactive per the page, wall time from navigation to ready) per load."""
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as pw:
        for _ in range(loads):
            with tempfile.TemporaryDirectory() as profile:
                context = pw.chromium.launch_persistent_context(
                    profile, executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS,
                    headless=True, viewport={"width": 1400, "height": 900})
                page = context.new_page()
                began = time.perf_counter()
                page.goto(report.as_uri())
                page.wait_for_selector("body[data-ready]", timeout=30_000)
                wall = time.perf_counter() - began
                ready_ms = float(page.get_attribute("body", "data-ready") or "nan")
                if screenshot is not None:
                    page.screenshot(path=str(screenshot))
                context.close()
            out.append((ready_ms / 1000, wall))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a real run folder (default: make one)")
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--screenshot", type=Path, help="save the real run's first screen")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        real = args.run or make_real_run(work)
        manifest = json.loads((real / "manifest.json").read_text())
        print(f"real run: {real} ({manifest['results']['measured']['seconds']} s measured, "
              f"{manifest['telemetry']['wait_sampling_hz']:.0f} Hz wait samples)")
        if args.screenshot:
            # with `pglab analyze` available, the first screen shows its verdict
            analyze = subprocess.run([sys.executable, "-m", "pglab", "analyze", str(real)],
                                     capture_output=True)
            print(f"pglab analyze: {'done' if analyze.returncode == 0 else 'not available'}")
            generate(real)
            open_in_chromium(real / "report.html", 1, args.screenshot)
            print(f"first screen: {args.screenshot}")
        long_run = work / "hour" / real.name
        copies = replicate(real, long_run, int(args.hours * 3600))
        rows = pl.scan_parquet(long_run / "timeseries.parquet").select(pl.len()).collect().item()
        print(f"replicated x{copies}: {args.hours:g} h, {rows:,} telemetry rows")
        times = [generate(long_run) for _ in range(3)]
        size = (long_run / "report.html").stat().st_size
        loads = open_in_chromium(long_run / "report.html", 3)
        gen, tti = statistics.median(times), statistics.median(t for t, _ in loads)
        wall = statistics.median(w for _, w in loads)
        print(f"generation      {gen:6.2f} s    budget 3 s    ratio {gen / 3:.2f}  "
              f"(runs: {', '.join(f'{t:.2f}' for t in times)})")
        print(f"size            {size / 1e6:6.2f} MB   budget 5 MB   ratio {size / 5e6:.2f}")
        print(f"interactive     {tti:6.2f} s    budget 2 s    ratio {tti / 2:.2f}  "
              f"(navigation to ready, wall: {wall:.2f} s)")


if __name__ == "__main__":
    main()
