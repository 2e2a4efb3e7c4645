"""`pglab analyze`: a results folder -> analysis.json (docs/ANALYSIS.md).

Pure over the folder's files: load (what is missing is named), detect stalls on the
client series, gather each window's evidence from every node's telemetry, rank causes,
fire recommendation rules, write analysis.json atomically.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pglab.analysis.causes import WEAK_BELOW, durability_causes, ranked_causes, steady_causes
from pglab.analysis.evidence import WindowEvidence, run_evidence
from pglab.analysis.kernel import dominant_wait_line
from pglab.analysis.loading import RunFrames, load_run_frames
from pglab.analysis.plans import change_entry, run_plans
from pglab.analysis.profile import window_rises
from pglab.analysis.recommendations import (
    CAUSE_FLOOR,
    SHORT_STALL_S,
    WEAK_ADVICE_BELOW,
    Facts,
    advise,
)
from pglab.analysis.signals import Finding
from pglab.analysis.stalls import DIP_FRACTION, PERIOD_TOLERANCE, StallReport, detect_stalls
from pglab.analysis.statements import (
    StatementTexts,
    run_statements,
    stall_statements,
    statement_texts,
)
from pglab.durability.section import durability_section
from pglab.errors import EnvironmentProblem
from pglab.results.analysis_doc import AnalysisDocument, write_analysis
from pglab.results.files import ANALYSIS, iso

# A run held back over its whole length whose stalls cover less than this share of its
# seconds: the whole-run cause is its verdict, as sure as the stalls' cause or more. A
# one-second dip would otherwise decide (a run of 1 MB WAL segments would be checkpoint-io
# for one dip, and the same run without the dip wal-segment-init).
MINOR_STALLS_PCT = 10.0


@dataclass(frozen=True)
class Analysis:
    path: Path  # the run folder
    document: AnalysisDocument  # what analysis.json holds


def _checkpoint_spacing(data: RunFrames) -> float | None:
    """Median seconds between checkpoint starts on the primary, if there were three."""
    starts = (data.events.filter((pl.col("kind") == "checkpoint")
                                 & (pl.col("node") == "primary"))["t_start"].sort())
    if starts.len() < 3:
        return None
    gaps = starts.diff().drop_nulls().dt.total_milliseconds() / 1000.0
    median = gaps.median()
    return float(median) if isinstance(median, (int, float)) else None


def _summary(report: StallReport, data: RunFrames) -> dict[str, Any]:
    steady = report.steady
    summary: dict[str, Any] = {
        "measured_seconds": steady.measured_seconds,
        "tps_median": round(steady.tps_median, 1),
        "tps_cv": round(steady.tps_cv, 3),
        "p99_median_ms": round(steady.p99_median_ms, 2) if steady.p99_median_ms else None,
        "degraded_pct": round(steady.degraded_pct, 1),
        "stall_seconds": steady.degraded_seconds,
        "zero_tps_seconds": steady.zero_seconds,
        "stalls": len(report.windows),
        "deficit_transactions": sum(w.deficit_transactions for w in report.windows),
        "periodic": None,
    }
    if report.periodic is not None:
        period = report.periodic.period_s
        spacing = _checkpoint_spacing(data)
        summary["periodic"] = {
            "period_s": period, "windows": report.periodic.windows,
            "kind": report.periodic.kind,
            "checkpoint_spacing_s": round(spacing, 1) if spacing else None,
            "matches_checkpoints": bool(spacing and abs(spacing - period)
                                        <= PERIOD_TOLERANCE * period),
        }
    return summary


def _stall(ev: WindowEvidence, texts: StatementTexts) -> dict[str, Any]:
    w = ev.window
    causes = ranked_causes(ev)
    kernel = [line for line in (dominant_wait_line(ev),) if line is not None]
    if causes and kernel and kernel[0] not in causes[0].evidence:
        causes[0].evidence.append(kernel[0])  # the top cause's waits, seen from the kernel
    return {
        "start": iso(w.start), "end": iso(w.end), "seconds": w.seconds, "kind": w.kind,
        "depth": w.depth, "deficit_transactions": w.deficit_transactions,
        "reference_tps": round(w.reference_tps, 1), "min_tps": w.min_tps,
        "p99_ms": round(w.p99_ms, 2) if w.p99_ms is not None else None,
        "max_latency_ms": round(w.max_latency_ms, 2) if w.max_latency_ms is not None else None,
        # faults of the scenario's timeline during the window: what was injected
        "faults": [{"kind": e.kind, "node": e.node, "start": iso(e.start), "end": iso(e.end),
                    **e.attrs} for e in ev.events if e.kind.startswith("fault")],
        "causes": [_finding(f) for f in causes],
        **({"kernel": kernel} if kernel else {}),
        **({"on_cpu": on_cpu} if (on_cpu := [r.line() for r in window_rises(ev)]) else {}),
        **({"statements": statements} if (statements := stall_statements(ev, texts)) else {}),
        **({"plan_changes": changes} if (changes := [
            change_entry(st, before, after) for st, before, after
            in ev.plans.changed(w.start, w.end)]) else {}),
    }


def _fpi_surge(evidence: list[WindowEvidence]) -> bool:
    for ev in evidence:
        node = ev.nodes[0]
        inside = ev.inside.mean(node, "db.wal", "wal_fpi") or 0.0
        healthy = ev.healthy.mean(node, "db.wal", "wal_fpi") or 0.0
        if inside > 2 * healthy and inside > 50:
            return True
    return False


def _direct_reclaim(evidence: list[WindowEvidence]) -> bool:
    for ev in evidence:
        inside = ev.inside.mean("host", "os.memory", "allocstall") or 0.0
        if inside > 0 and inside > 3 * (ev.healthy.mean("host", "os.memory", "allocstall")
                                        or 0.0):
            return True
    return False


def _checkpoint_flags(evidence: list[WindowEvidence]) -> frozenset[str]:
    """What triggered the checkpoints that overlap stall windows (time, wal, immediate...)."""
    flags: set[str] = set()
    for ev in evidence:
        for event in ev.events_of("checkpoint"):
            found = event.attrs.get("flags")
            # crash recovery's own checkpoint is immediate, and forced by nothing to change
            if isinstance(found, list) and "end-of-recovery" not in found:
                flags.update(str(f) for f in found)
    return frozenset(flags)


def _finding(f: Finding) -> dict[str, Any]:
    return {"cause": f.cause, "confidence": f.confidence, "evidence": f.evidence,
            **({"outside_the_lab": True} if f.outside else {}),
            **({"sub_cause": f.sub} if f.sub else {})}


def _first_causes(stalls: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, float]]:
    """Per attributed first cause of stalls (neither unknown nor outside the lab): the
    deficit of its stalls together (transactions not made), and its best confidence."""
    deficit: dict[str, int] = {}
    best: dict[str, float] = {}
    for stall in stalls:
        first = stall["causes"][0] if stall["causes"] else None
        if first is None or first["cause"] == "unknown" or first.get("outside_the_lab"):
            continue
        deficit[first["cause"]] = (deficit.get(first["cause"], 0)
                                   + stall["deficit_transactions"])
        best[first["cause"]] = max(best.get(first["cause"], 0.0), first["confidence"])
    return deficit, best


def _verdict(stalls: list[dict[str, Any]], steady: list[dict[str, Any]],
             degraded_pct: float = 100.0) -> dict[str, Any] | None:
    """The run's top cause: the first cause of the stalls with the largest deficit
    together; for a run without an attributed stall, or whose few stalls weigh less
    than what held it back throughout (MINOR_STALLS_PCT), the whole-run cause."""
    deficit, best = _first_causes(stalls)
    if deficit and steady and degraded_pct < MINOR_STALLS_PCT \
            and steady[0]["confidence"] >= max(best.values()):
        return {"cause": steady[0]["cause"], "confidence": steady[0]["confidence"],
                "basis": "steady-state", "minor_stalls": True}
    if deficit:
        cause = max(deficit, key=lambda c: (deficit[c], best[c]))
        return {"cause": cause, "confidence": best[cause], "basis": "stalls",
                "deficit_transactions": deficit[cause]}
    if steady:
        return {"cause": steady[0]["cause"], "confidence": steady[0]["confidence"],
                "basis": "steady-state"}
    if stalls:
        return {"cause": "unknown", "confidence": None, "basis": "stalls"}
    return None


def _causes_found(stalls: list[dict[str, Any]],
                  steady: list[dict[str, Any]]) -> dict[str, float]:
    """Best confidence per cause: each stall's first cause, any of CAUSE_FLOOR+, and
    the causes that held the whole run back."""
    found: dict[str, float] = {cause["cause"]: cause["confidence"] for cause in steady}
    for stall in stalls:
        for rank, cause in enumerate(stall["causes"]):
            # unknown and outside the lab: nothing to change in the server for those
            if _counts(rank, cause):
                found[cause["cause"]] = max(found.get(cause["cause"], 0.0),
                                            cause["confidence"])
    return found


def _counts(rank: int, cause: dict[str, Any]) -> bool:
    """Whether a stall's finding counts as found (see _causes_found)."""
    return not (cause["cause"] == "unknown" or cause.get("outside_the_lab")) and (
        (rank == 0 and cause["confidence"] >= WEAK_BELOW) or cause["confidence"] >= CAUSE_FLOOR)


def _weak_causes(stalls: list[dict[str, Any]], strong: set[str]) -> dict[str, str]:
    """Causes found only in stalls of SHORT_STALL_S or less, each under WEAK_ADVICE_BELOW
    (and not in `strong`: the whole run's and the durability causes): cause -> the stalls
    in words, e.g. "one 1-s dip at confidence 0.50"."""
    seen: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for stall in stalls:
        for rank, cause in enumerate(stall["causes"]):
            if _counts(rank, cause):
                seen.setdefault(cause["cause"], []).append((stall, cause["confidence"]))
    weak = {}
    for cause, found in seen.items():
        if cause in strong or any(stall["seconds"] > SHORT_STALL_S or conf >= WEAK_ADVICE_BELOW
                                  for stall, conf in found):
            continue
        best = max(conf for _, conf in found)
        if len(found) == 1:
            stall = found[0][0]
            weak[cause] = f"one {stall['seconds']}-s {stall['kind']} at confidence {best:.2f}"
        else:
            weak[cause] = (f"{len(found)} stalls of {SHORT_STALL_S} s or less at confidence "
                           f"{best:.2f} or less")
    return weak


def _sub_causes(stalls: list[dict[str, Any]], steady: list[dict[str, Any]],
                found: dict[str, float]) -> dict[str, frozenset[str]]:
    """cause -> the sub-causes named by its findings that count (those in `found`)."""
    subs: dict[str, set[str]] = {}
    for cause in [*steady, *(c for stall in stalls for c in stall["causes"])]:
        if cause["cause"] in found and cause.get("sub_cause"):
            subs.setdefault(cause["cause"], set()).add(str(cause["sub_cause"]))
    return {cause: frozenset(names) for cause, names in subs.items()}


def _priority(stalls: list[dict[str, Any]], verdict: dict[str, Any] | None
              ) -> tuple[str, ...]:
    """Causes by what they cost: the verdict's first, then the other first causes of
    stalls by their deficit (recommendations follow this order)."""
    deficit, _ = _first_causes(stalls)
    ranked = sorted(deficit, key=lambda c: deficit[c], reverse=True)
    head = [verdict["cause"]] if verdict else []
    return tuple(dict.fromkeys(head + ranked))


def _durability(data: RunFrames) -> dict[str, Any] | None:
    """The durability section with the causes of what the cuts cost in data."""
    section = durability_section(data.manifest)
    if section is not None:
        section["causes"] = [_finding(f) for f in durability_causes(section, data.manifest)]
    return section


def _durability_verdict(section: dict[str, Any]) -> dict[str, Any]:
    """A run that lost acknowledged commits or data is a durability failure whatever its
    TPS: its verdict is that, and the performance verdict is kept beside it."""
    causes = section["causes"]
    first = causes[0] if causes and causes[0]["cause"] == "data-loss" else None
    return {"cause": "data-loss", "confidence": first["confidence"] if first else 0.99,
            "basis": "durability", "durability_verdict": section["verdict"],
            "lost_commits": section["lost_commits"],
            "corruption": len(section["corruption"]) + len(section["invariant_violations"]),
            **({"sub_cause": first["sub_cause"]} if first and first.get("sub_cause") else {})}


def idle_seconds(data: RunFrames) -> list[dt.datetime]:
    """An observation's measured seconds without demand: the wait sampler read the
    observed server all through the second and found no client backend at work (active,
    or inside a transaction), and its commits were under DIP_FRACTION of the median of
    the seconds with work (a light load of short transactions that 10 samples a second
    miss is still measured). Fewer commits then is no demand, not a stall: the clients
    were gone or quiet. The seconds on either side of such a span go with it: clients
    that arrive or leave within a second make it a dip. Only an observation: a pglab
    run's own clients are always there, and a second in which they all wait for the
    server (or it is down) is a stall."""
    if data.manifest.source_kind != "observe":
        return []
    waits = data.timeseries.filter((pl.col("source") == "db.waits")
                                   & (pl.col("node") == "primary"))
    if waits.is_empty():
        return []
    busy = (waits.group_by(pl.col("t").dt.truncate("1s").alias("second"))
            .agg(pl.col("value").filter((pl.col("label") == "client backend")
                                        & (pl.col("metric") != "sampled")).sum()
                 .alias("busy")))
    quiet = set(busy.filter(pl.col("busy") == 0)["second"].to_list())
    measured = data.client.filter(~pl.col("warmup") & ~pl.col("partial"))
    working = measured.filter(~pl.col("t").is_in(list(quiet)))["tps"].median()
    floor = DIP_FRACTION * float(working) if isinstance(working, (int, float)) else 0.0
    idle = {t for t, tps in measured.select("t", "tps").iter_rows()
            if t in quiet and tps < floor}
    second = dt.timedelta(seconds=1)
    edges = {t for t in measured["t"].to_list()
             if t not in idle and (t - second in idle or t + second in idle)}
    return sorted(idle | edges)


def build_analysis(data: RunFrames) -> AnalysisDocument:
    """The analysis document of loaded run data (pure)."""
    idle = idle_seconds(data)
    report = detect_stalls(data.client.filter(~pl.col("t").is_in(idle)) if idle
                           else data.client)
    evidence, whole_run = run_evidence(data, report)
    texts = statement_texts(data.events)
    plans = run_plans(data.events, texts)
    for ev in evidence:
        ev.plans = plans
    stalls = [_stall(ev, texts) for ev in evidence]
    steady = [_finding(f) for f in steady_causes(whole_run)] if whole_run else []
    summary = _summary(report, data)
    if idle:
        summary["idle_seconds"] = len(idle)  # left out of measured_seconds
    if changes := plans.changed():  # within the run, in a stall or not
        summary["plan_changes"] = [change_entry(st, before, after)
                                   for st, before, after in changes]
    if plans.cut:
        summary["plans_cut"] = plans.cut
    summary["verdict"] = _verdict(stalls, steady, summary["degraded_pct"])
    found = _causes_found(stalls, steady)
    durability = _durability(data)
    priority = _priority(stalls, summary["verdict"])
    data_causes = durability["causes"] if durability else []
    subs = _sub_causes(stalls, [*steady, *data_causes],
                       {**found, **{c["cause"]: c["confidence"] for c in data_causes}})
    for cause in data_causes:  # what the cuts cost in data comes before any slowness
        found[cause["cause"]] = cause["confidence"]
    if durability is not None and durability["failed"]:
        summary["performance_verdict"] = summary["verdict"]
        summary["verdict"] = _durability_verdict(durability)
    if data_causes:
        priority = (*(c["cause"] for c in data_causes), *priority)
    strong = {c["cause"] for c in [*steady, *data_causes]}
    top = frozenset(v["cause"] for v in (summary["verdict"], summary.get("performance_verdict"))
                    if v)
    facts = Facts(found, data.manifest, _fpi_surge(evidence),
                  data.run.path, _checkpoint_flags(evidence),
                  data.events.filter(pl.col("kind") == "checkpoint-too-frequent").height > 0,
                  priority=priority,
                  direct_reclaim=_direct_reclaim(evidence),
                  sub_causes=subs, weak=_weak_causes(stalls, strong), top=top, frames=data,
                  indexes_gone=tuple(plans.gone()), plan_flips=tuple(plans.flips()))
    advice = advise(facts)
    return AnalysisDocument(
        run_id=data.manifest.run_id,
        status=data.run.status,
        partial=bool(data.missing),
        missing=list(data.missing),
        summary=summary,
        stalls=stalls,
        steady_state={"causes": steady},
        recommendations=advice.given,
        withheld=advice.withheld,
        durability=durability,
        statements=run_statements(data.timeseries, report.seconds["t"].to_list(),
                                  data.manifest, texts),
    )


def analyze_run(folder: Path, write: bool = True) -> Analysis:
    """Analyse one run folder; write analysis.json there unless `write` is False."""
    data = load_run_frames(folder)
    document = build_analysis(data)
    if write:
        try:
            write_analysis(folder, document)
        except OSError as exc:
            raise EnvironmentProblem(f"{folder / ANALYSIS}: cannot write "
                                     f"({exc.strerror}); use --json to print it") from None
    return Analysis(folder, document)
