"""<study-id>.study.json: the runs of one sweep or matrix, beside their run folders.

Written by the runner as the sweep goes (so an interrupted sweep still lists the runs it
made), read by the study report. Each entry names its run folder (`path`, relative to
the study file) and repeats the run's key figures, which stand in when that folder is
gone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pglab.errors import BadInput
from pglab.results.files import STUDY_SUFFIX, write_json
from pglab.results.folder import StoredRun

# Study format history:
#   1 (2026-11-21): first format.
STUDY_FORMAT = 1


@dataclass
class StudyDocument:
    study_id: str
    scenario_name: str
    axes: list[str]  # the dotted keys that vary between the runs
    planned: int  # variants the sweep was to run
    runs: list[dict[str, Any]] = field(default_factory=list)  # see study_entry
    format: int = STUDY_FORMAT

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "study_id": self.study_id,
                "scenario_name": self.scenario_name, "axes": self.axes,
                "planned": self.planned, "runs": self.runs}


def study_entry(run: StoredRun) -> dict[str, Any]:
    measured = run.manifest.measured
    return {
        "run_id": run.path.name,
        "path": run.path.name,
        "variant": run.manifest.variant,
        "status": run.status,
        "tps": measured.get("tps"),
        "lat_avg_ms": measured.get("lat_avg_ms"),
        "lat_p95_ms": measured.get("lat_p95_ms"),
        "lat_p99_ms": measured.get("lat_p99_ms"),
    }


def study_path(results_root: Path, scenario_name: str, study_id: str) -> Path:
    return results_root / scenario_name / (study_id + STUDY_SUFFIX)


def write_study(path: Path, document: StudyDocument) -> None:
    write_json(path, document.to_json())


def read_study(path: Path) -> StudyDocument:
    """The study file; BadInput naming it when it is unreadable, foreign or newer."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: not a readable study file ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise BadInput(f"{path}: not a pglab study file (no 'runs' list)")
    if int(data.get("format") or 1) > STUDY_FORMAT:
        raise BadInput(f"{path}: study format {data['format']} is newer than this pglab "
                       f"understands ({STUDY_FORMAT}); upgrade pglab")
    return StudyDocument(str(data.get("study_id")), str(data.get("scenario_name")),
                         list(data.get("axes") or []), int(data.get("planned") or 0),
                         [e for e in data["runs"] if isinstance(e, dict)],
                         int(data.get("format") or 1))
