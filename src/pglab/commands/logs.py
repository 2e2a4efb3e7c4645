"""`pglab logs`: the events of any PostgreSQL log."""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any

from pglab.commands.console import err
from pglab.errors import ExitCode, PglabError
from pglab.events import Event, attrs_summary
from pglab.results.files import iso
from pglab.serverlog import (
    EVENT_KINDS,
    FORMATS,
    DamagedLog,
    LinePrefix,
    ParseStats,
    compile_prefix,
    iter_event_batches,
    read_records,
)
from pglab.serverlog.decoders import LINE_FORMATS, STAMPED_FORMATS
from pglab.serverlog.reader import compression, sniff_format

# The attributes worth a glance, per event kind; others are in --json.
_LOG_KEYS = {
    "checkpoint": ("flags", "buffers", "buffers_pct", "wal_added", "write_s", "sync_s",
                   "total_s", "distance_kb"),
    "autovacuum": ("table", "pages_removed", "tuples_removed", "read_rate_mbs",
                   "write_rate_mbs", "elapsed_s"),
    "autoanalyze": ("table", "elapsed_s"),
    "lock-wait": ("pid", "user", "database", "lock_mode", "lock_object", "relation",
                  "holders", "waited_ms"),
    "slow-statement": ("duration_ms", "user", "database", "statement"),
    "temp-file": ("size_bytes", "path"),
    "crash": ("pid", "process", "signal", "exit_code"),
}


def _event_line(attrs: dict[str, Any], kind: str) -> str:
    return attrs_summary(attrs, _LOG_KEYS.get(kind) or tuple(attrs)[:6])


def line_prefix(text: str | None, option: str = "--prefix",
                need_time: bool = True) -> LinePrefix | None:
    """The compiled --prefix, or a one-line BadInput error saying what is expected.
    need_time=False for the formats whose records carry a time of their own
    (STAMPED_FORMATS: syslog, heroku, cloudlogging)."""
    if text is None:
        return None
    try:
        return compile_prefix(text, need_time)
    except ValueError as exc:
        raise PglabError(f"{option}: {exc}", ExitCode.BAD_INPUT) from None


def log_format(name: str | None, option: str = "--format") -> str | None:
    """--format checked against the format registry: one line listing them when not."""
    if name is not None and name not in FORMATS:
        raise PglabError(f"{option} {name!r}: not a log format pglab reads; one of "
                         f"{', '.join(FORMATS)}", ExitCode.BAD_INPUT)
    return name


def event_kinds(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """--kind checked against the kinds the rules make: one line listing them when not
    (a misspelt kind would otherwise print no event and look like a quiet log)."""
    unknown = [kind for kind in kinds if kind not in EVENT_KINDS]
    if unknown:
        raise PglabError(f"--kind {unknown[0]!r}: not a kind of event pglab makes; one of "
                         f"{', '.join(EVENT_KINDS)}", ExitCode.BAD_INPUT)
    return kinds


def _describe(stat: ParseStats) -> str:
    """The format and how it was chosen, and for stderr lines the log_line_prefix read
    with and how that was chosen."""
    how = "given" if stat.format_given else "detected"
    text = f"{stat.format} ({how})"
    if stat.format not in LINE_FORMATS:
        return text
    if stat.prefix is None:
        found = "pid" if stat.time_source else "time and pid"
        return (text + f", log_line_prefix not recognised: {found} found heuristically"
                + (f", times from {stat.time_source}" if stat.time_source else ""))
    how = "guessed" if stat.prefix_guessed else "given"
    text = f"{text}, log_line_prefix {stat.prefix!r} ({how})"
    return text + (f", times from {stat.time_source}" if stat.time_source else "")


# how many messages of a file without events are counted (read again, all of them)
_RECOUNT_MESSAGES = 20_000


def _warnings(path: Path, stat: ParseStats, events: int, prefix: LinePrefix | None) -> list[str]:
    """What a person must know about a file to trust its events: never silent."""
    out: list[str] = []
    if not stat.lines:
        out.append(f"{path}: empty: no line to read events from")
    elif not events:
        out.append(_no_events(path, stat, prefix))
    if stat.unknown_severities:
        words = ", ".join(f"{w} ({n:,})" for w, n in sorted(
            stat.unknown_severities.items(), key=lambda item: -item[1]))
        total = sum(stat.unknown_severities.values())
        out.append(f"{path}: {total:,} messages with severities pglab does not know: "
                   f"{words}; it reads logs written with lc_messages = 'C' (English)")
    if stat.assumed:
        out.append(f"{path}: {stat.assumed}")
    return out


def _no_events(path: Path, stat: ParseStats, prefix: LinePrefix | None) -> str:
    """Why a file with lines gave no event: no message read at all (the format or the
    prefix), or messages of none of the kinds pglab makes events of."""
    records, _stats = read_records(path, stat.format if stat.format_given else None,
                                   prefix=prefix)
    messages = sum(1 for _ in islice(records, _RECOUNT_MESSAGES))
    if messages:
        more = "" if messages < _RECOUNT_MESSAGES else " or more"
        return (f"{path}: {messages:,}{more} messages, but no event: none is a checkpoint, "
                "autovacuum, lock wait, slow statement, temp file or error (the server "
                "logs them with log_checkpoints, log_autovacuum_min_duration, "
                "log_lock_waits, log_min_duration_statement, log_temp_files)")
    if stat.other_loggers and not stat.skipped:
        return (f"{path}: {stat.lines:,} lines, but no PostgreSQL message: "
                f"{stat.other_loggers:,} are other programs' or loggers' (another program in "
                "a syslog file, CloudNativePG's instance manager, Cloud Logging entries "
                "without a textPayload)")
    if stat.format in LINE_FORMATS and stat.prefix is not None and not stat.prefix_guessed:
        return (f"{path}: {stat.lines:,} lines, but none read with --prefix "
                f"{stat.prefix!r}; check it against the server's log_line_prefix "
                "(SHOW log_line_prefix)")
    if stat.format in LINE_FORMATS:
        return (f"{path}: {stat.lines:,} lines, but no message with a recognised "
                "log_line_prefix; try --prefix with the server's log_line_prefix "
                "(SHOW log_line_prefix), e.g. --prefix '%t:%r:%u@%d:[%p]:', or --format "
                f"({', '.join(FORMATS)})")
    if stat.format_given:
        return (f"{path}: {stat.lines:,} lines, but no {stat.format} record that pglab "
                f"reads events from; is it {stat.format}? (without --format it is read "
                f"as {sniff_format(path)})")
    return (f"{path}: {stat.lines:,} lines, but no {stat.format} record that pglab "
            f"reads events from; if it is not {stat.format}, give --format "
            f"({', '.join(FORMATS)})")


def _check_files(files: tuple[Path, ...], fmt: str | None,
                 prefix: LinePrefix | None) -> None:
    """Every file readable (zstd needs its program), and a --prefix without a time
    only for syslog files: each problem one line, before anything is printed."""
    for path in files:
        if path.is_dir():
            raise PglabError(f"{path}: a directory, not a log file; give the log files in "
                             f"it (e.g. {path / '*.log'})", ExitCode.BAD_INPUT)
        if not path.exists():
            raise PglabError(f"{path}: no such log file", ExitCode.BAD_INPUT)
        if not path.is_file():
            raise PglabError(f"{path}: not a regular file (a device, socket or pipe); "
                             "give a log file", ExitCode.BAD_INPUT)
        try:
            with path.open("rb") as handle:
                packed = compression(handle.read(6))
        except OSError as exc:
            raise PglabError(f"{path}: cannot read it ({exc.strerror})",
                             ExitCode.BAD_INPUT) from None
        if packed == "zstd" and shutil.which("zstd") is None:
            raise PglabError(f"{path}: zstd-compressed, and the zstd program is not "
                             "installed (apt-get install zstd, or decompress it first)",
                             ExitCode.ENVIRONMENT)
        if prefix is not None and not prefix.has_time:
            try:
                found = fmt or sniff_format(path)
            except DamagedLog as exc:
                raise PglabError(str(exc), ExitCode.BAD_INPUT) from None
            if found not in STAMPED_FORMATS:
                raise PglabError(
                    f"--prefix: {prefix.text!r} has no time escape: pglab needs %m, %t or "
                    f"%n in the prefix to place {path}'s {found} messages in time (only "
                    f"{', '.join(STAMPED_FORMATS)} records carry a time of their own)",
                    ExitCode.BAD_INPUT)


def _row(event: Event) -> str:
    start = event.t_start.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    duration = (f"{(event.t_end - event.t_start).total_seconds():.3f}s"
                if event.t_end else "")
    details = _event_line(event.attrs, event.kind)
    if "\n" in details or "\t" in details:  # one row per event, whatever the SQL
        details = " ".join(details.split())
    return f"{start}  {duration:>10}  {event.kind:<23} {details}\n"


def _json_row(event: Event) -> str:
    return json.dumps({"t_start": iso(event.t_start), "t_end": iso(event.t_end),
                       "node": event.node, "kind": event.kind, "attrs": event.attrs},
                      default=str) + "\n"


def logs(files: tuple[Path, ...], as_json: bool, kinds: tuple[str, ...],
         prefix: str | None = None, fmt: str | None = None) -> int:
    """Rows are written as events come (memory stays flat whatever the log's size); the
    summary follows on stderr: per file what was read, then events per kind."""
    fmt = log_format(fmt)
    kinds = event_kinds(kinds)
    compiled = line_prefix(prefix, need_time=False)
    _check_files(files, fmt, compiled)
    stats: list[ParseStats] = []
    per_kind: Counter[str] = Counter()
    per_file = [0] * len(files)
    first: datetime | None = None
    last: datetime | None = None
    row = _json_row if as_json else _row
    write = sys.stdout.write
    if not as_json:
        write(f"{'start (UTC)':23}  {'duration':>10}  {'kind':<23} details\n")
    try:
        for batch in iter_event_batches(list(files), fmt=fmt, stats=stats, prefix=compiled):
            if not batch:
                continue
            per_file[max(len(stats) - 1, 0)] += len(batch)
            per_kind.update(e.kind for e in batch)
            shown = [e for e in batch if e.kind in kinds] if kinds else batch
            if shown:
                write("".join(map(row, shown)))
                # a slow statement starts before the messages logged ahead of it
                low = min(e.t_start for e in shown)
                high = max(e.t_start for e in shown)
                first = low if first is None else min(first, low)
                last = high if last is None else max(last, high)
    except DamagedLog as exc:
        sys.stdout.flush()  # the events before the damage stay printed
        raise PglabError(str(exc), ExitCode.BAD_INPUT) from None
    sys.stdout.flush()
    for path, stat, found in zip(files, stats, per_file, strict=True):
        others = (f", {stat.other_loggers:,} lines of other programs or loggers"
                  if stat.other_loggers else "")
        err.print(f"{path}: {_describe(stat)}, {stat.lines:,} lines, "
                  f"{stat.records:,} messages, {stat.skipped:,} unreadable{others}, "
                  f"{_events(found)}", highlight=False, soft_wrap=True)
        for warning in _warnings(path, stat, found, compiled):
            err.print(warning, highlight=False, soft_wrap=True)
    total = sum(per_kind.values())
    shown_total = sum(per_kind[k] for k in kinds) if kinds else total
    by_kind = ", ".join(f"{kind} {count:,}" for kind, count in per_kind.most_common())
    span = f" from {first:%Y-%m-%d %H:%M:%S} to {last:%Y-%m-%d %H:%M:%S} UTC" \
        if first and last else ""
    err.print(_events(shown_total) + (f" of {total:,}" if kinds else "") + span
              + (f": {by_kind}" if by_kind else ""), highlight=False, soft_wrap=True)
    return ExitCode.OK


def _events(count: int) -> str:
    return f"{count:,} event" + ("" if count == 1 else "s")
