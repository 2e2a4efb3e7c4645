"""Builds cloudnativepg.log: the real PostgreSQL 18 csvlog in ../pg18/postgresql.csv as
CloudNativePG writes a pod's stdout, from its documented format
(https://cloudnative-pg.io/documentation/current/logging): one JSON object per line,
`level`, `ts` (RFC 3339), `logger`, `msg`, `logging_pod` and, for PostgreSQL's own log,
`logger = "postgres"`, `msg = "record"` and the csvlog columns under `record`, every
value a string. Lines of the instance manager (other loggers) are interleaved, as
`kubectl logs` shows them.

    python tests/samples/serverlog/cloudnativepg/make_sample.py
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
COLUMNS = ("log_time", "user_name", "database_name", "process_id", "connection_from",
           "session_id", "session_line_num", "command_tag", "session_start_time",
           "virtual_transaction_id", "transaction_id", "error_severity", "sql_state_code",
           "message", "detail", "hint", "internal_query", "internal_query_pos", "context",
           "query", "query_pos", "location", "application_name", "backend_type",
           "leader_pid", "query_id")


def main() -> None:
    lines = []
    with open(HERE.parent / "pg18" / "postgresql.csv", newline="") as handle:
        for number, row in enumerate(csv.reader(handle)):
            record = {c: v for c, v in zip(COLUMNS, row, strict=True) if v != ""}
            if "session_start_time" in record:
                start = dt.datetime.strptime(record["session_start_time"] + "00",
                                             "%Y-%m-%d %H:%M:%S %z")
                record["session_start_time"] = (start.astimezone(dt.timezone.utc)
                                                .strftime("%Y-%m-%d %H:%M:%S UTC"))
            # CloudNativePG runs PostgreSQL with log_timezone UTC: the sample's +01 times
            # are written in UTC, as a pod's would be.
            stamp = dt.datetime.strptime(row[0] + "00", "%Y-%m-%d %H:%M:%S.%f %z")
            utc = stamp.astimezone(dt.timezone.utc)
            record["log_time"] = utc.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"
            ts = utc.isoformat().replace("+00:00", "Z")
            if number % 25 == 0:  # the instance manager talks too
                lines.append(json.dumps({
                    "level": "info", "ts": ts, "logger": "instance-manager",
                    "msg": "Checking for free disk space for WALs",
                    "logging_pod": "cluster-example-1",
                    "controller": "instance-cluster", "namespace": "default"},
                    separators=(",", ":")))
            lines.append(json.dumps({
                "level": "info", "ts": ts, "logger": "postgres", "msg": "record",
                "logging_pod": "cluster-example-1", "record": record},
                separators=(",", ":")))
    (HERE / "cloudnativepg.log").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
