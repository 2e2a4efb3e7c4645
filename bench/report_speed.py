"""How fast is report.html for a one-hour run, how big, and how soon is it usable?

A real run (made here with `pglab run`, or given with --run) is replicated along time
into a one-hour run folder: its client series, telemetry (10 Hz wait samples included)
and events are copied back to back, shifted by the real run's span. Then:

- generation: build the model from the folder and write report.html (median of 3),
- size of report.html,
- time to interactive in headless Chromium (/usr/bin/chromium): performance.now() when
  the page has drawn every chart and wired zoom/pan/tooltips (median of 3 fresh loads).

Each against a reference measured side by side, in turn with it, because on a shared
machine absolute times say more about the neighbours than about pglab:

- generation against reading the folder's Parquet files with polars and nothing else,
  the floor any report of this folder pays: generation/read is what the model and the
  HTML cost on top;
- time to interactive and wall time against the same Chromium (a fresh profile each time,
  as for the report) loading a static HTML page of the same byte size with no script
  (static_page says what is in it): its load event (navigation timing's loadEventEnd)
  and the wall time to it are the browser's floor for that many bytes;
  interactive/static is what the report's script and drawing add.

    python bench/report_speed.py [--run DIR] [--hours 1] [--screenshot PNG]

Budgets (issue 6): generation < 3 s, size < 5 MB, interactive < 2 s. With --screenshot,
the real run's report (not the replicated one) is saved as a first-screen PNG, and its
first timelines as report-timelines.png beside it.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import polars as pl

from pglab.report.model import build_model
from pglab.report.page import render
from pglab.results.files import write_text

if TYPE_CHECKING:
    from playwright.sync_api import Playwright

CHROMIUM = Path("/usr/bin/chromium")
PARQUET = ("client.parquet", "timeseries.parquet", "events.parquet")  # what replicate() copies
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


# Words of the static reference page's text.
WORDS = ("checkpoint", "throughput", "latency", "transactions", "per", "second", "wait",
         "events", "the", "of", "a", "and", "buffer", "write", "sync", "WAL", "lock",
         "autovacuum", "p99", "ms", "TPS", "replica", "disk", "CPU", "12.5", "3,600")


class Parser(argparse.ArgumentParser):
    """Bad input is one line, not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        sys.exit(f"{self.prog}: {message}")


def make_real_run(work: Path) -> Path:
    (work / "bench.toml").write_text(SCENARIO)
    run = subprocess.run([sys.executable, "-m", "pglab", "run", str(work / "bench.toml"),
                          "--results", str(work / "results")], capture_output=True, text=True)
    if run.returncode != 0:
        last = (run.stderr.strip().splitlines() or ["no message"])[-1]
        sys.exit(f"pglab run failed (exit {run.returncode}): {last}")
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


def read_parquet(run: Path) -> float:
    """The generation's reference: every Parquet file of the folder read whole, no more."""
    began = time.perf_counter()
    for path in sorted(run.glob("*.parquet")):
        pl.read_parquet(path)
    return time.perf_counter() - began


def static_page(path: Path, size: int) -> None:
    """A page of `size` bytes (at least its markup's), no script: the browser's floor.

    Its bulk is seeded text in one HTML comment. The report's bulk is its data in a
    <script type="application/json"> element: bytes the parser reads as raw text and
    nothing lays out, and a comment is the same work for the parser without a script
    element. The same bytes as visible paragraphs would add laying out a megabyte of text
    (in a trial, slower to its load event than the report to interactive), work the report
    never asks the browser for, so no floor of it."""
    head = ('<!doctype html>\n<html><head><meta charset="utf-8"><title>static</title>'
            "</head>\n<body>\n<p>A static page as large as the report, no script.</p>\n<!--\n")
    tail = "\n-->\n</body></html>\n"
    pick = random.Random(0).choice
    room = size - len(head) - len(tail)
    lines, used = [], 0
    while used < room:
        lines.append(" ".join(pick(WORDS) for _ in range(12)))  # no "--" in them: still a comment
        used += len(lines[-1]) + 1
    path.write_text(head + "\n".join(lines)[:max(0, room)] + tail, encoding="ascii")


def load_once(pw: Playwright, page_file: Path, scripted: bool,
              screenshot: Path | None = None) -> tuple[float, float]:
    """(ready per the page's own clock, wall time from navigation to ready) in seconds.

    Ready is the report's data-ready (its charts drawn and wired) or, for a page with no
    script, navigation timing's loadEventEnd; both count from the navigation's start."""
    with tempfile.TemporaryDirectory() as profile:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
            headless=True, viewport={"width": 1400, "height": 900})
        page = context.new_page()
        began = time.perf_counter()
        page.goto(page_file.as_uri())  # returns on the load event
        if scripted:
            page.wait_for_selector("body[data-ready]", timeout=30_000)
        wall = time.perf_counter() - began
        if scripted:
            ready_ms = float(page.get_attribute("body", "data-ready") or "nan")
        else:
            # read after the wall time is taken: this script is not the page's
            loaded = "performance.getEntriesByType('navigation')[0].loadEventEnd"
            page.wait_for_function(f"{loaded} > 0", timeout=30_000)
            ready_ms = float(page.evaluate(loaded))
        if screenshot is not None:
            page.screenshot(path=str(screenshot))
            if scripted:  # and the first timelines, scrolled to their heading
                page.evaluate("document.getElementById('timelines')"
                              ".previousElementSibling.previousElementSibling"
                              ".scrollIntoView()")
                page.screenshot(path=str(screenshot.with_name("report-timelines.png")))
        context.close()
    return ready_ms / 1000, wall


def open_in_chromium(pages: list[tuple[Path, bool]], rounds: int,
                     screenshot: Path | None = None) -> list[list[tuple[float, float]]]:
    """Per page (file, has the report's script): one load_once per round. The pages take
    turns within a round, so a slow spell of the machine falls on both sides."""
    from playwright.sync_api import sync_playwright

    out: list[list[tuple[float, float]]] = [[] for _ in pages]
    with sync_playwright() as pw:
        for _ in range(rounds):
            for loads, (page_file, scripted) in zip(out, pages, strict=True):
                loads.append(load_once(pw, page_file, scripted, screenshot))
    return out


def real_run_info(real: Path) -> tuple[float, float]:
    """Measured seconds and wait sampling rate of a run folder, or a one-line exit."""
    try:
        manifest = json.loads((real / "manifest.json").read_text())
        seconds = float(manifest["results"]["measured"]["seconds"])
        hz = float(manifest["telemetry"]["wait_sampling_hz"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        detail = f"no {exc} in its manifest" if isinstance(exc, KeyError) else str(exc)
        sys.exit(f"--run {real}: not a completed pglab run with telemetry ({detail})")
    missing = [name for name in PARQUET if not (real / name).is_file()]
    if missing:
        sys.exit(f"--run {real}: no {', '.join(missing)} to replicate")
    return seconds, hz


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a real run folder (default: make one)")
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--screenshot", type=Path, help="save the real run's first screen")
    args = parser.parse_args()
    if not 0 < args.hours <= 24:
        parser.error(f"--hours must be more than 0 and at most 24, not {args.hours:g}")
    if not CHROMIUM.is_file():
        sys.exit(f"{CHROMIUM} not found (Debian package chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        real = args.run or make_real_run(work)
        seconds, hz = real_run_info(real)
        print(f"real run: {real} ({seconds:g} s measured, {hz:.0f} Hz wait samples)")
        if args.screenshot:
            # with `pglab analyze` available, the first screen shows its verdict
            analyze = subprocess.run([sys.executable, "-m", "pglab", "analyze", str(real)],
                                     capture_output=True)
            print(f"pglab analyze: {'done' if analyze.returncode == 0 else 'not available'}")
            generate(real)
            open_in_chromium([(real / "report.html", True)], 1, args.screenshot)
            print(f"first screen: {args.screenshot}")
        long_run = work / "hour" / real.name
        copies = replicate(real, long_run, int(args.hours * 3600))
        rows = pl.scan_parquet(long_run / "timeseries.parquet").select(pl.len()).collect().item()
        print(f"replicated x{copies}: {args.hours:g} h, {rows:,} telemetry rows")
        # read first in each pair: replicate() has just written the files, so both sides
        # find them in the page cache
        times, reads = [], []
        for _ in range(3):
            reads.append(read_parquet(long_run))
            times.append(generate(long_run))
        size = (long_run / "report.html").stat().st_size
        static_page(work / "static.html", size)
        loads, static = open_in_chromium(
            [(long_run / "report.html", True), (work / "static.html", False)], 3)
        gen, tti = statistics.median(times), statistics.median(t for t, _ in loads)
        wall = statistics.median(w for _, w in loads)
        read = statistics.median(reads)
        floor = statistics.median(t for t, _ in static)
        floor_wall = statistics.median(w for _, w in static)

        def runs(values: list[float]) -> str:
            return ", ".join(f"{v:.3f}" if v < 0.1 else f"{v:.2f}" for v in values)

        print(f"generation      {gen:6.2f} s    budget 3 s    ratio {gen / 3:.2f}  "
              f"(runs: {runs(times)})")
        print(f"  parquet read  {read:6.3f} s    reference: polars reads the folder's Parquet "
              f"files (runs: {runs(reads)})")
        print(f"  generation/read {gen / read:.1f}x")
        print(f"size            {size / 1e6:6.2f} MB   budget 5 MB   ratio {size / 5e6:.2f}")
        print(f"interactive     {tti:6.2f} s    budget 2 s    ratio {tti / 2:.2f}  "
              f"(navigation to ready, wall: {wall:.2f} s)")
        print(f"  static page   {floor:6.2f} s    reference: {size / 1e6:.2f} MB of static HTML, "
              f"no script, to its load event (wall: {floor_wall:.2f} s)")
        print(f"  interactive/static {tti / floor:.1f}x, wall/static wall "
              f"{wall / floor_wall:.1f}x  (runs: report {runs([t for t, _ in loads])}, "
              f"static {runs([t for t, _ in static])})")


if __name__ == "__main__":
    main()
