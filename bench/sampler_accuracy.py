"""How regular is the 10 Hz wait sampler under load? Its lateness against a bare loop's.

Runs one `pglab run` under a TPC-B-like load (both cores busy) and reads what the run
recorded about its own sampling: how late each wait sample was against its schedule, and
the achieved interval between samples (target: p99 lateness under 10 ms).

Side by side, a reference: a process of its own, started just before the run and stopped
just after it, that wakes on the same schedule and does nothing else. It computes its
deadlines as pglab's wait loop does (src/pglab/probes/telemetry.py: _fast_loop): absolute ticks
on pglab's wall clock, half a period off the whole seconds, skipping ahead when more than
a period behind; it sleeps until each with time.sleep, as a plain Python sampler would,
and records how late it woke. Only its wake-ups between pglab's first and last wait read
count, so both sides cover the same seconds of the same load. Both take lateness on
waking, before any work (pglab stamps a read before its query). The reference's lateness
is the machine's: the scheduler under this load, which no sampler can beat. The ratio
pglab/reference, and the difference in ms, is what pglab adds: its process's other
threads (the interval loops, the run's driver) holding the GIL or a core when the wait
loop is due.

    python bench/sampler_accuracy.py [--duration 30] [--hz 10] [--clients 8]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import polars as pl

# What the reference prints once its loop is about to start: the run starts only then,
# so the reference covers all of it.
REFERENCE_READY = "ready"


class Parser(argparse.ArgumentParser):
    """Bad input is one line, not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        sys.exit(f"{self.prog}: {message}")


def pct(values: list[float], q: float) -> float | None:
    """The same percentile as the run's manifest (TelemetryRunner.summary), so the two
    sides' figures are comparable rank for rank."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def reference_loop(hz: int) -> None:
    """Wake on pglab's wait schedule until SIGTERM; print [tick, woke] pairs as JSON."""
    from pglab.probes.telemetry import monotonic_wall_clock

    clock = monotonic_wall_clock()  # pglab's clock: the ticks fall where its ticks fall
    period = 1.0 / hz
    offset = period / 2
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True  # time.sleep resumes after the handler; the loop ends at its tick

    signal.signal(signal.SIGTERM, stop)
    parent = os.getppid()
    wakes: list[tuple[float, float]] = []
    print(REFERENCE_READY, flush=True)
    tick = math.ceil((clock() - offset) / period) * period + offset
    while not stopping:
        delay = tick - clock()
        if delay > 0:
            time.sleep(delay)
        if stopping:
            break
        wakes.append((tick, clock()))
        # after the wake is stamped, so it costs the measurement nothing: a bench killed
        # without stopping its reference leaves no loop running for ever
        if os.getppid() != parent:
            return
        tick += period
        if clock() > tick + period:
            tick = math.ceil((clock() - offset) / period) * period + offset
    json.dump(wakes, sys.stdout)


def wait_window(run_dir: Path) -> tuple[float, float]:
    """Epoch seconds of pglab's first and last wait read: one `sampled` row per read."""
    reads = (pl.scan_parquet(run_dir / "timeseries.parquet")
             .filter((pl.col("source") == "db.waits") & (pl.col("metric") == "sampled"))
             .select(pl.col("t").dt.epoch("us").min().alias("first"),
                     pl.col("t").dt.epoch("us").max().alias("last"))
             .collect())
    first, last = reads.row(0)
    if first is None:
        sys.exit(f"no wait samples in {run_dir / 'timeseries.parquet'}")
    return first / 1e6, last / 1e6


def ratio(pglab: float | None, reference: float | None) -> str:
    if pglab is None or not reference:
        return "n/a"
    return f"{pglab / reference:.1f}x"


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=30)
    parser.add_argument("--hz", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    # how the bench starts its reference: itself, in a process of its own
    parser.add_argument("--reference-loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1 <= args.hz <= 100:
        parser.error(f"--hz must be 1 to 100 (pglab's wait_sampling_hz), not {args.hz}")
    if args.reference_loop:
        reference_loop(args.hz)
        return
    if args.duration < 1 or args.clients < 1:
        parser.error("--duration and --clients must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "sampler.toml"
        scenario.write_text(
            f'name = "sampler"\n[workload]\nscale = 10\nclients = {args.clients}\n'
            f'jobs = {min(2, args.clients)}\n'
            f'duration = "{args.duration}s"\nwarmup = "0s"\n'
            f"[telemetry]\nwait_sampling_hz = {args.hz}\n"
        )
        reference = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--reference-loop",
             "--hz", str(args.hz)], stdout=subprocess.PIPE, text=True)
        assert reference.stdout is not None
        try:
            if reference.stdout.readline().strip() != REFERENCE_READY:
                sys.exit("the reference loop did not start")
            run = subprocess.run([sys.executable, "-m", "pglab", "run", str(scenario),
                                  "--results", str(Path(tmp) / "r")],
                                 capture_output=True, text=True)
        finally:
            reference.terminate()
            out, _ = reference.communicate(timeout=10)
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["no message"])[-1]
            sys.exit(f"pglab run failed (exit {run.returncode}): {last}")
        run_dir = next((Path(tmp) / "r" / "sampler").iterdir())
        info = json.loads((run_dir / "manifest.json").read_text())["telemetry"]
        first, last_read = wait_window(run_dir)
    wakes = [(tick, woke) for tick, woke in json.loads(out) if first <= woke <= last_read]
    ref_late = [(woke - tick) * 1000 for tick, woke in wakes]
    ref_interval = [(b - a) * 1000 for (_, a), (_, b) in itertools.pairwise(wakes)]
    target = 1000 / args.hz
    print(f"{info['wait_samples']} wait samples at {args.hz} Hz (target interval "
          f"{target:.0f} ms) during a {args.duration}s load")
    print(f"achieved interval p50 {info['wait_interval_ms_p50']} ms, "
          f"p99 {info['wait_interval_ms_p99']} ms")
    print(f"lateness vs schedule p50 {info['wait_lateness_ms_p50']} ms, "
          f"p99 {info['wait_lateness_ms_p99']} ms (target p99 < 10 ms)")
    print(f"reference (a bare time.sleep loop, own process, same schedule): {len(wakes)} "
          f"wake-ups over the same {last_read - first:.1f} s")
    print(f"reference interval p50 {pct(ref_interval, 0.5)} ms, "
          f"p99 {pct(ref_interval, 0.99)} ms")
    ref_p50, ref_p99 = pct(ref_late, 0.5), pct(ref_late, 0.99)
    print(f"reference lateness p50 {ref_p50} ms, p99 {ref_p99} ms")
    p50, p99 = info["wait_lateness_ms_p50"], info["wait_lateness_ms_p99"]
    print(f"pglab/reference lateness: p50 {ratio(p50, ref_p50)}, p99 {ratio(p99, ref_p99)}"
          f"  (pglab's own: p50 {p50 - (ref_p50 or 0):+.3f} ms, "
          f"p99 {p99 - (ref_p99 or 0):+.3f} ms)")
    print(f"pglab/reference interval: p50 "
          f"{ratio(info['wait_interval_ms_p50'], pct(ref_interval, 0.5))}, p99 "
          f"{ratio(info['wait_interval_ms_p99'], pct(ref_interval, 0.99))}")


if __name__ == "__main__":
    main()
