"""Where the CPU went, base against a contender (os.profile's profile.parquet on both
sides): per node and process kind, the few functions whose share of the samples rose or
fell most, in words for every output, and a differential flame graph for the HTML page.

Each side's on-CPU samples of the measured window are summed over its runs per node,
kind and folded stack, and divided by the transactions the side made in those seconds:
samples per transaction are CPU time per transaction (at the profile's rate).

In words: a kind's samples per 1000 transactions on each side, then the functions whose
share of the kind's samples changed most (inclusive: the samples whose chain holds the
function anywhere, a flame graph's width, as the analysis's on-CPU evidence counts it),
each with its samples per 1000 transactions too; a change within its sampling error (two
standard errors of the difference of two sampled shares) is not named. Shares rather
than per-transaction points rank them, because every chain passes through main and the
process's main loop: by per-transaction points those would lead whenever the kind's CPU
per transaction changed, and that change is said once, on the kind's line. Of functions on the same
chains (a caller and the callee that holds its time) one is named: the innermost of
those within ALIKE_POINTS of the largest change, as the analysis names the function
that rose in a stall.

The graph has the contender's frames; each carries the base's cost of the same chain of
frames, expressed as a share of the contender's samples (report/assets/flame.js draws
it red where the contender spends more CPU per transaction in it, blue where less). A
frame only the base had is not drawn: the graph has the contender's frames only, as a
stall's does.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from pglab.analysis.profile import KIND_WORDS
from pglab.compare.groups import Group
from pglab.compare.rundata import RunData
from pglab.errors import BadInput
from pglab.report.html_profile import FrameNames, flame_tree, ordered_kinds
from pglab.results import files

PROBE = "os.profile"
MIN_SAMPLES = 20  # a kind with fewer on either side is not compared: nothing to compare
MIN_POINTS = 2.0  # a function whose share changed by less is not named
# nor one whose change is within this many standard errors of the difference of two
# sampled shares: a share of 70 samples is uncertain by several points
MIN_ERRORS = 2.0
ALIKE_POINTS = 2.0  # functions on the same chains whose changes are this close are one
MAX_FUNCTIONS = 4  # per kind
# of a side's frames: perf left this many unnamed (stripped binaries, no unwind tables),
# so its shares are of what was named; the manifest's line on why is repeated
UNNAMED_PCT = 10.0
TOGETHER = 0.9  # of the smaller one's samples in chains holding both: the same chains

Stacks = dict[tuple[str, str], Counter[str]]


@dataclass
class Side:
    """One side's on-CPU samples of its measured windows: (node, kind) -> stack -> samples,
    and the transactions of those windows."""

    stacks: Stacks
    transactions: float


@dataclass(frozen=True)
class FunctionChange:
    function: str
    base_pct: float  # of the kind's on-CPU samples on the side, inclusive
    contender_pct: float
    base_per_1000_tx: float  # the samples holding it per 1000 transactions
    contender_per_1000_tx: float

    @property
    def points(self) -> float:
        return self.contender_pct - self.base_pct

    def beyond_noise(self, base_samples: int, contender_samples: int) -> bool:
        """Whether the change exceeds MIN_POINTS and MIN_ERRORS standard errors of the
        difference of two sampled shares (the two-proportion test's pooled error: a
        function never sampled on one side is still uncertain there)."""
        pooled = (self.base_pct * base_samples + self.contender_pct * contender_samples) / (
            100 * (base_samples + contender_samples))
        error = 100 * math.sqrt(pooled * (1 - pooled)
                                * (1 / base_samples + 1 / contender_samples))
        return abs(self.points) >= max(MIN_POINTS, MIN_ERRORS * error)

    def line(self) -> str:
        """"ExecAgg +36.9 pts (0.0% -> 36.9%; 0.0 -> 16.2 per 1000 tx)"."""
        return (f"{self.function} {self.points:+.1f} pts ({self.base_pct:.1f}% -> "
                f"{self.contender_pct:.1f}%; {self.base_per_1000_tx:.1f} -> "
                f"{self.contender_per_1000_tx:.1f} per 1000 tx)")


@dataclass(frozen=True)
class KindChange:
    node: str
    kind: str
    base_samples: int
    contender_samples: int
    base_per_1000_tx: float
    contender_per_1000_tx: float
    functions: list[FunctionChange]

    @property
    def who(self) -> str:
        return who(self.node, self.kind)

    @property
    def change_pct(self) -> float:
        return 100 * (self.contender_per_1000_tx / self.base_per_1000_tx - 1)

    def line(self) -> str:
        """"primary's client backends: 30.2 -> 43.8 on-CPU samples per 1000 transactions
        (+45%)"."""
        return (f"{self.who}: {self.base_per_1000_tx:.1f} -> {self.contender_per_1000_tx:.1f}"
                f" on-CPU samples per 1000 transactions ({self.change_pct:+.0f}%)"
                + ("" if self.functions else
                   "; no function's share changed beyond its sampling error"))


@dataclass
class ProfileComparison:
    """One contender against the base; `notes` say, a line each, what was not compared
    and why (a side without a profile, kinds with too few samples)."""

    kinds: list[KindChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    base: Side | None = field(default=None, repr=False)
    contender: Side | None = field(default=None, repr=False)


TITLE = ("on-CPU samples (os.profile): each function's share of its process kind's "
         "samples, base -> contender")


def who(node: str, kind: str) -> str:
    return "pgbench" if kind == "pgbench" else f"{node}'s {KIND_WORDS.get(kind, kind)}"


def _asked(run: RunData) -> bool:
    """Whether the run was to record on-CPU profiles (whether or not it could)."""
    telemetry = run.manifest.telemetry or {}
    include = (run.manifest.scenario.get("telemetry") or {}).get("include") or []
    return PROBE in telemetry or PROBE in (telemetry.get("probes") or []) or PROBE in include


def _why_none(run: RunData, frame: pl.DataFrame | None) -> str | None:
    """Why the run's measured window gives nothing to compare, None when it does."""
    record = (run.manifest.telemetry or {}).get(PROBE)
    if isinstance(record, dict) and record.get("unavailable"):
        return f"os.profile did not run: {record['unavailable']}"
    if not _asked(run):
        return "os.profile was not among its probes (telemetry.include)"
    if frame is None:
        return f"no {files.PROFILE}"
    if run.window is None:
        return "no measured seconds"
    window = run.window
    if frame.filter((pl.col("t") >= window[0]) & (pl.col("t") < window[1])).is_empty():
        return "no on-CPU samples in its measured seconds"
    if not _transactions(run):
        return "no transactions in its measured seconds, nothing to divide by"
    return None


def _side(name: str, group: Group, notes: list[str]) -> Side | None:
    """The side's samples and transactions over its runs with a profile; a note for each
    run without one (the whole side's when none has one)."""
    side = Side({}, 0.0)
    lacking: list[str] = []
    for run in group.runs:
        try:
            frame = run.profile
        except BadInput as exc:  # a damaged file: this run's profile is left out, said
            lacking.append(str(exc))
            continue
        why = _why_none(run, frame)
        if why is not None or frame is None or run.window is None:
            lacking.append(f"{run.label}: {why}")
            continue
        window = run.window
        side.transactions += _transactions(run)
        rows = (frame.filter((pl.col("t") >= window[0]) & (pl.col("t") < window[1]))
                .group_by("node", "kind", "stack").agg(pl.col("samples").sum()))
        for node, kind, stack, samples in rows.iter_rows():
            side.stacks.setdefault((node, kind), Counter())[stack] += samples
        unnamed = _unnamed(run)
        if unnamed:
            notes.append(f"on-CPU profiles: the {name}'s {run.label}: {unnamed}")
    if not side.stacks:
        notes.append(f"on-CPU profiles not compared: the {name} has none: "
                     + "; ".join(lacking[:3])
                     + (f" and {len(lacking) - 3} more runs" if len(lacking) > 3 else ""))
        return None
    notes += [f"on-CPU profiles: left out of the {name}: {run}" for run in lacking[:3]]
    if len(lacking) > 3:
        notes.append(f"on-CPU profiles: {len(lacking) - 3} more {name} runs left out")
    return side


def _unnamed(run: RunData) -> str | None:
    """The manifest's line on what perf could not name and why, when it is much."""
    record = (run.manifest.telemetry or {}).get(PROBE) or {}
    pct = (record.get("resolution") or {}).get("unresolved_frames_pct")
    if isinstance(pct, (int, float)) and pct >= UNNAMED_PCT and record.get("unresolved"):
        return str(record["unresolved"])
    return None


def _transactions(run: RunData) -> float:
    rows = run.client_seconds
    return float(rows["tps"].sum()) if rows is not None and rows.height else 0.0


class _Chains:
    """One side's chains of a kind: each function's samples (inclusive: once per chain
    that holds it, named frames only) and which chains hold it."""

    def __init__(self, stacks: Counter[str]) -> None:
        self.samples = list(stacks.values())
        self.total = sum(self.samples)
        self.holding: dict[str, set[int]] = {}
        for index, stack in enumerate(stacks):
            for name in set(stack.split(";")):
                if not name.startswith("[unknown"):
                    self.holding.setdefault(name, set()).add(index)
        self.counts = {name: sum(self.samples[i] for i in chains)
                       for name, chains in self.holding.items()}

    def together(self, one: str, other: str) -> bool:
        """Whether the two functions lie on the same chains: nearly all samples of the
        one with fewer hold the other too (a caller and its callee)."""
        smaller = min(self.counts.get(one, 0), self.counts.get(other, 0))
        both = self.holding.get(one, set()) & self.holding.get(other, set())
        return smaller > 0 and sum(self.samples[i] for i in both) >= TOGETHER * smaller


def _functions(base: Counter[str], mine: Counter[str], base_tx: float,
               mine_tx: float) -> list[FunctionChange]:
    """The functions whose share changed most, one per set of chains (module docstring)."""
    theirs, ours = _Chains(base), _Chains(mine)
    changes = {name: FunctionChange(name, 100 * theirs.counts.get(name, 0) / theirs.total,
                                    100 * ours.counts.get(name, 0) / ours.total,
                                    1000 * theirs.counts.get(name, 0) / base_tx,
                                    1000 * ours.counts.get(name, 0) / mine_tx)
               for name in set(theirs.counts) | set(ours.counts)}
    ordered = sorted((c for c in changes.values()
                      if c.beyond_noise(theirs.total, ours.total)),
                     key=lambda c: (-abs(c.points), c.function))
    chosen: list[FunctionChange] = []
    for change in ordered:
        rose = change.points > 0
        side = ours if rose else theirs  # a function rises in the contender's chains
        if any((c.points > 0) == rose and side.together(c.function, change.function)
               for c in chosen):
            continue  # a caller or callee of one named: the same chains
        alike = [c for c in ordered if (c.points > 0) == rose
                 and abs(c.points - change.points) <= ALIKE_POINTS
                 and (c is change or side.together(c.function, change.function))]
        chosen.append(min(alike, key=lambda c: (side.counts.get(c.function, 0), c.function)))
        if len(chosen) == MAX_FUNCTIONS:
            break
    return chosen


def compare_profiles(base: Group, contender: Group) -> ProfileComparison | None:
    """The contender's on-CPU samples against the base's, or None when no run of either
    side was to record them (nothing to say)."""
    if not any(_asked(run) for run in base.runs + contender.runs):
        return None
    found = ProfileComparison()
    found.base = _side("base", base, found.notes)
    found.contender = _side("contender", contender, found.notes)
    if found.base is None or found.contender is None:
        return found
    theirs, mine = found.base, found.contender
    left_out = []
    for node, kind in ordered_kinds(list(set(theirs.stacks) | set(mine.stacks))):
        base_stacks = theirs.stacks.get((node, kind), Counter())
        stacks = mine.stacks.get((node, kind), Counter())
        base_n, mine_n = sum(base_stacks.values()), sum(stacks.values())
        if min(base_n, mine_n) < MIN_SAMPLES:
            left_out.append(f"{who(node, kind)} ({base_n} base, {mine_n} contender)")
            continue
        found.kinds.append(KindChange(
            node, kind, base_n, mine_n, 1000 * base_n / theirs.transactions,
            1000 * mine_n / mine.transactions,
            _functions(base_stacks, stacks, theirs.transactions, mine.transactions)))
    if left_out:
        found.notes.append(f"on-CPU profiles: too few samples to compare (under "
                           f"{MIN_SAMPLES} on a side): {', '.join(left_out)}")
    return found


def as_dict(found: ProfileComparison) -> dict[str, object]:
    """JSON of `pglab compare --format json`."""
    return {
        "notes": found.notes,
        "kinds": [{
            "node": k.node, "kind": k.kind, "base_samples": k.base_samples,
            "contender_samples": k.contender_samples,
            "base_per_1000_tx": round(k.base_per_1000_tx, 2),
            "contender_per_1000_tx": round(k.contender_per_1000_tx, 2),
            "change_pct": round(k.change_pct, 1),
            "functions": [{
                "function": f.function, "base_pct": round(f.base_pct, 1),
                "contender_pct": round(f.contender_pct, 1), "points": round(f.points, 1),
                "base_per_1000_tx": round(f.base_per_1000_tx, 2),
                "contender_per_1000_tx": round(f.contender_per_1000_tx, 2),
            } for f in k.functions],
        } for k in found.kinds],
    }


# --- the differential flame graphs of the HTML page -------------------------------------

def _scaled(tree: list[Any], factor: float) -> None:
    tree[3] = round(tree[3] * factor, 1)
    for child in tree[2]:
        _scaled(child, factor)


def _graphs(found: ProfileComparison, names: FrameNames) -> list[dict[str, Any]]:
    if found.base is None or found.contender is None:
        return []
    theirs, mine = found.base.stacks, found.contender.stacks
    graphs = []
    for kind in found.kinds:
        key = (kind.node, kind.kind)
        tree = flame_tree(sorted(mine[key].items()), names, sorted(theirs[key].items()))
        # flame_tree gives the base's share of its own samples; per transaction, against
        # the contender's samples, it is that times the ratio of the two sides' costs
        _scaled(tree, kind.base_per_1000_tx / kind.contender_per_1000_tx)
        graphs.append({
            "node": kind.node, "kind": kind.kind, "samples": tree[1], "tree": tree,
            "base_note": (f"{kind.contender_per_1000_tx:.1f} samples per 1000 transactions, "
                          f"base {kind.base_per_1000_tx:.1f} ({kind.change_pct:+.0f}%)"),
            "per_1000_tx": [round(kind.base_per_1000_tx, 2),
                            round(kind.contender_per_1000_tx, 2)]})
    return graphs


def flame_data(base_label: str, contenders: list[tuple[str, ProfileComparison | None]]
               ) -> dict[str, Any] | None:
    """What flame.js draws (DATA.profile's shape: names, graphs, and a section of
    differential graphs per contender with a profile), or None when none has one."""
    names = FrameNames()
    sections = []
    for label, found in contenders:
        graphs = _graphs(found, names) if found is not None else []
        if graphs:
            sections.append({"title": f"{label} against {base_label}: on-CPU samples per "
                                      "transaction, red grew, blue shrank",
                             "graphs": graphs})
    if not sections:
        return None
    return {"names": names.names, "graphs": [], "base_word": "per transaction in the base",
            "stalls": sections}


CSS = """
.toolbar{padding:6px 0}.chart{border:1px solid #ddd;border-radius:6px;margin:8px 0;
padding:6px 8px 4px}.chart-head{display:flex;align-items:baseline;gap:10px;flex-wrap:wrap}
.chart-head h3{margin:0;font-size:14px}.unit{color:#777;font-size:12px}
.tip{position:fixed;display:none;z-index:10;pointer-events:none;background:rgba(20,33,61,.95);
color:#fff;padding:6px 8px;border-radius:4px;font-size:12px;max-width:480px}
.tip-title{font-weight:600}.flame canvas{display:block;margin-top:4px;cursor:pointer}
.flame-search{min-width:320px}.flame-stall{font-size:14px;margin:18px 0 4px}
"""
