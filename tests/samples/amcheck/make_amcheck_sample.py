"""Real pg_amcheck output from relations damaged on purpose (tests/test_durability_analysis.py).

Starts a throwaway PostgreSQL with pglab (scale 1), stops it, damages two pages of
pgbench_accounts' files the way a torn or lost write would, starts it again and runs
pg_amcheck as pglab's integrity verdict does (pglab.durability.AMCHECK_OPTIONS). Twice:
with data checksums (PostgreSQL 18's default: any damaged page fails its checksum) and
without (pg_amcheck then reads the damaged structures). Writes
damaged-pg<major>-checksums-{on,off}.json: the argv (socket and port replaced), exit
code, stdout, stderr.

    python tests/samples/amcheck/make_amcheck_sample.py      (as root: the server runs as nobody)
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from pglab.durability.verdicts import AMCHECK_OPTIONS
from pglab.lab.lab import Lab
from pglab.scenario import load_text

HERE = Path(__file__).resolve().parent
SCENARIO = """name = "damage"
[server]
initdb = {{ data_checksums = {checksums} }}
[workload]
scale = 1
clients = 1
duration = "1s"
warmup = "0s"
"""
PAGE = 8192


def _file_of(lab: Lab, relation: str) -> Path:
    assert lab.primary is not None
    with lab.primary.connect() as conn:
        row = conn.execute("SELECT pg_relation_filepath(%s)", (relation,)).fetchone()
    assert row is not None
    return lab.primary.data_dir / str(row[0])


def _overwrite(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)


def sample(checksums: bool) -> None:
    text = SCENARIO.format(checksums=str(checksums).lower())
    scenario = load_text(text, "damage.toml").scenario
    with Lab(scenario, "damage.toml", f"amcheck-sample-{time.time_ns()}") as lab:
        server, bins = lab.primary, lab.bins
        assert server is not None and bins is not None
        index, heap = _file_of(lab, "pgbench_accounts_pkey"), _file_of(lab, "pgbench_accounts")
        server.stop()
        # an index leaf (block 1): its line pointers become garbage
        _overwrite(index, PAGE + 24, b"\xff" * 64)
        # a heap page (block 2): its first tuple's header, as a write torn mid-page leaves it
        with heap.open("rb") as f:
            f.seek(2 * PAGE + 24)
            item = int.from_bytes(f.read(4), "little")
        _overwrite(heap, 2 * PAGE + (item & 0x7FFF), b"\xee" * 24)
        server.start()
        info = server.conninfo()
        argv = [str(bins.tool("pg_amcheck")), *AMCHECK_OPTIONS, "-h", info["host"],
                "-p", info["port"], "-U", info["user"], info["dbname"]]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        version = subprocess.run([str(bins.tool("pg_amcheck")), "--version"],
                                 capture_output=True, text=True).stdout.strip()
    shown = [a.replace(info["host"], "SOCKET_DIR").replace(info["port"], "PORT")
             for a in argv[1:]]
    major = version.split()[-1].split(".")[0]
    out = HERE / f"damaged-pg{major}-checksums-{'on' if checksums else 'off'}.json"
    out.write_text(json.dumps({"tool": version, "argv": ["pg_amcheck", *shown],
                               "returncode": result.returncode, "stdout": result.stdout,
                               "stderr": result.stderr}, indent=1) + "\n")
    print(out, result.returncode)


def main() -> None:
    for checksums in (True, False):
        sample(checksums)


if __name__ == "__main__":
    main()
