"""Does pglab's wait profile agree with pg_wait_sampling's over the same run?

    python bench/wait_fidelity.py [--duration 30] [--clients 16] [--scale 1] [--hz 10]

1. Installs the Debian package postgresql-15-pg-wait-sampling if it is missing (as root).
2. Starts a throwaway PostgreSQL 15 (Debian's /usr/lib/postgresql/15/bin) through pglab's
   Lab with server.settings shared_preload_libraries = 'pg_wait_sampling': pglab sets it
   with ALTER SYSTEM and restarts because pending_restart says so. Then CREATE EXTENSION
   pg_wait_sampling in the database pgbench uses.
3. Runs a pglab scenario against that server (target = "dsn", through the runner's API):
   tpcb-like, 16 clients on scale 1, so every transaction updates one of the same few
   rows: lock waits, WAL waits and CPU. A RunUI resets pg_wait_sampling's profile when the
   load starts and reads it when the load ends, before pglab's telemetry stops.
4. Compares the two distributions over (wait_event_type, wait_event): pglab's db.waits
   counts (timeseries.parquet, the same window) against pg_wait_sampling_profile (its
   collector samples every process every 10 ms). Both sides are made to count the same
   thing: "on CPU" is a NULL wait event in pg_wait_sampling and `CPU` in pglab (Debian 12's
   pg_wait_sampling 1.1.4 has no sample_cpu setting and samples no process that is off a
   wait: when its profile has no NULL-event row, CPU is left out of both sides); waits of
   type Activity (background processes with nothing to do) and Client (pg_wait_sampling
   cannot tell an idle session from one idle in a transaction) are left out of both;
   pglab's own telemetry sessions, this script's session and pg_wait_sampling's collector
   are left out of both; pg_wait_sampling rows of processes never seen in
   pg_stat_activity during the load (pglab could not have seen them) are dropped, and
   their number is printed.

Prints both profiles side by side and the total variation distance (0 = identical,
1 = disjoint). Exit status 0 when the run completed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import psycopg

from pglab.lab.lab import Lab
from pglab.probes.capabilities import TELEMETRY_APP, canonical_wait
from pglab.runner import RunOptions, run_scenario
from pglab.scenario import load_text
from pglab.workload.pgbench_output import ProgressLine

PG15 = Path("/usr/lib/postgresql/15/bin")
PACKAGE = "postgresql-15-pg-wait-sampling"
LIBRARY = Path("/usr/lib/postgresql/15/lib/pg_wait_sampling.so")
APP = "pglab-wait-fidelity"
COLLECTOR = "pg_wait_sampling collector"
LEFT_OUT_TYPES = ("Activity", "Client")


def ensure_extension() -> None:
    if LIBRARY.exists():
        return
    if os.geteuid() != 0:
        raise SystemExit(f"{PACKAGE} is not installed (apt-get install {PACKAGE}, as root)")
    print(f"installing {PACKAGE} (Debian package) ...", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", PACKAGE], check=True)
    if not LIBRARY.exists():
        raise SystemExit(f"{LIBRARY} not found after installing {PACKAGE}")


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class ProfilingUI:
    """pglab's RunUI, plus pg_wait_sampling: reset at load start, read at load end."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, application_name=APP)
        self.started: datetime | None = None
        self.ended: datetime | None = None
        self.seen_pids: set[int] = set()  # processes in pg_stat_activity during the load
        self.excluded_pids: set[int] = set()  # pglab telemetry, this script, the collector
        self.profile: list[tuple[int, str | None, str | None, int]] = []

    def _look_around(self) -> None:
        rows = self.conn.execute(
            "SELECT pid, coalesce(application_name, ''), coalesce(backend_type, '') "
            "FROM pg_stat_activity"
        ).fetchall()
        for pid, app, backend_type in rows:
            self.seen_pids.add(int(pid))
            if app in (TELEMETRY_APP, APP) or backend_type == COLLECTOR:
                self.excluded_pids.add(int(pid))

    def status(self, message: str) -> None:
        print(f"  {message}", flush=True)

    def load_started(self, total_s: int, label: str) -> None:
        self.conn.execute("SELECT pg_wait_sampling_reset_profile()")
        self.started = utc_now()
        self._look_around()
        print(f"  load: {label}, {total_s} s; pg_wait_sampling profile reset", flush=True)

    def progress(self, line: ProgressLine) -> None:
        self._look_around()  # once a second, as pgbench reports progress

    def load_finished(self) -> None:
        self.ended = utc_now()
        self._look_around()
        self.profile = [
            (int(pid), event_type, event, int(count))
            for pid, event_type, event, count in self.conn.execute(
                "SELECT pid, event_type, event, sum(count) FROM pg_wait_sampling_profile "
                "GROUP BY 1, 2, 3"
            ).fetchall()
        ]


def sampling_profile(ui: ProfilingUI) -> tuple[Counter[str], int]:
    """pg_wait_sampling's counts per canonical wait; and the samples of dropped pids."""
    counts: Counter[str] = Counter()
    dropped = 0
    for pid, event_type, event, count in ui.profile:
        if pid in ui.excluded_pids or (event_type or "") in LEFT_OUT_TYPES:
            continue
        if pid not in ui.seen_pids:
            dropped += count
            continue
        counts[canonical_wait(event_type, event)] += count
    return counts, dropped


def pglab_profile(run_dir: Path, started: datetime, ended: datetime) -> Counter[str]:
    """pglab's db.waits counts per wait over [started, ended]."""
    frame = pl.read_parquet(run_dir / "timeseries.parquet").filter(
        (pl.col("source") == "db.waits")
        & (pl.col("metric") != "sampled")
        & (pl.col("label") != COLLECTOR)
        & (pl.col("t") >= started)
        & (pl.col("t") <= ended)
    )
    counts: Counter[str] = Counter()
    for metric, value in frame.group_by("metric").agg(pl.col("value").sum()).iter_rows():
        if str(metric).split(":", 1)[0] not in LEFT_OUT_TYPES:
            counts[str(metric)] += int(value)
    return counts


def shares(counts: Counter[str]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in counts.items()} if total else {}


def total_variation(p: dict[str, float], q: dict[str, float]) -> float:
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def run(args: argparse.Namespace) -> int:
    server = load_text(
        f'name = "wait-fidelity-server"\n[server]\nbin = "{PG15}"\n'
        '[server.settings]\nshared_preload_libraries = "pg_wait_sampling"\n'
        f"[workload]\nscale = {args.scale}\n",
        "bench",
    )
    with (
        tempfile.TemporaryDirectory() as tmp,
        Lab(
            server.scenario, "bench", "bench-wait-fidelity", on_status=lambda m: print(f"  {m}")
        ) as lab,
    ):
        assert lab.primary is not None and lab.bins is not None
        info = lab.primary.conninfo()
        dsn = " ".join(f"{k}={v}" for k, v in info.items())
        with lab.connect() as conn:  # the database pgbench uses
            preload = conn.execute("SHOW shared_preload_libraries").fetchone()
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_wait_sampling")
            period = conn.execute("SHOW pg_wait_sampling.profile_period").fetchone()
        print(
            f"PostgreSQL {lab.bins.version} ({lab.bins.bin_dir}), shared_preload_libraries = "
            f"{preload[0] if preload else '?'}, pg_wait_sampling.profile_period = "
            f"{period[0] if period else '?'}",
            flush=True,
        )
        scenario = load_text(
            f'name = "wait-fidelity"\n[server]\ntarget = "dsn"\ndsn = "{dsn}"\n'
            f"allow_writes = true\n[workload]\nscale = {args.scale}\n"
            f'mix = ["tpcb-like"]\nclients = {args.clients}\njobs = {args.jobs}\n'
            f'duration = "{args.duration}s"\nwarmup = "0s"\n'
            f"[telemetry]\nwait_sampling_hz = {args.hz}\n",
            "bench",
        )
        ui = ProfilingUI(dsn)
        try:
            runs = run_scenario(scenario, RunOptions(results_root=Path(tmp)), ui)
        finally:
            ui.conn.close()
        stored = runs[0]
        if stored.status != "completed" or ui.started is None or ui.ended is None:
            print(f"run {stored.status}: {stored.manifest.reason}")
            return 1
        ours = pglab_profile(stored.path, ui.started, ui.ended)
        theirs, dropped = sampling_profile(ui)
        if args.keep:
            shutil.copytree(stored.path, args.keep / stored.path.name)

    # Older pg_wait_sampling (Debian 12's 1.1.4) samples only processes in a wait: with no
    # NULL-event row at all, "on CPU" is left out of both sides, not compared with nothing.
    cpu_sampled = any(event_type is None for _, event_type, _, _ in ui.profile)
    if not cpu_sampled:
        ours.pop("CPU", None)
    p, q = shares(ours), shares(theirs)
    tps = stored.manifest.pgbench.get("tps")
    print(
        f"\nload: tpcb-like, scale {args.scale}, {args.clients} clients, {args.duration} s, "
        f"{tps} tps; pglab sampled at {args.hz} Hz"
    )
    print(
        f"samples: pglab {sum(ours.values())}, pg_wait_sampling {sum(theirs.values())} "
        f"(plus {dropped} of processes never in pg_stat_activity, dropped)"
    )
    print(f"{'wait':32} {'pglab':>8} {'pg_wait_sampling':>17}")
    for key in sorted(set(p) | set(q), key=lambda k: -max(p.get(k, 0.0), q.get(k, 0.0))):
        print(f"{key:32} {p.get(key, 0.0):8.1%} {q.get(key, 0.0):17.1%}")
    if not cpu_sampled:
        print("(this pg_wait_sampling samples no on-CPU processes: CPU left out of both)")
    print(f"total variation distance: {total_variation(p, q):.3f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--duration", type=int, default=30)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--hz", type=int, default=10, help="pglab's wait_sampling_hz")
    parser.add_argument("--keep", type=Path, help="copy the pglab run folder here")
    args = parser.parse_args()
    ensure_extension()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
