"""Evidence from what the processes computed: the on-CPU stacks of os.profile
(profile.parquet) in a stall window against the healthy seconds.

A function's share of a process kind's samples is inclusive: the samples whose chain holds
it anywhere (a flame graph's width), so "41% of the startup process's on-CPU samples in
heap_page_prune_opt" counts the time in it and in what it called. The function that rose
most in the window is what the window computed that the healthy seconds did not; the
innermost frame most often sampled in the window says where that time ended up.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from pglab.analysis.evidence import WindowEvidence

# A kind's window needs this many samples before its shares are read (at 49 Hz, a second
# of a busy process): fewer tell nothing.
MIN_SAMPLES = 20
# A function rose when its share grew by this many points.
MIN_RISE_POINTS = 10.0
MAX_LINES = 4
KIND_WORDS = {
    "backends": "client backends", "startup": "startup process",
    "walreceiver": "WAL receiver", "walsender": "WAL sender", "walwriter": "WAL writer",
    "bgwriter": "background writer", "autovacuum": "autovacuum workers",
    "io_worker": "io workers",
}


@dataclass
class ProfileSegment:
    """On-CPU samples over a set of seconds, per (node, kind)."""

    totals: dict[tuple[str, str], int] = field(default_factory=dict)
    frames: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)  # inclusive
    leaves: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)  # innermost

    def share(self, node: str, kind: str, frame: str) -> float:
        total = self.totals.get((node, kind), 0)
        return 100 * self.frames.get((node, kind), {}).get(frame, 0) / total if total else 0.0

    @staticmethod
    def combined(parts: list[ProfileSegment]) -> ProfileSegment:
        out = ProfileSegment()
        for part in parts:
            for key, n in part.totals.items():
                out.totals[key] = out.totals.get(key, 0) + n
            for table, mine in ((part.frames, out.frames), (part.leaves, out.leaves)):
                for key, counts in table.items():
                    into = mine.setdefault(key, {})
                    for name, n in counts.items():
                        into[name] = into.get(name, 0) + n
        return out


def _named(frame: str) -> bool:
    return not frame.startswith("[unknown") and frame != "all"


def profile_segments(profile: pl.DataFrame, by_second: pl.DataFrame) -> dict[int, ProfileSegment]:
    """segment -> its on-CPU samples, from profile.parquet's rows and the evidence's
    second -> segment map (evidence.py: a window with its second after, HEALTHY...)."""
    found: dict[int, ProfileSegment] = defaultdict(ProfileSegment)
    if profile.height == 0 or by_second.height == 0:
        return found
    rows = (profile.lazy()
            .with_columns(pl.col("t").dt.truncate("1s").alias("sec"))
            .join(by_second.lazy(), on="sec", how="inner")
            .group_by("segment", "node", "kind", "stack").agg(pl.col("samples").sum())
            .collect())
    for segment, node, kind, stack, samples in rows.iter_rows():
        seg, key = found[int(segment)], (node, kind)
        seg.totals[key] = seg.totals.get(key, 0) + samples
        names = stack.split(";")
        frames = seg.frames.setdefault(key, {})
        for name in set(names):
            if _named(name):
                frames[name] = frames.get(name, 0) + samples
        leaf = names[-1]
        leaves = seg.leaves.setdefault(key, {})
        leaves[leaf] = leaves.get(leaf, 0) + samples
    return found


@dataclass(frozen=True)
class Rise:
    node: str
    kind: str
    frame: str
    window_pct: float
    healthy_pct: float
    samples: int
    leaf: str
    leaf_pct: float

    @property
    def points(self) -> float:
        return self.window_pct - self.healthy_pct

    def line(self) -> str:
        """"standby1's startup process: 41% of its on-CPU samples in heap_page_prune_opt
        (healthy 9%); innermost most often XLogFlush 12% (230 samples)"."""
        who = "pgbench" if self.kind == "pgbench" else (
            f"{self.node}'s {KIND_WORDS.get(self.kind, self.kind)}")
        leaf = (f"; innermost most often {self.leaf} {self.leaf_pct:.0f}%"
                if self.leaf != self.frame else "")
        return (f"{who}: {self.window_pct:.0f}% of its on-CPU samples in {self.frame} "
                f"(healthy {self.healthy_pct:.0f}%){leaf} ({self.samples} samples)")


def risen(inside: ProfileSegment, healthy: ProfileSegment, node: str, kind: str
          ) -> Rise | None:
    """The function of one kind whose share rose most in the window, if it rose by
    MIN_RISE_POINTS and the window has MIN_SAMPLES of the kind. Of functions that rose
    alike (a caller and the callee that holds all its time), the innermost is named: the
    one with the smallest share among those within 2 points of the largest rise."""
    key = (node, kind)
    total = inside.totals.get(key, 0)
    if total < MIN_SAMPLES:
        return None
    rises = sorted(((inside.share(node, kind, f) - healthy.share(node, kind, f), f)
                    for f in inside.frames.get(key, {})), reverse=True)
    if not rises or rises[0][0] < MIN_RISE_POINTS:
        return None
    alike = [f for points, f in rises if points >= rises[0][0] - 2.0]
    frame = min(alike, key=lambda f: (inside.share(node, kind, f), f))
    leaves = inside.leaves.get(key, {})
    leaf, count = max(leaves.items(), key=lambda kv: (kv[1], kv[0]))
    return Rise(node, kind, frame, inside.share(node, kind, frame),
                healthy.share(node, kind, frame), total, leaf, 100 * count / total)


def rises(inside: ProfileSegment, healthy: ProfileSegment) -> list[Rise]:
    """Every kind whose computing changed in the window, the largest rise first."""
    found = [r for node, kind in inside.totals
             if (r := risen(inside, healthy, node, kind)) is not None]
    return sorted(found, key=lambda r: (-r.points, r.node, r.kind))[:MAX_LINES]


def window_rises(ev: WindowEvidence) -> list[Rise]:
    """The kinds whose computing changed in the window (none without os.profile)."""
    if ev.cpu_inside is None or ev.cpu_healthy is None:
        return []
    return rises(ev.cpu_inside, ev.cpu_healthy)


def kind_line(ev: WindowEvidence, node: str, kind: str) -> str | None:
    """One kind's rising function, as evidence for a cause about that kind."""
    if ev.cpu_inside is None or ev.cpu_healthy is None:
        return None
    rise = risen(ev.cpu_inside, ev.cpu_healthy, node, kind)
    return rise.line() if rise is not None else None


def busiest_kind(ev: WindowEvidence, node: str) -> str | None:
    """The kind of `node` with the most on-CPU samples in the window."""
    if ev.cpu_inside is None:
        return None
    kinds = [(n, kind) for (name, kind), n in ev.cpu_inside.totals.items() if name == node]
    return max(kinds)[1] if kinds else None
