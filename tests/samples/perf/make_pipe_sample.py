"""Make the committed sample of perf record's piped data (pipe.data.gz, pipe.json).

Run as root: python make_pipe_sample.py
It starts a parent shell that, 1 s later, forks a child spinning on a CPU for 1 s
(after perf started: the filter must follow it through its FORK event), and records
`perf record -e cpu-clock -F 99 --call-graph dwarf,256 -a -k CLOCK_MONOTONIC -q -o -`
for 2.5 s (os.profile's record, with a smaller stack copy to keep the file small: the
layout of each event is the same). pipe.json holds the parent's pid.
"""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    parent = subprocess.Popen(
        ["bash", "-c", 'sleep 1; timeout 1 sh -c "while :; do :; done"; sleep 1'])
    record = ["perf", "record", "-e", "cpu-clock", "-F", "99", "--call-graph", "dwarf,256",
              "-a", "-k", "CLOCK_MONOTONIC", "-q", "-o", "-", "--", "sleep", "2.5"]
    data = subprocess.run(record, capture_output=True, check=True).stdout
    parent.wait()
    (HERE / "pipe.data.gz").write_bytes(gzip.compress(data, 9))
    (HERE / "pipe.json").write_text(json.dumps({"parent": parent.pid, "record": record}) + "\n")


if __name__ == "__main__":
    main()
