"""How long does `pglab analyze` take on a one-hour run? Target: under 2 seconds.

    python bench/analyze_speed.py [--sample lock] [--hours 1] [--repeat 3]

Builds a one-hour results folder in a temp dir by tiling a real short run committed in
tests/samples/runs/<sample>/: its measured seconds (client series, every telemetry
sample, every event) are repeated back to back, shifted in time, until they cover the
asked duration, so the hour holds the sample's stalls over and over (one lock stall per
~20 s for the default sample: a worst case for the per-window work). Then times
analyze_run() on the short sample and on the hour, side by side, best of --repeat, and
prints both, the ratio, and the figure against the target.

Exit status 0 when the hour is analysed in under 2 s, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from pglab.analysis.analyze import analyze_run

SAMPLES = Path(__file__).resolve().parent.parent / "tests" / "samples" / "runs"
TARGET_S = 2.0


def _tile(frame: pl.DataFrame, columns: list[str], lo: dt.datetime, hi: dt.datetime,
          copies: int) -> pl.DataFrame:
    """Rows of [lo, hi) repeated `copies` times, each copy shifted by (hi - lo)."""
    first = columns[0]
    part = frame.filter((pl.col(first) >= lo) & (pl.col(first) < hi))
    span = hi - lo
    return pl.concat([
        part.with_columns([pl.col(c) + span * i for c in columns]) for i in range(copies)
    ])


def build_long_run(sample: Path, target: Path, seconds: int) -> Path:
    """A results folder of about `seconds` measured seconds, tiled from `sample`."""
    shutil.copytree(sample, target, ignore=shutil.ignore_patterns("analysis.json"))
    client = pl.read_parquet(sample / "client.parquet")
    measured = client.filter(~pl.col("warmup") & ~pl.col("partial") & pl.col("job").is_null())
    lo = measured["t"].min()
    hi = measured["t"].max()
    assert isinstance(lo, dt.datetime) and isinstance(hi, dt.datetime)
    hi = hi + dt.timedelta(seconds=1)
    copies = max(1, seconds // int((hi - lo).total_seconds()))
    measured_rows = client.filter(~pl.col("warmup") & ~pl.col("partial"))
    _tile(measured_rows, ["t"], lo, hi, copies).write_parquet(target / "client.parquet")
    series = pl.read_parquet(sample / "timeseries.parquet")
    _tile(series, ["t"], lo, hi, copies).write_parquet(target / "timeseries.parquet")
    events = pl.read_parquet(sample / "events.parquet")
    _tile(events, ["t_start", "t_end"], lo, hi, copies).write_parquet(
        target / "events.parquet")
    # the analysis measures the scenario's duration: the tiled run lasts the whole hour
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["scenario"]["workload"]["duration"] = copies * int((hi - lo).total_seconds())
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def _best_of(folder: Path, repeat: int) -> tuple[float, dict[str, object]]:
    best, document = float("inf"), {}
    for _ in range(repeat):
        started = time.perf_counter()
        document = analyze_run(folder).document.to_json()
        best = min(best, time.perf_counter() - started)
    return best, document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", default="lock")
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pglab-analyze-speed-") as scratch:
        short = shutil.copytree(SAMPLES / args.sample, Path(scratch) / "short",
                                ignore=shutil.ignore_patterns("analysis.json"))
        long = build_long_run(SAMPLES / args.sample, Path(scratch) / "long",
                              int(args.hours * 3600))
        rows = pl.scan_parquet(long / "timeseries.parquet").select(pl.len()).collect().item()
        short_s, _ = _best_of(short, args.repeat)
        long_s, document = _best_of(long, args.repeat)
    summary = document["summary"]
    assert isinstance(summary, dict)
    if summary["measured_seconds"] < 0.9 * args.hours * 3600:  # the tiling did not take
        print(f"the long run has {summary['measured_seconds']} measured seconds, expected "
              f"about {args.hours * 3600:.0f}", file=sys.stderr)
        return 1
    print(f"sample {args.sample}: {short_s * 1000:.0f} ms")
    print(f"{args.hours:g} h tiled from it ({summary['measured_seconds']} measured seconds, "
          f"{rows:,} telemetry rows, {summary['stalls']} stalls): {long_s * 1000:.0f} ms")
    print(f"ratio hour/sample: {long_s / short_s:.1f}x; target < {TARGET_S:.0f} s: "
          f"{'met' if long_s < TARGET_S else 'MISSED'}")
    print(json.dumps({"sample_s": round(short_s, 3), "hour_s": round(long_s, 3)}))
    return 0 if long_s < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
