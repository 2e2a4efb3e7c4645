"""`pglab logs` over damaged variants of every committed server-log sample, and every
sample read as every format: never a traceback, never an interruption's exit code,
never silence. A variant is the file cut at a third, 64 bytes in its middle replaced by
seeded random bytes, or its lines in reverse order; each is read as detected, then with
each --format forced. Exit 0 must come with the file's summary line and, when no event
came out, a line saying why; exit 2 with one line naming the file. No server needed."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import pytest

from conftest import SAMPLES
from pglab.cli import main
from pglab.serverlog import FORMATS

SAMPLE_FILES = sorted(
    p for p in (SAMPLES / "serverlog").rglob("*")
    if p.is_file() and p.suffix in (".log", ".csv", ".json", ".ndjson", ".gz", ".syslog"))


def variants(path: Path, tmp_path: Path) -> list[Path]:
    data = path.read_bytes()
    rng = random.Random(zlib.crc32(path.name.encode()))
    middle = len(data) // 2
    made = {
        "cut": data[: len(data) // 3],
        "garbled": data[:middle] + rng.randbytes(64) + data[middle + 64:],
    }
    if not path.name.endswith(".gz"):
        made["reversed"] = b"".join(reversed(data.splitlines(keepends=True)))
    out = []
    for name, content in made.items():
        variant = tmp_path / f"{name}-{path.name}"
        variant.write_bytes(content)
        out.append(variant)
    return out


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ended:
        main(["logs", *args])
    return int(ended.value.code or 0), capsys.readouterr().err


def check(code: int, err: str, path: Path) -> None:
    assert "Traceback" not in err
    if code == 2:
        assert err.startswith(f"pglab: {path}: ") and len(err.splitlines()) == 1, err
        return
    assert code == 0, err
    said = " ".join(err.split())
    assert f"{path}: " in said
    if said.endswith(" 0 events"):
        # the summary, then why no event came out
        assert len([line for line in err.splitlines() if line.startswith(str(path))]) >= 2


@pytest.mark.parametrize("sample", SAMPLE_FILES,
                         ids=[p.relative_to(SAMPLES).as_posix() for p in SAMPLE_FILES])
def test_damaged_and_misread_samples(sample: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    for path in [sample, *variants(sample, tmp_path)]:
        check(*run(capsys, str(path)), path)
        for fmt in FORMATS:
            check(*run(capsys, "--format", fmt, str(path)), path)
