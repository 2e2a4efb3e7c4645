"""Time to a verified fix: the wall time of `pglab tune` on the built-in pathologies.

    python bench/tune_time.py [NAME ...] [--steps 1] [--repeats 3] [--results DIR]
                              [--set KEY=VALUE ...]

Runs `pglab tune NAME` (default options unless given) for each named built-in (default:
every built-in except demo and healthy-control), one after the other, and prints per
built-in: the wall time, the tune's status, the path of kept changes with each one's
measured effect (commits lost per cut where the scenario cuts, stall seconds and TPS:
delta and 95% interval) and, for several steps, the combined effect against the
original baseline. Target (issue 17): under 20 minutes
per built-in on 2 cores. `--set` shortens every run (e.g. workload.duration=20s) for a
quicker, rougher figure; the printout says so.

Exit status 0 when every tune completed within the target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pglab.scenario.builtin import builtin_names

TARGET_S = 20 * 60
SKIP = ("demo", "healthy-control")  # nothing to fix


def _effect(candidate: dict[str, Any]) -> str:
    parts = []
    for metric in candidate.get("metrics") or []:
        if metric["metric"] not in ("lost_commits", "stall_seconds", "tps") or (
                metric["delta_pct"] is None):
            continue
        ci = metric.get("ci_pct")
        interval = f" [{ci[0]:+.0f}%, {ci[1]:+.0f}%]" if ci else ""
        parts.append(f"{metric['metric']} {metric['delta_pct']:+.0f}%{interval} "
                     f"{metric['verdict']}")
    return "; ".join(parts) or "not measured"


def _describe(tuned: dict[str, Any]) -> list[str]:
    lines = []
    for step in tuned.get("steps") or []:
        winner = next((c for c in step["candidates"] if c["rule"] == step["winner"]), None)
        tried = ", ".join(c["rule"] + (" (failed)" if c.get("failed") else "")
                          for c in step["candidates"]) or "nothing testable"
        lines.append(f"  step {step['step']} (top cause {step['top_cause']}): tried {tried}")
        if winner is not None:
            lines.append(f"    kept {' '.join(winner['overrides'])}: {_effect(winner)}")
    combined = tuned.get("combined")
    if combined:
        lines.append(f"  combined {' '.join(combined['overrides'])}: {_effect(combined)}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    args = parser.parse_args()
    names = args.names or [n for n in builtin_names() if n not in SKIP]
    results = args.results or Path(tempfile.mkdtemp(prefix="pglab-tune-bench-"))
    ok = True
    for name in names:
        argv = [sys.executable, "-m", "pglab", "tune", name, "--results", str(results),
                "--steps", str(args.steps), "--repeats", str(args.repeats)]
        for override in args.sets:
            argv += ["--set", override]
        started = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True)
        wall = time.monotonic() - started
        files = sorted((results / name).glob("*.tune.json"))
        tuned = json.loads(files[-1].read_text()) if files else {}
        status = tuned.get("status", f"no tune file (exit {done.returncode})")
        within = wall <= TARGET_S and status == "completed"
        ok = ok and within
        shortened = f", runs shortened: {' '.join(args.sets)}" if args.sets else ""
        print(f"{name}: {wall / 60:.1f} min wall, {status}, steps {args.steps}, repeats "
              f"{args.repeats}{shortened} ({'within' if within else 'over'} the "
              f"{TARGET_S // 60} min target)")
        for line in _describe(tuned):
            print(line)
        if not tuned.get("winning_overrides"):
            print("  no change kept")
        if done.returncode not in (0, 1) or not tuned:
            print("  " + (done.stderr.strip().splitlines() or ["?"])[-1])
        sys.stdout.flush()
    print(f"results: {results}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
