"""Rotated logs compressed by the real programs (gzip, bzip2, xz, zstd) read exactly like
the plain file, never as text."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SAMPLES, run_cli
from pglab.serverlog import parse_log_file

PLAIN = SAMPLES / "serverlog" / "pg18" / "postgresql.log"
PROGRAMS = {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstd": ".zst"}


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_a_compressed_log_reads_like_the_plain_one(program: str, tmp_path: Path) -> None:
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed")
    packed = tmp_path / f"postgresql.log{PROGRAMS[program]}"
    with packed.open("wb") as out:
        subprocess.run([program, "-c", str(PLAIN)], stdout=out, check=True)
    assert packed.read_bytes() != PLAIN.read_bytes()
    events, stats = parse_log_file(packed)
    plain_events, plain_stats = parse_log_file(PLAIN)
    assert (stats.format, stats.lines, stats.records, stats.skipped) == (
        plain_stats.format, plain_stats.lines, plain_stats.records, plain_stats.skipped)
    assert [(e.kind, e.t_start) for e in events] == [(e.kind, e.t_start)
                                                      for e in plain_events]
    assert len(events) > 0
    result = run_cli("logs", str(packed), "--json")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())  # the terminal may wrap the line
    assert f"{plain_stats.records:,} messages, 0 unreadable" in said
