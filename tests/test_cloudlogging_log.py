"""Google Cloud Logging exports of Cloud SQL's server log (tests/samples/serverlog/cloudsql/:
a real PostgreSQL 18 stderr log with Cloud SQL's log_line_prefix, and the same lines
as LogEntry objects built by make_entries.py from the documented format): one entry per
line, and gcloud's JSON array (newest first), yield the plain log's events. Counts are
checked against the entries. No server needed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLES
from pglab.events import Event
from pglab.serverlog import LogTail, detect_format, parse_log_file, read_records

CLOUDSQL = SAMPLES / "serverlog" / "cloudsql"
PLAIN = CLOUDSQL / "postgresql.log"
NDJSON = CLOUDSQL / "postgres.ndjson"
ARRAY = CLOUDSQL / "gcloud-read.json"
_MESSAGE_RE = re.compile(r"\] db=[^,]*,user=\S* (LOG|ERROR|FATAL|WARNING):  ")


def key(events: list[Event]) -> list[tuple[str, object, object, object]]:
    return [(e.kind, e.t_start, e.attrs.get("pid"), e.attrs.get("user")) for e in events]


def payloads(path: Path) -> list[str]:
    return [json.loads(line)["textPayload"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("export", [NDJSON, ARRAY], ids=["ndjson", "gcloud-array"])
def test_an_export_reads_like_the_plain_log(export: Path) -> None:
    assert detect_format(export.read_bytes()[:4096]) == "cloudlogging"
    texts = payloads(NDJSON)
    assert texts == PLAIN.read_text().splitlines()  # one entry per line of the log
    records, stats = read_records(export)
    assert len(list(records)) == stats.records == sum(
        _MESSAGE_RE.search(t) is not None for t in texts) == 31
    assert (stats.format, stats.skipped, stats.other_loggers) == ("cloudlogging", 0, 0)
    assert stats.prefix == "%m [%p]: [%l-1] db=%d,user=%u " and stats.prefix_guessed
    events, _ = parse_log_file(export)
    plain, _ = parse_log_file(PLAIN)
    assert key(events) == key(plain) and len(events) == 21
    assert {e.attrs.get("database") for e in events if e.kind == "slow-statement"} == {"orders"}
    statement = next(e for e in events if e.kind == "slow-statement").attrs["statement"]
    assert statement == "SELECT count(*),\n\tsum(balance)\nFROM accounts\nWHERE id <= 100;"


def test_a_message_per_entry_and_other_logs(tmp_path: Path) -> None:
    """Entries holding a whole message (tab lines inside textPayload), and entries of
    other logs without a textPayload (an audit log), read with the rest counted."""
    entries = [json.loads(line) for line in NDJSON.read_text().splitlines()]
    merged: list[dict[str, Any]] = []
    for entry in entries:
        if str(entry["textPayload"]).startswith("\t") and merged:
            merged[-1]["textPayload"] = f"{merged[-1]['textPayload']}\n{entry['textPayload']}"
        else:
            merged.append(entry)
    assert len(merged) < len(entries)
    audit = {"insertId": "a1", "logName": "projects/p/logs/cloudaudit.googleapis.com%2Factivity",
             "protoPayload": {"methodName": "cloudsql.instances.update"},
             "timestamp": "2026-11-23T22:59:26Z"}
    merged.insert(5, audit)
    export = tmp_path / "merged.ndjson"
    export.write_text("".join(json.dumps(e) + "\n" for e in merged))
    events, stats = parse_log_file(export)
    assert stats.other_loggers == 1 and stats.skipped == 0
    assert key(events) == key(parse_log_file(PLAIN)[0])


def test_followed_in_pieces() -> None:
    text = NDJSON.read_text()
    tail = LogTail()
    events: list[Event] = []
    for start in range(0, len(text), 900):
        events += tail.feed(text[start:start + 900])
    events += tail.close()
    assert tail.stats.format == "cloudlogging"
    assert key(events) == key(parse_log_file(PLAIN)[0])
