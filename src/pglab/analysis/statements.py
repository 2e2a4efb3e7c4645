"""Which statements: the run's statements by time (`db.statements`), and each stall's,
from the wait samples of its client backends grouped by query_id (`db.statement_waits`).

A statement is its queryid and its text as pg_stat_statements normalised it (the
`statement-text` events). A backend waiting for a table's lock has no query_id yet (the
lock is taken while the statement is analysed): the sampler groups it by its sampled
text, literals replaced by ?, which is matched here with the statement whose
normalised text it is, so the wait counts for that statement.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pglab.analysis.evidence import Segment, WindowEvidence
from pglab.results.manifest import Manifest
from pglab.sqltext import squash_lists

STATEMENT_WAITS = "db.statement_waits"  # probes.db_activity.STATEMENT_WAITS
STATEMENTS = "db.statements"  # probes.db_statements.StatementStats.name
TEXT_LABEL = "text:"  # probes.db_activity.TEXT_LABEL
STALL_STATEMENTS = 5  # listed per stall
RUN_STATEMENTS = 20  # in the run's table, by total execution time
MIN_SHARE = 0.02  # of a stall's samples: below, a statement is not listed
TEXT_CHARS = 200  # the sampler keeps this much of a statement without query_id
# a list's constants in a comparable text, squashed as 18 writes them or not
_LIST = re.compile(r"\?(?: /\*, \.\.\. \*/|(?:, ?\?)+)")
LIST_TOKEN = "?.."
UNKNOWN = "(statement not identified: no query_id and no text readable)"
# A backend idle in its transaction waits for its client's next statement with the last
# one's query_id: that is the client's time, not the statement's.
CLIENTS_TURN = "Client:ClientRead"
_PARAM = re.compile(r"\$\d+")
_SPACE = re.compile(r"\s+")


def comparable(text: str) -> str:
    """A statement's text as both sources can give it: parameters and literals as ?,
    one space, no final semicolon, lower case."""
    text = _SPACE.sub(" ", _PARAM.sub("?", text)).strip().rstrip(";").strip()
    return text.lower()


@dataclass
class StatementTexts:
    """The run's statements by queryid, per node (its `statement-text` events)."""

    texts: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> queryid -> text
    hidden: set[tuple[str, str]] = field(default_factory=set)  # (node, queryid): text hidden
    # node -> queryid -> the relations its generic plan reads (16+)
    relations: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    _index: dict[str, dict[str, str]] = field(default_factory=dict)  # comparable -> queryid
    # comparable with lists squashed -> queryid, where one queryid has it
    _squashed: dict[str, dict[str, str]] = field(default_factory=dict)

    @staticmethod
    def from_events(events: list[tuple[str, dict[str, Any]]]) -> StatementTexts:
        out = StatementTexts()
        for node, attrs in events:
            queryid = attrs.get("queryid")
            if queryid is None:
                continue
            out.texts.setdefault(node, {})[str(queryid)] = str(attrs.get("query") or "")
            if attrs.get("hidden"):
                out.hidden.add((node, str(queryid)))
            names = attrs.get("relations")
            if isinstance(names, list) and names:
                out.relations.setdefault(node, {})[str(queryid)] = [str(n) for n in names]
        return out

    def relations_of(self, node: str, queryid: str | None) -> list[str]:
        return self.relations.get(node, {}).get(queryid or "", [])

    def text(self, node: str, queryid: str) -> str:
        if (node, queryid) in self.hidden:
            return f"(text hidden from pglab's role: queryid {queryid})"
        return self.texts.get(node, {}).get(queryid) or f"(queryid {queryid}: no text read)"

    def queryid_of_text(self, node: str, sampled: str) -> str | None:
        """The queryid whose normalised text the sampled one is (its first TEXT_CHARS
        characters when it was cut), or None."""
        want = comparable(sampled)
        if not want:
            return None
        index = self._index.get(node)
        if index is None:
            index = self._index[node] = {comparable(text): queryid for queryid, text
                                         in self.texts.get(node, {}).items() if text}
        found = index.get(want)
        if found is None:
            found = self._squashed_match(node, sampled)
        if found is not None or len(sampled) < TEXT_CHARS - 10:
            return found
        # cut by the sampler, maybe inside a literal: its start is what it says
        head = want[: len(want) - 20]
        found = next((q for text, q in index.items() if text.startswith(head)), None)
        if found is not None:
            return found
        # cut inside a list (a long IN list is what makes a text long), which 18 keeps
        # squashed: both with each list one token, the sampled one up to its last list
        # when the cut came soon after it
        lists = _LIST.sub(LIST_TOKEN, want)
        end = lists.rfind(LIST_TOKEN) + len(LIST_TOKEN)
        head = lists[:end] if len(lists) - end < 20 <= end else lists[: len(lists) - 20]
        return next((q for text, q in index.items()
                     if _LIST.sub(LIST_TOKEN, text).startswith(head)), None)


    def _squashed_match(self, node: str, sampled: str) -> str | None:
        """A text whose list is of another length than its entry's: PostgreSQL 18 keeps
        one entry of any length (`IN ($1 /*, ... */)`), which a text logged with its
        literals (auto_explain, a log whose server is not known) only meets squashed.
        An older server's entries of several lengths squash alike: none is chosen."""
        index = self._squashed.get(node)
        if index is None:
            seen: dict[str, set[str]] = defaultdict(set)
            for queryid, text in self.texts.get(node, {}).items():
                if text:
                    seen[comparable(squash_lists(text))].add(queryid)
            index = self._squashed[node] = {key: next(iter(ids)) for key, ids in seen.items()
                                            if len(ids) == 1}
        return index.get(comparable(squash_lists(sampled)))


def statement_texts(data_events: pl.DataFrame) -> StatementTexts:
    """From the run's events (events.parquet's columns)."""
    rows = data_events.filter(pl.col("kind") == "statement-text")
    found = []
    for node, attrs in rows.select("node", "attrs").iter_rows():
        try:
            parsed = json.loads(attrs) if attrs else {}
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            found.append((str(node or "primary"), parsed))
    return StatementTexts.from_events(found)


def _by_statement(segment: Segment, node: str, texts: StatementTexts
                  ) -> dict[str, dict[str, float]]:
    """Samples per statement (queryid, `text:...` when no statement has that text, ""
    when neither) and per wait."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (n, source, wait), by_label in segment.sums.items():
        if n != node or source != STATEMENT_WAITS or wait == CLIENTS_TURN:
            continue
        for label, count in by_label.items():
            key = label
            if label.startswith(TEXT_LABEL):
                key = texts.queryid_of_text(node, label[len(TEXT_LABEL):]) or label
            out[key][wait] += count
    return out


def stall_statements(ev: WindowEvidence, texts: StatementTexts,
                     limit: int = STALL_STATEMENTS) -> list[dict[str, Any]]:
    """The statements the window's client backends were running or waiting in (not
    idle in a transaction between two: CLIENTS_TURN): each one's share of the window's
    samples against its share of the healthy seconds', and its most sampled wait; the
    largest first."""
    node = ev.nodes[0]
    inside = _by_statement(ev.inside, node, texts)
    healthy = _by_statement(ev.healthy, node, texts)
    total = sum(sum(w.values()) for w in inside.values())
    total_h = sum(sum(w.values()) for w in healthy.values())
    if total <= 0:
        return []
    ranked = sorted(inside.items(), key=lambda kv: sum(kv[1].values()), reverse=True)
    out = []
    for key, waits in ranked[:limit]:
        samples = sum(waits.values())
        if samples / total < MIN_SHARE:
            break
        wait, count = max(waits.items(), key=lambda kv: kv[1])
        if key.startswith(TEXT_LABEL):
            queryid, text = None, key[len(TEXT_LABEL):]
        elif key:
            queryid, text = key, texts.text(node, key)
        else:
            queryid, text = None, UNKNOWN
        in_healthy = sum(healthy.get(key, {}).values())
        relations = texts.relations_of(node, queryid)
        out.append({
            "queryid": queryid, "text": text, "node": node,
            **({"relations": relations} if relations else {}),
            "share": round(samples / total, 3),
            "healthy_share": round(in_healthy / total_h, 3) if total_h > 0 else None,
            "samples": int(samples),
            "top_wait": wait, "top_wait_share": round(count / samples, 3),
        })
    return out


def statement_line(entry: dict[str, Any]) -> str:
    """One statement of a stall, as the terminal and the report print it (an entry of
    analysis.json as read: a figure missing is left out)."""
    def share(key: str) -> float | None:
        value = entry.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    own, healthy, wait = share("share"), share("healthy_share"), share("top_wait_share")
    parts = [f"{own:.0%} of samples" if own is not None else "share unknown"]
    if healthy is not None:
        parts.append(f" (healthy seconds {healthy:.0%})")
    if entry.get("top_wait"):
        parts.append(f", mostly {entry['top_wait']}"
                     + (f" ({wait:.0%})" if wait is not None else ""))
    relations = entry.get("relations")
    if isinstance(relations, list) and relations:
        parts.append(f", on {', '.join(map(str, relations))}")
    return "".join(parts) + f": {entry.get('text') or entry.get('queryid') or '?'}"


COLUMNS = ("calls", "exec_ms", "rows", "shared_blks_hit", "shared_blks_read",
           "shared_blks_dirtied", "temp_blks_written", "wal_bytes")


def _interval_s(manifest: Manifest) -> float:
    telemetry = manifest.telemetry or {}
    value = telemetry.get("interval_s")
    if not isinstance(value, (int, float)):
        value = (manifest.scenario.get("telemetry") or {}).get("interval")
    return float(value) if isinstance(value, (int, float)) and value > 0 else 1.0


def run_statements(timeseries: pl.DataFrame, seconds: list[Any], manifest: Manifest,
                   texts: StatementTexts, node: str = "primary",
                   limit: int = RUN_STATEMENTS) -> list[dict[str, Any]]:
    """The run's statements over its measured seconds, by total execution time: per
    second calls, rows, shared blocks hit/read/dirtied, temp blocks written and WAL
    bytes; mean milliseconds per call; each one's share of the time."""
    if timeseries.height == 0 or not seconds:
        return []
    rows = (timeseries.lazy()
            .filter((pl.col("source") == STATEMENTS) & (pl.col("node") == node)
                    & pl.col("metric").is_in(COLUMNS))
            .with_columns(pl.col("t").dt.truncate("1s").alias("sec"))
            .filter(pl.col("sec").is_in(seconds))
            .group_by("label", "metric").agg(pl.col("value").sum())
            .collect())
    if rows.height == 0:
        return []
    interval, measured = _interval_s(manifest), len(seconds)
    totals: dict[str, dict[str, float]] = defaultdict(dict)
    for label, metric, value in rows.iter_rows():
        totals[str(label)][str(metric)] = float(value) * interval  # rates back to counts
    all_ms = sum(t.get("exec_ms", 0.0) for t in totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda kv: kv[1].get("exec_ms", 0.0), reverse=True)
    out = []
    for queryid, total in ranked[:limit]:
        calls = total.get("calls", 0.0)
        relations = texts.relations_of(node, queryid)
        entry: dict[str, Any] = {
            "queryid": queryid, "text": texts.text(node, queryid),
            **({"relations": relations} if relations else {}),
            "calls_per_s": round(calls / measured, 2),
            "mean_ms": round(total.get("exec_ms", 0.0) / calls, 3) if calls else None,
            "time_share": round(total.get("exec_ms", 0.0) / all_ms, 3),
        }
        for metric in COLUMNS[2:]:
            if metric in total:
                entry[f"{metric}_per_s"] = round(total[metric] / measured, 1)
        out.append(entry)
    return out
