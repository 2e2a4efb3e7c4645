"""manifest.json: what one run was, how it ended and what it measured (docs/RESULTS.md).

`Manifest` is the document, typed at its top level. Its sections (`scenario`, `host`,
`nodes`, `workload`, `results`, ...) stay JSON objects whose keys docs/RESULTS.md lists;
the accessors below are the lookups that more than one reader makes, so a key is spelt
in one place. A section this pglab does not know (written by a newer pglab of the same
format) is kept in `extra` and written back unchanged.

Older formats are upgraded on read (`UPGRADES`), so every reader sees the current shape
and a folder on disk is never rewritten just because it was read.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pglab import __version__
from pglab.driver_traits import driver_traits
from pglab.errors import BadInput, expect_path
from pglab.results.files import MANIFEST

# Manifest format history:
#   1 (2026-11-21): first format.
MANIFEST_FORMAT = 1

# The format a manifest was written in -> a function that turns it into the next format.
# Empty while there is one format; an entry is added with the format it upgrades from.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

RunStatus = Literal["running", "completed", "failed", "interrupted"]
RUN_STATUSES: tuple[RunStatus, ...] = ("running", "completed", "failed", "interrupted")

# Sections written only when they hold something, as format 1 always did.
_OPTIONAL = ("pid", "kernel", "faults", "durability", "telemetry", "source", "analysis",
             "report_error", "network")


@dataclass
class Manifest:
    run_id: str = ""
    scenario_name: str = ""
    status: str = "running"  # RUN_STATUSES; a reader may find another (a foreign writer)
    reason: str | None = None  # why it failed or was interrupted
    started_at: str | None = None  # ISO UTC, milliseconds
    ended_at: str | None = None
    pid: int | None = None  # pglab's, while running: a dead pid means interrupted
    scenario_source: str = ""  # a path, "builtin:<name>" or "import"
    overrides: dict[str, Any] = field(default_factory=dict)  # --set, key -> value
    variant: dict[str, Any] = field(default_factory=dict)  # this sweep/matrix point
    study_id: str | None = None
    scenario: dict[str, Any] = field(default_factory=dict)  # the validated scenario
    envelope: dict[str, Any] = field(default_factory=dict)  # the primary's, as asked
    host: dict[str, Any] = field(default_factory=dict)  # hostfacts.host_facts
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> facts
    workload: dict[str, Any] = field(default_factory=dict)  # argv, jobs, times, returncode
    results: dict[str, Any] = field(default_factory=dict)  # pgbench, measured, errors
    kernel: dict[str, Any] | None = None  # the kernel knobs set for the run
    # The hosts' links (network.hosts = "separate"): configured and measured figures.
    network: dict[str, Any] | None = None
    faults: list[dict[str, Any]] | None = None  # fired faults, as event records
    # The integrity verdict of a run with crash or power-loss faults (durability/verdicts.py):
    # one per cut and one at the end.
    durability: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None  # probes, sampling statistics, observer cost
    source: dict[str, Any] | None = None  # {"kind": "import", ...} for imported runs
    analysis: dict[str, Any] | None = None  # {"error": ...} when the analysis failed
    report_error: str | None = None
    format: int = MANIFEST_FORMAT
    pglab_version: str = __version__
    extra: dict[str, Any] = field(default_factory=dict)  # unknown sections, kept as read

    # --- the lookups several readers share -------------------------------------------

    @property
    def measured(self) -> dict[str, Any]:
        """Statistics of the measured window (tps, lat_*_ms, seconds...), or {}."""
        return _object(self.results.get("measured"))

    @property
    def pgbench(self) -> dict[str, Any]:
        """pgbench's own summary, parsed, or {}."""
        return _object(self.results.get("pgbench"))

    def node(self, name: str = "primary") -> dict[str, Any]:
        return _object(self.nodes.get(name))

    def node_settings(self, name: str = "primary") -> dict[str, Any]:
        """The node's non-default settings: name -> {setting, unit, source}."""
        return _object(self.node(name).get("settings"))

    def node_envelope(self, name: str = "primary") -> dict[str, Any]:
        """The envelope applied to the node (limits, measured figures), or {}."""
        return _object(self.node(name).get("envelope"))

    def node_storage(self, name: str = "primary") -> list[dict[str, Any]]:
        """The volumes the run made for the node (storage/): one record each, with its
        role (data, wal), filesystem, options and device; [] on the host's directory."""
        volumes = self.node(name).get("storage")
        return [v for v in volumes if isinstance(v, dict)] if isinstance(volumes, list) else []

    @property
    def scenario_workload(self) -> dict[str, Any]:
        return _object(self.scenario.get("workload"))

    @property
    def clients(self) -> Any:
        """workload.clients as the scenario recorded it (a number or a one-point list);
        a sysbench run's workload.threads."""
        workload = self.scenario_workload
        return workload.get(driver_traits(workload.get("driver")).concurrency)

    @property
    def duration_s(self) -> int:
        """The measured duration asked for, in seconds (0 when unknown)."""
        try:
            return int(self.scenario_workload.get("duration") or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def source_kind(self) -> str:
        """"import" for an imported run, "pglab" for a run pglab made."""
        return str((self.source or {}).get("kind", "pglab"))

    @property
    def cpu_cores(self) -> int:
        return int(self.host.get("cpu_cores") or 1)

    @property
    def analysis_error(self) -> str | None:
        error = (self.analysis or {}).get("error")
        return str(error) if error else None

    # --- JSON --------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format, "pglab_version": self.pglab_version}
        for f in dataclasses.fields(self):
            if f.name in ("format", "pglab_version", "extra"):
                continue
            value = getattr(self, f.name)
            if f.name in _OPTIONAL and value is None:
                continue
            out[f.name] = value
        out.update(self.extra)
        return out

    @staticmethod
    def from_json(data: Any, where: str = "manifest") -> Manifest:
        """The manifest of a JSON document, upgraded to this format; BadInput if it is
        not one."""
        if not isinstance(data, dict) or "format" not in data:
            raise BadInput(f"{where}: not a pglab manifest (no format field)")
        try:
            version = int(data["format"])
        except (TypeError, ValueError):
            raise BadInput(f"{where}: not a pglab manifest (format {data['format']!r})") from None
        if version > MANIFEST_FORMAT:
            raise BadInput(f"{where}: manifest format {version} is newer than this pglab "
                           f"understands ({MANIFEST_FORMAT}); upgrade pglab")
        while version < MANIFEST_FORMAT:
            data = UPGRADES[version](data)
            version += 1
        names = {f.name for f in dataclasses.fields(Manifest)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        known["format"] = version
        for key in ("overrides", "variant", "scenario", "envelope", "host", "nodes",
                    "workload", "results"):
            if known.get(key) is None:  # written as null by a hand or a foreign tool
                known.pop(key, None)
        for key, value in known.items():
            expected = _SHAPES.get(key)
            if expected is not None and value is not None and not isinstance(value, expected):
                raise BadInput(f"{where}: not a pglab manifest ({key} is "
                               f"{type(value).__name__}, expected {expected.__name__})")
        extra = {k: v for k, v in data.items() if k not in names}
        return Manifest(**known, extra=extra)


def _object(value: Any) -> dict[str, Any]:
    """A section's part as a new dict; {} when absent or not an object (a hand's edit)."""
    return dict(value) if isinstance(value, dict) else {}


# The JSON type of each field (None allowed where the field is optional): readers use
# the sections as objects, so a manifest edited by hand or written by another tool is
# refused here with the key, not deep inside a reader.
_SHAPES: dict[str, type] = {
    **dict.fromkeys(("run_id", "scenario_name", "status", "reason", "started_at", "ended_at",
                     "scenario_source", "study_id", "report_error", "pglab_version"), str),
    **dict.fromkeys(("overrides", "variant", "scenario", "envelope", "host", "nodes",
                     "workload", "results", "kernel", "durability", "telemetry", "source",
                     "analysis"), dict),
    "faults": list,
    "pid": int,
}


def read_manifest(folder: Path) -> Manifest:
    """The manifest of a run folder; BadInput naming the file when there is none, it is
    unreadable, or its format is newer than this pglab."""
    path = folder / MANIFEST
    expect_path(folder, "folder", "run folder",
                f"give its folder, {folder.parent}" if folder.name == MANIFEST
                else f"expected a folder holding {MANIFEST}")
    if not path.is_file():
        raise BadInput(f"{folder}: not a pglab run folder (no manifest.json)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: unreadable manifest: {exc}") from None
    return Manifest.from_json(data, str(path))
