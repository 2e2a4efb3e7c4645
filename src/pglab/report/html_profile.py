"""os.profile for the report: one flame graph per node and kind of process, for the run.

profile.parquet's folded stacks, summed over the run, become a tree per node and kind
(frames as indexes into one table of names, so a frame repeated in many chains is one
string in the page), which report/assets/flame.js draws. Frames under a thousandth of a
graph's samples are left out: they would be under a pixel wide, and the page stays small.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from pglab.results import files
from pglab.results.folder import StoredRun

PRUNE = 1 / 1000  # of a graph's samples: narrower frames are not drawn
# The order kinds are listed in: where a run's time goes first
KIND_ORDER = ("backends", "pgbench", "startup", "walreceiver", "walsender", "walwriter",
              "checkpointer", "bgwriter", "autovacuum", "io_worker", "postmaster")


class _Names:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def of(self, name: str) -> int:
        found = self.index.get(name)
        if found is None:
            found = self.index[name] = len(self.names)
            self.names.append(name)
        return found


def flame_tree(stacks: list[tuple[str, int]], names: _Names) -> list[Any]:
    """Folded stacks and their samples -> [name, samples, [children]] nested, the root's
    name being "all"; children sorted by name (a flame graph's order), pruned."""
    root: dict[str, Any] = {"v": 0, "c": {}}
    for stack, samples in stacks:
        root["v"] += samples
        node = root
        for frame in stack.split(";"):
            node = node["c"].setdefault(frame, {"v": 0, "c": {}})
            node["v"] += samples
    least = root["v"] * PRUNE

    def encode(name: str, node: dict[str, Any]) -> list[Any]:
        children = [encode(child, sub) for child, sub in sorted(node["c"].items())
                    if sub["v"] >= least]
        return [names.of(name), node["v"], children]

    return encode("all", root)


def profile_section(run: StoredRun) -> dict[str, Any] | None:
    """What flame.js draws: the table of names and one graph per node and kind, primary
    first; None when the run has no profile.parquet."""
    path = run.file(files.PROFILE)
    if not path.is_file():
        return None
    frame = pl.read_parquet(path)
    if frame.is_empty():
        return None
    summed = frame.group_by("node", "kind", "stack").agg(pl.col("samples").sum())
    names = _Names()
    graphs = []
    keys = summed.select("node", "kind").unique().rows()

    def order(key: tuple[str, str]) -> tuple[int, str, int, str]:
        node, kind = key
        rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
        return (0 if node == "primary" else 2 if node == "client" else 1, node, rank, kind)

    for node, kind in sorted(keys, key=order):
        rows = summed.filter((pl.col("node") == node) & (pl.col("kind") == kind))
        stacks = list(zip(rows["stack"].to_list(), rows["samples"].to_list(), strict=True))
        tree = flame_tree(stacks, names)
        graphs.append({"node": node, "kind": kind, "samples": tree[1], "tree": tree})
    record = (run.manifest.telemetry or {}).get("os.profile") or {}
    return {"names": names.names, "graphs": graphs, "hz": record.get("hz"),
            "unresolved": record.get("unresolved")}
