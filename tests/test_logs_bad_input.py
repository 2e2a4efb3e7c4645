"""`pglab logs` on damaged or wrong input: a compressed log cut short or corrupt, a kind
of event that does not exist, a directory, an empty file, a file of other programs'
lines. Each is one line naming the file or value and what is expected (exit 2), or a
note that says why no event came out; never a traceback, never silence, never the
"aborted" of an interruption. Files are the committed samples, compressed and damaged
here by the real programs. No server needed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import SAMPLES
from pglab.cli import main
from pglab.serverlog import EVENT_KINDS, DamagedLog, parse_log_file

PLAIN = SAMPLES / "serverlog" / "pg18" / "postgresql.log"
CLOUDSQL = SAMPLES / "serverlog" / "pgbadger-fixtures" / "cloudsql.log.gz"
PROGRAMS = {"gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstd": ".zst"}


def pglab(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    captured = capsys.readouterr()
    return int(ended.value.code or 0), captured.out, captured.err


def compressed(program: str, tmp_path: Path) -> Path:
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed")
    packed = tmp_path / f"postgresql.log{PROGRAMS[program]}"
    with packed.open("wb") as out:
        subprocess.run([program, "-c", str(PLAIN)], stdout=out, check=True)
    return packed


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_a_compressed_log_cut_short_is_one_line(program: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    packed = compressed(program, tmp_path)
    data = packed.read_bytes()
    packed.write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedLog, match=f"^{packed}: its {program} data is cut short"):
        parse_log_file(packed)
    code, _, err = pglab(capsys, "logs", str(packed))
    assert code == 2 and "aborted" not in err
    assert err.startswith(f"pglab: {packed}: its {program} data is cut short")
    assert len(err.splitlines()) == 1


def test_a_real_gzipped_export_cut_short(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Cloud SQL's export as pgBadger ships it, cut in the middle as a copy that did
    not finish: the events before the cut are printed, then the one-line error."""
    cut = tmp_path / "cloudsql.log.gz"
    cut.write_bytes(CLOUDSQL.read_bytes()[:30000])
    code, out, err = pglab(capsys, "logs", str(cut))
    assert (code, err) == (2, f"pglab: {cut}: its gzip data is cut short (the file ends "
                              "before the end of the compressed stream)\n")
    assert len(out.splitlines()) > 1  # the header and the events read before the cut


def test_corrupt_compressed_data_is_one_line(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    packed = compressed("gzip", tmp_path)
    data = bytearray(packed.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(64)  # a block of zeros where the data was
    packed.write_bytes(bytes(data))
    code, _, err = pglab(capsys, "logs", str(packed))
    assert code == 2 and err.startswith(f"pglab: {packed}: its gzip data is damaged (")
    assert len(err.splitlines()) == 1


def test_an_unknown_kind_is_refused_with_the_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = pglab(capsys, "logs", "--kind", "checkpoint", "--kind", "bogus",
                           str(PLAIN))
    assert (code, out) == (2, "")
    assert err == (f"pglab: --kind 'bogus': not a kind of event pglab makes; one of "
                   f"{', '.join(EVENT_KINDS)}\n")
    code, out, err = pglab(capsys, "logs", "--kind", "checkpoint", str(PLAIN))
    assert code == 0 and out.splitlines()[1:] and all(
        "  checkpoint  " in line for line in out.splitlines()[1:])


def test_every_kind_made_is_a_kind_accepted() -> None:
    """The samples provoke every kind there is (make_samples.sh, and make_auto_explain.sh
    for auto_explain's plans): --kind accepts exactly what the rules make."""
    made = {e.kind for folder in ("pg15", "auto_explain/pg15")
            for name in ("postgresql.log", "postgresql.csv")
            for e in parse_log_file(SAMPLES / "serverlog" / folder / name)[0]}
    assert made == set(EVENT_KINDS)


def test_a_directory_is_not_a_missing_file(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = pglab(capsys, "logs", str(tmp_path))
    assert code == 2
    assert err == (f"pglab: {tmp_path}: a directory, not a log file; give the log files in "
                   f"it (e.g. {tmp_path / '*.log'})\n")
    code, _, err = pglab(capsys, "logs", str(tmp_path / "missing.log"))
    assert (code, err) == (2, f"pglab: {tmp_path / 'missing.log'}: no such log file\n")


def test_zero_events_always_say_why(tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("")
    code, _, err = pglab(capsys, "logs", str(empty))
    assert code == 0 and f"{empty}: empty: no line to read events from" in err
    # CloudNativePG's instance manager only: lines of another program, not PostgreSQL's
    manager = tmp_path / "manager.log"
    manager.write_text("".join(json.dumps(
        {"level": "info", "ts": 1669574894.5 + i, "logger": "instance-manager",
         "msg": "Checking for free disk space for WALs", "logging_pod": "pg-1"}) + "\n"
        for i in range(3)))
    code, _, err = pglab(capsys, "logs", str(manager))
    assert code == 0
    said = " ".join(err.split())
    assert f"{manager}: jsonlog (detected), 3 lines, 0 messages, 0 unreadable, 3 lines of " \
           "other programs or loggers, 0 events" in said
    assert (f"{manager}: 3 lines, but no PostgreSQL message: 3 are other programs' or "
            "loggers'") in said
