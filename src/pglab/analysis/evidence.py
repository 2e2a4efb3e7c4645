"""Telemetry of each stall window against the run's healthy seconds.

All samples are aggregated in one pass: each sample's second is matched to a *segment*
(stall window i and the second after it, or HEALTHY for the other measured seconds that
are not degraded, or lead_in(i) for the second before window i when only such seconds
are undegraded), then summed per (segment, node, source, metric, label). A window's
evidence is then a few dictionary look-ups, so a one-hour run with many windows stays fast.

Interval probes write at most one row per second per (node, metric, label), so the sum
over a segment divided by its seconds is the per-second mean (sparse rates such as
pg_stat_io's, written only when non-zero, come out right too). Wait samples are counts
per read; shares are counts over the busy processes of the same reads.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import polars as pl

from pglab.analysis.loading import RunFrames
from pglab.analysis.names import ObjectNames
from pglab.analysis.plans import RunPlans
from pglab.analysis.profile import ProfileSegment, profile_segments
from pglab.analysis.stalls import StallReport, StallWindow
from pglab.results.manifest import Manifest

HEALTHY = -1
EVENT_SLACK = dt.timedelta(seconds=2)  # log lines and 1 s samples straddle boundaries
# Counters move when an operation completes: the fsync that stalled commits is counted in
# the second the stall ends. A window's telemetry includes the second after it.
EVIDENCE_TAIL = dt.timedelta(seconds=1)
# What stalls commits often begins within the second before TPS falls (a writeback burst,
# a checkpoint's fsync), and that second still counts enough transactions to look
# healthy: it is left out of the healthy seconds, which are what a window is compared to.
EVIDENCE_LEAD = dt.timedelta(seconds=1)
CLIENT_BACKEND = "client backend"
Key = tuple[str, str, str, str]  # node, source, metric, label
_N = TypeVar("_N", int, float)  # a segment's sums and peaks, or its seconds present


def lead_in(index: int) -> int:
    """The segment of window index's lead-in second, where it is part of the baseline."""
    return HEALTHY - 1 - index


@dataclass
class Segment:
    """Telemetry sums over a set of seconds, indexed by (node, source, metric) -> label."""

    seconds: int
    sums: dict[tuple[str, str, str], dict[str, float]] = field(default_factory=dict)
    peaks: dict[tuple[str, str, str], dict[str, float]] = field(default_factory=dict)
    lows: dict[tuple[str, str, str], dict[str, float]] = field(default_factory=dict)
    # how many of the seconds have a sample of the metric (a node that stops answering
    # the samplers leaves seconds without any)
    present: dict[tuple[str, str, str], dict[str, int]] = field(default_factory=dict)

    def seconds_with(self, node: str, source: str, metric: str, label: str = "") -> int:
        """The seconds of the segment in which the metric was sampled at least once."""
        return self.present.get((node, source, metric), {}).get(label, 0)

    def labels(self, node: str, source: str, metric: str) -> dict[str, float]:
        """Sum per label of one metric."""
        return self.sums.get((node, source, metric), {})

    def _values(self, table: dict[tuple[str, str, str], dict[str, float]], node: str,
                source: str, metric: str, label: str | None) -> list[float]:
        by_label = table.get((node, source, metric), {})
        if label is not None:
            value = by_label.get(label)
            return [] if value is None else [value]
        return list(by_label.values())

    def mean(self, node: str, source: str, metric: str, label: str | None = None) -> float | None:
        """Per-second mean; with label None, the largest over labels (e.g. devices)."""
        values = self._values(self.sums, node, source, metric, label)
        if not values or self.seconds == 0:
            return None
        return max(values) / self.seconds

    def total(self, node: str, source: str, metric: str, label: str | None = None) -> float:
        """Sum over the seconds and over labels (label None)."""
        return sum(self._values(self.sums, node, source, metric, label))

    def peak(self, node: str, source: str, metric: str, label: str | None = None) -> float | None:
        values = self._values(self.peaks, node, source, metric, label)
        return max(values) if values else None

    def low(self, node: str, source: str, metric: str, label: str | None = None) -> float | None:
        values = self._values(self.lows, node, source, metric, label)
        return min(values) if values else None

    def wait_shares(self, node: str, backend: str | None = CLIENT_BACKEND) -> dict[str, float]:
        """Share of each wait among sampled processes (of one backend type, or all)."""
        key = (node, backend)
        cached = self._shares.get(key)
        if cached is not None:
            return cached
        counts: dict[str, float] = defaultdict(float)
        for (n, source, metric), by_label in self.sums.items():
            if n != node or source != "db.waits" or metric == "sampled":
                continue
            for label, value in by_label.items():
                if backend is None or label == backend:
                    counts[metric] += value
        busy = sum(counts.values())
        shares = {w: c / busy for w, c in counts.items()} if busy > 0 else {}
        self._shares[key] = shares
        return shares

    def __post_init__(self) -> None:
        self._shares: dict[tuple[str, str | None], dict[str, float]] = {}

    @staticmethod
    def combined(parts: list[Segment]) -> Segment:
        """One segment of the seconds of all parts (they share none)."""
        out = Segment(sum(p.seconds for p in parts))
        for part in parts:
            _merge(out.sums, part.sums, lambda a, b: a + b)
            _merge(out.peaks, part.peaks, max)
            _merge(out.lows, part.lows, min)
            _merge(out.present, part.present, lambda a, b: a + b)
        return out


def _merge(into: dict[tuple[str, str, str], dict[str, _N]],
           part: dict[tuple[str, str, str], dict[str, _N]], merge: Callable[[_N, _N], _N]
           ) -> None:
    for key, by_label in part.items():
        mine = into.setdefault(key, {})
        for label, value in by_label.items():
            mine[label] = merge(mine[label], value) if label in mine else value


@dataclass(frozen=True)
class EventView:
    kind: str
    node: str
    start: dt.datetime
    end: dt.datetime | None
    attrs: dict[str, Any]


@dataclass
class WindowEvidence:
    """What the causes look at for one window."""

    window: StallWindow
    inside: Segment
    healthy: Segment
    events: list[EventView]  # overlapping the window (with EVENT_SLACK)
    nodes: list[str]  # database nodes, primary first
    manifest: Manifest
    missing: list[str]
    names: ObjectNames = field(default_factory=ObjectNames)  # the whole run's OIDs named
    # the whole run's plans per statement (set by the analysis, which reads their texts)
    plans: RunPlans = field(default_factory=RunPlans)
    # on-CPU samples (os.profile) of the window and of the healthy seconds, if it ran
    cpu_inside: ProfileSegment | None = None
    cpu_healthy: ProfileSegment | None = None

    @property
    def cores(self) -> int:
        return self.manifest.cpu_cores

    def events_of(self, *kinds: str) -> list[EventView]:
        return [e for e in self.events if e.kind in kinds]

    def lock_queues(self) -> list[tuple[dict[str, Any], float]]:
        """Each lock queue seen (db.lockqueue's events) with its seconds in the window."""
        found = []
        for e in self.events_of("lock-queue"):
            end = e.end or e.start + dt.timedelta(seconds=1)
            seen = min(end, self.window.end) - max(e.start, self.window.start)
            found.append((e.attrs, seen.total_seconds()))
        return found

    def shares(self, node: str, waits: tuple[str, ...] | None = None, prefix: str = "",
               backend: str | None = CLIENT_BACKEND) -> tuple[float, float]:
        """(window, healthy) share of the named waits (or those starting with prefix)."""
        def pick(shares: dict[str, float]) -> float:
            return sum(v for w, v in shares.items()
                       if (waits is not None and w in waits) or (prefix and w.startswith(prefix)))
        return (pick(self.inside.wait_shares(node, backend)),
                pick(self.healthy.wait_shares(node, backend)))

    def wait_count(self, node: str, waits: tuple[str, ...]) -> float:
        """Samples in the window of these waits, any backend type."""
        return sum(self.inside.total(node, "db.waits", w) for w in waits)

    def top_waits(self, node: str, n: int = 3) -> list[tuple[str, float, float]]:
        inside = self.inside.wait_shares(node)
        healthy = self.healthy.wait_shares(node)
        ranked = sorted(inside.items(), key=lambda kv: kv[1], reverse=True)[:n]
        return [(w, s, healthy.get(w, 0.0)) for w, s in ranked]


def _segments_by_second(report: StallReport) -> pl.DataFrame:
    """sec -> segment for the measured seconds (HEALTHY or the window's index)."""
    seconds = report.seconds.select(pl.col("t").alias("sec"), pl.col("kind")).sort("sec")
    windows = pl.DataFrame(
        {"start": [w.start for w in report.windows], "end": [w.end for w in report.windows],
         "index": list(range(len(report.windows)))},
        schema={"start": seconds.schema["sec"], "end": seconds.schema["sec"],
                "index": pl.Int32()},
    ).sort("start")
    matched = seconds.join_asof(windows, left_on="sec", right_on="start", strategy="backward")
    inside = pl.col("index").is_not_null() & (pl.col("sec") < pl.col("end") + EVIDENCE_TAIL)
    segment = pl.when(inside).then(pl.col("index")).otherwise(pl.lit(HEALTHY, pl.Int32()))
    leads = pl.DataFrame(
        {"sec": [w.start - EVIDENCE_LEAD for w in report.windows],
         "lead": [lead_in(i) for i in range(len(report.windows))]},
        schema={"sec": seconds.schema["sec"], "lead": pl.Int32()},
    )
    matched = (matched.with_columns(segment.alias("segment"))
               .join(leads, on="sec", how="left"))
    healthy = (pl.col("segment") == HEALTHY) & pl.col("kind").is_null()
    if not matched.filter(healthy & pl.col("lead").is_null()).is_empty():
        healthy = healthy & pl.col("lead").is_null()
    else:
        # A run whose only undegraded seconds lead into windows still has a baseline: those
        # seconds, rather than none (against none, every wait looks like a rise from 0%).
        # Each keeps its window's mark, so that a window is not compared with the second in
        # which its own cause began (baseline()).
        matched = matched.with_columns(
            pl.when(healthy).then(pl.col("lead")).otherwise(pl.col("segment"))
            .alias("segment"))
        healthy = pl.col("segment") < HEALTHY
        if matched.filter(healthy).is_empty():
            # Nor do any lead in from outside a window: each undegraded second is the tail
            # of one window and the lead-in of the next (a load in bursts, 97, 196, 97, 194
            # TPS). It stays in that window's evidence and is the baseline too: a window
            # compared with no second at all would claim every wait and pressure it saw.
            matched = pl.concat([matched, matched.filter(
                pl.col("lead").is_not_null() & pl.col("kind").is_null()
            ).with_columns(pl.col("lead").alias("segment"))])
    return matched.filter((pl.col("segment") > HEALTHY) | healthy).select("sec", "segment")


def aggregate(data: RunFrames, report: StallReport) -> dict[int, Segment]:
    """Segments for HEALTHY, every window and the lead-ins in the baseline, from one
    group-by over the samples."""
    by_second = _segments_by_second(report)
    counts = by_second.group_by("segment").len()
    segments = {int(s): Segment(int(n)) for s, n in counts.iter_rows()}
    segments.setdefault(HEALTHY, Segment(0))
    for index in range(len(report.windows)):
        segments.setdefault(index, Segment(0))
    if data.timeseries.height == 0 or by_second.height == 0:
        return segments
    sums = (
        data.timeseries.lazy()
        .with_columns(pl.col("t").dt.truncate("1s").alias("sec"))
        .join(by_second.lazy(), on="sec", how="inner")
        .group_by("segment", "node", "source", "metric", "label")
        .agg(pl.col("value").sum().alias("sum"), pl.col("value").max().alias("peak"),
             pl.col("value").min().alias("low"), pl.col("sec").n_unique().alias("present"))
        .collect()
    )
    for seg, node, source, metric, name, total, peak, low, present in sums.iter_rows():
        segment = segments[int(seg)]
        key, label = (node, source, metric), name or ""
        segment.sums.setdefault(key, {})[label] = float(total)
        segment.peaks.setdefault(key, {})[label] = float(peak)
        segment.lows.setdefault(key, {})[label] = float(low)
        segment.present.setdefault(key, {})[label] = int(present)
    return segments


def _nodes(data: RunFrames) -> list[str]:
    found = set(data.timeseries["node"].unique().to_list()) | set(
        data.events["node"].unique().to_list())
    found -= {"host", "client", None}
    return sorted(found, key=lambda n: (n != "primary", n)) or ["primary"]


def _event_view(row: dict[str, Any]) -> EventView:
    try:
        attrs = json.loads(row["attrs"]) if row["attrs"] else {}
    except json.JSONDecodeError:
        attrs = {}
    return EventView(row["kind"], row["node"] or "primary", row["t_start"], row["t_end"],
                     attrs if isinstance(attrs, dict) else {})


def overlapping_events(data: RunFrames, spans: list[tuple[dt.datetime, dt.datetime]]
                       ) -> list[list[EventView]]:
    """Per span [start, end) (sorted, as stall windows are): the events touching it, with
    EVENT_SLACK either side. An unfinished checkpoint runs until the end of the run."""
    found: list[list[EventView]] = [[] for _ in spans]
    if not spans or data.events.height == 0:
        return found
    dtype = data.events.schema["t_start"]
    los = pl.Series([a - EVENT_SLACK for a, _ in spans], dtype=dtype)
    his = pl.Series([b + EVENT_SLACK for _, b in spans], dtype=dtype)
    events = data.events.with_row_index("row").with_columns(
        pl.when(pl.col("t_end").is_null() & (pl.col("kind") == "checkpoint"))
        .then(pl.lit(his.max(), dtype=dtype))
        .otherwise(pl.coalesce(pl.col("t_end"), pl.col("t_start"))).alias("until"))
    # Both bounds of the spans grow with the index: binary searches find each event's
    # first and last overlapping span, without comparing every event with every span.
    first = his.search_sorted(events["t_start"], side="right")
    last = los.search_sorted(events["until"], side="right") - 1
    hits = (events.with_columns(first.alias("first"), last.alias("last"))
            .filter(pl.col("first") <= pl.col("last"))
            .with_columns(pl.int_ranges("first", pl.col("last") + 1).alias("span"))
            .explode("span"))
    views: dict[int, EventView] = {}
    for row in hits.iter_rows(named=True):
        view = views.get(row["row"])
        if view is None:
            view = views[row["row"]] = _event_view(row)
        found[row["span"]].append(view)
    return found


def _whole_run(data: RunFrames, report: StallReport, healthy: Segment,
               nodes: list[str]) -> WindowEvidence | None:
    times = report.seconds["t"]
    if healthy.seconds == 0 or times.is_empty():
        return None
    first: dt.datetime = times.min()  # type: ignore[assignment]
    end: dt.datetime = times.max() + dt.timedelta(seconds=1)  # type: ignore[operator,assignment]
    steady = report.steady
    lowest = float(report.seconds["tps"].min() or 0.0)  # type: ignore[arg-type]
    window = StallWindow(first, end, "steady", 0.0, 0, steady.tps_median, lowest,
                         steady.p99_median_ms, None)
    return WindowEvidence(window, healthy, Segment(0),
                          overlapping_events(data, [(first, end)])[0], nodes,
                          data.manifest, data.missing, object_names(data))


def object_names(data: RunFrames) -> ObjectNames:
    """The OIDs db.lockqueue named during the run (its `object-names` events)."""
    rows = data.events.filter(pl.col("kind") == "object-names")
    return ObjectNames.from_events([(view.node, view.attrs) for view in
                                    map(_event_view, rows.iter_rows(named=True))])


def run_evidence(data: RunFrames, report: StallReport) -> tuple[list[WindowEvidence],
                                                              WindowEvidence | None]:
    """Each stall window's evidence, and the whole run's: its healthy seconds (all of
    them when it never stalled; a stall's seconds are explained by the stall), with
    nothing to compare against. None without healthy seconds."""
    segments = aggregate(data, report)
    nodes = _nodes(data)
    by_window = overlapping_events(data, [(w.start, w.end) for w in report.windows])
    count = len(report.windows)
    names = object_names(data)
    windows = [
        WindowEvidence(window, segments[index], healthy, by_window[index], nodes,
                       data.manifest, data.missing, names)
        for (index, window), healthy in zip(enumerate(report.windows),
                                            baselines(segments, count), strict=True)
    ]
    if data.profile is not None and data.profile.height:
        cpu = profile_segments(data.profile, _segments_by_second(report))
        for index, ev in enumerate(windows):
            ev.cpu_inside = cpu.get(index, ProfileSegment())
            ev.cpu_healthy = _cpu_baseline(cpu, index, count)
    leads = [segments[lead_in(i)] for i in range(count) if lead_in(i) in segments]
    whole = Segment.combined([segments[HEALTHY], *leads]) if leads else segments[HEALTHY]
    return windows, _whole_run(data, report, whole, nodes)


def _cpu_baseline(cpu: dict[int, ProfileSegment], index: int,
                  count: int) -> ProfileSegment:
    """A window's on-CPU baseline, chosen as `baselines` chooses: the healthy seconds; in
    a run whose only undegraded seconds lead into windows, the other windows' lead-ins,
    its own only when there is no other (a rise that begins in it would be in both)."""
    healthy = cpu.get(HEALTHY)
    if healthy is not None and healthy.totals:
        return healthy
    others = [seg for i in range(count) if i != index and (seg := cpu.get(lead_in(i)))]
    return ProfileSegment.combined(others) if others else cpu.get(lead_in(index),
                                                                   ProfileSegment())


def baselines(segments: dict[int, Segment], count: int) -> list[Segment]:
    """What each window is compared with: the healthy seconds; in a run whose only
    undegraded seconds lead into windows, the other windows' lead-ins. Its own lead-in
    only when there is no other: a writeback burst that begins in it raises the usual
    level (to 124 MB, beside a stalling burst of 249 MB) and hides the burst.
    The lead-ins before and after each window are merged as running totals from either
    end, so that a run of many windows does not merge them all again for each."""
    leads = [segments.get(lead_in(i)) for i in range(count)]
    if not any(leads):
        return [segments[HEALTHY]] * count
    before, after = [Segment(0)], [Segment(0)]  # the lead-ins of windows < i, and > i
    for lead in leads[:-1]:
        before.append(Segment.combined([before[-1], lead]) if lead else before[-1])
    for lead in reversed(leads[1:]):
        after.append(Segment.combined([after[-1], lead]) if lead else after[-1])
    after.reverse()
    found = []
    for index, own in enumerate(leads):
        others = Segment.combined([before[index], after[index]])
        found.append(others if others.seconds or own is None else own)
    return found
