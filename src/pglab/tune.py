"""`pglab tune SCENARIO`: check the analysis's advice by measurement.

1. Run the baseline once and read its analysis (stalls, causes, recommendations).
2. Take the top recommendations that pglab can test (a scenario change), one at a time.
3. Run them interleaved with the baseline, round after round (B, C1, C2, ... then again),
   so that a slow phase of a shared machine hits every variant alike; `repeats` rounds.
4. Compare each candidate's runs with the baseline's (compare/: block bootstrap over the
   per-second samples and over repeats) on stall seconds, TPS and p99.
5. Keep a change only when at least one of those is significantly better and none is
   significantly worse; print the kept changes as --set overrides.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pglab.compare.comparison import MetricResult, compare
from pglab.compare.groups import Group
from pglab.compare.rundata import RunData
from pglab.errors import BadInput, PglabError
from pglab.results.files import TUNE_SUFFIX, new_run_id, write_json
from pglab.results.folder import StoredRun
from pglab.runner import RunOptions, RunUI, run_scenario
from pglab.scenario import LoadedScenario

TUNE_METRICS = ["stall_seconds", "tps", "p99"]  # what a candidate is judged by


@dataclass(frozen=True)
class Candidate:
    rule: str
    change: dict[str, Any]  # scenario key -> value
    because: list[str]

    def overrides(self) -> list[str]:
        # JSON strings and numbers are valid TOML values, which is what --set parses.
        return [f"{key}={json.dumps(value)}" for key, value in self.change.items()]

    @property
    def label(self) -> str:
        return " ".join(self.overrides())


@dataclass
class CandidateResult:
    candidate: Candidate
    runs: list[StoredRun] = field(default_factory=list)
    metrics: list[MetricResult] = field(default_factory=list)
    kept: bool = False
    why: str = ""
    not_applicable: str | None = None  # this server refused the change (e.g. lz4 missing)


@dataclass
class TuneResult:
    tune_id: str
    baseline: list[StoredRun]
    candidates: list[CandidateResult]
    noise: float

    def winning_overrides(self) -> list[str]:
        return [o for c in self.candidates if c.kept for o in c.candidate.overrides()]


def candidates_from(run: StoredRun, top: int) -> list[Candidate]:
    """The first `top` distinct recommendations of the run's analysis that pglab can test."""
    analysis = run.analysis()
    if analysis is None:
        return []
    found: list[Candidate] = []
    for rec in analysis.recommendations:
        change = rec.get("change") or {}
        if not change or not str(rec.get("test", "")).startswith("pglab run"):
            continue  # filesystem or hardware advice: nothing pglab can run here
        if any(c.change == change for c in found):
            continue
        found.append(Candidate(str(rec.get("rule")), dict(change),
                               list(rec.get("because") or [])))
        if len(found) == top:
            break
    return found


def _decide(result: CandidateResult) -> None:
    verdicts = {m.metric.name: m.verdict for m in result.metrics}
    better = [n for n, v in verdicts.items() if v == "better"]
    worse = [n for n, v in verdicts.items() if v == "worse"]
    result.kept = bool(better) and not worse
    if worse:
        result.why = f"significantly worse on {', '.join(worse)}"
    elif better:
        result.why = f"significantly better on {', '.join(better)}"
    else:
        result.why = "no significant difference"


def tune(loaded_for: Callable[[list[str]], LoadedScenario], base_overrides: list[str],
         options: RunOptions, ui: RunUI, repeats: int = 3, top: int = 3, noise: float = 0.10,
         on_run: Callable[[StoredRun], None] | None = None) -> TuneResult:
    """Baseline, then `repeats` interleaved rounds of baseline + each candidate."""
    if repeats < 1:
        raise BadInput(f"--repeats {repeats}: expected at least 1")
    base = loaded_for(base_overrides)
    if len(base.variants) != 1:
        raise BadInput(f"{base.where}: tune needs a single run (no client list, no "
                       f"[matrix]); this scenario makes {len(base.variants)}")
    tune_id = new_run_id()

    def run(loaded: LoadedScenario) -> StoredRun:
        stored = run_scenario(loaded, options, ui, on_run=on_run)[0]
        if stored.status != "completed":
            raise PglabError(f"tune: a run did not complete ({stored.path}: {stored.reason})")
        return stored

    ui.status("tune: baseline run")
    baseline = [run(base)]
    candidates = [CandidateResult(c) for c in candidates_from(baseline[0], top)]
    loaded: dict[str, LoadedScenario] = {}
    for cand in candidates:
        try:
            loaded[cand.candidate.label] = loaded_for(base_overrides
                                                      + cand.candidate.overrides())
        except BadInput as exc:  # the scenario cannot take the change: skip, go on
            cand.not_applicable = str(exc)
            cand.why = f"not applicable here: {exc}"
    result = TuneResult(tune_id, baseline, candidates, noise)
    if candidates:
        for round_ in range(1, repeats + 1):
            ui.status(f"tune: round {round_}/{repeats}: baseline")
            baseline.append(run(base))
            for cand in candidates:
                if cand.not_applicable:
                    continue
                ui.status(f"tune: round {round_}/{repeats}: {cand.candidate.label}")
                try:
                    cand.runs.append(run(loaded[cand.candidate.label]))
                except BadInput as exc:  # the server refused the setting: skip, go on
                    cand.not_applicable = str(exc)
                    cand.why = f"not applicable here: {exc}"
        base_group = Group("baseline", [RunData(r) for r in baseline])
        for cand in candidates:
            if cand.not_applicable:
                continue
            group = Group(cand.candidate.label, [RunData(r) for r in cand.runs])
            comparison = compare(base_group, [group], noise, metric_names=TUNE_METRICS)
            cand.metrics = comparison.contenders[0].metrics
            _decide(cand)
    write_tune_file(options.results_root / base.scenario.name / (tune_id + TUNE_SUFFIX),
                    result)
    return result


def write_tune_file(path: Path, result: TuneResult) -> None:
    def metric(m: MetricResult) -> dict[str, Any]:
        ci = m.ci_pct
        return {"metric": m.metric.name, "base": m.base, "contender": m.contender,
                "delta_pct": m.delta_pct, "ci_pct": list(ci) if ci else None,
                "verdict": m.verdict, "note": m.note}

    write_json(path, {
        "format": 1,
        "tune_id": result.tune_id,
        "noise": result.noise,
        "baseline": [r.path.name for r in result.baseline],
        "candidates": [{"rule": c.candidate.rule, "change": c.candidate.change,
                        "because": c.candidate.because, "runs": [r.path.name for r in c.runs],
                        "metrics": [metric(m) for m in c.metrics], "kept": c.kept,
                        "why": c.why} for c in result.candidates],
        "winning_overrides": result.winning_overrides(),
    })
