"""analysis.json: the stalls of a run, their causes and the advice (docs/ANALYSIS.md).

`AnalysisDocument` is the document, typed at its top level; stalls, causes and
recommendations stay JSON objects whose keys docs/ANALYSIS.md lists. A folder holds one
only when the run was analysed, so `read_analysis` has two outcomes a reader must handle:
None (not analysed) and BadInput (a torn, foreign or newer file), never a half-read
document.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pglab.errors import BadInput
from pglab.results.files import ANALYSIS, write_json

# Analysis format history:
#   1 (2026-11-21): first format (summary, stalls with ranked causes, recommendations).
#   Later additions that format-1 readers can ignore: `steady_state` (causes that held
#   the whole run back) and `summary.verdict` (the run's top cause).
#   2 (2026-11-23): `lost_transactions` (stalls, summary, verdict) is now
#   `deficit_transactions`: a stall's throughput cost, transactions not made; "lost" is
#   kept for acknowledged commits that a crash takes away. Readers take either.
#   Later additions that format-2 readers can ignore: `durability` (what the crashes and
#   power losses of a run cost in data) and, for a run that lost or damaged data,
#   `summary.verdict` with basis "durability" (cause data-loss) and the performance
#   verdict kept as `summary.performance_verdict`; `withheld` (rules that fired but the
#   run's own data rules out, or that only weak, short stalls fired, each with why);
#   `statements` (the run's, by execution time) and a stall's `statements` (those its
#   client backends were sampled in); a stall's `on_cpu` (the functions whose share of
#   each process kind's on-CPU samples rose, from os.profile).
ANALYSIS_FORMAT = 2


@dataclass
class AnalysisDocument:
    run_id: str | None
    status: str  # the run's status when it was analysed
    partial: bool = False  # something was missing: see `missing`
    missing: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # steady state, verdict
    stalls: list[dict[str, Any]] = field(default_factory=list)
    steady_state: dict[str, Any] = field(default_factory=lambda: {"causes": []})
    recommendations: list[dict[str, Any]] = field(default_factory=list)
    withheld: list[dict[str, Any]] = field(default_factory=list)  # rule, because, why
    # only for a run with crashes or power losses (durability/section.py)
    durability: dict[str, Any] | None = None
    # the run's statements by execution time (pg_stat_statements), when it recorded them
    statements: list[dict[str, Any]] = field(default_factory=list)
    format: int = ANALYSIS_FORMAT
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, kept as read

    @property
    def verdict(self) -> dict[str, Any] | None:
        """The run's top cause, if the analysis named one."""
        verdict = self.summary.get("verdict")
        return verdict if isinstance(verdict, dict) else None

    @property
    def performance_verdict(self) -> dict[str, Any] | None:
        """The run's top cause of slowness: the verdict, unless data loss took its place."""
        kept = self.summary.get("performance_verdict")
        if isinstance(kept, dict):
            return kept
        verdict = self.verdict
        return None if verdict is not None and verdict.get("basis") == "durability" \
            else verdict

    @property
    def durability_failed(self) -> bool:
        """The run lost acknowledged commits or data (the durability section says so)."""
        return bool((self.durability or {}).get("failed"))

    @property
    def steady_causes(self) -> list[dict[str, Any]]:
        return [c for c in self.steady_state.get("causes") or [] if isinstance(c, dict)]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format}
        out.update((f.name, getattr(self, f.name)) for f in dataclasses.fields(self)
                   if f.name not in ("format", "extra")
                   and not (f.name == "durability" and self.durability is None))
        out.update(self.extra)
        return out

    @staticmethod
    def from_json(data: Any, where: str = "analysis") -> AnalysisDocument:
        if not isinstance(data, dict) or not isinstance(data.get("format"), int):
            raise BadInput(f"{where}: not a pglab analysis (no format field)")
        if data["format"] > ANALYSIS_FORMAT:
            raise BadInput(f"{where}: analysis format {data['format']} is newer than this "
                           f"pglab understands ({ANALYSIS_FORMAT}); upgrade pglab")
        names = {f.name for f in dataclasses.fields(AnalysisDocument)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names and v is not None}
        known.setdefault("run_id", None)
        known.setdefault("status", "unknown")
        for key, kind in (("missing", list), ("summary", dict), ("stalls", list),
                          ("steady_state", dict), ("recommendations", list),
                          ("withheld", list), ("durability", dict),
                          ("statements", list)):
            if key in known and not isinstance(known[key], kind):
                raise BadInput(f"{where}: not a pglab analysis ({key} is not a "
                               f"{kind.__name__})")
        extra = {k: v for k, v in data.items() if k not in names}
        return AnalysisDocument(**known, extra=extra)


def deficit(item: dict[str, Any]) -> int | None:
    """A stall's (or verdict's) throughput cost: transactions not made. Format 1 called it
    lost_transactions; "lost" now means commits a crash took away."""
    value = item.get("deficit_transactions", item.get("lost_transactions"))
    return int(value) if isinstance(value, (int, float)) else None


def verdict_basis(verdict: dict[str, Any]) -> str:
    """Why the verdict's cause is the run's top cause, in words."""
    if verdict.get("basis") == "durability":
        return _durability_basis(verdict)
    conf = verdict.get("confidence")
    conf_text = f"confidence {conf:.2f}, " if isinstance(conf, (int, float)) else ""
    if verdict.get("basis") == "steady-state":
        if verdict.get("minor_stalls"):
            return f"{conf_text}held the whole run back; its stalls were minor"
        return f"{conf_text}held the whole run back; no stall"
    fewer = deficit(verdict)
    if fewer is not None:
        return (f"{conf_text}first cause of the stalls that cost about {fewer:,} "
                "transactions")
    return "no stall could be attributed"


def _durability_basis(verdict: dict[str, Any]) -> str:
    kind = verdict.get("durability_verdict")
    lost = verdict.get("lost_commits")
    if kind == "server-lost":
        what = "the server did not come back after a cut"
    elif kind == "corruption":
        what = f"damaged data found after a cut ({verdict.get('corruption')} finding(s))"
    else:
        what = f"{lost:,} acknowledged commits lost" if isinstance(lost, int) else "data lost"
    return f"{what}: a durability failure, whatever the run's throughput"


def read_analysis(folder: Path) -> AnalysisDocument | None:
    """The folder's analysis; None if it has none; BadInput naming the file if that is
    torn, foreign or newer than this pglab."""
    path = folder / ANALYSIS
    if not path.is_file():
        if path.exists():
            raise BadInput(f"{path}: not a file (expected the run's {ANALYSIS})")
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: unreadable analysis: {exc}") from None
    return AnalysisDocument.from_json(data, str(path))


def write_analysis(folder: Path, document: AnalysisDocument) -> Path:
    path = folder / ANALYSIS
    write_json(path, document.to_json(), indent=None)  # compact: see write_json
    return path
