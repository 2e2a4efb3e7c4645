"""How well does a stall name its statement? One known statement among ten, for real.

A pgbench script of ten statements, each of another shape (ten queryids): nine read
pgbench_tellers by its key, one (the known statement) reads pgbench_accounts by its key.
A `sql` fault drops pgbench_accounts' primary key at 6 s and a second makes it again at
`6 + --hold` s: while it is gone, the known statement, and only it, scans the table, and
the stall is its. The truth the scenario made is read from pg_stat_statements itself
(`db.statements`: each statement's execution time in the stall's seconds), independent
of the wait sampler. The attribution is pglab's: the stall's `statements` in
analysis.json, each one's share of the client backends' samples (db.statement_waits at
wait_sampling_hz).

    python bench/statement_attribution.py [--runs 3] [--hold 6] [--clients 4]

Prints per run: the known statement's attributed share, its share of the execution time
(the truth), and its rank among the stall's statements (1 = named first); then the
medians and the median difference.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

SHAPES = ("tbalance", "abs(tbalance)", "sign(tbalance)", "length(filler)", "md5(filler)",
          "lower(filler)", "upper(filler)", "tbalance::text", "bid")
KNOWN = "SELECT abalance FROM pgbench_accounts WHERE aid = :aid"
KNOWN_TABLE = "pgbench_accounts"


def script() -> str:
    lines = ["\\set aid random(1, 100000 * :scale)", "\\set tid random(1, 10 * :scale)",
             "BEGIN;"]
    lines += [f"SELECT {shape} FROM pgbench_tellers WHERE tid = :tid;" for shape in SHAPES[:5]]
    lines.append(f"{KNOWN};")
    lines += [f"SELECT {shape} FROM pgbench_tellers WHERE tid = :tid;" for shape in SHAPES[5:]]
    return "\n".join([*lines, "END;"]) + "\n"


def scenario(hold: float, clients: int) -> str:
    return f"""name = "attribution"
[workload]
scale = 2
mix = []
scripts = ["ten.sql"]
clients = {clients}
jobs = 2
duration = "{12 + hold:g}s"
warmup = "2s"
[[faults]]
at = "6s"
action = "sql"
args = {{ sql = "ALTER TABLE pgbench_accounts DROP CONSTRAINT pgbench_accounts_pkey" }}
[[faults]]
at = "{6 + hold:g}s"
action = "sql"
args = {{ sql = "ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid)" }}
"""


def measure(run: Path) -> dict[str, float | int | None]:
    analysis = json.loads((run / "analysis.json").read_text())
    stalls = [s for s in analysis["stalls"] if s.get("statements")]
    if not stalls:
        return {"attributed": None, "truth": None, "rank": None}
    stall = max(stalls, key=lambda s: s["seconds"])
    known = [i for i, s in enumerate(stall["statements"])
             if KNOWN_TABLE in str(s.get("text"))]
    attributed = stall["statements"][known[0]]["share"] if known else 0.0
    events = pl.read_parquet(run / "events.parquet").filter(
        pl.col("kind") == "statement-text")
    texts = {json.loads(a)["queryid"]: json.loads(a)["query"] for a in events["attrs"]}
    start = dt.datetime.fromisoformat(stall["start"])
    end = dt.datetime.fromisoformat(stall["end"])
    ts = pl.read_parquet(run / "timeseries.parquet").filter(
        (pl.col("source") == "db.statements") & (pl.col("metric") == "exec_ms")
        & (pl.col("t") >= start) & (pl.col("t") < end))
    spent = ts.group_by("label").agg(pl.col("value").sum())
    # client statements only: the faults' ALTER TABLEs are not the load's
    load = {label: value for label, value in spent.iter_rows()
            if not texts.get(label, "").startswith("ALTER TABLE")}
    total = sum(load.values()) or 1.0
    truth = sum(v for q, v in load.items() if texts.get(q, "").startswith(
        "SELECT abalance FROM pgbench_accounts")) / total
    return {"attributed": attributed, "truth": round(truth, 3),
            "rank": known[0] + 1 if known else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hold", type=float, default=6.0)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    found = []
    with tempfile.TemporaryDirectory(prefix="pglab-attribution-") as scratch:
        folder = Path(scratch)
        (folder / "ten.sql").write_text(script())
        (folder / "attribution.toml").write_text(scenario(args.hold, args.clients))
        for index in range(args.runs):
            subprocess.run([sys.executable, "-m", "pglab", "run",
                            str(folder / "attribution.toml"), "--results",
                            str(folder / "results")], check=True, capture_output=True)
            run = max((folder / "results" / "attribution").iterdir())
            result = measure(run)
            found.append(result)
            print(f"run {index + 1}: attributed {result['attributed']}, truth "
                  f"{result['truth']}, rank {result['rank']}", flush=True)
    pairs = [(r["attributed"], r["truth"]) for r in found
             if isinstance(r["attributed"], float) and isinstance(r["truth"], float)]
    if pairs:
        print(f"median attributed {statistics.median(a for a, _ in pairs):.3f}, median truth "
              f"{statistics.median(t for _, t in pairs):.3f}, median |difference| "
              f"{statistics.median(abs(a - t) for a, t in pairs):.3f}; named first in "
              f"{sum(1 for r in found if r['rank'] == 1)} of {len(found)} runs")


if __name__ == "__main__":
    main()
