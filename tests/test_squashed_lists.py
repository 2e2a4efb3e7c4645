"""Lists of constants: PostgreSQL 18's pg_stat_statements keeps `IN (1, 2)` and
`IN (1, 2, 3)` as one entry, `IN ($1 /*, ... */)`; 15 keeps one per length. Tested on
real servers' output (tests/samples/pg_stat_statements/make_in_lists.py): the texts
pg_stat_statements wrote and the plans the same server logged with their literals."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pglab.analysis.plans import run_plans
from pglab.analysis.statements import TEXT_CHARS, StatementTexts
from pglab.compare.statements import RunStatement, _pairs
from pglab.results.spool import event_record, events_frame
from pglab.serverlog import parse_log_file
from pglab.serverlog.triggers import STATEMENT_MAX
from pglab.sqltext import normalise, squash_lists

SAMPLES = Path(__file__).parent / "samples" / "pg_stat_statements"


def _sample(major: int) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    """(pg_stat_statements' rows, name -> the texts run, bound ones with $n)."""
    found = SAMPLES / f"in-lists-{major}"
    rows = json.loads((found / "pg_stat_statements.json").read_text())["rows"]
    run = json.loads((found / "statements.json").read_text())
    texts: dict[str, list[str]] = dict(run["statements"])
    for name, bound in run["bound"].items():
        texts[name] = []
        for text in bound:
            pieces = text.split("%s")
            texts[name].append(pieces[0] + "".join(f"${n}{piece}" for n, piece
                                                   in enumerate(pieces[1:], 1)))
    return rows, texts


def _texts(rows: list[dict[str, Any]]) -> StatementTexts:
    return StatementTexts.from_events([("primary", {"queryid": r["queryid"],
                                                    "query": r["query"]}) for r in rows])


@pytest.mark.parametrize("major", [15, 18])
def test_every_text_normalises_to_its_servers_entry(major: int) -> None:
    """Each statement run, normalised for its server, is the very text that server's
    pg_stat_statements wrote; on 18 the lengths of one statement are one text (not for
    a list with a column in it, nor a list of one), on 15 a text per length (18 writes one text for
    the two lengths of `IN ($1, $2) AND bid = $3`, bound: its queryids differ by the
    bound value's number)."""
    rows, run = _sample(major)
    written = {r["query"] for r in rows}
    for name, texts in run.items():
        found = {normalise(text, squash=major >= 18) for text in texts}
        assert found <= written, (name, found - written)
        one = major >= 18 and name != "not-constants"
        assert len(found) == (1 if one else len(texts)), (name, found)


def test_an_older_servers_texts_squash_into_18s() -> None:
    """The two versions' entries of one statement meet squashed: every 15 text of a
    statement, squashed, is 18's text of it (compare pairs runs of the two)."""
    rows15, run = _sample(15)
    rows18, _ = _sample(18)
    written18 = {r["query"] for r in rows18}
    for name, texts in run.items():
        of15 = {normalise(text, squash=False) for text in texts}
        assert {squash_lists(text) for text in of15} <= written18, name
        assert {squash_lists(normalise(t, squash=True)) for t in texts} == \
            {normalise(t, squash=True) for t in texts}  # squashing twice changes nothing
    # numbered anew in order, as 18 numbers a bound value after a list
    assert normalise("SELECT 1 WHERE a IN ($1, $2) AND b = $3") == \
        "SELECT $1 WHERE a IN ($2 /*, ... */) AND b = $3"
    base = {r["queryid"]: RunStatement(r["queryid"], r["query"], [], [], []) for r in rows15}
    cont = {r["queryid"]: RunStatement(r["queryid"], r["query"], [], [], []) for r in rows18}
    # the versions' queryids differ: by text, one of 15's entries of the IN statement
    # meets 18's one entry (a pair is one to one)
    want = "SELECT abalance FROM accounts WHERE aid IN ($1 /*, ... */)"
    met = [p for p in _pairs([base], [cont]) if p[1] and p[2] and cont[p[2]].text == want]
    assert len(met) == 1 and met[0][0] in {normalise(t, squash=False) for t in run["in"]}


@pytest.mark.parametrize("major", [15, 18])
@pytest.mark.parametrize("name", ["postgresql.log", "postgresql.json"])
def test_each_logged_plan_meets_its_entry(major: int, name: str) -> None:
    """auto_explain logged every statement's plan with its literals: matched to the
    entries by text, each entry gets as many plans as pg_stat_statements counted calls.
    An entry whose text another entry has too (the server wrote one text for two
    queryids: bigint casts and numerics, or a bound value numbered after the list)
    cannot be told by its text: its plans meet no entry rather than a wrong one. So
    on 15 with the lists of 100 and 150 constants: a plan keeps 500 characters of its
    text, those two are kept squashed, which no single 15 entry is."""
    rows, _ = _sample(major)
    texts = _texts(rows)
    events, stats = parse_log_file(SAMPLES / f"in-lists-{major}" / name)
    assert stats.skipped == 0
    plans = [e.attrs for e in events if e.kind == "statement-plan"]
    matched = Counter(texts.queryid_of_text("primary", str(p["query"])) for p in plans)
    shared = {t for t, n in Counter(r["query"] for r in rows).items() if n > 1}
    if major < 18:
        shared |= {r["query"] for r in rows if len(r["query"]) > STATEMENT_MAX}
        long = [p for p in plans if str(p["query"]).endswith("IN ($1 /*, ... */)")]
        assert len(long) == 2 and not any(texts.queryid_of_text("primary", str(p["query"]))
                                           for p in long)
    for row in rows:
        if row["query"] not in shared:
            assert matched[row["queryid"]] == row["calls"], row
    assert sum(row["calls"] for row in rows if row["query"] not in shared) >= 30


def test_plans_of_one_statement_are_one_statement_with_or_without_entries() -> None:
    """The PostgreSQL 18 log's plans of `IN` lists of six lengths (and two bound) are
    one statement's plans: keyed by its entry, and without entries (a log alone) by the
    squashed text, which is the entry's."""
    events, _ = parse_log_file(SAMPLES / "in-lists-18" / "postgresql.json")
    frame = events_frame([event_record(e) for e in events])
    rows, _ = _sample(18)
    want = "SELECT abalance FROM accounts WHERE aid IN ($1 /*, ... */)"
    for texts in (_texts(rows), StatementTexts()):
        plans = run_plans(frame, texts)
        found = [st for st in plans.statements.values() if st.text == want]
        assert len(found) == 1
        assert sum(seen.count for seen in found[0].plans.values()) == 8


@pytest.mark.parametrize("major", [15, 18])
def test_a_sampled_text_cut_inside_a_long_list_meets_its_entry(major: int) -> None:
    """The wait sampler keeps 200 characters of a statement without query_id
    (`left(query, 200)`): cut inside a list of 100 or 150 constants, the parser refuses
    it and the sampled text still meets the entry: 18's one entry, or on 15 one of the
    long lists' entries (which of them the first 200 characters cannot say)."""
    rows, run = _sample(major)
    texts = _texts(rows)
    long = [text for text in run["in"] if len(text) > TEXT_CHARS]
    assert len(long) == 2
    entries = {r["queryid"] for r in rows if r["query"].count("$") >= 100
               or r["query"] == "SELECT abalance FROM accounts WHERE aid IN ($1 /*, ... */)"}
    assert len(entries) == (1 if major >= 18 else 2)
    for text in long:
        sampled = normalise(text[:TEXT_CHARS], squash=major >= 18)
        assert "/*" not in sampled  # not parsed: the fallback's words
        assert texts.queryid_of_text("primary", sampled) in entries, sampled
