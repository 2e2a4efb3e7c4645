"""auto_explain's plans: `duration: N ms  plan:` and the plan, JSON or text.

A `statement-plan` event per plan: its duration, the statement (normalised: constants as
$n, as pg_stat_statements keeps it, so the two meet), its outline (one line per plan node:
`Index Scan using accounts_pkey on accounts`, indented by depth) and `plan_id`, a digest of
the outline alone (node kinds, relations, indexes; no costs, no row counts), so that two
plans of one statement are the same plan exactly when their shapes are. A plan cut short
(a log copied while it was written, a line limit of the log's transport) keeps what it
had: the nodes it names, `cut: true`, and no plan_id (the extractor counts it as not
understood, which the reader says once). Its text is what auto_explain logs, the
client's whole query string: several statements sent in one string are one text, which
names none of pg_stat_statements' statements (each of those is one of them).
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


def _text_outline(body: str) -> tuple[str, list[str]]:
    """auto_explain.log_format = text: `Query Text: ...` and the plan's node lines, named
    as the JSON outline names them where the words allow (`Seq Scan on accounts`, its
    alias left out)."""
    query, lines = "", []
    for row in body.splitlines():
        if row.startswith("Query Text: "):
            query = row[len("Query Text: "):]
            continue
        m = _TEXT_NODE.match(row)
        if m is None:
            continue
        depth = (len(m.group(1)) - 2) // 6 + 1 if m.group(2) else 0
        name = m.group(3)
        if " on " in name:  # "Seq Scan on accounts a": the alias is no part of the plan
            head, _, rest = name.partition(" on ")
            name = f"{head} on {rest.split()[0]}"
        lines.append("  " * depth + name)
    return query, lines[:OUTLINE_MAX]


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
        query, outline = _text_outline(body)
        whole = bool(outline)
    attrs: dict[str, Any] = {
        "duration_ms": ms,
        # text and JSON name nodes differently: plans are compared within one notation
        "format": "json" if body.lstrip().startswith("{") else "text",
        # lists kept at their length: a log does not say its server's version, and the
        # analysis meets a PostgreSQL 18 entry through the squashed form (sqltext)
        "query": normalise(query, squash=False)[:STATEMENT_MAX],
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

