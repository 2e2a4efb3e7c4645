"""Which plan: auto_explain's plans read from real PostgreSQL 15 and 18 logs (all three
formats, JSON and text plans), a plan cut short, texts normalised by PostgreSQL's parser,
the plan change named on a real run of the plan-flip built-in, and compare statement by
statement against a run of the same built-in without the fault."""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
from pathlib import Path

import polars as pl
import pytest
from rich.console import Console

from conftest import run_cli
from pglab.analysis.analyze import analyze_run, build_analysis
from pglab.analysis.loading import load_run_frames
from pglab.analysis.plans import GoneIndex, RunPlans, run_plans
from pglab.analysis.recommendations import NOT_TESTABLE, Facts, advise
from pglab.analysis.statements import comparable, statement_texts
from pglab.compare.comparison import as_dict, compare
from pglab.compare.groups import load_group
from pglab.compare.render import render_text
from pglab.lab.faults import check_faults
from pglab.report.model import build_model
from pglab.report.page import render
from pglab.results.manifest import Manifest
from pglab.scenario import LoadedScenario, load
from pglab.scenario.builtin import load_builtin
from pglab.serverlog import parse_log_file
from pglab.sqltext import normalise
from pglab.terminal.tune_result import print_tune
from pglab.tune import Candidate, CandidateResult, Step, TuneResult

SAMPLES = Path(__file__).parent / "samples"
LOGS = SAMPLES / "serverlog" / "auto_explain"
FLIP = SAMPLES / "runs" / "plan-flip"
FLIP_BASE = SAMPLES / "runs" / "plan-flip-base"
STALE = SAMPLES / "runs" / "plan-flip-stale"
FORMATS = ("postgresql.log", "postgresql.csv", "postgresql.json")
SELECT = "SELECT abalance FROM accounts WHERE aid = $1"


def _plans(path: Path) -> list[dict[str, object]]:
    events, stats = parse_log_file(path)
    assert stats.skipped == 0
    return [e.attrs for e in events if e.kind == "statement-plan"]


@pytest.mark.parametrize("major", [15, 18])
@pytest.mark.parametrize("name", FORMATS)
def test_auto_explain_plans_are_read_in_every_format(major: int, name: str) -> None:
    """make_auto_explain.sh: the SELECT by primary key, its plan an Index Scan, then a
    (Parallel) Seq Scan once the key is dropped: two plan ids of one statement, its text
    normalised as pg_stat_statements writes it; the text-format plans outlined too."""
    plans = _plans(LOGS / f"pg{major}" / name)
    assert len(plans) == 10
    select = [p for p in plans if p["query"] == SELECT]
    assert select[0]["outline"] == ["Index Scan using accounts_pkey on accounts"]
    assert all("Seq Scan on accounts" in str(p["outline"]) for p in select[1:])
    ids = [p.get("plan_id") for p in select]
    assert len(select) == 5 and ids[0] != ids[1] and ids[1] == ids[2]
    # the extended protocol's plans: the text auto_explain logs has the $1 already
    assert sum(1 for p in select if float(str(p["duration_ms"])) > 20) == 4
    text_join = plans[-1]["outline"]
    assert isinstance(text_join, list) and "          Parallel Seq Scan on accounts" in text_join
    assert "            Seq Scan on branches" in text_join  # its alias left out


def test_the_three_formats_and_both_versions_agree() -> None:
    """The same messages in three formats are the same events; the two versions plan the
    same statements alike, so their plan ids match too."""
    seen = {(major, name): [(p["query"], p.get("plan_id")) for p in
                            _plans(LOGS / f"pg{major}" / name)]
            for major in (15, 18) for name in FORMATS}
    assert len(set(map(tuple, seen.values()))) == 1


def test_a_plan_cut_short_is_said_once_and_the_rest_goes_on(tmp_path: Path) -> None:
    """A real log cut inside a plan (as a log copied while being written is). In stderr
    the plan's lines so far are a record: the plans before it whole, the cut one kept
    without a plan id, counted once as not understood. In jsonlog the cut line is no
    record at all: skipped, and counted once."""
    lines = (LOGS / "pg18" / "postgresql.log").read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "Seq Scan" in line)
    cut = tmp_path / "postgresql.log"
    cut.write_text("".join(lines[:at + 1]))
    events, stats = parse_log_file(cut)
    plans = [e.attrs for e in events if e.kind == "statement-plan"]
    assert [bool(p.get("cut")) for p in plans] == [False] * (len(plans) - 1) + [True]
    assert "plan_id" not in plans[-1] and plans[-1]["query"] == SELECT
    assert plans[-1]["outline"] == ["Gather", "Seq Scan"]  # the nodes it named
    assert stats.skipped == 1
    records = (LOGS / "pg18" / "postgresql.json").read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(records) if "Seq Scan" in line)
    cut_json = tmp_path / "postgresql.json"
    cut_json.write_text("".join(records[:at]) + records[at][: records[at].index("Seq Scan")])
    events, stats = parse_log_file(cut_json)
    assert stats.skipped == 1
    assert len([e for e in events if e.kind == "statement-plan"]) == len(plans) - 1
    result = run_cli("logs", str(cut))  # said once, in the summary line
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("1 unreadable") == 1 and "cut=True" in result.stdout


def test_sampled_texts_meet_pg_stat_statements_texts() -> None:
    """PostgreSQL's parser normalises auto_explain's literal texts of the plan-flip run
    into the very texts pg_stat_statements recorded for it (its statement-text events)."""
    frames = load_run_frames(FLIP)
    texts = statement_texts(frames.events)
    plans = frames.events.filter(pl.col("kind") == "statement-plan")
    queries = {json.loads(a)["query"] for a in plans["attrs"].to_list()}
    # the stall's two statements, whose plans every draw logs (a third, slower than the
    # threshold by chance of the machine, is in some draws and not in others)
    assert {normalise(q) for q in queries} >= {
        "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
        "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2"}
    for query in queries:
        assert texts.queryid_of_text("primary", query) is not None, query
    assert normalise("UPDATE t SET a = a + -1640 WHERE b = 'x''y';") == \
        "UPDATE t SET a = a + $1 WHERE b = $2"
    assert comparable(normalise("select 1")) == "select ?"


def test_the_plan_flip_names_the_statement_and_its_plan_change() -> None:
    """The built-in plan-flip-index-dropped, run for real: its stall's first cause is the
    plan change, index gone, naming the accounts statements, both plans, their time per
    call; the advice is the index, not ANALYZE; its expect is met."""
    document = build_analysis(load_run_frames(FLIP))
    assert document.summary["verdict"]["cause"] == "plan-change"
    stall = max(document.stalls, key=lambda s: s["seconds"])
    first = stall["causes"][0]
    assert first["cause"] == "plan-change" and first["sub_cause"] == "index-gone"
    assert first["confidence"] >= 0.7
    evidence = "\n".join(first["evidence"])
    assert "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2" in evidence
    assert "SELECT abalance FROM pgbench_accounts WHERE aid = $1" in evidence
    assert "Index Scan using pgbench_accounts_pkey" in evidence and "Seq Scan" in evidence
    changes = stall["plan_changes"]
    assert {c["after_source"] for c in changes} == {"auto_explain"}
    assert all(c["before_source"] == "generic plan" for c in changes)
    rules = [r["rule"] for r in document.recommendations]
    assert "plan-index" in rules and "autovacuum-analyze" not in rules
    # the run's plan changes: these two, the flag of the run as a whole
    assert [c["text"] for c in document.summary["plan_changes"]] == [
        c["text"] for c in sorted(changes, key=lambda c: c["changed_at"])]


MAKE_PKEY = "ALTER TABLE pgbench_accounts ADD CONSTRAINT pgbench_accounts_pkey PRIMARY KEY (aid)"
REMAKE = f"{MAKE_PKEY}; ANALYZE pgbench_accounts"


def _valid_run(test: str) -> LoadedScenario:
    """The scenario a `test:` line runs, as `pglab run` loads and checks it before a lab."""
    argv = shlex.split(test)
    assert argv[:2] == ["pglab", "run"] and all(a == "--set" for a in argv[3::2]), argv
    loaded = load_builtin(argv[2], argv[4::2])
    check_faults(loaded.scenario, loaded.where)
    return loaded


def test_the_index_advice_is_a_run_that_makes_the_index_again() -> None:
    """plan-index on the plan-flip run: the index the earlier plan used is made again as it
    was (db.statements recorded its primary key constraint when the statement first ran,
    and saw it dropped), 2 s after the scenario's fault that dropped it, and ANALYZEd; its
    `test:` line is a `pglab run` that pglab accepts, the scenario's own faults kept."""
    frames = load_run_frames(FLIP)
    plans = run_plans(frames.events, statement_texts(frames.events))
    assert plans.indexes["pgbench_accounts_pkey"]["make"] == MAKE_PKEY
    assert plans.dropped == {"pgbench_accounts_pkey"}  # seen gone: index-gone, not a flip
    rule = next(r for r in build_analysis(frames).recommendations if r["rule"] == "plan-index")
    assert "not_testable_because" not in rule
    faults = rule["change"]["faults"]
    assert [(f["at"], f["args"]["sql"]) for f in faults] == [
        ("12s", "ALTER TABLE pgbench_accounts DROP CONSTRAINT pgbench_accounts_pkey"),
        ("14s", REMAKE), ("28s", "ALTER TABLE pgbench_accounts ADD PRIMARY KEY (aid)")]
    loaded = _valid_run(rule["test"])
    assert [(f.at, f.args["sql"]) for f in loaded.scenario.faults][1] == (14.0, REMAKE)


def test_tune_prints_the_winning_faults_as_a_command_to_paste() -> None:
    """The plan-index change kept by a tune: its `winning overrides` line is quoted for
    the shell (a list of faults has spaces and quotes) and loads as the run it was."""
    rule = next(r for r in build_analysis(load_run_frames(FLIP)).recommendations
                if r["rule"] == "plan-index")
    kept = CandidateResult(Candidate("plan-index", rule["change"], ["plan-change"]), kept=True)
    buffer = io.StringIO()
    print_tune(Console(file=buffer, width=100000), TuneResult("t", 0.1, [Step(
        1, [], candidates=[kept])]))
    (line,) = [x for x in buffer.getvalue().splitlines() if x.startswith("winning overrides:")]
    loaded = _valid_run("pglab run plan-flip-index-dropped "
                        + line.removeprefix("winning overrides:"))
    assert [f.args["sql"] for f in loaded.scenario.faults][1] == REMAKE


def _flip_facts(faults: list[dict[str, object]], duration: float,
                gone: tuple[GoneIndex, ...]) -> Facts:
    """The plan-flip run's facts as if its scenario had these faults and this length."""
    raw = json.loads((FLIP / "manifest.json").read_text())
    raw["scenario"]["faults"] = faults
    raw["scenario"]["workload"]["duration"] = duration
    return Facts({"plan-change": 0.85}, Manifest.from_json(raw), fpi_surge=False,
                 sub_causes={"plan-change": frozenset({"index-gone"})}, indexes_gone=gone)


def test_the_index_advice_is_untestable_without_the_index_or_its_drop() -> None:
    """The remade index lands inside a shortened run (half-way from its drop to the end);
    without a recorded definition (before PostgreSQL 16), or without a `sql` fault that
    dropped it (an index dropped by hand), the advice says why it cannot be tested."""
    drop = {"at": 1.0, "action": "sql", "node": "primary", "duration": None, "repeat": 1,
            "every": None, "args": {"sql": "ALTER TABLE pgbench_accounts DROP CONSTRAINT "
                                            "pgbench_accounts_pkey"}}
    known = GoneIndex("pgbench_accounts_pkey", "pgbench_accounts", MAKE_PKEY)
    (given,) = [r for r in advise(_flip_facts([drop], 2.0, (known,))).given
                if r["rule"] == "plan-index"]
    assert [f["at"] for f in given["change"]["faults"]] == ["1s", "1.5s"]
    assert [f.at for f in _valid_run(given["test"]).scenario.faults] == [1.0, 1.5]
    other = {**drop, "args": {"sql": "DROP INDEX pgbench_accounts_bid"}}
    for faults, gone in (([drop], (GoneIndex("pgbench_accounts_pkey"),)),
                         ([other], (known,)), ([], (known,))):
        (given,) = [r for r in advise(_flip_facts(faults, 40.0, gone)).given
                    if r["rule"] == "plan-index"]
        assert given["change"] == {} and given["test"] == NOT_TESTABLE, given
        assert "no `sql` fault of the scenario that dropped it" in given[
            "not_testable_because"]


def test_stale_statistics_flip_the_plan_and_the_advice_is_analyze() -> None:
    """A bulk insert into pgbench_tellers, its autovacuum off (the sample plan-flip-stale,
    a real run): the join flips from the accounts' primary key to a hash join that scans
    accounts, and the index is still there. The sub-cause is plan-flip, not index-gone;
    the advice is ANALYZE, tested by a run of the scenario's own faults plus an ANALYZE
    of the flipped plans' tables a second after the insert ended."""
    frames = load_run_frames(STALE)
    plans = run_plans(frames.events, statement_texts(frames.events))
    assert "pgbench_accounts_pkey" in plans.indexes and not plans.dropped
    # recorded and never seen gone: still there; a run that recorded no index (before
    # PostgreSQL 16) goes by the plans' shapes alone
    assert not plans.went("pgbench_accounts_pkey") and RunPlans().went("pgbench_accounts_pkey")
    document = build_analysis(frames)
    stall = max(document.stalls, key=lambda s: s["seconds"])
    first = stall["causes"][0]
    assert (first["cause"], first["sub_cause"]) == ("plan-change", "plan-flip"), first
    evidence = "\n".join(first["evidence"])
    assert "JOIN pgbench_accounts a ON a.aid = t.tid * $1 WHERE t.bid = $2" in evidence
    rules = {r["rule"]: r for r in document.recommendations}
    assert "plan-index" not in rules
    faults = rules["autovacuum-analyze"]["change"]["faults"]
    insert = json.loads(frames.events.filter(pl.col("kind") == "fault")["attrs"][1])
    assert insert["statement"].startswith("INSERT INTO pgbench_tellers")
    ended = insert["at_s"] + insert["elapsed_s"]
    assert [f["args"]["sql"] for f in faults][-1] == \
        "ANALYZE pgbench_accounts; ANALYZE pgbench_tellers"
    assert float(faults[-1]["at"].removesuffix("s")) == pytest.approx(ended + 1, abs=0.6)
    argv = shlex.split(rules["autovacuum-analyze"]["test"])
    loaded = load(Path(argv[2]), argv[4::2])  # the run folder's copy, its script beside it
    check_faults(loaded.scenario, loaded.where)
    assert len(loaded.scenario.faults) == 3


def test_the_base_run_without_the_fault_has_no_plan_change() -> None:
    frames = load_run_frames(FLIP_BASE)
    plans = run_plans(frames.events, statement_texts(frames.events))
    assert plans.changed() == [] and plans.gone() == []
    document = build_analysis(frames)
    assert "plan_changes" not in document.summary
    assert all(c["cause"] != "plan-change" for s in document.stalls for c in s["causes"])


def test_compare_per_statement_with_plans_side_by_side() -> None:
    """compare BASE CONTENDER: per statement its calls/s, mean ms and time with their
    intervals; the accounts statements' mean ms significantly worse, their plans side by
    side; in each of the three renderings and in JSON."""
    result = compare(load_group(str(FLIP_BASE)), [load_group(str(FLIP))])
    found = result.contenders[0].statements
    assert found is not None and found.missing is None
    by_text = {s.text: s for s in found.statements}
    select = by_text["SELECT abalance FROM pgbench_accounts WHERE aid = $1"]
    mean = next(r for r in select.metrics if r.metric.name == "mean_ms")
    assert mean.verdict == "worse" and mean.interval is not None
    assert select.plans is not None
    assert select.plans[0] == ["Index Scan using pgbench_accounts_pkey on pgbench_accounts"]
    assert "  Seq Scan on pgbench_accounts" in select.plans[1]
    tellers = by_text["UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2"]
    assert tellers.plans is None  # the same plan in both
    terminal = render_text(result, "terminal")
    assert "plan changed (base | contender)" in terminal
    # the statement's queryid is text, not a markup tag the console would eat
    assert re.search(r"\[queryid -?\d+\]", terminal), terminal
    assert "Index Scan using pgbench_accounts_pkey on pgbench_accounts | Gather" in terminal
    markdown = render_text(result, "markdown")
    assert "| base plan | contender plan |" in markdown and "mean ms" in markdown
    html = render_text(result, "html")
    assert "<h4>plan changed" in html and "Seq Scan on pgbench_accounts" in html
    data = as_dict(result)["contenders"][0]  # type: ignore[index]
    assert data["statements"]["statements"][0]["plans"]["base"]


def test_a_run_without_statements_data_is_said_once() -> None:
    """The `lock` sample predates pg_stat_statements in labs: one line, in each rendering,
    naming it; the run's rows are there as ever."""
    result = compare(load_group(str(FLIP_BASE)), [load_group(str(SAMPLES / "runs" / "lock"))])
    for fmt in ("terminal", "markdown", "html"):
        text = render_text(result, fmt)
        said = [line for line in text.splitlines() if "statements not compared" in line]
        assert len(said) == 1 and "no pg_stat_statements data (db.statements) in runs/lock" \
            in said[0], said
        assert "TPS" in text


def test_analyze_details_and_the_report_show_both_plans(tmp_path: Path) -> None:
    run = tmp_path / "plan-flip"
    shutil.copytree(FLIP, run)
    analyze_run(run)
    result = run_cli("analyze", str(run), "--details")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    changed = [i for i, line in enumerate(lines) if line.startswith("    plan changed at ")]
    assert len(changed) == 2, result.stdout
    assert lines[changed[0] + 1].startswith("      before: ")
    assert "Index Scan using pgbench_accounts_pkey" in lines[changed[0] + 1]
    assert "Seq Scan on pgbench_accounts" in lines[changed[0] + 2]
    page = render(build_model(run))
    assert "plans that changed" in page and "before: Index Scan using pgbench_accounts_pkey" \
        in page


@pytest.mark.parametrize("text", [
    "ALTER ROLE app PASSWORD $$S3cretPw",  # dollar-quoted, cut open
    "SELECT E'it\\'s 4111-1111-S3cretPw",  # an E'...' string with \' inside, cut open
    "SELECT * FROM t WHERE x = 'C:\\' AND y = $1 AND z = 'S3cretPw",  # cut in a literal
    "UPDATE t SET a = 5 WHERE b = $q$S3cretPw",
    "SELECT 'a''b', 'S3cretPw" + "x" * 200,
])
def test_a_text_the_parser_refuses_keeps_no_literal(text: str) -> None:
    """The sampler keeps 200 characters of a statement without query_id: cut there, the
    parser refuses it, and the fallback still leaves no literal's text in the label."""
    found = normalise(text)
    assert "S3cretPw" not in found and "4111" not in found, found
    assert found.startswith(("ALTER ROLE app PASSWORD $", "SELECT", "UPDATE t SET a = $0"))


def test_text_and_json_plans_are_compared_within_their_own_notation() -> None:
    """The real PostgreSQL 18 log logs the SELECT's plan in JSON (Gather, Seq Scan) and
    later in text, where EXPLAIN names the same node Parallel Seq Scan, and the join's
    Aggregate as Finalize GroupAggregate: a notation is no plan change. The JSON plans'
    own change (the key dropped: Index Scan, then a Seq Scan) is still one."""
    from pglab.results.spool import event_record, events_frame

    events, _ = parse_log_file(LOGS / "pg18" / "postgresql.log")
    frame = events_frame([event_record(e) for e in events])
    plans = run_plans(frame, statement_texts(frame))
    changes = [(st.text, before.outline, after.outline) for st, before, after
               in plans.changed()]
    assert [c for c in changes if c[0] == SELECT] == [
        (SELECT, ["Index Scan using accounts_pkey on accounts"],
         ["Gather", "  Seq Scan on accounts"])], changes
    assert not any(c[0].startswith("SELECT b.name") for c in changes), changes


TEXT_PLANS = SAMPLES / "serverlog" / "auto_explain_text"
_HEAD = re.compile(r"^\d{4}-\d\d-\d\d ")


def _messages(path: Path) -> tuple[list[str], list[tuple[int, int]]]:
    """A stderr log's lines and each plan message's (first line, line after its last)."""
    lines = path.read_text().splitlines(keepends=True)
    spans = []
    for at, line in enumerate(lines):
        if "  plan:" in line:
            end = at + 1
            while end < len(lines) and not _HEAD.match(lines[end]):
                end += 1
            spans.append((at, end))
    return lines, spans


def _plan_after_cut(tmp_path: Path, lines: list[str], span: tuple[int, int], body: list[str],
                    index: int) -> dict[str, object]:
    """The `index`th plan of the log whose plan at `span` is `body` instead."""
    cut = tmp_path / "postgresql.log"
    cut.write_text("".join([*lines[: span[0]], *body, *lines[span[1]:]]))
    events, _ = parse_log_file(cut)
    return [e.attrs for e in events if e.kind == "statement-plan"][index]


@pytest.mark.parametrize("major", [15, 18])
@pytest.mark.parametrize("name", ["postgresql.log", "postgresql.json"])
def test_whole_text_plans_are_whole(major: int, name: str) -> None:
    """make_text_plans.py: 24 statements' real plans in the text format, of joins, sorts,
    aggregates, Gather, Append, bitmap scans, subplans, init plans, CTEs, set operations,
    modifications: each is whole, with a plan id."""
    plans = _plans(TEXT_PLANS / f"pg{major}" / name)
    assert len(plans) == 24
    assert all(p["format"] == "text" and not p.get("cut") and p.get("plan_id") for p in plans)


@pytest.mark.parametrize("major", [15, 18])
def test_a_text_plan_cut_inside_a_node_line_is_cut(major: int, tmp_path: Path) -> None:
    """A log cut inside a plan node's line (a transport's byte limit falls inside a
    line far more often than between two): each node line of each real plan, cut just
    after its `(cost=`, leaves a plan marked cut, without a plan id."""
    lines, spans = _messages(TEXT_PLANS / f"pg{major}" / "postgresql.log")
    tried = 0
    for index, span in enumerate(spans):
        body = lines[span[0]:span[1]]
        for at, line in enumerate(body):
            if "(cost=" not in line:
                continue
            kept = [*body[:at], line[: line.index("(cost=") + 6] + "\n"]
            plan = _plan_after_cut(tmp_path, lines, span, kept, index)
            assert plan.get("cut") and "plan_id" not in plan, (major, body[1], line)
            tried += 1
    assert tried >= len(spans) == 24


def _later_child(body: list[str], at: int) -> bool:
    """Whether the node line `at` has a sibling before it (the same arrow column, below
    its parent): a plan cut before it still has its parent's first child."""
    column = body[at].lstrip("\t").index("->")
    for line in reversed(body[1:at]):
        text = line.lstrip("\t")
        indent = len(text) - len(text.lstrip(" "))
        if "->" in text and text.index("->") == column:
            return True
        if (indent < column and "(cost=" in text) or indent < column - 2:
            return False
    return False


@pytest.mark.parametrize("major", [15, 18])
def test_a_text_plan_cut_between_lines_is_cut_when_a_node_is_missing(
        major: int, tmp_path: Path) -> None:
    """A log cut between two lines of a plan (a log copied while written, a lost syslog
    piece): the plan is cut whenever a node lost its first child or its only one; what
    cannot be told is a node's later child lost (another partition of an Append, the
    second input of 18's SetOp) or a SubPlan whose label was lost with it."""
    lines, spans = _messages(TEXT_PLANS / f"pg{major}" / "postgresql.log")
    told = 0
    for index, span in enumerate(spans):
        body = lines[span[0]:span[1]]
        for at in range(2, len(body)):
            dropped = [k for k in range(at, len(body))
                       if "(cost=" in body[k] or "SubPlan " in body[k]]
            if not dropped:
                continue
            plan = _plan_after_cut(tmp_path, lines, span, body[:at], index)
            first = dropped[0]
            if plan.get("cut"):
                told += 1
            else:
                assert "SubPlan " in body[first] or _later_child(body, first), \
                    (major, body[1], body[first])
    assert told >= len(spans) == 24


def test_a_cut_text_plan_is_no_plan_change_and_is_said_once(tmp_path: Path) -> None:
    """The real PostgreSQL 18 log with its last plan (the join, in text) logged again
    after it, truncated inside its Hash Join as a collector truncates a long field (the
    jsonlog line stays valid JSON): the copy is cut, counted once as unreadable, and no
    plan change of the join is read from it (it has no shape)."""
    from pglab.results.spool import event_record, events_frame

    records = (LOGS / "pg18" / "postgresql.json").read_text().splitlines(keepends=True)
    at = max(i for i, line in enumerate(records) if "Hash Join" in line)
    record = json.loads(records[at])
    message = record["message"]
    record["message"] = message[: message.index("Hash Join") + len("Hash Join")]
    path = tmp_path / "postgresql.json"
    path.write_text("".join(records[: at + 1]) + json.dumps(record) + "\n"
                    + "".join(records[at + 1:]))
    events, stats = parse_log_file(path)
    plans = [e.attrs for e in events if e.kind == "statement-plan"]
    assert [bool(p.get("cut")) for p in plans] == [False] * (len(plans) - 1) + [True]
    assert plans[-1]["format"] == "text" and "plan_id" not in plans[-1]
    assert stats.skipped == 1  # the cut plan, not understood
    frame = events_frame([event_record(e) for e in events])
    found = run_plans(frame, statement_texts(frame))
    assert found.cut == 1
    assert not any(st.text.startswith("SELECT b.name") for st, _, _ in found.changed())
    result = run_cli("logs", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("1 unreadable") == 1 and "cut=True" in result.stdout
