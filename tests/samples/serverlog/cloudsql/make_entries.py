"""A stderr log with Cloud SQL's log_line_prefix as a Google Cloud Logging export.

    python make_entries.py postgresql.log OUT_DIR

Built from Cloud Logging's documented LogEntry format
(https://cloud.google.com/logging/docs/reference/v2/rest/v2/LogEntry) and the names
Cloud SQL for PostgreSQL's logs carry (log `cloudsql.googleapis.com/postgres.log`,
resource `cloudsql_database` with the labels `database_id`, `project_id`, `region`),
not by Google's service. One entry per line of the log, the line in `textPayload`
(without its newline); `timestamp` is the line's own time (a tab-indented continuation
line has the time of its message), `receiveTimestamp` 40 ms later, `severity` the
LogSeverity of PostgreSQL's (LOG -> INFO, ERROR -> ERROR, ...; DETAIL lines that of
their message), `insertId` a fixed-width counter. Writes:

- `postgres.ndjson`: one entry per line, oldest first, as a log sink writes its files;
- `gcloud-read.json`: a JSON array, indented, newest first, as `gcloud logging read
  --format=json` prints one.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timedelta
from pathlib import Path

PROJECT = "pglab-sample"
INSTANCE = "orders-db"
LOG_NAME = f"projects/{PROJECT}/logs/cloudsql.googleapis.com%2Fpostgres.log"
RESOURCE = {"type": "cloudsql_database",
            "labels": {"database_id": f"{PROJECT}:{INSTANCE}", "project_id": PROJECT,
                       "region": "europe-west1"}}
SEVERITY = {"LOG": "INFO", "INFO": "INFO", "NOTICE": "NOTICE", "WARNING": "WARNING",
            "ERROR": "ERROR", "FATAL": "CRITICAL", "PANIC": "ALERT"}
_HEAD_RE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) UTC \[\d+\]: \[\d+-1\] "
                      r"db=[^,]*,user=\S* (\w+):  ")


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def entries(log: Path) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    t = datetime(1970, 1, 1)
    severity = "DEFAULT"
    for line in log.read_text().splitlines():
        m = _HEAD_RE.match(line)
        if m is not None:
            t = datetime.fromisoformat(m.group(1))
            if m.group(2) in SEVERITY:
                severity = SEVERITY[m.group(2)]
        out.append({
            "insertId": f"s{len(out):08d}",
            "logName": LOG_NAME,
            "receiveTimestamp": rfc3339(t + timedelta(milliseconds=40)),
            "resource": RESOURCE,
            "severity": severity,
            "textPayload": line,
            "timestamp": rfc3339(t),
        })
    return out


def main() -> None:
    log, out = Path(sys.argv[1]), Path(sys.argv[2])
    made = entries(log)
    (out / "postgres.ndjson").write_text(
        "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in made))
    (out / "gcloud-read.json").write_text(json.dumps(made[::-1], indent=2) + "\n")


if __name__ == "__main__":
    main()
