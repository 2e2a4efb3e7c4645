"""`pglab tune SCENARIO`: check the analysis's advice by measurement, in steps.

One step:
1. Run the step's baseline once and read its analysis (stalls, causes, recommendations).
2. Take the top recommendations that pglab can test (a scenario change). Where a round
   would start with a baseline run (steps after the first, the combined changes), have
   the server check each candidate first: a lab with the candidate's initdb options and
   settings is started and stopped again (PostgreSQL refuses some combinations only at
   start, e.g. min_wal_size under two WAL segments), so that a refused candidate costs
   no baseline run. Step 1's first round starts with the candidates themselves, whose
   first runs start the same labs: there a refused candidate fails its first run.
3. Run them interleaved with the baseline, round after round (B, C1, C2, ... then again),
   so that a slow phase of a shared machine hits every variant alike; `repeats` rounds,
   the first of which takes step 1's analysed baseline run as its B.
4. Compare each candidate's runs with the baseline's (compare/: block bootstrap over the
   per-second samples and over repeats) on stall seconds, TPS and p99, and on
   acknowledged commits lost per cut when the scenario crashes or cuts the power.
5. A candidate is kept when at least one of those is significantly better and none is
   significantly worse; the step's winner is the best kept one. Where commits are lost,
   losing significantly fewer is what counts: such a change is kept even when it costs
   speed (a write cache that really flushes is slower, and the fix), and one that loses
   significantly more is never kept, however fast.

With `steps` > 1 the winner becomes the next step's baseline: its runs are analysed
again and what their top cause recommends is tested next (the report's loop: find the
bottleneck, fix it, find the next). When more than one step found a winner, the
combined changes are measured as a whole against the original baseline, interleaved.

A candidate that the server refuses, that cannot start or whose run fails is marked with
the reason and the tune goes on; the result file is written on every path (a Ctrl-C
too, with status "interrupted").
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pglab.analysis.recommendations import RULES
from pglab.compare.comparison import MetricResult, applies_to, compare
from pglab.compare.groups import Group
from pglab.compare.metrics import BY_NAME
from pglab.compare.rundata import RunData
from pglab.errors import BadInput, Interrupted, PglabError
from pglab.lab.lab import Lab
from pglab.processes import shielded
from pglab.results.files import TUNE_SUFFIX, new_run_id, write_json
from pglab.results.folder import StoredRun
from pglab.runner import RunOptions, RunUI, run_scenario
from pglab.scenario import LoadedScenario
from pglab.scenario.model import Envelope, Scenario, StorageSpec, Topology
from pglab.scenario.overrides import toml_value

# what a candidate is judged by (lost_commits only where a run has crashes or power losses)
TUNE_METRICS = ["lost_commits", "stall_seconds", "tps", "p99"]
RULES_BY_ID = {rule.id: rule for rule in RULES}
TUNE_FORMAT = 2  # 1: one step (baseline, candidates); 2: + steps, combined, status


@dataclass(frozen=True)
class Candidate:
    rule: str
    change: dict[str, Any]  # scenario key -> value
    because: list[str]

    def overrides(self) -> list[str]:
        # JSON strings and numbers are valid TOML values, which is what --set parses.
        return [f"{key}={toml_value(value)}" for key, value in self.change.items()]

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
    # why it could not be measured (fully): refused by the scenario or the server, or a
    # run that failed; the tune goes on without it
    failed: str | None = None

    def fail(self, reason: str) -> None:
        self.failed = reason
        self.kept = False
        self.why = reason

    def delta(self, metric: str) -> float | None:
        return next((m.delta_pct for m in self.metrics if m.metric.name == metric), None)

    @property
    def gives_up_durability(self) -> bool:
        """A change that trades acknowledged commits for speed (synchronous_commit = off):
        measured like any other, never taken into the tune's path (a user makes that
        trade per transaction, knowing which ones can afford it)."""
        rule = RULES_BY_ID.get(self.candidate.rule)
        return rule is not None and rule.gives_up_durability


@dataclass
class Step:
    number: int
    overrides: list[str]  # the step's baseline: the original overrides + earlier winners
    baseline: list[StoredRun] = field(default_factory=list)
    analysed: list[str] = field(default_factory=list)  # runs whose analysis gave candidates
    top_cause: str | None = None
    candidates: list[CandidateResult] = field(default_factory=list)
    baseline_failures: list[str] = field(default_factory=list)

    @property
    def winner(self) -> CandidateResult | None:
        kept = [c for c in self.candidates if c.kept and not c.gives_up_durability]
        return min(kept, key=_rank) if kept else None


@dataclass
class TuneResult:
    tune_id: str
    noise: float
    steps: list[Step] = field(default_factory=list)
    # the winners of all steps together, measured against the original baseline (only
    # when more than one step found a winner; otherwise step 1's winner is that)
    combined: CandidateResult | None = None
    combined_baseline: list[StoredRun] = field(default_factory=list)
    point: dict[str, Any] = field(default_factory=dict)  # of a sweep: the point tuned
    status: str = "running"  # completed | failed | interrupted
    reason: str | None = None
    path: Path | None = None  # the .tune.json file

    @property
    def baseline(self) -> list[StoredRun]:
        return self.steps[0].baseline if self.steps else []

    @property
    def candidates(self) -> list[CandidateResult]:
        return self.steps[0].candidates if self.steps else []

    def path_winners(self) -> list[CandidateResult]:
        return [w for s in self.steps if (w := s.winner) is not None]

    def winning_overrides(self) -> list[str]:
        return [o for w in self.path_winners() for o in w.candidate.overrides()]


def _verdict(c: CandidateResult, metric: str) -> str | None:
    return next((m.verdict for m in c.metrics if m.metric.name == metric), None)


def _rank(c: CandidateResult) -> tuple[bool, int, float, float]:
    """Best first: fewer commits lost, then most metrics significantly better, then the
    largest cut in stall seconds, then the largest TPS gain."""
    better = sum(1 for m in c.metrics if m.verdict == "better")
    return (_verdict(c, "lost_commits") != "better", -better,
            c.delta("stall_seconds") or 0.0, -(c.delta("tps") or 0.0))


def _analysis(run: StoredRun) -> dict[str, Any]:
    """The run's analysis.json as a document ({} when there is none or it is unreadable:
    a candidate's run without an analysis recommends nothing)."""
    try:
        found = run.analysis()
    except BadInput:
        return {}
    return found.to_json() if found is not None else {}


def candidates_from(runs: list[StoredRun], top: int,
                    tried: list[dict[str, Any]] | None = None) -> list[Candidate]:
    """The first `top` distinct testable recommendations of the runs' analyses, those
    that most of the runs recommend first (one noisy run does not set the course);
    changes in `tried` are left out."""
    seen: dict[str, tuple[int, int, Candidate]] = {}
    order = 0
    for run in runs:
        for rec in _analysis(run).get("recommendations", []):
            change = rec.get("change") or {}
            if not change or not str(rec.get("test", "")).startswith("pglab run"):
                continue  # filesystem or hardware advice: nothing pglab can run here
            if tried and change in tried:
                continue
            key = json.dumps(change, sort_keys=True)
            if key in seen:
                count, first, cand = seen[key]
                seen[key] = (count + 1, first, cand)
            else:
                seen[key] = (1, order, Candidate(str(rec.get("rule")), dict(change),
                                                 list(rec.get("because") or [])))
                order += 1
    ranked = sorted(seen.values(), key=lambda item: (-item[0], item[1]))
    return [cand for _, _, cand in ranked[:top]]


def _top_cause(runs: list[StoredRun]) -> str | None:
    """The verdict most of the runs give (the first run's on a tie)."""
    verdicts = [str(v.get("cause")) for r in runs
                if isinstance(v := (_analysis(r).get("summary") or {}).get("verdict"), dict)]
    return max(verdicts, key=verdicts.count) if verdicts else None


def _decide(result: CandidateResult) -> None:
    verdicts = {m.metric.name: m.verdict for m in result.metrics}
    better = [n for n, v in verdicts.items() if v == "better"]
    worse = [n for n, v in verdicts.items() if v == "worse"]
    result.kept = bool(better) and not worse and result.failed is None
    if result.failed is not None:
        return
    lost = verdicts.get("lost_commits")
    if lost in ("better", "worse"):
        # durability first: speed is what a fix for lost commits costs, never a reason to
        # keep a change that loses more
        result.kept = lost == "better"
        costs = [n for n in worse if n != "lost_commits"]
        result.why = ("significantly fewer acknowledged commits lost"
                      + (f", at a cost: significantly worse on {', '.join(costs)}"
                         if costs else "")) if result.kept else (
            "significantly more acknowledged commits lost")
        return
    if worse:
        result.why = f"significantly worse on {', '.join(worse)}"
    elif better:
        result.why = f"significantly better on {', '.join(better)}"
        if result.gives_up_durability:
            result.why += ("; it gives up durability (a crash loses acknowledged commits): "
                           "not taken into the path")
    else:
        result.why = "no significant difference"


def _measure(base: list[StoredRun], cand: CandidateResult, noise: float) -> None:
    if not base or not cand.runs:
        if cand.failed is None:
            cand.why = "no baseline run completed: nothing to compare with"
        return
    base_group = Group("baseline", [RunData(r) for r in base])
    group = Group(cand.candidate.label, [RunData(r) for r in cand.runs])
    names = [n for n in TUNE_METRICS if applies_to(BY_NAME[n], [base_group, group])]
    cand.metrics = compare(base_group, [group], noise, metric_names=names).contenders[0].metrics
    _decide(cand)


def primary_alone(scenario: Scenario) -> Scenario:
    """The scenario's primary on the local disk, with no standbys, pooler, volumes, faults
    or kernel knobs, and of its envelope only the memory limit: where a change of the
    server's settings or initdb options is checked. The server alone refuses such a change
    or takes it, and the rest costs most of a check (the disk limits are measured, a
    synchronous standby is built and streams: a 15 s start), while a memory limit can make
    a larger shared_buffers fail."""
    return scenario.model_copy(update={
        "envelope": Envelope(memory=scenario.envelope.memory), "storage": StorageSpec(),
        "topology": Topology(), "faults": [], "nodes": {}, "kernel": {}})


class _Tuner:
    def __init__(self, loaded_for: Callable[[list[str]], LoadedScenario],
                 options: RunOptions, ui: RunUI, repeats: int, top: int,
                 on_run: Callable[[StoredRun], None] | None, result: TuneResult,
                 steps: int) -> None:
        self.loaded_for = loaded_for
        self.steps = steps
        self.options = options
        self.ui = ui
        self.repeats = repeats
        self.top = top
        self.on_run = on_run
        self.result = result
        self.save: Callable[[], None] = lambda: None

    def attempt(self, loaded: LoadedScenario) -> StoredRun | str:
        """One run: the stored run, or why it failed (a Ctrl-C is raised)."""
        try:
            stored = run_scenario(loaded, self.options, self.ui, on_run=self.on_run)[0]
        except PglabError as exc:
            return str(exc)
        if stored.status != "completed":
            return f"{stored.path.name}: {stored.status}: {stored.reason}"
        return stored

    def check(self, loaded: LoadedScenario, change: dict[str, Any]) -> str | None:
        """Start and stop a lab with the scenario: None when the server takes it, else
        what refused it. Cheaper than finding out in round 1, after a baseline run."""
        scenario = loaded.variants[0].scenario
        if all(key.startswith("server.") for key in change):
            scenario = primary_alone(scenario)
        try:
            with Lab(scenario, loaded.where, f"tune-check-{secrets.token_hex(3)}",
                     pg_bin=self.options.pg_bin, on_status=self.ui.status):
                pass
        except PglabError as exc:
            return str(exc)
        return None

    def prepare(self, cands: list[CandidateResult], base: list[str], check: bool = True
                ) -> dict[str, LoadedScenario]:
        """Each candidate's scenario, and with `check` the server's word on it first."""
        loaded: dict[str, LoadedScenario] = {}
        for cand in cands:
            label = cand.candidate.label
            try:
                scenario = self.loaded_for(base + cand.candidate.overrides())
            except BadInput as exc:  # the scenario cannot take the change
                cand.fail(f"not applicable here: {exc}")
                continue
            if not check:
                loaded[label] = scenario
                continue
            self.ui.status(f"tune: checking {label}")
            refused = self.check(scenario, cand.candidate.change)
            if refused is not None:
                cand.fail(f"refused before its runs: {refused}")
                continue
            loaded[label] = scenario
        return loaded

    def rounds(self, base: LoadedScenario, baseline: list[StoredRun],
               cands: list[CandidateResult], loaded: dict[str, LoadedScenario],
               failures: list[str], what: str, first_done: bool = False) -> None:
        """`repeats` interleaved rounds of the baseline and every live candidate;
        `first_done`: the baseline run just analysed is round 1's (it ran right before
        the candidates' checks), so that round starts with the first candidate."""
        for round_ in range(1, self.repeats + 1):
            live = [c for c in cands if c.failed is None]
            if not live:
                return
            if not (first_done and round_ == 1):
                self.ui.status(f"tune: {what}round {round_}/{self.repeats}: baseline")
                got = self.attempt(base)
                if isinstance(got, str):
                    failures.append(f"round {round_}: {got}")
                else:
                    baseline.append(got)
            for cand in live:
                label = cand.candidate.label
                self.ui.status(f"tune: {what}round {round_}/{self.repeats}: {label}")
                got = self.attempt(loaded[label])
                if isinstance(got, str):
                    cand.fail(f"run failed in round {round_}: {got}")
                else:
                    cand.runs.append(got)
                self.save()

    def step(self, number: int, overrides: list[str], first: list[StoredRun],
             tried: list[dict[str, Any]]) -> Step:
        """One step from `first` (the runs of its baseline so far, already analysed)."""
        step = Step(number, list(overrides))
        self.result.steps.append(step)
        step.analysed = [r.path.name for r in first]
        step.top_cause = _top_cause(first)
        step.candidates = [CandidateResult(c) for c in candidates_from(first, self.top, tried)]
        what = f"step {number}/{self.steps}: " if self.steps > 1 else ""
        if number == 1:
            step.baseline.extend(first)
        self.save()
        if not step.candidates:
            return step
        base = self.loaded_for(overrides)
        # step 1's round 1 starts with the candidates (its baseline is the run analysed):
        # a check would start each one's lab just before its first run starts it again
        loaded = self.prepare(step.candidates, overrides, check=number != 1)
        self.rounds(base, step.baseline, step.candidates, loaded, step.baseline_failures,
                    what, first_done=number == 1)
        for cand in step.candidates:
            _measure(step.baseline, cand, self.result.noise)
        self.save()
        return step


def tune(loaded_for: Callable[[list[str]], LoadedScenario], base_overrides: list[str],
         options: RunOptions, ui: RunUI, repeats: int = 3, top: int = 3, noise: float = 0.10,
         on_run: Callable[[StoredRun], None] | None = None, steps: int = 1) -> TuneResult:
    """Baseline, then per step `repeats` interleaved rounds of baseline + each candidate;
    the result file is written whatever happens (Interrupted is re-raised after)."""
    if repeats < 1:
        raise BadInput(f"--repeats {repeats}: expected at least 1")
    if steps < 1:
        raise BadInput(f"--steps {steps}: expected at least 1")
    if top < 1:
        raise BadInput(f"--top {top}: expected at least 1")
    base = loaded_for(base_overrides)
    point: dict[str, Any] = {}
    if len(base.variants) != 1:
        # A sweep (a client list, a [matrix]) is tuned at its first point, the one its
        # author put first (too-many-connections: without the pooler): its overrides are
        # pinned and the matrix emptied, so a candidate's change is not overwritten by a
        # matrix value of the same key.
        point = dict(base.variants[0].overrides)
        count = len(base.variants)
        base_overrides = [*base_overrides, "matrix={}",
                          *(f"{k}={toml_value(v)}" for k, v in point.items())]
        base = loaded_for(base_overrides)
        ui.status(f"tune: {count} runs in the sweep; tuning its first point: "
                  + ", ".join(f"{k}={v}" for k, v in point.items()))
    tune_id = new_run_id()
    result = TuneResult(tune_id, noise, point=point)
    result.path = options.results_root / base.scenario.name / (tune_id + TUNE_SUFFIX)
    tuner = _Tuner(loaded_for, options, ui, repeats, top, on_run, result, steps)

    def save() -> None:
        assert result.path is not None
        with shielded():
            write_tune_file(result.path, result)

    tuner.save = save
    try:
        _run_steps(tuner, base, base_overrides, steps)
        if result.status == "running":
            result.status = "completed"
    except Interrupted as exc:
        result.status, result.reason = "interrupted", f"{exc.signal_name} received"
        if result.path is not None:
            exc.marked.append(str(result.path))
        raise
    except BaseException as exc:
        result.status = "failed"
        result.reason = str(exc) if isinstance(exc, PglabError) else (
            f"internal error: {type(exc).__name__}: {exc}")
        raise
    finally:
        save()
    return result


def _run_steps(tuner: _Tuner, base: LoadedScenario, base_overrides: list[str],
               steps: int) -> None:
    result = tuner.result
    tuner.ui.status("tune: baseline run")
    got = tuner.attempt(base)
    if isinstance(got, str):  # nothing to tune against
        result.status, result.reason = "failed", f"the baseline run failed: {got}"
        return
    first = [got]
    overrides = list(base_overrides)
    tried: list[dict[str, Any]] = []
    for number in range(1, steps + 1):
        step = tuner.step(number, overrides, first, tried)
        winner = step.winner
        # A change kept but beaten by the winner is tried again on the new baseline: fixes
        # of one cause can add up (slow WAL file creation takes 1 GB segments *and*
        # wal_init_zero = off); one that did not help is not.
        tried.extend(c.candidate.change for c in step.candidates if not c.kept or c is winner)
        if winner is None:
            break  # nothing better: the path ends here
        overrides = overrides + winner.candidate.overrides()
        first = winner.runs  # the new baseline's runs, analysed like any other
    winners = result.path_winners()
    if len(winners) > 1:
        _measure_combined(tuner, base, base_overrides)


def _measure_combined(tuner: _Tuner, base: LoadedScenario, base_overrides: list[str]
                      ) -> None:
    """All the path's winners at once against the original baseline, interleaved."""
    result = tuner.result
    winners = result.path_winners()
    change: dict[str, Any] = {}
    for w in winners:
        change.update(w.candidate.change)
    because = list(dict.fromkeys(c for w in winners for c in w.candidate.because))
    combined = CandidateResult(Candidate("+".join(w.candidate.rule for w in winners),
                                         change, because))
    result.combined = combined
    # checked like any candidate: changes that each started may still clash together
    loaded = tuner.prepare([combined], base_overrides)
    if combined.failed is not None:
        return
    failures: list[str] = []
    tuner.rounds(base, result.combined_baseline, [combined], loaded, failures, "combined: ")
    _measure(result.combined_baseline, combined, result.noise)


def _runs(runs: list[StoredRun]) -> list[str]:
    return [r.path.name for r in runs]


def _metric(m: MetricResult) -> dict[str, Any]:
    ci = m.ci_pct
    return {"metric": m.metric.name, "base": m.base, "contender": m.contender,
            "delta_pct": m.delta_pct, "ci_pct": list(ci) if ci else None,
            "verdict": m.verdict, "note": m.note}


def _candidate(c: CandidateResult) -> dict[str, Any]:
    return {"rule": c.candidate.rule, "change": c.candidate.change,
            "overrides": c.candidate.overrides(), "because": c.candidate.because,
            "runs": _runs(c.runs), "metrics": [_metric(m) for m in c.metrics],
            "kept": c.kept, "why": c.why, "failed": c.failed}


def write_tune_file(path: Path, result: TuneResult) -> None:
    """Format 2; its top-level `baseline` and `candidates` are step 1's, as in format 1."""
    steps = [{"step": s.number, "overrides": s.overrides, "baseline": _runs(s.baseline),
              "baseline_failures": s.baseline_failures, "analysed": s.analysed,
              "top_cause": s.top_cause,
              "candidates": [_candidate(c) for c in s.candidates],
              "winner": s.winner.candidate.rule if s.winner else None} for s in result.steps]
    write_json(path, {
        "format": TUNE_FORMAT,
        "tune_id": result.tune_id,
        "status": result.status,
        "reason": result.reason,
        "noise": result.noise,
        "sweep_point": result.point or None,
        "baseline": _runs(result.baseline),
        "candidates": steps[0]["candidates"] if steps else [],
        "steps": steps,
        "combined": ({**_candidate(result.combined),
                      "baseline": _runs(result.combined_baseline)}
                     if result.combined else None),
        "winning_overrides": result.winning_overrides(),
    })
