"""The results folder: layout, manifest, atomic writes, loading.

results/<scenario>/<run-id>/ holds everything about one run (see docs/RESULTS.md). Every
file is written to a temporary name in the same folder and renamed into place, so a
reader never sees half a file and an interrupted run leaves only whole files behind.
The manifest is written when the run starts (status "running") and rewritten as it ends.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import os
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from pglab.errors import BadInput, EnvironmentProblem

if TYPE_CHECKING:  # loaded by the readers that need it: `pglab ls` does not
    import polars as pl

# Manifest format history:
#   1 (2026-11-21): first format.
MANIFEST_FORMAT = 1
STATUSES = ("running", "completed", "failed", "interrupted")


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def iso(t: dt.datetime | float | None) -> str | None:
    if t is None:
        return None
    if isinstance(t, float | int):
        t = dt.datetime.fromtimestamp(t, dt.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(now: dt.datetime | None = None) -> str:
    """Sortable: UTC time to the second, then a short random suffix."""
    now = now or utc_now()
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any) -> None:
    _atomic_write(path, (json.dumps(obj, indent=2, default=str) + "\n").encode())


def write_text(path: Path, text: str) -> None:
    _atomic_write(path, text.encode())


def write_parquet(path: Path, frame: pl.DataFrame) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        frame.write_parquet(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class RunFolder:
    path: Path

    @property
    def raw(self) -> Path:
        return self.path / "raw"

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json(self.manifest_path, manifest)


def create_run_folder(results_root: Path, scenario_name: str) -> RunFolder:
    # Absolute: pgbench runs with raw/ as its working directory and writes logs there.
    parent = results_root.absolute() / scenario_name
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for _ in range(10):
            path = parent / new_run_id()
            try:
                path.mkdir()
                break
            except FileExistsError:
                continue
        (path / "raw").mkdir()
        probe = path / ".writable"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise EnvironmentProblem(
            f"results dir {results_root}: cannot write there ({exc.strerror}); "
            "choose another with --results DIR"
        ) from None
    return RunFolder(path)


# --- reading ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredRun:
    path: Path
    manifest: dict[str, Any]

    @property
    def status(self) -> str:
        """The recorded status; a 'running' run whose pglab is gone was interrupted."""
        status = str(self.manifest.get("status", "unknown"))
        if status == "running" and not _alive(self.manifest.get("pid")):
            return "interrupted"
        return status

    @property
    def reason(self) -> str | None:
        if str(self.manifest.get("status")) == "running" and self.status == "interrupted":
            return "pglab stopped without finishing (killed?)"
        reason = self.manifest.get("reason")
        return str(reason) if reason else None

    def client_series(self) -> pl.DataFrame | None:
        import polars as pl

        path = self.path / "client.parquet"
        return pl.read_parquet(path) if path.is_file() else None


def _alive(pid: Any) -> bool:
    return isinstance(pid, int) and psutil.pid_exists(pid)


def load_run(path: Path) -> StoredRun:
    manifest_path = path / "manifest.json"
    if not path.is_dir():
        raise BadInput(f"{path}: no such run folder")
    if not manifest_path.is_file():
        raise BadInput(f"{path}: not a pglab run folder (no manifest.json)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"{manifest_path}: unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict) or "format" not in manifest:
        raise BadInput(f"{manifest_path}: not a pglab manifest (no format field)")
    if int(manifest["format"]) > MANIFEST_FORMAT:
        raise BadInput(
            f"{manifest_path}: manifest format {manifest['format']} is newer than this "
            f"pglab understands ({MANIFEST_FORMAT}); upgrade pglab"
        )
    return StoredRun(path, manifest)


def find_runs(root: Path) -> Iterator[Path]:
    """Run folders below `root` (any depth), sorted by path (run ids sort by time)."""
    if (root / "manifest.json").is_file():
        yield root
        return
    for manifest in sorted(root.rglob("manifest.json")):
        if "raw" not in manifest.parent.parts[len(root.parts):]:
            yield manifest.parent


@dataclass(frozen=True)
class RunFilter:
    """`pglab ls` filters: scenario name (shell wildcards), statuses, start time range."""

    scenario: str | None = None
    statuses: tuple[str, ...] = ()
    since: str | None = None  # ISO UTC, compared as text with manifests' started_at
    until: str | None = None

    @staticmethod
    def parse(scenario: str | None, statuses: tuple[str, ...], since: str | None,
              until: str | None) -> RunFilter:
        return RunFilter(scenario, statuses, _iso_utc(since, "--since"),
                         _iso_utc(until, "--until"))

    @property
    def active(self) -> bool:
        return bool(self.scenario or self.statuses or self.since or self.until)

    def matches(self, run: StoredRun) -> bool:
        started = str(run.manifest.get("started_at") or "")
        return not (
            (self.scenario and not fnmatch.fnmatchcase(
                str(run.manifest.get("scenario_name")), self.scenario))
            or (self.statuses and run.status not in self.statuses)
            or (self.since and started < self.since)
            or (self.until and started >= self.until)
        )


def _iso_utc(value: str | None, option: str) -> str | None:
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(f"{option} {value!r}: expected a date or time like 2026-11-21 or "
                       "2026-11-21T14:00") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return iso(parsed.replace(tzinfo=dt.timezone.utc))
