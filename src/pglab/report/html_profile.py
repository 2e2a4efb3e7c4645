"""os.profile for the report: one flame graph per node and kind of process for the run,
and for each stall window a differential one (the window against the healthy seconds).

profile.parquet's folded stacks, summed over the run, become a tree per node and kind
(frames as indexes into one table of names, so a frame repeated in many chains is one
string in the page), which report/assets/flame.js draws. Frames under a thousandth of a
graph's samples are left out: they would be under a pixel wide, and the page stays small.

A stall's differential graph has the window's shape (its seconds and the one after, as
the analysis takes a window's telemetry) and each frame carries its share of the healthy
seconds' samples too (the measured seconds at least one second away from every window,
as the analysis's baseline leaves out the second leading into one): flame.js colours a
frame by how much its share grew (red) or shrank (blue). A frame the window lost entirely
is not drawn: the graph has the window's frames only.

Where os.kernel ran too, an off-CPU view follows: per node and kind, the kernel stacks
its processes were blocked in (os.kernel's `stack:` series: each second's share of a
kind's reads in a chain, times its reads, is a count of samples), outermost first as
the on-CPU graphs. The latch waits (epoll) every idle process sleeps in are left out, as
the report's kernel chart leaves them out: the wait events name what those waited for.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl

from pglab.results import files
from pglab.results.folder import StoredRun
from pglab.results.kernel_series import FRAME_SEPARATOR

KERNEL = "os.kernel"
LATCH_FRAMES = ("do_epoll_wait", "ep_poll", "epoll_wait")

PRUNE = 1 / 1000  # of a graph's samples: narrower frames are not drawn
MIN_WINDOW_SAMPLES = 5  # a kind with fewer in a window gets no differential graph there
MAX_STALLS = 8  # differential graphs for this many stall windows, the longest first
# The order kinds are listed in: where a run's time goes first
KIND_ORDER = ("backends", "pgbench", "startup", "walreceiver", "walsender", "walwriter",
              "checkpointer", "bgwriter", "autovacuum", "io_worker", "postmaster")


class FrameNames:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.names: list[str] = []

    def of(self, name: str) -> int:
        found = self.index.get(name)
        if found is None:
            found = self.index[name] = len(self.names)
            self.names.append(name)
        return found


def _grow(stacks: list[tuple[str, int]]) -> dict[str, Any]:
    root: dict[str, Any] = {"v": 0, "c": {}}
    for stack, samples in stacks:
        root["v"] += samples
        node = root
        for frame in stack.split(";"):
            node = node["c"].setdefault(frame, {"v": 0, "c": {}})
            node["v"] += samples
    return root


def flame_tree(stacks: list[tuple[str, int]], names: FrameNames,
               baseline: list[tuple[str, int]] | None = None) -> list[Any]:
    """Folded stacks and their samples -> [name, samples, [children]] nested, the root's
    name being "all"; children sorted by name (a flame graph's order), pruned. With a
    baseline, each frame has a fourth item: its share of the baseline's samples in
    thousandths (the same chain of frames from the root), for a differential graph."""
    root = _grow(stacks)
    base = _grow(baseline) if baseline else None
    least = root["v"] * PRUNE

    def encode(name: str, node: dict[str, Any], other: dict[str, Any] | None) -> list[Any]:
        children = [encode(child, sub, other["c"].get(child) if other else None)
                    for child, sub in sorted(node["c"].items()) if sub["v"] >= least]
        encoded = [names.of(name), node["v"], children]
        if base is not None:
            encoded.append(round(1000 * (other["v"] if other else 0) / base["v"], 1))
        return encoded

    return encode("all", root, base)


def _seconds(frame: pl.DataFrame) -> pl.Series:
    return frame["t"].dt.epoch("s")


def stall_graphs(frame: pl.DataFrame, stalls: list[tuple[dt.datetime, dt.datetime, str]],
                 measured: list[int], names: FrameNames) -> list[dict[str, Any]]:
    """Per stall window (the longest MAX_STALLS, in time order) and node and kind, the
    window's tree against the healthy seconds'; [] without healthy seconds."""
    def span(start: dt.datetime, end: dt.datetime) -> tuple[int, int]:
        return int(start.timestamp()), max(int(end.timestamp()), int(start.timestamp()) + 1)

    spans = [span(start, end) for start, end, _ in stalls]
    healthy = [s for s in measured
               if not any(a - 1 <= s <= b for a, b in spans)]  # b: the window's next second
    if not healthy:
        return []
    seconds = _seconds(frame)
    base = frame.filter(seconds.is_in(healthy))
    longest = sorted(range(len(stalls)), key=lambda i: spans[i][0] - spans[i][1])[:MAX_STALLS]
    out = []
    for index in sorted(longest):
        (a, b), (start, _, label) = spans[index], stalls[index]
        window = frame.filter((seconds >= a) & (seconds <= b))
        graphs = []
        for node, kind in ordered_kinds(window.select("node", "kind").unique().rows()):
            mine = _summed(window, node, kind)
            if sum(n for _, n in mine) < MIN_WINDOW_SAMPLES:
                continue
            tree = flame_tree(mine, names, _summed(base, node, kind))
            graphs.append({"node": node, "kind": kind, "samples": tree[1], "tree": tree,
                           "healthy_samples": sum(n for _, n in _summed(base, node, kind))})
        if graphs:
            out.append({"start": files.iso(start),
                        "seconds": b - a, "label": label, "healthy_seconds": len(healthy),
                        "graphs": graphs})
    return out


def _summed(frame: pl.DataFrame, node: str, kind: str) -> list[tuple[str, int]]:
    rows = (frame.filter((pl.col("node") == node) & (pl.col("kind") == kind))
            .group_by("stack").agg(pl.col("samples").sum()).sort("stack"))
    return list(zip(rows["stack"].to_list(), rows["samples"].to_list(), strict=True))


def ordered_kinds(keys: list[tuple[Any, ...]]) -> list[tuple[str, str]]:
    def order(key: tuple[Any, ...]) -> tuple[int, str, int, str]:
        node, kind = str(key[0]), str(key[1])
        rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
        return (0 if node == "primary" else 2 if node == "client" else 1, node, rank, kind)

    return [(str(k[0]), str(k[1])) for k in sorted(keys, key=order)]


def profile_section(run: StoredRun, stalls: list[tuple[dt.datetime, dt.datetime, str]],
                    measured: list[int]) -> dict[str, Any] | None:
    """What flame.js draws: the table of names, one graph per node and kind (primary
    first) and the stall windows' differential ones; None when the run has no
    profile.parquet. `measured`: the measured seconds (epoch), for the healthy ones."""
    frame = run.parquet(files.PROFILE)  # damaged: as the run's reader chose (left out)
    if frame is None or frame.is_empty():
        return None
    names = FrameNames()
    graphs = []
    for node, kind in ordered_kinds(frame.select("node", "kind").unique().rows()):
        tree = flame_tree(_summed(frame, node, kind), names)
        graphs.append({"node": node, "kind": kind, "samples": tree[1], "tree": tree})
    record = (run.manifest.telemetry or {}).get("os.profile") or {}
    return {"names": names.names, "graphs": graphs, "hz": record.get("hz"),
            "unresolved": record.get("unresolved"),
            "stalls": stall_graphs(frame, stalls, measured, names),
            "off_cpu": off_cpu_graphs(run.parquet(files.TIMESERIES), names)}


def off_cpu_graphs(series: pl.DataFrame | None, names: FrameNames) -> list[dict[str, Any]]:
    """Per node and kind, os.kernel's blocked kernel stacks as a flame graph ([] when it
    did not run): samples per chain, latch waits left out."""
    if series is None or series.is_empty():
        return []
    kernel = series.filter(pl.col("source") == KERNEL)
    reads = kernel.filter(pl.col("metric") == "samples").select(
        "t", "node", "label", pl.col("value").alias("reads"))
    stacks = (kernel.filter(pl.col("metric").str.starts_with("stack:"))
              .join(reads, on=["t", "node", "label"], how="inner")
              .with_columns((pl.col("value") / 100 * pl.col("reads")).alias("samples"))
              .group_by("node", "label", "metric").agg(pl.col("samples").sum()))
    by_kind: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for node, kind, metric, samples in stacks.iter_rows():
        frames = metric.removeprefix("stack:").split(FRAME_SEPARATOR)
        count = round(samples)
        if count < 1 or any(f in LATCH_FRAMES for f in frames):
            continue
        folded = ";".join(f"{f}_[k]" for f in reversed(frames))  # outermost first
        by_kind.setdefault((node, kind), []).append((folded, count))
    graphs = []
    for node, kind in ordered_kinds(list(by_kind)):
        tree = flame_tree(sorted(by_kind[node, kind]), names)
        graphs.append({"node": node, "kind": kind, "samples": tree[1], "tree": tree,
                       "unit_note": "os.kernel's reads of blocked processes"})
    return graphs
