"""Pure parsers for what pgbench prints during a load: `-P` progress lines, the summary.

Checked against real pgbench 15 and 18 output (tests/samples/pgbench/). The parsers never
raise on odd input: lines they do not recognise are ignored and missing values are None.
pgbench must run with LC_ALL=C (decimal points, English messages).

Differences between versions that matter here:
- The summary's per-script block: pgbench 15 prints `- N transactions (P% of total, tps = X)`
  where N counts successful transactions; pgbench 18 prints `- N transactions (P% of total)`
  with N including failures, then `- number of transactions actually processed: M (tps = X)`.
  `ScriptSummary.transactions` is the successful count in both (`transactions_total` keeps
  pgbench 18's N).
- Statement latency lines (-r) have one space before the statement text in 18, two in 15;
  the columns (latency, failures[, retries]) are named by the header line.
- `latency average = X ms (including failures)` when transactions failed.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from pglab.units import NUMBER, finite_float

_NUM = NUMBER
_NUM_OR_NAN = rf"(?:{_NUM}|[-+]?nan|[-+]?inf)"


_float = finite_float


# --- progress (-P) ----------------------------------------------------------------------


@dataclass(frozen=True)
class ProgressLine:
    """One `progress:` line of `pgbench -P N` (stderr).

    pgbench prints `lat 0.000 ms stddev 0.000` (older versions NaN) for an interval in which
    no transaction completed; those are reported as None, as is lag then.
    """

    t: float  # epoch seconds with --progress-timestamp, else elapsed seconds
    tps: float
    lat_ms: float | None
    stddev_ms: float | None
    failed: int
    lag_ms: float | None
    skipped: int
    retried: int
    retries: int


_PROGRESS_HEAD = re.compile(rf"^progress: ({_NUM}) s, ({_NUM_OR_NAN}) tps(.*)$")
_PROGRESS_LAT = re.compile(rf"^lat ({_NUM_OR_NAN}) ms stddev ({_NUM_OR_NAN})(?: ms)?$")
_PROGRESS_LAG = re.compile(rf"^lag ({_NUM_OR_NAN}) ms$")
_PROGRESS_COUNT = re.compile(r"^(\d+) (failed|skipped|retried|retries)$")


def parse_progress_line(line: str) -> ProgressLine | None:
    """Parse one progress line; None for any other line."""
    head = _PROGRESS_HEAD.match(line.strip())
    if head is None:
        return None
    t = _float(head.group(1))
    tps = _float(head.group(2))
    if t is None:
        return None
    lat: float | None = None
    stddev: float | None = None
    lag: float | None = None
    counts = {"failed": 0, "skipped": 0, "retried": 0, "retries": 0}
    for raw_part in head.group(3).split(","):
        part = raw_part.strip()
        if not part:
            continue
        if (m := _PROGRESS_LAT.match(part)) is not None:
            lat, stddev = _float(m.group(1)), _float(m.group(2))
        elif (m := _PROGRESS_LAG.match(part)) is not None:
            lag = _float(m.group(1))
        elif (m := _PROGRESS_COUNT.match(part)) is not None:
            counts[m.group(2)] = int(m.group(1))
    if not tps:  # nothing completed: pgbench prints zeros, not statistics
        tps = 0.0
        if not lat and not stddev:
            lat = stddev = None
        if not lag:
            lag = None
    return ProgressLine(
        t=t,
        tps=tps,
        lat_ms=lat,
        stddev_ms=stddev,
        failed=counts["failed"],
        lag_ms=lag,
        skipped=counts["skipped"],
        retried=counts["retried"],
        retries=counts["retries"],
    )


# --- summary (stdout) -------------------------------------------------------------------


@dataclass(frozen=True)
class StatementLatency:
    """One line of `-r` (--report-per-command) output."""

    latency_ms: float
    failures: int | None  # PG15+ prints failures (and retries when --max-tries != 1)
    retries: int | None
    statement: str


@dataclass(frozen=True)
class ScriptSummary:
    """One `SQL script N: name` block (printed when several scripts ran)."""

    name: str  # e.g. "<builtin: TPC-B (sort of)>" or the file name as given
    weight: int | None
    transactions: int | None  # successful transactions
    tps: float | None
    latency_avg_ms: float | None
    statements: list[StatementLatency]
    latency_stddev_ms: float | None = None
    transactions_total: int | None = None  # pgbench 18+: including failures
    failed: int | None = None
    serialization_failures: int | None = None
    deadlock_failures: int | None = None
    retried: int | None = None
    retries: int | None = None
    skipped: int | None = None


@dataclass(frozen=True)
class PgbenchSummary:
    """The summary pgbench prints on stdout at the end of a run."""

    transaction_type: str | None
    scaling_factor: int | None
    query_mode: str | None
    clients: int | None
    threads: int | None
    max_tries: int | None
    duration_s: float | None
    transactions: int | None  # "number of transactions actually processed"
    failed: int | None
    retried: int | None
    retries: int | None
    skipped: int | None
    latency_limit_ms: float | None
    above_limit: int | None  # "number of transactions above the X ms latency limit"
    latency_avg_ms: float | None
    latency_stddev_ms: float | None
    lag_avg_ms: float | None
    initial_connection_ms: float | None
    tps: float | None  # "tps = X (without initial connection time)"
    scripts: list[ScriptSummary]
    statements: list[StatementLatency]  # -r with a single script
    pgbench_version: str | None = None  # from "pgbench (15.18 ...)"
    server_version: str | None = None  # only printed when it differs from pgbench's
    partition_method: str | None = None
    partitions: int | None = None
    transactions_per_client: int | None = None  # -t
    transactions_expected: int | None = None  # "processed: N/M" with -t
    serialization_failures: int | None = None  # --failures-detailed
    deadlock_failures: int | None = None
    lag_max_ms: float | None = None
    latency_includes_failures: bool = False  # "latency average = X ms (including failures)"


# Lines shared by the top level and the per-script blocks (the latter prefixed " - ").
_COMMON: list[tuple[str, re.Pattern[str], str]] = [
    ("failed", re.compile(r"^number of failed transactions: (\d+)"), "int"),
    ("serialization_failures", re.compile(r"^number of serialization failures: (\d+)"), "int"),
    ("deadlock_failures", re.compile(r"^number of deadlock failures: (\d+)"), "int"),
    ("retried", re.compile(r"^number of transactions retried: (\d+)"), "int"),
    ("retries", re.compile(r"^total number of retries: (\d+)"), "int"),
    ("skipped", re.compile(r"^number of transactions skipped: (\d+)"), "int"),
    ("latency_avg_ms", re.compile(rf"^latency average\s*[=:]\s*({_NUM}) ms"), "float"),
    ("latency_stddev_ms", re.compile(rf"^latency stddev\s*[=:]\s*({_NUM}) ms"), "float"),
]

_TOP: list[tuple[str, re.Pattern[str], str]] = [
    ("transaction_type", re.compile(r"^transaction type: (.+)$"), "str"),
    ("scaling_factor", re.compile(r"^scaling factor: (\d+)$"), "int"),
    ("partition_method", re.compile(r"^partition method: (\S+)$"), "str"),
    ("partitions", re.compile(r"^partitions: (\d+)$"), "int"),
    ("query_mode", re.compile(r"^query mode: (\S+)$"), "str"),
    ("clients", re.compile(r"^number of clients: (\d+)$"), "int"),
    ("threads", re.compile(r"^number of threads: (\d+)$"), "int"),
    ("max_tries", re.compile(r"^maximum number of tries: (\d+)$"), "int"),
    ("transactions_per_client", re.compile(r"^number of transactions per client: (\d+)$"), "int"),
    ("duration_s", re.compile(rf"^duration: ({_NUM}) s$"), "float"),
    ("initial_connection_ms", re.compile(rf"^initial connection time = ({_NUM}) ms"), "float"),
    *_COMMON,
]

_PROCESSED = re.compile(r"^number of transactions actually processed: (\d+)(?:/(\d+))?")
_ABOVE = re.compile(
    rf"^number of transactions above the ({_NUM}) ms latency limit: (\d+)(?:/(\d+))?"
)
_LAG = re.compile(rf"^rate limit schedule lag: avg ({_NUM}) \(max ({_NUM})\) ms")
_TPS = re.compile(rf"^tps = ({_NUM}) \((without initial connection time|excluding .*)\)")
_TPS_OLD_INCLUDING = re.compile(rf"^tps = ({_NUM}) \(including ")
_VERSION = re.compile(r"^pgbench \((.+)\)$")
_SCRIPT = re.compile(r"^SQL script \d+: (.+)$")
_STATEMENTS = re.compile(r"^statement latencies in milliseconds(.*):$")
# pgbench 18: "- N transactions (P% of total)"; pgbench 15: "... of total, tps = X)"
_SCRIPT_TX = re.compile(rf"^(\d+) transactions \({_NUM}% of total(?:, tps = ({_NUM}))?\)$")
_SCRIPT_PROCESSED = re.compile(
    rf"^number of transactions actually processed: (\d+)(?: \(tps = ({_NUM})\))?"
)
_SCRIPT_WEIGHT = re.compile(r"^weight: (\d+)")


def _convert(kind: str, text: str) -> object:
    if kind == "int":
        return int(text)
    if kind == "float":
        return _float(text)
    return text.strip()


def _statement(line: str, ncols: int) -> StatementLatency | None:
    """`   0.123   0   0  SELECT ...` with `ncols` numeric columns; None if not one."""
    parts = line.split(None, ncols)
    if len(parts) != ncols + 1:
        return None
    latency = _float(parts[0]) if re.fullmatch(_NUM, parts[0]) else None
    if latency is None or not all(p.isdigit() for p in parts[1:ncols]):
        return None
    failures = int(parts[1]) if ncols >= 2 else None
    retries = int(parts[2]) if ncols >= 3 else None
    return StatementLatency(latency, failures, retries, parts[ncols].strip())


def _script(values: dict[str, object], statements: list[StatementLatency]) -> ScriptSummary:
    def get_int(key: str) -> int | None:
        value = values.get(key)
        return value if isinstance(value, int) else None

    def get_float(key: str) -> float | None:
        value = values.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    return ScriptSummary(
        name=str(values.get("name", "")),
        weight=get_int("weight"),
        transactions=get_int("transactions"),
        tps=get_float("tps"),
        latency_avg_ms=get_float("latency_avg_ms"),
        statements=statements,
        latency_stddev_ms=get_float("latency_stddev_ms"),
        transactions_total=get_int("transactions_total"),
        failed=get_int("failed"),
        serialization_failures=get_int("serialization_failures"),
        deadlock_failures=get_int("deadlock_failures"),
        retried=get_int("retried"),
        retries=get_int("retries"),
        skipped=get_int("skipped"),
    )


def parse_summary(text: str) -> PgbenchSummary:
    """Parse pgbench's stdout. Unknown lines are ignored; missing fields are None."""
    top: dict[str, object] = {}
    top_statements: list[StatementLatency] = []
    scripts: list[tuple[dict[str, object], list[StatementLatency]]] = []
    # Where statement lines currently go, and how many numeric columns they have.
    statements_to: list[StatementLatency] | None = None
    ncols = 1
    tps_including: float | None = None

    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if statements_to is not None:
            stmt = _statement(line, ncols)
            if stmt is not None:
                statements_to.append(stmt)
                continue
            statements_to = None
        in_script = line.startswith(" - ") and bool(scripts)
        body = line[3:] if in_script else line.strip()

        if (m := _STATEMENTS.match(body)) is not None:
            columns = m.group(1)
            ncols = 3 if "retries" in columns else 2 if "failures" in columns else 1
            statements_to = scripts[-1][1] if in_script else top_statements
            continue
        if in_script:
            values = scripts[-1][0]
            if (m := _SCRIPT_WEIGHT.match(body)) is not None:
                values["weight"] = int(m.group(1))
            elif (m := _SCRIPT_TX.match(body)) is not None:
                if m.group(2) is not None:  # pgbench <= 17: successful transactions and tps
                    values["transactions"] = int(m.group(1))
                    values["tps"] = _float(m.group(2))
                else:  # pgbench 18: all transactions, the successful ones follow
                    values["transactions_total"] = int(m.group(1))
            elif (m := _SCRIPT_PROCESSED.match(body)) is not None:
                values["transactions"] = int(m.group(1))
                if m.group(2) is not None:
                    values["tps"] = _float(m.group(2))
            else:
                for key, pattern, kind in _COMMON:
                    if (m := pattern.match(body)) is not None:
                        values[key] = _convert(kind, m.group(1))
                        break
            continue

        if (m := _SCRIPT.match(body)) is not None:
            scripts.append(({"name": m.group(1).strip()}, []))
        elif (m := _VERSION.match(body)) is not None:
            inner = m.group(1)
            if ", server " in inner:
                mine, server = inner.rsplit(", server ", 1)
                top["pgbench_version"], top["server_version"] = mine.strip(), server.strip()
            else:
                top["pgbench_version"] = inner.strip()
        elif (m := _PROCESSED.match(body)) is not None:
            top["transactions"] = int(m.group(1))
            if m.group(2) is not None:
                top["transactions_expected"] = int(m.group(2))
        elif (m := _ABOVE.match(body)) is not None:
            top["latency_limit_ms"] = _float(m.group(1))
            top["above_limit"] = int(m.group(2))
        elif (m := _LAG.match(body)) is not None:
            top["lag_avg_ms"] = _float(m.group(1))
            top["lag_max_ms"] = _float(m.group(2))
        elif (m := _TPS.match(body)) is not None:
            top["tps"] = _float(m.group(1))
        elif (m := _TPS_OLD_INCLUDING.match(body)) is not None:
            tps_including = _float(m.group(1))
        else:
            for key, pattern, kind in _TOP:
                if (m := pattern.match(body)) is not None:
                    top[key] = _convert(kind, m.group(1))
                    if key == "latency_avg_ms" and "(including failures)" in body:
                        top["latency_includes_failures"] = True
                    break

    if "tps" not in top and tps_including is not None:
        top["tps"] = tps_including

    def get_int(key: str) -> int | None:
        value = top.get(key)
        return value if isinstance(value, int) else None

    def get_float(key: str) -> float | None:
        value = top.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    def get_str(key: str) -> str | None:
        value = top.get(key)
        return value if isinstance(value, str) else None

    return PgbenchSummary(
        transaction_type=get_str("transaction_type"),
        scaling_factor=get_int("scaling_factor"),
        query_mode=get_str("query_mode"),
        clients=get_int("clients"),
        threads=get_int("threads"),
        max_tries=get_int("max_tries"),
        duration_s=get_float("duration_s"),
        transactions=get_int("transactions"),
        failed=get_int("failed"),
        retried=get_int("retried"),
        retries=get_int("retries"),
        skipped=get_int("skipped"),
        latency_limit_ms=get_float("latency_limit_ms"),
        above_limit=get_int("above_limit"),
        latency_avg_ms=get_float("latency_avg_ms"),
        latency_stddev_ms=get_float("latency_stddev_ms"),
        lag_avg_ms=get_float("lag_avg_ms"),
        initial_connection_ms=get_float("initial_connection_ms"),
        tps=get_float("tps"),
        scripts=[_script(values, stmts) for values, stmts in scripts],
        statements=top_statements,
        pgbench_version=get_str("pgbench_version"),
        server_version=get_str("server_version"),
        partition_method=get_str("partition_method"),
        partitions=get_int("partitions"),
        transactions_per_client=get_int("transactions_per_client"),
        transactions_expected=get_int("transactions_expected"),
        serialization_failures=get_int("serialization_failures"),
        deadlock_failures=get_int("deadlock_failures"),
        lag_max_ms=get_float("lag_max_ms"),
        latency_includes_failures=top.get("latency_includes_failures") is True,
    )


def summary_to_dict(s: PgbenchSummary) -> dict[str, object]:
    """A JSON-serialisable dict of the summary (for the run manifest)."""
    result: dict[str, object] = dataclasses.asdict(s)
    return result


__all__ = [
    "PgbenchSummary",
    "ProgressLine",
    "ScriptSummary",
    "StatementLatency",
    "parse_progress_line",
    "parse_summary",
    "summary_to_dict",
]
