"""`pglab logs`: the events of any PostgreSQL log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from pglab.commands.console import err, out
from pglab.errors import ExitCode, PglabError
from pglab.events import attrs_summary
from pglab.results.files import iso
from pglab.serverlog import LinePrefix, ParseStats, compile_prefix, parse_log_files
from pglab.serverlog.reader import compression

# The attributes worth a glance, per event kind; others are in --json.
_LOG_KEYS = {
    "checkpoint": ("flags", "buffers", "buffers_pct", "wal_added", "write_s", "sync_s",
                   "total_s", "distance_kb"),
    "autovacuum": ("table", "pages_removed", "tuples_removed", "read_rate_mbs",
                   "write_rate_mbs", "elapsed_s"),
    "autoanalyze": ("table", "elapsed_s"),
    "lock-wait": ("pid", "user", "database", "lock_mode", "lock_object", "holders",
                  "waited_ms"),
    "slow-statement": ("duration_ms", "user", "database", "statement"),
    "temp-file": ("size_bytes", "path"),
    "crash": ("pid", "process", "signal", "exit_code"),
}


def _event_line(attrs: dict[str, Any], kind: str) -> str:
    return attrs_summary(attrs, _LOG_KEYS.get(kind) or tuple(attrs)[:6])


def line_prefix(text: str | None, option: str = "--prefix") -> LinePrefix | None:
    """The compiled --prefix, or a one-line BadInput error saying what is expected."""
    if text is None:
        return None
    try:
        return compile_prefix(text)
    except ValueError as exc:
        raise PglabError(f"{option}: {exc}", ExitCode.BAD_INPUT) from None


def _describe(stat: ParseStats) -> str:
    """The format, and for stderr the log_line_prefix read with and how it was chosen."""
    if stat.format != "stderr":
        return stat.format
    if stat.prefix is None:
        return "stderr (log_line_prefix not recognised: time and pid found heuristically)"
    how = "guessed" if stat.prefix_guessed else "given"
    return f"stderr, log_line_prefix {stat.prefix!r} ({how})"


def _unread_warning(path: Path, stat: ParseStats) -> str | None:
    """One line when a file has lines but pglab read no message from it: never silent."""
    if stat.lines == 0 or stat.records > 0:
        return None
    if stat.format == "stderr" and stat.prefix is not None and not stat.prefix_guessed:
        return (f"{path}: {stat.lines:,} lines, but none read with --prefix "
                f"{stat.prefix!r}; check it against the server's log_line_prefix "
                "(SHOW log_line_prefix)")
    if stat.format == "stderr":
        return (f"{path}: {stat.lines:,} lines, but no message with a recognised "
                "log_line_prefix; try --prefix with the server's log_line_prefix "
                "(SHOW log_line_prefix), e.g. --prefix '%t:%r:%u@%d:[%p]:'")
    return (f"{path}: {stat.lines:,} lines, but no {stat.format} record that pglab "
            "reads events from")


def logs(files: tuple[Path, ...], as_json: bool, kinds: tuple[str, ...],
         prefix: str | None = None) -> int:
    compiled = line_prefix(prefix)
    for path in files:
        if not path.is_file():
            raise PglabError(f"{path}: no such log file", ExitCode.BAD_INPUT)
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
    events, stats = parse_log_files(list(files), prefix=compiled)
    shown = [e for e in events if not kinds or e.kind in kinds]
    if as_json:
        for event in shown:
            click.echo(json.dumps({"t_start": iso(event.t_start), "t_end": iso(event.t_end),
                                   "node": event.node, "kind": event.kind,
                                   "attrs": event.attrs}, default=str))
    else:
        table = Table(header_style="bold", box=None)
        for column in ("start (UTC)", "duration", "kind", "details"):
            table.add_column(column, overflow="fold")
        for event in shown:
            duration = (f"{(event.t_end - event.t_start).total_seconds():.3f}s"
                        if event.t_end else "")
            table.add_row(event.t_start.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3], duration,
                          event.kind, _event_line(event.attrs, event.kind))
        out.print(table)
    for path, stat in zip(files, stats, strict=True):
        others = (f", {stat.other_loggers:,} lines of other CloudNativePG loggers"
                  if stat.other_loggers else "")
        err.print(f"{path}: {_describe(stat)}, {stat.lines:,} lines, "
                  f"{stat.records:,} messages, {stat.skipped:,} unreadable{others}",
                  highlight=False, soft_wrap=True)
        warning = _unread_warning(path, stat)
        if warning is not None:
            err.print(warning, highlight=False, soft_wrap=True)
    err.print(f"{len(shown)} events" + (f" of {len(events)}" if kinds else ""))
    return ExitCode.OK
