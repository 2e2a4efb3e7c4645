"""The names inside a results folder, atomic writes, run ids and timestamps, and the one
reader of its Parquet files.

Every file is written to a temporary name in the same folder and renamed into place, so
a reader never sees half a file and an interrupted run leaves only whole files behind.
A file can still arrive damaged (a copy cut short, a disk's error, another tool's file
under the name): `read_parquet` turns that into one BadInput naming the file.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pglab.errors import BadInput, ExitCode, PglabError

if TYPE_CHECKING:  # loaded by the writers that need it: `pglab ls` does not
    import polars as pl

# One run folder, results/<scenario>/<run-id>/ (docs/RESULTS.md describes each file).
MANIFEST = "manifest.json"
SCENARIO = "scenario.toml"  # the scenario file as given (a dsn's password redacted)
CLIENT = "client.parquet"
TIMESERIES = "timeseries.parquet"
EVENTS = "events.parquet"
PROFILE = "profile.parquet"  # os.profile's on-CPU stacks, when the probe ran
ANALYSIS = "analysis.json"
REPORT = "report.html"
RAW = "raw"  # pgbench's own output and logs
SPOOL = "telemetry"  # incremental telemetry while a run is in progress (spool.py)
SPOOL_SAMPLES = "samples.csv"
SPOOL_EVENTS = "events.jsonl"
# Beside the run folders of one scenario, results/<scenario>/:
STUDY_SUFFIX = ".study.json"  # <study-id>.study.json: the runs of one sweep or matrix
STUDY_REPORT_SUFFIX = ".report.html"  # <study-id>.report.html: its study report
TUNE_SUFFIX = ".tune.json"  # <tune-id>.tune.json: what `pglab tune` measured


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def iso(t: dt.datetime | float | None) -> str | None:
    if t is None:
        return None
    if isinstance(t, float | int):
        t = dt.datetime.fromtimestamp(t, dt.timezone.utc)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(now: dt.datetime | None = None) -> str:
    """Sortable: UTC time to the second, then a short random suffix. Study and tune ids
    are made the same way, so every file of a results folder sorts by time."""
    now = now or utc_now()
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


def _cannot_write(path: Path, exc: OSError) -> PglabError:
    """One line for a file pglab cannot write: a path that cannot be one (no such folder,
    a folder of that name) is the user's to fix (exit 2), a full or read-only disk or a
    permission the machine's (exit 3)."""
    code = (ExitCode.BAD_INPUT if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR)
            else ExitCode.ENVIRONMENT)
    return PglabError(f"{path}: cannot write it ({exc.strerror or exc})", code)


def _atomic_write(path: Path, data: bytes) -> None:
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _cannot_write(path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: Any, indent: int | None = 2) -> None:
    """indent=None writes compact JSON: json's indenting encoder is pure Python and slow
    on large documents (an analysis of thousands of stalls)."""
    _atomic_write(path, (json.dumps(obj, indent=indent, default=str) + "\n").encode())


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


def read_parquet(path: Path) -> pl.DataFrame | None:
    """A run folder's Parquet file; None if there is none; BadInput naming the file if it
    is unreadable (torn, corrupt, not Parquet) or lacks a column its readers need
    (`schemas.REQUIRED_COLUMNS`, cast to their types)."""
    import polars as pl

    from pglab.results.schemas import REQUIRED_COLUMNS

    if not path.is_file():
        if path.exists():
            raise BadInput(f"{path}: not a file (expected {path.name} of a run folder)")
        return None
    try:
        frame = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"{path}: unreadable Parquet file (truncated or damaged?): "
                       f"{reason}") from None
    required = REQUIRED_COLUMNS.get(path.name, {})
    absent = [c for c in required if c not in frame.columns]
    if absent:
        raise BadInput(f"{path}: not a pglab {path.name} (no column {', '.join(absent)})")
    try:
        return frame.with_columns(pl.col(c).cast(t) for c, t in required.items())
    except pl.exceptions.PolarsError:
        wrong = [f"{c} is {frame.schema[c]}, expected {t}" for c, t in required.items()
                 if frame.schema[c] != t]
        raise BadInput(f"{path}: not a pglab {path.name} ({'; '.join(wrong)})") from None
