"""A differential flame graph per process kind for `pglab compare` (os.profile's
profile.parquet on both sides), normalised per transaction.

Each side's on-CPU samples of the measured window are summed over its runs per node,
kind and folded stack, and divided by the transactions the side made in those seconds:
samples per transaction are CPU time per transaction (at the profile's rate). The graph
has the contender's frames; each carries the base's cost of the same chain of frames,
expressed as a share of the contender's samples (report/assets/flame.js draws it red
where the contender spends more CPU per transaction in it, blue where less). A frame only
the base had is not drawn: the graph has the contender's frames only, as a stall's does.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl

from pglab.compare.groups import Group
from pglab.compare.rundata import RunData
from pglab.report.html_profile import FrameNames, flame_tree, ordered_kinds
from pglab.results import files

MIN_SAMPLES = 20  # a kind with fewer on either side gets no graph: nothing to compare


def _side(group: Group) -> tuple[dict[tuple[str, str], Counter[str]], float]:
    """(node, kind) -> stack -> samples in the measured windows, and the transactions."""
    stacks: dict[tuple[str, str], Counter[str]] = {}
    transactions = 0.0
    for run in group.runs:
        frame, window = run.run.parquet(files.PROFILE), run.window
        if frame is None or frame.is_empty() or window is None:
            continue
        transactions += _transactions(run)
        rows = (frame.filter((pl.col("t") >= window[0]) & (pl.col("t") < window[1]))
                .group_by("node", "kind", "stack").agg(pl.col("samples").sum()))
        for node, kind, stack, samples in rows.iter_rows():
            stacks.setdefault((node, kind), Counter())[stack] += samples
    return stacks, transactions


def _transactions(run: RunData) -> float:
    rows = run.client_seconds
    return float(rows["tps"].sum()) if rows is not None and rows.height else 0.0


def _scaled(tree: list[Any], factor: float) -> None:
    tree[3] = round(tree[3] * factor, 1)
    for child in tree[2]:
        _scaled(child, factor)


def profile_diff(base: Group, contender: Group) -> dict[str, Any] | None:
    """What flame.js draws for one contender (DATA.profile's shape: names, graphs, and
    one section of differential graphs), or None when a side has no profile."""
    base_stacks, base_tx = _side(base)
    mine, mine_tx = _side(contender)
    if not base_stacks or not mine or not base_tx or not mine_tx:
        return None
    names = FrameNames()
    graphs = []
    for node, kind in ordered_kinds(list(mine)):
        theirs = base_stacks.get((node, kind))
        ours = mine[node, kind]
        if theirs is None or min(sum(ours.values()), sum(theirs.values())) < MIN_SAMPLES:
            continue
        per_tx_base = sum(theirs.values()) / base_tx
        per_tx_mine = sum(ours.values()) / mine_tx
        tree = flame_tree(sorted(ours.items()), names, sorted(theirs.items()))
        # flame_tree gives the base's share of its own samples; per transaction, against
        # the contender's samples, it is that times the ratio of the two sides' costs
        _scaled(tree, per_tx_base / per_tx_mine)
        change = 100 * (per_tx_mine / per_tx_base - 1)
        graphs.append({
            "node": node, "kind": kind, "samples": tree[1], "tree": tree,
            "base_note": (f"{1000 * per_tx_mine:.1f} samples per 1000 transactions, base "
                          f"{1000 * per_tx_base:.1f} ({change:+.0f}%)"),
            "per_1000_tx": [round(1000 * per_tx_base, 2), round(1000 * per_tx_mine, 2)]})
    if not graphs:
        return None
    return {"names": names.names, "graphs": [], "base_word": "per transaction in the base",
            "stalls": [{"title": f"{contender.label} against {base.label}: on-CPU samples per "
                                 "transaction, red grew, blue shrank", "graphs": graphs}]}


CSS = """
.toolbar{padding:6px 0}.chart{border:1px solid #ddd;border-radius:6px;margin:8px 0;
padding:6px 8px 4px}.chart-head{display:flex;align-items:baseline;gap:10px;flex-wrap:wrap}
.chart-head h3{margin:0;font-size:14px}.unit{color:#777;font-size:12px}
.tip{position:fixed;display:none;z-index:10;pointer-events:none;background:rgba(20,33,61,.95);
color:#fff;padding:6px 8px;border-radius:4px;font-size:12px;max-width:480px}
.tip-title{font-weight:600}.flame canvas{display:block;margin-top:4px;cursor:pointer}
.flame-search{min-width:320px}.flame-stall{font-size:14px;margin:18px 0 4px}
"""
