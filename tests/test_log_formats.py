"""`pglab logs --format` / `pglab observe --log-format` (names from the format registry, a
bad one is one line listing them), and never silent: a file with messages but no events,
severities pglab does not know, the format detected or given, a syslog year assumed.
Files are the committed samples or variants made from them here; `pglab` runs in this
process (main(), as the console script does). No server needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import SAMPLES
from pglab.cli import _LOG_FORMATS, main
from pglab.serverlog import FORMATS, parse_log_file

PG18 = SAMPLES / "serverlog" / "pg18"
SYSLOG = SAMPLES / "serverlog" / "syslog" / "postgresql.syslog"
ACCEPTED = "stderr, csvlog, jsonlog, syslog, heroku, cloudlogging"


def pglab(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(args))
    captured = capsys.readouterr()
    return int(ended.value.code or 0), captured.out, captured.err


def test_the_format_names_are_the_registrys(capsys: pytest.CaptureFixture[str]) -> None:
    assert _LOG_FORMATS == ", ".join(FORMATS) == ACCEPTED
    for command in (["logs", "--help"], ["observe", "--help"]):
        code, out, _ = pglab(capsys, *command)
        assert code == 0 and ACCEPTED in " ".join(out.split())


def test_a_bad_format_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = pglab(capsys, "logs", "--format", "eventlog", str(SYSLOG))
    assert (code, out) == (2, "")
    assert err == f"pglab: --format 'eventlog': not a log format pglab reads; one of {ACCEPTED}\n"
    code, _, err = pglab(capsys, "observe", "host=/nonexistent", "--log", str(SYSLOG),
                         "--log-format", "eventlog")
    assert code == 2
    assert err == ("pglab: --log-format 'eventlog': not a log format pglab reads; one of "
                   f"{ACCEPTED}\n")


def test_format_reads_what_detection_cannot(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A syslog file that begins with the server's own stderr lines (what it wrote
    before log_destination took effect, 60 of them): detection sees stderr."""
    stderr_lines = (PG18 / "postgresql.log").read_text().splitlines(keepends=True)[:60]
    mixed = tmp_path / "postgresql.log"
    mixed.write_text("".join(stderr_lines) + SYSLOG.read_text())
    _, detected = parse_log_file(mixed)
    assert detected.format == "stderr"
    events, given = parse_log_file(mixed, fmt="syslog")
    plain, _ = parse_log_file(SYSLOG)
    assert given.format_given and given.skipped == 60  # the stderr lines: not syslog's
    assert [(e.kind, e.attrs.get("pid")) for e in events] == [
        (e.kind, e.attrs.get("pid")) for e in plain]
    code, out, err = pglab(capsys, "logs", "--format", "syslog", str(mixed))
    assert code == 0 and f"{mixed}: syslog (given), " in err
    assert len(out.splitlines()) == 1 + len(plain)  # the header, then a row per event


def test_messages_but_no_events_say_so(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    quiet = tmp_path / "quiet.log"
    kept = [line for line in (PG18 / "postgresql.log").read_text().splitlines(keepends=True)
            if re.search(r"LOG:  (listening on|shutting down|invalid record length)", line)]
    quiet.write_text("".join(kept))
    code, out, err = pglab(capsys, "logs", str(quiet))
    assert code == 0 and out.splitlines()[1:] == []
    assert (f"{quiet}: {len(kept)} messages, but no event: none is a checkpoint, autovacuum, "
            "lock wait, slow statement, temp file or error") in err
    assert len(kept) == 3


@pytest.mark.parametrize("name", ["postgresql.csv", "postgresql.json"])
def test_unknown_severities_are_counted_and_said(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A server with lc_messages = 'de_DE' writes FEHLER for ERROR."""
    text = (PG18 / name).read_text()
    german = text.replace(",ERROR,", ",FEHLER,").replace('"ERROR"', '"FEHLER"')
    errors = len(re.findall(r',ERROR,|"error_severity":"ERROR"', text))
    assert errors == 3 and german != text
    log = tmp_path / name
    log.write_text(german)
    events, stats = parse_log_file(log)
    assert stats.unknown_severities == {"FEHLER": errors}
    # the events of those messages (an error, a deadlock, a cancelled autovacuum) are
    # the ones missing
    original, _ = parse_log_file(PG18 / name)
    lost = [e for e in original if e.kind == "deadlock" or e.attrs.get("severity") == "ERROR"]
    assert len(lost) == errors and len(events) == len(original) - errors
    _, _, err = pglab(capsys, "logs", str(log))
    assert (f"{log}: 3 messages with severities pglab does not know: FEHLER (3); it reads "
            "logs written with lc_messages = 'C' (English)") in err


def test_what_was_detected_and_assumed_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = pglab(capsys, "logs", str(SYSLOG))
    assert code == 0
    assert f"{SYSLOG}: syslog (detected), log_line_prefix '%q%u@%d ' (guessed), " in err
    assert re.search(r"syslog times have no year and no zone: year \d{4} assumed \(the file's "
                     r"modification time, \w+ \d{4}\), times taken as UTC", err)
    assert err.splitlines()[-1].startswith("24 events from ")
    assert len(out.splitlines()) == 25


def test_the_docs_list_every_format() -> None:
    section = (Path(__file__).resolve().parent.parent / "docs" / "LOGS.md").read_text()
    assert [name for name in FORMATS if f"| `{name}` |" in section] == list(FORMATS)
