"""How long does `pglab logs` take on a big log, printing rows and printing --json?

    python bench/logs_command.py [--size-mb 25] [--mix default] [--runs 2]

1. Generates a stderr log (log_line_prefix '%m [%p] ') of --size-mb MB with
   bench/log_throughput.py's generator (default mix: mostly slow statements, lock waits,
   autovacuum, checkpoints; 25 MB hold about 114,000 events, the size of the log issue 14
   measured).
2. Runs `pglab logs LOG` and `pglab logs --json LOG` one after the other, --runs times
   each, interleaved, stdout to a file (as `> out.txt` or a pipe to `less` would take it),
   in child processes, and prints each run's wall time and peak RSS, then the medians and
   the ratio of the table's time to --json's (the table should cost about what --json
   costs: both print one line per event).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from log_throughput import MIXES, generate_log


def run_logs(log: Path, extra: list[str], out: Path) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MB, and lines printed of one `pglab logs` child."""
    # the wait4 rusage of this one child: its own peak RSS, not the largest child's
    t0 = time.perf_counter()
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "pglab", "logs", *extra, str(log)],
                                stdout=sink, stderr=subprocess.DEVNULL,
                                env={**os.environ, "COLUMNS": "160"})
        _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"pglab logs {' '.join(extra)} failed")
    with out.open("rb") as printed:
        lines = sum(1 for _ in printed)
    return wall, usage.ru_maxrss / 1024, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--size-mb", type=int, default=25)
    parser.add_argument("--mix", choices=sorted(MIXES), default="default")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pglab-logs-bench-") as tmp:
        work = Path(tmp)
        log = work / "postgresql.log"
        written = generate_log(log, args.size_mb * 1024 * 1024, MIXES[args.mix])
        print(f"log: {log.stat().st_size / 1e6:.0f} MB, {sum(written.values()):,} events "
              f"written ({dict(sorted(written.items()))})", flush=True)
        results: dict[str, list[tuple[float, float, int]]] = {"table": [], "--json": []}
        for _ in range(args.runs):
            for name, extra in (("table", []), ("--json", ["--json"])):
                wall, rss, lines = run_logs(log, extra, work / "out.txt")
                results[name].append((wall, rss, lines))
                print(f"  pglab logs {name:7} {wall:7.1f} s  peak RSS {rss:6.0f} MB  "
                      f"{lines:,} lines printed", flush=True)
        table = statistics.median(r[0] for r in results["table"])
        as_json = statistics.median(r[0] for r in results["--json"])
        table_rss = max(r[1] for r in results["table"])
        json_rss = max(r[1] for r in results["--json"])
        print(f"median: table {table:.1f} s (peak {table_rss:.0f} MB), --json {as_json:.1f} s "
              f"(peak {json_rss:.0f} MB); table / --json = {table / as_json:.2f}x time, "
              f"{table_rss / json_rss:.2f}x memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
