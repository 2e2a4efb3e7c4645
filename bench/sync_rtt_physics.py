"""Physics as the check: one client committing through a synchronous standby behind a
round trip r reaches at most 1 / (r + flush) commits/s. Does the lab's link add r and
nothing hidden?

    python bench/sync_rtt_physics.py [RESULTS_DIR]       (needs root without a dir)

Without RESULTS_DIR it runs the built-in `sync-standby-across-zones` (one client, one
autocommit UPDATE a transaction, a link of 0 / 0.5 / 2 / 5 ms to the synchronous
standby) into a temporary folder; with one, it reads the runs of that built-in there.
For each run, from the run's own data alone:
- r: the link's round trip measured at setup (p50, pglab's one-byte round trips);
- flush: the primary's WAL fsync (pg_stat_io `fsync_time` / `fsyncs` of the WAL, with
  track_wal_io_timing on) plus the standby's (its flush_lag less its write_lag in
  pg_stat_replication: what it took to flush what it had written);
- bound = 1 / (r + flush), against the run's measured TPS (TPS / bound: above 1 would
  mean the link added less than r). The bound leaves out what a commit costs besides
  the round trip and the flushes (the UPDATE itself, the client's own round trip to the
  primary), which is most of it on a short link: TPS / bound is far below 1 there.
- added: what each link added to a transaction's mean time (1 / TPS) over the nearest
  link's run, per millisecond of round trip it added (measured r): 1.0 when the link
  adds r and nothing hidden; target within 10% (0.90-1.10).
The load average is printed: other work on the machine delays what any process does.
Exit 0 when every run's `added` meets its target, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

NAME = "sync-standby-across-zones"


def _mean_fsync_ms(ts: pl.DataFrame, node: str) -> float | None:
    """WAL fsync time per fsync on a node, over the run (pg_stat_io's WAL rows)."""
    wal = ts.filter((pl.col("source") == "db.io") & (pl.col("node") == node)
                    & pl.col("label").str.contains("/wal/"))
    fsyncs = float(wal.filter(pl.col("metric") == "fsyncs")["value"].sum())
    spent = float(wal.filter(pl.col("metric") == "fsync_time")["value"].sum())
    return spent / fsyncs if fsyncs > 0 and spent > 0 else None


def _mean(ts: pl.DataFrame, node: str, source: str, metric: str) -> float | None:
    values = ts.filter((pl.col("source") == source) & (pl.col("node") == node)
                       & (pl.col("metric") == metric))["value"]
    return float(values.mean()) if len(values) else None  # type: ignore[arg-type]


def physics(run: Path) -> dict[str, float | str | None]:
    """One run's figures: rtt, flush (primary, standby), bound, TPS and their ratio."""
    manifest = json.loads((run / "manifest.json").read_text())
    ts = pl.read_parquet(run / "timeseries.parquet")
    link = next(link for link in manifest["network"]["links"]
                if set(link["between"]) == {"primary", "standby1"})
    rtt = float(link["measured"]["rtt_ms"]["p50"])
    primary = _mean_fsync_ms(ts, "primary")
    flush_lag = _mean(ts, "primary", "db.replication", "flush_lag_s")
    write_lag = _mean(ts, "primary", "db.replication", "write_lag_s")
    standby = (1000 * (flush_lag - write_lag) if flush_lag is not None
               and write_lag is not None else None)
    standby = _mean_fsync_ms(ts, "standby1") or standby
    tps = float(manifest["results"]["measured"]["tps"])
    flush = (primary or 0.0) + max(0.0, standby or 0.0)
    bound = 1000 / (rtt + flush)
    return {"run": run.name, "configured": str(link["configured"].get("rtt_ms", 0)),
            "rtt_ms": rtt, "primary_flush_ms": primary, "standby_flush_ms": standby,
            "bound_tps": bound, "tps": tps, "ratio": tps / bound}


def main() -> int:
    if len(sys.argv) > 1:
        root = Path(sys.argv[1])
    else:
        root = Path(tempfile.mkdtemp(prefix="pglab-physics-"))
        subprocess.run([sys.executable, "-m", "pglab", "run", NAME, "--results", str(root)],
                       check=True)
    runs = sorted(p for p in (root / NAME).iterdir() if (p / "manifest.json").is_file())
    print(f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print(f"{'rtt':>6} {'measured':>9} {'flush p':>8} {'flush s':>8} {'bound':>7} "
          f"{'TPS':>7} {'TPS/bound':>9} {'added':>6}")
    rows = sorted((physics(run) for run in runs), key=lambda r: float(r["rtt_ms"] or 0))
    ok = True
    nearest = rows[0] if rows else None
    for row in rows:
        ratio = float(row["ratio"] or 0)
        added = None
        if nearest is not None and row is not nearest:
            took = 1000 / float(row["tps"] or 0) - 1000 / float(nearest["tps"] or 0)
            added = took / (float(row["rtt_ms"] or 0) - float(nearest["rtt_ms"] or 0))
            ok &= 0.9 <= added <= 1.1

        def ms(v: object) -> str:
            return f"{v:.3f}" if isinstance(v, float) else "?"
        print(f"{row['configured']:>6} {ms(row['rtt_ms']):>9} {ms(row['primary_flush_ms']):>8} "
              f"{ms(row['standby_flush_ms']):>8} {float(row['bound_tps'] or 0):7.1f} "
              f"{float(row['tps'] or 0):7.1f} {ratio:9.3f} "
              + (f"{added:6.3f}" if added is not None else f"{'base':>6}")
              + ("  (outside 0.90-1.10)" if added is not None and not 0.9 <= added <= 1.1
                 else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
