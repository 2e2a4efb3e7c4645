"""Make the committed os.profile sample: 3 s of real perf over a pgbench load.

Run as root beside a running pglab lab (e.g. `pglab run` of a scenario with 8 clients):
    python make_perf_sample.py POSTMASTER_PID PGBENCH_PID
It records `perf record -e cpu-clock -F 49 --call-graph dwarf -a -k CLOCK_MONOTONIC` for
3 s, unwinds it with `perf script --no-inline -F comm,pid,tid,time,ip,sym,dso` (the
probe's own commands, probes/os_probes/profile.py), and keeps every sample of the server's
processes and of pgbench and the first 10 of any other process (which the probe must
leave out), in perf-script.txt; processes.json holds the /proc files the probe reads to
place them (stat, cmdline, the postmaster's children list) as they were meanwhile.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def main() -> None:
    postmaster, pgbench = int(sys.argv[1]), int(sys.argv[2])
    children = [int(p) for p in read(f"/proc/{postmaster}/task/{postmaster}/children").split()]
    procs = {str(pid): {"stat": read(f"/proc/{pid}/stat"), "cmdline": read(f"/proc/{pid}/cmdline")}
             for pid in [postmaster, *children, pgbench]}
    record = ["perf", "record", "-e", "cpu-clock", "-F", "49", "--call-graph", "dwarf", "-a",
              "-k", "CLOCK_MONOTONIC", "-q", "-o", "-", "--", "sleep", "3"]
    script = ["perf", "script", "-i", "-", "--no-inline", "-F", "comm,pid,tid,time,ip,sym,dso"]
    rec = subprocess.Popen(record, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    text = subprocess.run(script, stdin=rec.stdout, capture_output=True, text=True).stdout
    rec.wait()
    ours = {int(p) for p in procs}
    kept, others = [], 0
    for block in text.split("\n\n"):
        head = block.split("\n", 1)[0].split()
        pid = next((int(w.split("/")[0]) for w in head if "/" in w and w.split("/")[0].isdigit()),
                   None)
        if pid in ours:
            kept.append(block)
        elif others < 10 and block.strip():
            kept.append(block)
            others += 1
    (HERE / "perf-script.txt").write_text("\n\n".join(kept) + "\n")
    (HERE / "processes.json").write_text(json.dumps({
        "postmaster": postmaster, "pgbench": pgbench, "children": children,
        "processes": procs, "record": record, "script": script}, indent=1) + "\n")


if __name__ == "__main__":
    main()
