"""Which statements: pg_stat_statements' deltas on real reads of the view, a stall named
down to its statement on a real run, and a short live run that records them."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import run_cli, write_scenario
from pglab.analysis.analyze import analyze_run, build_analysis
from pglab.analysis.loading import load_run_frames
from pglab.analysis.statements import comparable, statement_texts
from pglab.probes.db_statements import (
    ViewRead,
    entry_deltas,
    parse_rows,
    per_statement,
    queryid_of,
)
from pglab.report.model import build_model
from pglab.report.page import render

SAMPLES = Path(__file__).parent / "samples"
READS = SAMPLES / "pg_stat_statements"
RUN = SAMPLES / "runs" / "statements"


def _reads(major: int) -> tuple[dict[str, Any], list[ViewRead]]:
    data = json.loads((READS / f"reads-{major}.json").read_text())
    return data, [parse_rows([tuple(row) for row in read["rows"]]) for read in data["reads"]]


@pytest.mark.parametrize("major", [18, 15])
def test_deltas_count_what_ran_through_resets_and_evictions(major: int) -> None:
    """make_reads.py ran known numbers of calls between real reads of the view, with a
    reset of one entry, a reset of all and an eviction between them: each interval's
    delta is the calls it made, never negative."""
    data, reads = _reads(major)
    steps = [read["step"] for read in data["reads"]]
    made = [read["calls_since_last_read"] for read in data["reads"]]
    names: dict[str, str] = {}  # queryid -> the script's name, from the calls it made
    for index in range(1, len(reads)):
        before, after = reads[index - 1], reads[index]
        reset = after.stats_reset != before.stats_reset
        deltas = entry_deltas(before.entries, after.entries, reset)
        assert all(v >= 0 for d in deltas.by_entry.values() for v in d.values())
        calls = {q: d["calls"] for q, d in per_statement(deltas).items() if d.get("calls")}
        step = steps[index]
        if step == "more":  # the five statements, 10 to 14 calls each: names them
            by_count = {int(n): name for name, n in made[index].items()}
            names = {q: by_count[int(n)] for q, n in calls.items()}
            assert sorted(names.values()) == sorted(made[index])
            continue
        named = {names[q]: n for q, n in calls.items() if q in names}
        if step == "one-entry-reset":  # its counters went back: counted from zero
            assert named == {"one": 4} and deltas.remade == 1 and not reset
        elif step == "all-reset":  # stats_reset moved: every entry from zero
            assert reset and named == {"two": 6}
        elif step == "before-eviction":
            assert named == {"three": 1}
        elif step == "after-eviction":
            # 130 new shapes pushed entries out: pg_stat_statements_info says how often
            assert before.dealloc == 0 and (after.dealloc or 0) > 0
            if major >= 17:  # stats_since tells "three" was evicted and made anew
                assert named["three"] == 5 and deltas.remade >= 1
            else:  # before 17 an entry made anew that ran more than before cannot be told
                assert named["three"] == 5 - 1
    assert "after-eviction" in steps and names


def test_an_entry_made_anew_is_never_a_negative_delta() -> None:
    """The one entry reset alone reads lower than before: its new counts, not minus."""
    _data, reads = _reads(18)
    before, after = reads[1], reads[2]
    lower = [k for k, e in after.entries.items() if k in before.entries
             and e.counters["calls"] < before.entries[k].counters["calls"]]
    assert len(lower) == 1
    deltas = entry_deltas(before.entries, after.entries, reset=False)
    assert deltas.by_entry[lower[0]]["calls"] == after.entries[lower[0]].counters["calls"]
    assert queryid_of(lower[0]) == lower[0].split("/")[0]


def test_the_stall_names_the_statement_that_queued_first() -> None:
    """The `statements` sample: a five-statement script; a `sql` fault held LOCK TABLE
    pgbench_tellers 4 s. The stall's first statement is the one that updates tellers,
    waiting on the relation's lock (sampled by its text while analysed, then matched with
    pg_stat_statements' text), on the table its plan reads; the healthy seconds saw it
    far less; the fault's own pg_sleep is there, as it was nowhere else."""
    frames = load_run_frames(RUN)
    document = build_analysis(frames)
    stall = max(document.stalls, key=lambda s: s["seconds"])
    assert stall["faults"][0]["action"] == "sql"
    first = stall["statements"][0]
    assert first["text"] == "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2"
    assert first["queryid"] is not None and first["top_wait"] == "Lock:relation"
    assert first["share"] > 2 * first["healthy_share"]
    assert first["relations"] == ["pgbench_tellers"]  # from its generic plan
    # the holder's own statement is there too, and only in the stall
    (sleep,) = [s for s in stall["statements"] if s["text"] == "SELECT pg_sleep($1)"]
    assert sleep["healthy_share"] == 0 and sleep["top_wait"] == "Timeout:PgSleep"
    # the waits on the lock came with no query_id: the sampler's text was matched
    ts = frames.timeseries.filter(pl.col("source") == "db.statement_waits")
    texts = [t for t in ts["label"].unique().to_list() if t.startswith("text:")]
    assert any(comparable(t[5:]) == comparable(first["text"]) for t in texts)


def test_attribution_is_the_truth_the_scenario_made() -> None:
    """While the fault held the lock (from half a second after it began, when every
    client had queued, to its end), each of the 4 clients was in the tellers update and
    the fault's session in its pg_sleep: the statement samples say 4 in 5 and 1 in 5."""
    frames = load_run_frames(RUN)
    fault = frames.events.filter(pl.col("kind") == "fault").row(0, named=True)
    held = json.loads(fault["attrs"])["elapsed_s"]
    start = fault["t_start"] + dt.timedelta(seconds=0.5)
    end = fault["t_start"] + dt.timedelta(seconds=held)
    samples = frames.timeseries.filter(
        (pl.col("source") == "db.statement_waits") & (pl.col("t") >= start)
        & (pl.col("t") < end))
    texts = statement_texts(frames.events)
    by_text: dict[str, float] = {}
    for label, value in samples.select("label", "value").iter_rows():
        queryid = (texts.queryid_of_text("primary", label[5:])
                   if label.startswith("text:") else label)
        text = texts.text("primary", queryid) if queryid else label
        by_text[text] = by_text.get(text, 0.0) + value
    total = sum(by_text.values())
    assert total >= 5 * 30  # 3.5 s at 10 Hz, 5 backends each read
    assert by_text == {
        "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2": 4 * total / 5,
        "SELECT pg_sleep($1)": total / 5}


def test_the_run_table_agrees_with_the_client() -> None:
    """The run's statements by execution time: each of the script's statements once per
    transaction, so each one's calls per second is the client's TPS (two sources)."""
    frames = load_run_frames(RUN)
    document = build_analysis(frames)
    table = {e["text"]: e for e in document.statements}
    times = [e["time_share"] for e in document.statements]
    assert times == sorted(times, reverse=True)
    select = table["SELECT abalance FROM pgbench_accounts WHERE aid = $1"]
    measured = frames.client.filter(~pl.col("warmup") & ~pl.col("partial"))
    assert select["calls_per_s"] == pytest.approx(measured["tps"].mean(), rel=0.1)
    assert select["shared_blks_hit_per_s"] > 0 and select["mean_ms"] > 0
    update = table["UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2"]
    assert update["wal_bytes_per_s"] > 0
    texts = statement_texts(load_run_frames(RUN).events)
    assert "commit" in texts.texts["primary"].values()


def test_details_and_the_report_list_the_stall_s_statements(tmp_path: Path) -> None:
    run = tmp_path / "statements"
    shutil.copytree(RUN, run)
    analyze_run(run)
    result = run_cli("analyze", str(run), "--details")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = lines.index("    statements")
    assert "Lock:relation" in lines[at + 1] and "UPDATE pgbench_tellers" in lines[at + 1]
    page = render(build_model(run))
    assert "Statements by execution time" in page
    assert "statements its client backends were sampled in" in page
    assert "SELECT abalance FROM pgbench_accounts WHERE aid = $1" in page
    assert page.count('<svg class="spark"') == len(json.loads(
        (run / "analysis.json").read_text())["statements"])  # a sparkline each


def test_the_analysis_reads_the_names_the_probes_write() -> None:
    """analysis/statements.py keeps the probes' names as its own constants (it does not
    import the probes' database code): they must not drift apart."""
    from pglab.analysis import statements as analysis
    from pglab.probes import db_activity, db_statements

    assert analysis.STATEMENT_WAITS == db_activity.STATEMENT_WAITS
    assert analysis.TEXT_LABEL == db_activity.TEXT_LABEL
    assert analysis.TEXT_CHARS == db_activity.TEXT_CHARS
    assert db_statements.StatementStats.name == analysis.STATEMENTS
    assert set(analysis.COLUMNS) == set(db_statements.COUNTERS)


def test_an_empty_sql_fault_is_refused_in_one_line(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, '[workload]\nduration = "10s"\n[[faults]]\n'
                                        'at = "2s"\naction = "sql"\n')
    result = run_cli("validate", str(scenario))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "'sql' needs the statement to run" in result.stderr


@pytest.mark.live
def test_a_lab_run_records_statements_and_query_ids(tmp_path: Path) -> None:
    """A 3-s run of a two-statement script with a `sql` fault that resets
    pg_stat_statements mid-run: the extension preloaded, wait samples by query_id, the
    statements' texts once, the reset seen as one (no negative rate), the fault's two
    statements run on its side connection; the generic plan of a statement when it first
    ran with how its index is made, and auto_explain's plan of the slow one from the
    server log. About 15 s with the template built."""
    (tmp_path / "two.sql").write_text(
        "\\set aid random(1, 100000 * :scale)\n"
        "SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n"
        "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;\n")
    scenario = write_scenario(tmp_path, (
        '[workload]\nscale = 1\nmix = []\nscripts = ["two.sql"]\nclients = 2\n'
        'duration = "3s"\nwarmup = "0s"\n[[faults]]\nat = "1s"\naction = "sql"\n'
        'args = { sql = "SELECT pg_sleep(0.5); SELECT pg_stat_statements_reset()" }\n'))
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "results"))
    assert result.returncode == 0, result.stderr
    (run,) = (tmp_path / "results" / "t").iterdir()
    ts = pl.read_parquet(run / "timeseries.parquet")
    events = pl.read_parquet(run / "events.parquet")
    named = {json.loads(a)["query"]: json.loads(a).get("relations") for a in
             events.filter(pl.col("kind") == "statement-text")["attrs"].to_list()}
    # its relations from its generic plan (EXPLAIN, never run)
    assert named["SELECT abalance FROM pgbench_accounts WHERE aid = $1"] == [
        "pgbench_accounts", "pgbench_accounts_pkey"]
    plans = {json.loads(a)["query"]: json.loads(a).get("plan") for a in
             events.filter(pl.col("kind") == "statement-text")["attrs"].to_list()}
    assert plans["SELECT abalance FROM pgbench_accounts WHERE aid = $1"] == [
        "Index Scan using pgbench_accounts_pkey on pgbench_accounts"]
    # and how its index is made: a primary key's, by the constraint (plan-index's test)
    indexes = {json.loads(a)["query"]: json.loads(a).get("indexes") for a in
               events.filter(pl.col("kind") == "statement-text")["attrs"].to_list()}
    assert indexes["SELECT abalance FROM pgbench_accounts WHERE aid = $1"] == {
        "pgbench_accounts_pkey": {"table": "pgbench_accounts", "make": (
            "ALTER TABLE pgbench_accounts ADD CONSTRAINT pgbench_accounts_pkey "
            "PRIMARY KEY (aid)")}}
    # the fault's pg_sleep(0.5) passed auto_explain's threshold: its plan, from the log
    # (its text the whole string the fault sent, as auto_explain logs it)
    logged = [json.loads(a) for a in
              events.filter(pl.col("kind") == "statement-plan")["attrs"].to_list()]
    sleep = [p for p in logged if p["query"].startswith("SELECT pg_sleep($1);")]
    assert sleep and sleep[0]["outline"] == ["Result"] and sleep[0]["plan_id"], logged
    calls = ts.filter((pl.col("source") == "db.statements") & (pl.col("metric") == "calls"))
    assert calls.height > 0 and calls["value"].min() > 0  # type: ignore[operator]
    resets = [json.loads(a) for a in
              events.filter(pl.col("kind") == "statements-reset")["attrs"].to_list()]
    assert [r["reset_all"] for r in resets] == [True], resets
    rates = ts.filter(pl.col("source") == "db.statements")["value"]
    assert rates.min() >= 0  # type: ignore[operator]
    waits = ts.filter(pl.col("source") == "db.statement_waits")
    ids = [label for label in waits["label"].unique().to_list() if label.lstrip("-").isdigit()]
    assert ids, waits["label"].unique().to_list()
    assert events.filter(pl.col("kind") == "statements-missing").height == 0
    fault = json.loads(events.filter(pl.col("kind") == "fault")["attrs"][0])
    assert "error" not in fault and fault["elapsed_s"] >= 0.5, fault
