"""Run folders: creating one, loading one, finding them, filtering them (`pglab ls`).

results/<scenario>/<run-id>/ holds everything about one run (docs/RESULTS.md). The
manifest is written when the run starts (status "running", with pglab's pid) and
rewritten as it ends; a reader treats "running" with a dead pid as interrupted.

Every reader of a folder's files goes through `StoredRun`: the manifest must be
readable (else BadInput), and what a damaged optional file (a Parquet file, the
analysis) does is the reader's choice, made once when it loads the run (`on_damaged`):
fail with the file's one-line error (the default), or be told it and go on without the
file (docs/RESULTS.md says which command does which).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psutil

from pglab.errors import BadInput, EnvironmentProblem
from pglab.results import files
from pglab.results.analysis_doc import AnalysisDocument, read_analysis
from pglab.results.manifest import Manifest, read_manifest

if TYPE_CHECKING:  # loaded by the readers that need it: `pglab ls` does not
    import polars as pl

_T = TypeVar("_T")


@dataclass
class RunFolder:
    """A run folder being written."""

    path: Path

    @property
    def raw(self) -> Path:
        return self.path / files.RAW

    def file(self, name: str) -> Path:
        """One of the folder's files, by its name in `results.files`."""
        return self.path / name

    def write_manifest(self, manifest: Manifest) -> None:
        files.write_json(self.path / files.MANIFEST, manifest.to_json())


def create_run_folder(results_root: Path, scenario_name: str) -> RunFolder:
    # Absolute: pgbench runs with raw/ as its working directory and writes logs there.
    parent = results_root.absolute() / scenario_name
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for _ in range(10):
            path = parent / files.new_run_id()
            try:
                path.mkdir()
                break
            except FileExistsError:
                continue
        (path / files.RAW).mkdir()
        probe = path / ".writable"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise EnvironmentProblem(
            f"results dir {results_root}: cannot write there ({exc.strerror}); "
            "choose another with --results DIR"
        ) from None
    return RunFolder(path)


# Told of a damaged optional file (its one-line error); the file then reads as absent.
OnDamaged = Callable[[BadInput], None]


@dataclass(frozen=True)
class StoredRun:
    """A run folder as written, read back."""

    path: Path
    manifest: Manifest
    # None: a damaged optional file raises its BadInput; else it is told once per file
    on_damaged: OnDamaged | None = field(default=None, compare=False, repr=False)
    _damaged: dict[str, BadInput] = field(default_factory=dict, compare=False, repr=False)

    @property
    def status(self) -> str:
        """The recorded status; a 'running' run whose pglab is gone was interrupted."""
        status = self.manifest.status or "unknown"
        if status == "running" and not _alive(self.manifest.pid):
            return "interrupted"
        return status

    @property
    def reason(self) -> str | None:
        if self.manifest.status == "running" and self.status == "interrupted":
            return "pglab stopped without finishing (killed?)"
        return str(self.manifest.reason) if self.manifest.reason else None

    def file(self, name: str) -> Path:
        """One of the folder's files, by its name in `results.files`."""
        return self.path / name

    def client_series(self) -> pl.DataFrame | None:
        return self.parquet(files.CLIENT)

    def parquet(self, name: str) -> pl.DataFrame | None:
        """One of the folder's Parquet files (`files.read_parquet`), or None if it has
        none, or if it is damaged and `on_damaged` took the error."""
        return self._optional(name, lambda: files.read_parquet(self.path / name))

    def analysis(self) -> AnalysisDocument | None:
        """See `read_analysis`: None if not analysed (or damaged and `on_damaged` took
        the error), BadInput if unreadable."""
        return self._optional(files.ANALYSIS, lambda: read_analysis(self.path))

    def _optional(self, name: str, read: Callable[[], _T]) -> _T | None:
        if name in self._damaged:
            return None
        try:
            return read()
        except BadInput as exc:
            if self.on_damaged is None:
                raise
            self._damaged[name] = exc
            self.on_damaged(exc)
            return None

    @property
    def damaged(self) -> list[str]:
        """The optional files found damaged so far, each as its one-line error."""
        return [str(exc) for exc in self._damaged.values()]


def _alive(pid: Any) -> bool:
    return isinstance(pid, int) and psutil.pid_exists(pid)


def load_run(path: Path, on_damaged: OnDamaged | None = None) -> StoredRun:
    """A run folder; BadInput if `path` is not one (see read_manifest). `on_damaged`: see
    StoredRun."""
    return StoredRun(path, read_manifest(path), on_damaged)


def is_run_folder(path: Path) -> bool:
    return (path / files.MANIFEST).is_file()


def find_runs(root: Path) -> Iterator[Path]:
    """Run folders below `root` (any depth), sorted by path (run ids sort by time)."""
    if is_run_folder(root):
        yield root
        return
    for manifest in sorted(root.rglob(files.MANIFEST)):
        if files.RAW not in manifest.parent.parts[len(root.parts):]:
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
        started = str(run.manifest.started_at or "")
        return not (
            (self.scenario and not fnmatch.fnmatchcase(run.manifest.scenario_name,
                                                       self.scenario))
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
    return files.iso(parsed.replace(tzinfo=dt.timezone.utc))
