"""Record what a real server writes of statements with lists of constants of several
lengths: pg_stat_statements' texts (PostgreSQL 18 squashes such a list into one entry,
`IN ($1 /*, ... */)`; 15 keeps one entry per length) and the server log's statements and
auto_explain plans (their texts with the literals, as the wait sampler also sees them).

    python tests/samples/pg_stat_statements/make_in_lists.py                  # in-lists-18/
    python tests/samples/pg_stat_statements/make_in_lists.py /usr/lib/postgresql/15/bin

Starts a throwaway server (pglab's LocalServer, as pglab's labs run it: pg_stat_statements
and auto_explain preloaded, query ids on) logging every statement and every plan, runs
STATEMENTS (simple protocol: the literals are in the text) and BOUND (extended protocol:
the values are parameters), and writes in-lists-<major>/: pg_stat_statements.json (the
view's queryid, query and calls), the server's log files and `statements.json` (what
was run, the truth the tests compare with).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from pglab.lab.binaries import find_binaries, runnable_by
from pglab.lab.local import LocalServer
from pglab.lab.osuser import server_user
from pglab.paths import labs_dir

HERE = Path(__file__).resolve().parent


def _in(n: int) -> str:
    return ", ".join(str(i) for i in range(1, n + 1))


# name -> texts that are one statement on PostgreSQL 18 (lists of several lengths)
STATEMENTS = {
    "in": [f"SELECT abalance FROM accounts WHERE aid IN ({_in(n)})"
           for n in (2, 3, 5, 12, 100, 150)],  # the last two longer than the sampler keeps
    "in-and-more": [f"SELECT count(*) FROM accounts WHERE bid = 3 AND aid IN ({_in(n)}) "
                    f"AND abalance >= 0" for n in (2, 4, 7)],
    "any-array": [f"SELECT count(*) FROM accounts WHERE aid = ANY(ARRAY[{_in(n)}])"
                  for n in (2, 3, 6)],
    "strings": ["SELECT count(*) FROM branches WHERE name IN ('b1', 'b2')",
                "SELECT count(*) FROM branches WHERE name IN ('b1', 'b2', 'b3', 'b4')"],
    "casts": ["SELECT count(*) FROM accounts WHERE aid IN (1::bigint, 2::bigint)",
              "SELECT count(*) FROM accounts WHERE aid IN (1::bigint, 2::bigint, 3::bigint)"],
    "update": [f"UPDATE accounts SET abalance = abalance + 1 WHERE aid IN ({_in(n)})"
               for n in (2, 9)],
    # one element is no list: the parser makes it `aid = 1`, a statement of its own
    "in-one": ["SELECT abalance FROM accounts WHERE aid IN (7)"],
    # an expression among the constants: no squashing, one entry per length
    "not-constants": ["SELECT count(*) FROM accounts WHERE aid IN (1, 2, bid)",
                      "SELECT count(*) FROM accounts WHERE aid IN (1, 2, 3, bid)"],
    "not-in": [f"SELECT count(*) FROM accounts WHERE aid NOT IN ({_in(n)})" for n in (2, 3)],
    "signed-and-null": ["SELECT count(*) FROM accounts WHERE aid IN (-1, 2.5, NULL)",
                        "SELECT count(*) FROM accounts WHERE aid IN (-1, 2.5, NULL, 4)"],
    "array-value": ["SELECT ARRAY[1, 2] AS a, 5 AS b", "SELECT ARRAY[1, 2, 3] AS a, 5 AS b"],
    "two-lists": [f"SELECT count(*) FROM accounts WHERE aid IN ({_in(n)}) "
                  f"AND bid IN ({_in(m)})" for n, m in ((2, 3), (4, 2))],
}
# name -> (text, parameters) run through the extended protocol (psycopg binds them)
BOUND: dict[str, list[tuple[str, tuple[int, ...]]]] = {
    "bound-in": [("SELECT abalance FROM accounts WHERE aid IN (%s, %s)", (1, 2)),
                 ("SELECT abalance FROM accounts WHERE aid IN (%s, %s, %s, %s)", (1, 2, 3, 4))],
    # bound values and literals in one text, never run with literals only (its own text)
    "bound-and-literal": [
        ("SELECT bid FROM accounts WHERE aid IN (%s, %s, %s) AND abalance > -1", (1, 2, 3)),
        ("SELECT bid FROM accounts WHERE aid IN (%s, %s) AND abalance > -1", (1, 2))],
    "bound-after-list": [
        ("SELECT count(*) FROM accounts WHERE aid IN (%s, %s) AND bid = %s", (1, 2, 3)),
        ("SELECT count(*) FROM accounts WHERE aid IN (%s, %s, %s) AND bid = %s", (1, 2, 3, 4))],
    # a bound value before a list of literals and a literal after: how the two number
    "bound-before-literals": [
        ("SELECT count(*) FROM accounts WHERE bid = %s AND aid IN (1, 2, 3) AND abalance > -1",
         (3,))],
    # no list at all: a literal before a bound value
    "literal-before-bound": [
        ("SELECT count(*) FROM accounts WHERE abalance > -1 AND bid = %s", (3,))],
    # and with a list after both
    "literal-bound-list": [
        ("SELECT count(*) FROM accounts WHERE abalance > -1 AND bid = %s AND aid IN (1, 2)",
         (3,))],
}


def main() -> None:
    user = server_user()
    bins = runnable_by(find_binaries(sys.argv[1] if len(sys.argv) > 1 else None), user)
    node_dir = labs_dir() / "pgss-in-lists"
    shutil.rmtree(node_dir, ignore_errors=True)
    server = LocalServer("pgss", bins, node_dir, user)
    server.extra_conf.update({
        "log_destination": "'stderr,jsonlog'",
        "log_min_duration_statement": "0",
        "auto_explain.log_min_duration": "0",
    })
    server.initdb(None, None, "C", "UTF8")
    server.start()
    out = HERE / f"in-lists-{bins.major}"
    try:
        with server.connect("postgres") as conn:
            conn.execute("CREATE DATABASE pglab")
        server.create_statements_extension()
        with server.connect() as conn:
            conn.execute("SET log_min_duration_statement = -1")
            conn.execute("SET auto_explain.log_min_duration = -1")
            conn.execute("SET pg_stat_statements.track = 'none'")
            conn.execute("CREATE TABLE accounts (aid int PRIMARY KEY, bid int, abalance int)")
            conn.execute("INSERT INTO accounts SELECT g, g % 10, 0 "
                         "FROM generate_series(1, 1000) g")
            conn.execute("CREATE TABLE branches (bid int PRIMARY KEY, name text)")
            conn.execute("INSERT INTO branches SELECT g, 'b' || g FROM generate_series(0, 9) g")
            conn.execute("ANALYZE")
            conn.execute("SELECT pg_stat_statements_reset()")
        with server.connect() as conn:
            for texts in STATEMENTS.values():
                for text in texts:
                    conn.execute(text.encode(), prepare=False)  # bytes: no parameters
            for bound in BOUND.values():
                for text, params in bound:
                    conn.execute(text, params)
        with server.connect() as reader:
            reader.execute("SET pg_stat_statements.track = 'none'")
            rows = reader.execute(
                "SELECT queryid::text, query, calls FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND query NOT LIKE 'SET %' ORDER BY query").fetchall()
    finally:
        server.stop()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for path in sorted(server.log_dir.glob("postgresql.*")):
        shutil.copy(path, out / path.name)
    (out / "pg_stat_statements.json").write_text(json.dumps(
        {"postgres": bins.version,
         "rows": [{"queryid": q, "query": t, "calls": c} for q, t, c in rows]},
        indent=1) + "\n")
    (out / "statements.json").write_text(json.dumps(
        {"statements": STATEMENTS,
         "bound": {k: [t for t, _ in v] for k, v in BOUND.items()}}, indent=1) + "\n")
    shutil.rmtree(node_dir, ignore_errors=True)
    print(f"{out}: {len(rows)} pg_stat_statements entries, "
          f"{', '.join(p.name for p in sorted(out.iterdir()))}")


if __name__ == "__main__":
    main()
