"""Turning the command line's BASE / CONTENDER arguments into groups of runs (repeats).

One argument is one side of the comparison. It may name:
- a run folder;
- a folder holding run folders (e.g. results/checkpoint-storm): all its runs are repeats;
- a glob, quoted so that pglab expands it ('results/t/2026112*');
- several of those joined by commas (results/a/RUN1,results/a/RUN2).
Runs that did not complete are left out with a note; a side with no completed run is an
error.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

from pglab.compare.rundata import RunData
from pglab.errors import BadInput, PglabError, expect_path
from pglab.results.folder import find_runs, is_run_folder, load_run


@dataclass
class Group:
    spec: str  # the argument as given
    runs: list[RunData]
    skipped: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        if len(self.runs) == 1:
            return self.runs[0].label
        return f"{self.spec} ({len(self.runs)} runs)"


def _paths(part: str) -> list[Path]:
    if any(ch in part for ch in "*?["):
        matches = sorted(Path(p) for p in glob.glob(part))
        if not matches:
            raise BadInput(f"{part}: the pattern matches no file or folder")
        return matches
    return [Path(part)]


def load_group(spec: str) -> Group:
    """The completed runs that `spec` names (see the module docstring)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise BadInput(f"{spec!r}: expected a run folder, a folder of runs, a glob or a "
                       "comma-separated list of them")
    found: list[Path] = []
    for part in parts:
        for path in _paths(part):
            expect_path(path, "folder", "run folder or folder of runs")
            if is_run_folder(path):
                found.append(path)
                continue
            below = list(find_runs(path)) if path.is_dir() else []
            if not below:
                raise BadInput(f"{path}: not a pglab run folder (no manifest.json) and no "
                               "run folders below it")
            found.extend(below)
    group = Group(spec, [])
    seen: set[Path] = set()
    for path in found:
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        try:
            run = load_run(path)
        except PglabError as exc:
            group.skipped.append(str(exc))
            continue
        if run.status != "completed":
            group.skipped.append(f"{path}: {run.status}, left out")
            continue
        group.runs.append(RunData(run))
    if not group.runs:
        why = "; ".join(group.skipped) or "no runs"
        raise BadInput(f"{spec}: no completed run to compare ({why})")
    return group
