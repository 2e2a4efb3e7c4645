"""auto_explain's plans: `duration: N ms  plan:` and the plan, JSON or text.

A `statement-plan` event per plan: its duration, the statement (normalised: constants as
$n, as pg_stat_statements keeps it, so the two meet), its outline (one line per plan node:
`Index Scan using accounts_pkey on accounts`, indented by depth) and `plan_id`, a digest of
the outline alone (node kinds, relations, indexes; no costs, no row counts), so that two
plans of one statement are the same plan exactly when their shapes are. A plan cut short
(a log copied while it was written, a line limit of the log's transport, a collector
truncating a long field, a syslog piece lost) keeps what it had: the nodes it names,
`cut: true`, and no plan_id (the extractor counts it as not understood, which the reader
says once). A JSON plan is cut when it does not parse; a text plan when a node lacks the
children its kind always has or its last line leaves a bracket open. Its text is what
auto_explain logs, the client's whole query string: several statements sent in one
string are one text, which names none of pg_stat_statements' statements (each of those
is one of them).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pglab.events import Event
from pglab.serverlog.event_parts import MICROSECOND, new_event
from pglab.serverlog.records import LogRecord
from pglab.serverlog.statement_rules import add_session
from pglab.serverlog.triggers import STATEMENT_MAX
from pglab.sqltext import normalise

PLAN_RE = re.compile(r"duration: ([\d.]+) ms  plan:\s*(.*)", re.S)
OUTLINE_MAX = 40  # plan nodes kept in an event
_QUERY_TEXT = re.compile(r'"Query Text": "((?:[^"\\]|\\.)*)"')
_NODE_TYPE = re.compile(r'"Node Type": "([^"]+)"')
# the text format: a node's line is its name then its costs; below the top one, after
# "->  ", six columns deeper a level
_TEXT_NODE = re.compile(r"^( *)(->  )?(\S.*?)  \(cost=")


def _node_line(node: dict[str, Any]) -> str:
    kind = str(node.get("Node Type") or "?")
    if kind == "ModifyTable" and node.get("Operation"):
        kind = str(node["Operation"])
    if node.get("Index Name"):
        kind += f" using {node['Index Name']}"
    if node.get("Relation Name"):
        kind += f" on {node['Relation Name']}"
    return kind


def outline_of(plan: dict[str, Any]) -> list[str]:
    """The plan's nodes, depth first, each indented two spaces a level."""
    lines: list[str] = []

    def walk(node: Any, depth: int) -> None:
        if not isinstance(node, dict) or len(lines) >= OUTLINE_MAX:
            return
        lines.append("  " * depth + _node_line(node))
        for child in node.get("Plans") or []:
            walk(child, depth + 1)

    walk(plan, 0)
    return lines


def plan_id(outline: list[str]) -> str:
    return hashlib.sha1("\n".join(outline).encode()).hexdigest()[:12]


# A text plan has no closing bracket to miss: cut short (a log copied while written, a
# transport's line or field limit, a lost syslog piece) it is still lines of nodes. What
# tells it is a node short of the children its kind always has: the last ones are gone.
_PREFIXES = re.compile(r"^(?:(?:Parallel|Partial|Finalize|Async) )+")
_TWO_CHILDREN = re.compile(r"(?:^(?:Hash|Merge|Nested Loop)\b.* Join$|^Nested Loop$"
                           r"|^Recursive Union$|^BitmapAnd$|^BitmapOr$)")
_ONE_CHILD = re.compile(
    r"^(?:Gather|Gather Merge|Sort|Incremental Sort|Hash|Materialize|Memoize|Limit|Unique"
    r"|\w*Aggregate|Group|WindowAgg|\w*SetOp(?: \w+)*|LockRows|ProjectSet|Append|Merge Append"
    r"|Subquery Scan on .*|Bitmap Heap Scan on .*|(?:Insert|Update|Delete|Merge) on .*)$")
# the label of a plan inside a node (`InitPlan 1`, `SubPlan 2`, `CTE recent`): its one
# node is the label's child, not the node's
_TEXT_LABEL = re.compile(r"^( *)((?:InitPlan|SubPlan|CTE) \S.*)$")
_QUOTED = re.compile(r"'(?:[^']|'')*'")


def _children_needed(name: str) -> int:
    """How many child nodes a plan node of this (text format) name always has."""
    name = _PREFIXES.sub("", name)
    if _TWO_CHILDREN.match(name):
        return 2
    return 1 if _ONE_CHILD.match(name) else 0


def _text_outline(body: str) -> tuple[str, list[str], bool]:
    """auto_explain.log_format = text: `Query Text: ...`, the plan's node lines, named
    as the JSON outline names them where the words allow (`Seq Scan on accounts`, its
    alias left out), and whether the plan is whole: it has nodes, each has the children
    its kind always has (a join two, a Sort or a Gather one), and its last line closes
    its brackets."""
    query, lines = "", []
    nodes: list[list[int]] = []  # [column of its name, children needed, children seen]
    rows = body.splitlines()
    for row in rows:
        if row.startswith("Query Text: "):
            query = row[len("Query Text: "):]
            continue
        m = _TEXT_NODE.match(row)
        if m is None:
            label = _TEXT_LABEL.match(row)
            if label is not None:
                nodes.append([len(label.group(1)), 1, 0])
            continue
        depth = (len(m.group(1)) - 2) // 6 + 1 if m.group(2) else 0
        name = m.group(3)
        column = len(m.group(1)) + (4 if m.group(2) else 0)
        if m.group(2):  # a child of the last node whose name begins left of its arrow
            parent = next((i for i in range(len(nodes) - 1, -1, -1)
                           if nodes[i][0] < len(m.group(1))), None)
            if parent is not None:
                nodes[parent][2] += 1
        nodes.append([column, _children_needed(name), 0])
        if " on " in name:  # "Seq Scan on accounts a": the alias is no part of the plan
            head, _, rest = name.partition(" on ")
            name = f"{head} on {rest.split()[0]}"
        lines.append("  " * depth + name)
    last = _QUOTED.sub("", rows[-1]) if rows else ""
    whole = (bool(nodes) and last.count("(") == last.count(")")
             and all(seen >= needed for _, needed, seen in nodes))
    return query, lines[:OUTLINE_MAX], whole


def plan_event(rec: LogRecord, msg: str, node: str) -> tuple[Event, bool] | None:
    """(the event, whether the plan was whole), or None: not an auto_explain plan."""
    m = PLAN_RE.match(msg)
    if m is None:
        return None
    ms, body = float(m.group(1)), m.group(2).replace("\n\t", "\n")
    whole = True
    query = ""
    outline: list[str] = []
    if body.lstrip().startswith("{"):
        try:
            parsed = json.loads(body)
            query = str(parsed.get("Query Text") or "")
            outline = outline_of(parsed.get("Plan") or {})
        except (json.JSONDecodeError, AttributeError):
            whole = False
            found = _QUERY_TEXT.search(body)
            if found is not None:
                try:
                    query = json.loads(f'"{found.group(1)}"')
                except json.JSONDecodeError:
                    query = found.group(1)
            outline = _NODE_TYPE.findall(body)[:OUTLINE_MAX]
    else:
        query, outline, whole = _text_outline(body)
    text = normalise(query, squash=False)
    if len(text) > STATEMENT_MAX:
        # too long to keep whole, mostly for a long list: squashed it is whole and still
        # meets 18's entry (what the list's length was is lost either way)
        text = normalise(query)
    attrs: dict[str, Any] = {
        "duration_ms": ms,
        # text and JSON name nodes differently: plans are compared within one notation
        "format": "json" if body.lstrip().startswith("{") else "text",
        # lists kept at their length: a log does not say its server's version, and the
        # analysis meets a PostgreSQL 18 entry through the squashed form (sqltext)
        "query": text[:STATEMENT_MAX],
        "outline": outline,
        "pid": rec.pid,
    }
    if whole:
        attrs["plan_id"] = plan_id(outline)
    else:
        attrs["cut"] = True
    event = new_event(rec.t - MICROSECOND * round(ms * 1000), "statement-plan", node,
                      rec.t, add_session(attrs, rec))
    return event, whole

