"""Record real reads of pg_stat_statements around a reset of one entry, a reset of all,
and an eviction, with the calls made between them (the truth the tests compare with).

    python tests/samples/pg_stat_statements/make_reads.py

Starts a throwaway server (pglab's LocalServer, PostgreSQL from the embedded wheel, as
pglab's labs run it: pg_stat_statements preloaded, query ids on) with
pg_stat_statements.max = 100, reads the view with db.statements' own query at each step
and writes reads-<major>.json: the rows as the probe's query returns them.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.local import LocalServer
from pglab.lab.osuser import server_user
from pglab.paths import labs_dir
from pglab.probes.base import ProbeOutput
from pglab.probes.capabilities import Capabilities
from pglab.probes.db_statements import StatementStats

HERE = Path(__file__).resolve().parent
STATEMENTS = {  # name -> text: five statements of distinct shapes
    "one": "SELECT 1 AS one",
    "two": "SELECT 1 AS a, 2 AS b",
    "three": "SELECT count(*) FROM generate_series(1, 10)",
    "four": "SELECT now()",
    "five": "SELECT 1 WHERE 1 = 1",
}


def _json(value: Any) -> Any:
    return float(value) if isinstance(value, decimal.Decimal) else value


def main() -> None:
    user = server_user()
    bins = runnable_by(find_binaries(sys.argv[1] if len(sys.argv) > 1 else None), user)
    node_dir = labs_dir() / "pgss-samples"
    shutil.rmtree(node_dir, ignore_errors=True)
    server = LocalServer("pgss", bins, node_dir, user)
    server.extra_conf["pg_stat_statements.max"] = "100"
    server.initdb(None, None, "C", "UTF8")
    server.start()
    try:
        with server.connect("postgres") as conn:
            conn.execute("CREATE DATABASE pglab")
        server.create_statements_extension()
        reads: list[dict[str, Any]] = []
        with server.connect() as conn, server.connect() as reader:
            # the reads and resets are not counted, as telemetry's own statements are not
            reader.execute("SET pg_stat_statements.track = 'none'")
            probe = StatementStats()
            state = probe._prepare(reader, Capabilities.detect(reader), "primary",
                                   dt.datetime.now(dt.timezone.utc), ProbeOutput())
            query = state.query
            assert query is not None

            def run(name: str, times: int) -> None:
                for _ in range(times):
                    conn.execute(STATEMENTS[name])

            def read(step: str, calls: dict[str, int]) -> None:
                rows = [[_json(v) for v in row] for row in reader.execute(query).fetchall()]
                reads.append({"step": step, "calls_since_last_read": calls, "rows": rows})

            for name in STATEMENTS:
                run(name, 3)
            read("baseline", {})
            for index, name in enumerate(STATEMENTS):
                run(name, 10 + index)
            read("more", {name: 10 + index for index, name in enumerate(STATEMENTS)})
            queryid = reader.execute("SELECT queryid FROM pg_stat_statements "
                                     "WHERE query LIKE '% AS one'").fetchone()
            assert queryid is not None
            reader.execute("SELECT pg_stat_statements_reset(0, 0, %s)", [queryid[0]])
            run("one", 4)
            read("one-entry-reset", {"one": 4})
            reader.execute("SELECT pg_stat_statements_reset()")
            run("two", 6)
            read("all-reset", {"two": 6})
            run("three", 1)  # one call: the least used entry, evicted first
            read("before-eviction", {"three": 1})
            for width in range(3, 133):  # 130 shapes none of the five has, 3 calls each
                text = "SELECT " + ", ".join(["1"] * width)
                for _ in range(3):
                    conn.execute(text)
            run("three", 5)
            read("after-eviction", {"three": 5, "distinct": 130})
        version = bins.major
        out = HERE / f"reads-{version}.json"
        out.write_text(json.dumps({"postgres": bins.version, "statements": STATEMENTS,
                                   "query": query, "reads": reads}, indent=1) + "\n")
        print(f"{out}: {len(reads)} reads, {out.stat().st_size // 1024} kB")
    finally:
        server.stop(discard=True)
        shutil.rmtree(node_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
