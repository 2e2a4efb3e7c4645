"""Are the built-ins' verdicts stable? Each built-in run N times, its top cause each time.

    python bench/verdict_stability.py [NAME ...] [--repeats 3] [--results DIR]
                                      [--set KEY=VALUE ...]

Runs `pglab run NAME` (default options unless `--set` shortens them) `--repeats` times for
each named built-in (default: all but demo), one after the other, and prints per built-in
the verdict of each run (cause and sub-cause, or none) and how many agree with the
majority of its runs. Issue 17 asks that repeated runs of one scenario give the same
top cause. The figure is agreement: runs whose top cause is the majority's, of all runs.

Exit status 0 when every built-in's runs agree, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from pglab.scenario.builtin import builtin_names


def _verdict(run: Path) -> str:
    analysis = run / "analysis.json"
    if not analysis.exists():
        return "(no analysis)"
    verdict = json.loads(analysis.read_text())["summary"]["verdict"]
    if not verdict:
        return "none"
    sub = verdict.get("sub_cause")
    return f"{verdict['cause']}" + (f" ({sub})" if sub else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--results", type=Path)
    parser.add_argument("--set", action="append", default=[], dest="sets")
    args = parser.parse_args()
    names = args.names or [n for n in builtin_names() if n != "demo"]
    results = args.results or Path(tempfile.mkdtemp(prefix="pglab-stability-"))
    print(f"{len(names)} built-ins x {args.repeats} runs, results under {results}"
          + (f", shortened: {' '.join(args.sets)}" if args.sets else ", default options"))
    agreeing = total = 0
    unstable = []
    for name in names:
        verdicts = []
        started = time.monotonic()
        for repeat in range(args.repeats):
            out = results / name / str(repeat + 1)
            command = [sys.executable, "-m", "pglab", "run", name, "--results", str(out)]
            for item in args.sets:
                command += ["--set", item]
            done = subprocess.run(command, capture_output=True, text=True)
            runs = sorted(p for p in (out / name).glob("*") if p.is_dir()) if (
                out / name).exists() else []
            if done.returncode != 0 or not runs:
                last = (done.stderr.strip() or "?").splitlines()[-1]
                verdicts.append(f"(failed: {last[:60]})")
                continue
            # a sweep built-in makes one run per point: its first point is the pathology
            verdicts.append(_verdict(runs[0]))
        _majority, count = Counter(verdicts).most_common(1)[0]
        agreeing += count
        total += len(verdicts)
        if count < len(verdicts):
            unstable.append(name)
        print(f"{name:26} {count}/{len(verdicts)} agree  {' | '.join(verdicts)}  "
              f"({time.monotonic() - started:.0f} s)", flush=True)
    print(f"agreement: {agreeing}/{total} runs give their built-in's majority verdict; "
          f"unstable: {', '.join(unstable) or 'none'}")
    return 1 if unstable else 0


if __name__ == "__main__":
    sys.exit(main())
