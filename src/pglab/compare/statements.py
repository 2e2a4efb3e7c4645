"""BASE against CONTENDER statement by statement: an AWR-style diff beside the run's rows.

A statement is its queryid with the text pg_stat_statements normalised (`statement-text`
events); two runs' statements are the same statement when their queryids are, or else
when their texts are (a queryid is computed from the OIDs of the tables it reads, which
two labs made from different templates need not share). Each statement's rows are
metrics of compare's own registry kind, made for it, so that its values, delta,
interval and verdict come from the very machinery the run's rows do
(`comparison.compare_metric`: block bootstrap of the samples, widened by the assumed
run-to-run noise when a side has a single run):

- calls/s: the mean of its per-interval call rates (0 where it did not run);
- mean ms: the mean over intervals of each interval's execution time per call.

(Its execution time per second, which ranks the statements, is the product of the two;
a third bootstrap per statement would cost a comparison more than it says.)

Samples are the `db.statements` reads inside the measured window. The statements shown
are the largest by time on either side (STATEMENTS); a run without statements data is
named once per contender and its statements are not compared.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from pglab.analysis.plans import RunPlans, StatementPlans, run_plans, shape
from pglab.analysis.statements import comparable
from pglab.analysis.statements import statement_texts as event_texts
from pglab.compare.metrics import Measure, Metric
from pglab.compare.rundata import RunData
from pglab.sqltext import squash_lists

if TYPE_CHECKING:
    from pglab.compare.comparison import MetricResult
    from pglab.compare.groups import Group

SOURCE = "db.statements"  # probes.db_statements.StatementStats.name
NODE = "primary"
STATEMENTS = 10  # compared per contender: the largest by time on either side
TEXT_CHARS = 80  # of a statement's text in a row


@dataclass(frozen=True)
class RunStatement:
    """One statement in one run: its per-interval samples in the measured window."""

    queryid: str
    text: str
    calls: list[float]  # per-second rate, each read (0 where it did not run)
    exec_ms: list[float]  # execution ms per second, each read
    mean_ms: list[float]  # ms per call, each read it ran in

    @property
    def time_ms(self) -> float:
        return sum(self.exec_ms)


@dataclass(frozen=True)
class RunStatements:
    reads: int  # of db.statements in the measured window
    by_queryid: dict[str, RunStatement]


# Read once per run: a comparison of many runs compares each with several others.
_READ: weakref.WeakKeyDictionary[RunData, RunStatements | None] = weakref.WeakKeyDictionary()
_PLANS: weakref.WeakKeyDictionary[RunData, RunPlans] = weakref.WeakKeyDictionary()


def run_statements(run: RunData) -> RunStatements | None:
    """The run's statements by queryid, or None when it has no `db.statements` reads in
    its measured window (the probe was off, or the server had no pg_stat_statements)."""
    if run not in _READ:
        _READ[run] = _read_statements(run)
    return _READ[run]


def _read_statements(run: RunData) -> RunStatements | None:
    frame, window = run.timeseries, run.window
    if frame is None or window is None:
        return None
    rows = frame.filter((pl.col("source") == SOURCE) & (pl.col("node") == NODE)
                        & (pl.col("t") >= window[0]) & (pl.col("t") < window[1]))
    # every read writes the `entries` gauge: the reads a statement did not run in are 0
    reads = sorted(set(rows.filter(pl.col("metric") == "entries")["t"].to_list()))
    if not reads:
        return None
    values: dict[str, dict[str, dict[Any, float]]] = defaultdict(lambda: defaultdict(dict))
    for t, metric, label, value in rows.filter(pl.col("metric").is_in(("calls", "exec_ms"))
                                               ).select("t", "metric", "label",
                                                        "value").iter_rows():
        values[str(label)][str(metric)][t] = float(value)
    texts = (event_texts(run.events).texts.get(NODE, {}) if run.events is not None
             else {})
    out: dict[str, RunStatement] = {}
    for queryid, by_metric in values.items():
        calls = [by_metric["calls"].get(t, 0.0) for t in reads]
        exec_ms = [by_metric["exec_ms"].get(t, 0.0) for t in reads]
        mean_ms = [e / c for c, e in zip(calls, exec_ms, strict=True) if c > 0]
        out[queryid] = RunStatement(queryid, texts.get(queryid) or f"(queryid {queryid})",
                                    calls, exec_ms, mean_ms)
    return RunStatements(len(reads), out)


@dataclass
class StatementResult:
    """One statement's rows: the same statement in both sides, or in one only."""

    text: str
    base_queryid: str | None
    contender_queryid: str | None
    metrics: list[MetricResult]
    base_time_ms: float  # the statements' execution time over the measured reads, per run
    contender_time_ms: float
    # (base, contender) plan outlines when the statement's usual plan differs between them
    plans: tuple[list[str], list[str]] | None = None


@dataclass
class StatementsComparison:
    statements: list[StatementResult] = field(default_factory=list)
    missing: str | None = None  # said once: the runs without statements data
    more: int = 0  # statements left out (smaller on both sides)


def _metric(name: str, title: str, unit: str, better: str, pick: str,
            sides: dict[int, RunStatement], reads: dict[int, int]) -> Metric:
    """A metric of compare's registry kind reading one statement's samples from each run
    (`sides`: id(RunData) -> the statement in that run; absent: it did not run there, so
    its rates were 0 at each of the run's `reads`)."""
    def read(run: RunData) -> Measure:
        found = sides.get(id(run))
        if found is None:
            if pick == "mean_ms":
                return Measure(None, None, "not run on one side")
            return Measure(0.0, [0.0] * max(1, reads.get(id(run), 1)))
        samples: list[float] = getattr(found, pick)
        if not samples:
            return Measure(None, None, "no calls in the measured window")
        return Measure(sum(samples) / len(samples), samples)
    return Metric(name, title, unit, "lower" if better == "lower" else "higher", "mean",
                  read, sample="per-read")


def _pairs(base: list[dict[str, RunStatement]], contender: list[dict[str, RunStatement]]
           ) -> list[tuple[str, str | None, str | None]]:
    """(text, base queryid, contender queryid): by queryid, else by the same text."""
    base_ids = {q: s.text for run in base for q, s in run.items()}
    cont_ids = {q: s.text for run in contender for q, s in run.items()}
    by_text = {comparable(t): q for q, t in cont_ids.items()}
    # a list squashed on one side only (PostgreSQL 18 against an older server)
    by_squashed = {comparable(squash_lists(t)): q for q, t in cont_ids.items()}
    pairs: list[tuple[str, str | None, str | None]] = []
    matched: set[str] = set()
    for queryid, text in base_ids.items():
        other = (queryid if queryid in cont_ids else by_text.get(comparable(text))
                 or by_squashed.get(comparable(squash_lists(text))))
        if other is not None and other in matched:
            other = None
        if other is not None:
            matched.add(other)
        pairs.append((text, queryid, other))
    pairs += [(text, None, q) for q, text in cont_ids.items() if q not in matched]
    return pairs


def _usual_plans(runs: list[RunData]) -> dict[str, list[str]]:
    """comparable text -> the plan a side ran the statement with most: the shape logged
    most often by auto_explain, else its generic plan when it first ran."""
    counts: dict[str, dict[tuple[str, ...], tuple[int, list[str]]]] = defaultdict(dict)
    for run in runs:
        if run not in _PLANS:
            events = run.events
            _PLANS[run] = (RunPlans() if events is None
                           else run_plans(events, event_texts(events)))
        for key, statement in _PLANS[run].statements.items():
            _count(counts[key], statement)
    return {key: max(found.values(), key=lambda v: v[0])[1] for key, found in counts.items()
            if found}


def _count(into: dict[tuple[str, ...], tuple[int, list[str]]],
           statement: StatementPlans) -> None:
    for seen in statement.plans.values():
        weight = seen.count if seen.source == "auto_explain" else 0
        before = into.get(shape(seen.outline), (0, seen.outline))
        into[shape(seen.outline)] = (before[0] + weight, before[1])


def compare_statements(base: Group, contender: Group, noise: float, confidence: float,
                       limit: int = STATEMENTS) -> StatementsComparison:
    from pglab.compare.comparison import compare_metric  # comparison calls this module

    read = {id(run): run_statements(run) for run in [*base.runs, *contender.runs]}
    lacking = [run.label for run in [*base.runs, *contender.runs] if read[id(run)] is None]
    out = StatementsComparison()
    if lacking:
        out.missing = (f"statements not compared: no pg_stat_statements data (db.statements) "
                       f"in {', '.join(lacking[:3])}"
                       + (f" and {len(lacking) - 3} more" if len(lacking) > 3 else ""))
        return out
    found_runs = {key: value for key, value in read.items() if value is not None}
    reads = {key: value.reads for key, value in found_runs.items()}
    base_runs = [found_runs[id(r)].by_queryid for r in base.runs]
    cont_runs = [found_runs[id(r)].by_queryid for r in contender.runs]

    def time(runs: list[dict[str, RunStatement]], queryid: str | None) -> float:
        if queryid is None:
            return 0.0
        return sum(r[queryid].time_ms for r in runs if queryid in r) / len(runs)

    ranked = sorted(_pairs(base_runs, cont_runs),
                    key=lambda p: max(time(base_runs, p[1]), time(cont_runs, p[2])),
                    reverse=True)
    out.more = max(0, len(ranked) - limit)
    base_plans, cont_plans = _usual_plans(base.runs), _usual_plans(contender.runs)
    for text, base_id, cont_id in ranked[:limit]:
        sides: dict[int, RunStatement] = {}
        for runs, group, queryid in ((base_runs, base, base_id), (cont_runs, contender,
                                                                   cont_id)):
            for run, found in zip(group.runs, runs, strict=True):
                if queryid is not None and queryid in found:
                    sides[id(run)] = found[queryid]
        metrics = [_metric("calls_per_s", "calls/s", "calls/s", "higher", "calls", sides,
                           reads),
                   _metric("mean_ms", "mean ms", "ms", "lower", "mean_ms", sides, reads)]
        results = [compare_metric(m, base, contender, noise, confidence) for m in metrics]
        key = comparable(text)
        base_plan, cont_plan = base_plans.get(key), cont_plans.get(key)
        changed = ((base_plan, cont_plan) if base_plan is not None and cont_plan is not None
                   and shape(base_plan) != shape(cont_plan) else None)
        out.statements.append(StatementResult(
            text, base_id, cont_id, results, time(base_runs, base_id),
            time(cont_runs, cont_id), changed))
    return out


def short_text(text: str, chars: int = TEXT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1] + "…"


def as_dict(found: StatementsComparison) -> dict[str, object]:
    """JSON of `pglab compare --format json`."""
    return {
        "missing": found.missing,
        "more": found.more,
        "statements": [{
            "text": s.text, "base_queryid": s.base_queryid,
            "contender_queryid": s.contender_queryid,
            **({"plans": {"base": s.plans[0], "contender": s.plans[1]}} if s.plans else {}),
            "metrics": [{"metric": r.metric.name, "unit": r.unit, "statistic": r.statistic,
                         "base": r.base,
                         "contender": r.contender, "delta_pct": r.delta_pct,
                         "ci_pct": list(r.ci_pct) if r.ci_pct else None,
                         "verdict": r.verdict, "note": r.note} for r in s.metrics],
        } for s in found.statements],
    }
