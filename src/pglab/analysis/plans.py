"""Which plans: each statement's plans over a run, and where one changed.

Two sources, both outlined alike (serverlog.plan_rules.outline_of): the generic plan
db.statements read when the statement first ran (`statement-text` events, 16+: the plan
it started with, however fast), and auto_explain's plans of statements slower than its
threshold (`statement-plan` events from the server log, in the lab and in an observed
server's log alike). A statement's plan changed when a plan logged later has another
shape than the one before it. Shapes leave out Gather and Gather Merge: a generic plan
is planned without knowing its parameters and may go without the parallel workers its
custom plans use, which is no change of how the rows are found.

A plan cut short in the log is no evidence of a change (it has no shape); how many
were cut is said once.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:  # statements reads the evidence, which holds a run's plans
    from pglab.analysis.statements import StatementTexts

_PARALLEL = ("Gather", "Gather Merge")


def shape(outline: list[str]) -> tuple[str, ...]:
    return tuple(line.strip() for line in outline if line.strip() not in _PARALLEL)


@dataclass
class PlanSeen:
    """One shape of a statement's plan: when it was first and last seen, how often."""

    outline: list[str]
    source: str  # "generic plan" or "auto_explain"
    first: dt.datetime
    last: dt.datetime
    count: int = 0
    durations_ms: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float | None:
        if not self.durations_ms:
            return None
        ordered = sorted(self.durations_ms)
        return ordered[len(ordered) // 2]


@dataclass
class StatementPlans:
    text: str  # the normalised text
    queryid: str | None
    # (notation, shape) -> the plan: "json" (EXPLAIN's JSON: the generic plan, auto_explain
    # in JSON) or "text" (auto_explain's text, its default)
    plans: dict[tuple[str, tuple[str, ...]], PlanSeen] = field(default_factory=dict)

    def changes(self) -> list[tuple[PlanSeen, PlanSeen]]:
        """(before, after) for each shape that came after another of the same notation:
        EXPLAIN's text names nodes otherwise than its JSON (HashAggregate for Aggregate,
        "on" for "using"), so a text plan and a JSON one of the same plan never match."""
        found = []
        for notation in {key[0] for key in self.plans}:
            ordered = sorted((p for key, p in self.plans.items() if key[0] == notation),
                             key=lambda p: p.first)
            found += list(itertools.pairwise(ordered))
        return sorted(found, key=lambda pair: pair[1].first)


@dataclass(frozen=True)
class GoneIndex:
    """An index a statement's earlier plan used and its later plan does not: its table
    and the statement that makes it as it was, when the run recorded them (the generic
    plan's indexes, 16+), else None."""

    name: str
    table: str | None = None
    make: str | None = None


@dataclass(frozen=True)
class PlanFlip:
    """A plan change with no index dropped (statistics, settings): when the new plan was
    first seen, and the tables it reads."""

    at: dt.datetime
    tables: tuple[str, ...]


def tables_of(outline: list[str]) -> list[str]:
    """The tables a plan's outline scans (`... on NAME`), each once."""
    return list(dict.fromkeys(line.split(" on ", 1)[1].split()[0] for line in outline
                              if " on " in line and line.split(" on ", 1)[1].split()))


def indexes_gone(before: PlanSeen, after: PlanSeen) -> list[str]:
    """The indexes the plan before used (`... using NAME on ...`) that the plan after
    does not."""
    used = [line.split(" using ", 1)[1].split(" on ", 1)[0] for line in before.outline
            if " using " in line]
    return [name for name in dict.fromkeys(used)
            if not any(f" using {name} " in f"{line} " for line in after.outline)]


@dataclass
class RunPlans:
    statements: dict[str, StatementPlans] = field(default_factory=dict)  # comparable text
    cut: int = 0  # plans cut short in the log
    # index name -> {"table", "make"}: how each index a generic plan used was made
    indexes: dict[str, dict[str, str]] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)  # of those, the ones seen gone

    def went(self, index: str) -> bool:
        """Whether a plan that stopped using `index` did so because it was dropped: the
        run saw it gone (`index-dropped`), or did not record it (a run before PostgreSQL
        16, or an older run folder), where the plans' shapes are all there is to go by.
        An index the run recorded and never saw gone is still there: the planner chose
        another way (statistics, settings)."""
        return index in self.dropped or index not in self.indexes

    def changed(self, start: dt.datetime | None = None,
                end: dt.datetime | None = None) -> list[tuple[StatementPlans, PlanSeen,
                                                              PlanSeen]]:
        """Plan changes whose new plan was seen in [start, end) (any time without), the
        first seen first, whichever statement it is."""
        found = []
        for statement in self.statements.values():
            for before, after in statement.changes():
                seen_in = ((start is None or after.last >= start)
                           and (end is None or after.first < end))
                if seen_in:
                    found.append((statement, before, after))
        return sorted(found, key=lambda change: change[2].first)

    def gone(self) -> list[GoneIndex]:
        """The indexes the run's plan changes stopped using, each once, with how it was
        made where the run recorded it."""
        names = dict.fromkeys(name for _, before, after in self.changed()
                              for name in indexes_gone(before, after) if self.went(name))
        return [GoneIndex(name, (known := self.indexes.get(name) or {}).get("table"),
                          known.get("make")) for name in names]

    def flips(self) -> list[PlanFlip]:
        """The run's plan changes that no dropped index explains, first seen first."""
        return [PlanFlip(after.first, tuple(tables_of(after.outline)))
                for _, before, after in self.changed()
                if not any(self.went(name) for name in indexes_gone(before, after))]


def _attrs(raw: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def run_plans(events: pl.DataFrame, texts: StatementTexts, node: str = "primary"
              ) -> RunPlans:
    """The run's plans per statement, from its events (events.parquet's columns)."""
    from pglab.analysis.statements import comparable
    from pglab.sqltext import squash_lists

    out = RunPlans()
    if events.height == 0:
        return out
    rows = events.filter(pl.col("kind").is_in(("statement-text", "statement-plan",
                                               "index-dropped"))
                         & (pl.col("node") == node)).sort("t_start")
    for kind, t, raw in rows.select("kind", "t_start", "attrs").iter_rows():
        attrs = _attrs(raw)
        if kind == "index-dropped":
            out.dropped.add(str(attrs.get("index")))
            continue
        if kind == "statement-text":
            outline, text = attrs.get("plan"), str(attrs.get("query") or "")
            queryid = str(attrs["queryid"]) if attrs.get("queryid") is not None else None
            source, ms, notation = "generic plan", None, "json"
            for name, made in (attrs.get("indexes") or {}).items():
                if isinstance(made, dict) and made.get("make") and made.get("table"):
                    out.indexes.setdefault(str(name), {"table": str(made["table"]),
                                                       "make": str(made["make"])})
        else:
            if attrs.get("cut"):
                out.cut += 1
                continue
            outline, text = attrs.get("outline"), str(attrs.get("query") or "")
            queryid = texts.queryid_of_text(node, text) if text else None
            source, ms = "auto_explain", attrs.get("duration_ms")
            notation = str(attrs.get("format") or "json")
        if not isinstance(outline, list) or not outline or not text:
            continue
        # a plan logged with a list of another length is its entry's statement (18);
        # without an entry, the squashed text is the statement, as PostgreSQL 18 keeps it
        text = texts.text(node, queryid) if queryid else squash_lists(text)
        key = comparable(text)
        statement = out.statements.get(key)
        if statement is None:
            statement = out.statements[key] = StatementPlans(text, queryid)
        outline = [str(line) for line in outline]
        plan_key = (notation, shape(outline))
        seen = statement.plans.get(plan_key)
        if seen is None:
            seen = statement.plans[plan_key] = PlanSeen(outline, source, t, t)
        seen.last = max(seen.last, t)
        seen.count += 1
        if isinstance(ms, (int, float)):
            seen.durations_ms.append(float(ms))
    return out


def change_entry(statement: StatementPlans, before: PlanSeen, after: PlanSeen,
                 start: dt.datetime | None = None, end: dt.datetime | None = None
                 ) -> dict[str, Any]:
    """A plan change as analysis.json keeps it (plans of the window counted when given)."""
    return {
        "queryid": statement.queryid, "text": statement.text,
        "before": before.outline, "before_source": before.source,
        "after": after.outline, "after_source": after.source,
        "changed_at": after.first.isoformat(),
        "after_plans": after.count,
        **({"after_median_ms": round(m, 1)} if (m := after.median_ms) is not None else {}),
        **({"before_median_ms": round(m, 1)} if (m := before.median_ms) is not None
           else {}),
    }


def access(outline: list[str]) -> str:
    """The plan in a few words: its scans, `Seq Scan on pgbench_accounts`."""
    scans = [line.strip() for line in outline if " on " in line or "Scan" in line]
    return ", ".join(dict.fromkeys(scans)) or " / ".join(line.strip() for line in outline)


def change_line(entry: dict[str, Any]) -> str:
    """One plan change, as the terminal and the report print it."""
    before, after = entry.get("before") or [], entry.get("after") or []
    timing = (f" ({entry['after_plans']} plans logged, median {entry['after_median_ms']:g} ms)"
              if entry.get("after_median_ms") is not None else "")
    return (f"plan changed at {str(entry.get('changed_at', ''))[11:19]}: "
            f"{entry.get('text') or entry.get('queryid')}: {access(before)} "
            f"({entry.get('before_source')}) -> {access(after)}{timing}")


def by_statement(plans: RunPlans) -> dict[str, list[dict[str, Any]]]:
    """Each statement's shapes in the order seen (compare's view), by comparable text."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for key, statement in plans.statements.items():
        for seen in sorted(statement.plans.values(), key=lambda p: p.first):
            out[key].append({"outline": seen.outline, "source": seen.source,
                             "count": seen.count, "median_ms": seen.median_ms})
    return out
