"""How long does `pglab logs` take on a big log, printing rows and printing --json?

    python bench/logs_command.py [--size-mb 16] [--mix default] [--runs 2] [--before SRC]

1. Generates a stderr log (log_line_prefix '%m [%p] ') of --size-mb MB with
   bench/log_throughput.py's generator (default mix: mostly slow statements, lock waits,
   autovacuum, checkpoints; 16 MB hold about 114,000 events, the size of the log issue 14
   measured).
2. Runs `pglab logs LOG` and `pglab logs --json LOG`, --runs times each, interleaved,
   stdout to a file (as `> out.txt` or a pipe to `less` would take it), in child
   processes, and prints each run's wall time, CPU time and peak RSS, then the medians
   and the ratio of the table's time to --json's (the table should cost about what --json
   costs: both print one line per event). On a shared machine wall time includes
   waiting for a core; CPU time is the work done.
3. With --before SRC (the `src` directory of another commit, e.g. from `git archive
   COMMIT src | tar -x -C /tmp/before`), the same commands of that code run interleaved
   with this checkout's, so before and after are measured side by side in one run.
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

Result = tuple[float, float, float, int]  # wall s, CPU s, peak RSS MB, lines printed


def run_logs(log: Path, extra: list[str], out: Path, src: Path | None) -> Result:
    """One `pglab logs` child (of the code under `src`, else this checkout's)."""
    env = {**os.environ, "COLUMNS": "160"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    t0 = time.perf_counter()
    with out.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "pglab", "logs", *extra, str(log)],
                                stdout=sink, stderr=subprocess.DEVNULL, env=env)
        # the wait4 rusage of this one child: its own peak RSS, not the largest child's
        _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"pglab logs {' '.join(extra)} failed")
    with out.open("rb") as printed:
        lines = sum(1 for _ in printed)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--size-mb", type=int, default=16)
    parser.add_argument("--mix", choices=sorted(MIXES), default="default")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--before", type=Path, default=None,
                        help="the src directory of the code to compare with")
    args = parser.parse_args()
    codes: list[tuple[str, Path | None]] = [("now", None)]
    if args.before is not None:
        codes.insert(0, ("before", args.before.resolve()))
    with tempfile.TemporaryDirectory(prefix="pglab-logs-bench-") as tmp:
        work = Path(tmp)
        log = work / "postgresql.log"
        written = generate_log(log, args.size_mb * 1024 * 1024, MIXES[args.mix])
        print(f"log: {log.stat().st_size / 1e6:.0f} MB, {sum(written.values()):,} events "
              f"written ({dict(sorted(written.items()))})", flush=True)
        results: dict[tuple[str, str], list[Result]] = {}
        for _ in range(args.runs):
            for code, src in codes:
                for name, extra in (("table", []), ("--json", ["--json"])):
                    run = run_logs(log, extra, work / "out.txt", src)
                    results.setdefault((code, name), []).append(run)
                    wall, cpu, rss, lines = run
                    print(f"  {code:6} pglab logs {name:7} {wall:7.1f} s  CPU {cpu:6.1f} s  "
                          f"peak RSS {rss:6.0f} MB  {lines:,} lines printed", flush=True)
        for code, _src in codes:
            table, as_json = results[(code, "table")], results[(code, "--json")]
            t_wall, j_wall = (statistics.median(r[0] for r in x) for x in (table, as_json))
            t_cpu, j_cpu = (statistics.median(r[1] for r in x) for x in (table, as_json))
            t_rss, j_rss = (max(r[2] for r in x) for x in (table, as_json))
            print(f"{code}: table {t_wall:.1f} s (CPU {t_cpu:.1f} s, peak {t_rss:.0f} MB), "
                  f"--json {j_wall:.1f} s (CPU {j_cpu:.1f} s, peak {j_rss:.0f} MB); "
                  f"table / --json: {t_wall / j_wall:.2f}x wall, {t_cpu / j_cpu:.2f}x CPU, "
                  f"{t_rss / j_rss:.2f}x memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
