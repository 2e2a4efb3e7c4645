"""The server log of an observed node: from a file, over SQL, or from a command.

`--log FILE` follows a file from its end (rotation: a new inode or a shorter file is read
from its start); `--log sql` asks the server (`pg_current_logfile`, `pg_ls_logdir`, then
`pg_read_binary_file` in chunks; following rotation: the rest of the old file first);
`--log "command:kubectl logs -f pod/pg-1"` reads a command's stdout. Every source hands
text to the same streaming parser (serverlog.LogTail); events carry the log's own times.
"""

from __future__ import annotations

import codecs
import contextlib
import datetime as dt
import os
import shlex
import shutil
import subprocess
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import psycopg

from pglab.errors import BadInput
from pglab.events import Event
from pglab.probes.base import Probe, ProbeContext, ProbeOutput
from pglab.processes import spawn
from pglab.serverlog import LinePrefix, LogTail

READ_LIMIT = 16 * 1024 * 1024  # per interval: a burst must not stall the host loop
SQL_CHUNK = 4 * 1024 * 1024


class LogSource(ABC):
    describe: str = ""
    problem: str | None = None  # a reason it stopped, said once

    def start(self, ctx: ProbeContext) -> None:  # noqa: B027 - optional hook
        pass

    @abstractmethod
    def read(self) -> str:
        """The text appended since the last call."""

    def stop(self) -> None:  # noqa: B027 - optional hook
        pass


class FileSource(LogSource):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.describe = str(path)
        try:
            with open(path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                self.offset = handle.tell()
                self.inode = os.fstat(handle.fileno()).st_ino
        except OSError as exc:
            raise BadInput(f"--log {path}: cannot read it ({exc.strerror})") from None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self) -> str:
        try:
            with open(self.path, "rb") as handle:
                info = os.fstat(handle.fileno())
                if info.st_ino != self.inode or info.st_size < self.offset:
                    self.inode, self.offset = info.st_ino, 0  # rotated or truncated
                handle.seek(self.offset)
                data = handle.read(READ_LIMIT)
        except OSError as exc:
            self.problem = f"{self.path}: {exc.strerror}"
            return ""
        self.offset += len(data)
        return self._decoder.decode(data)


class SqlSource(LogSource):
    """The current log file read over the node's own (read-only) connection."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.describe = "sql"
        self.current: str | None = None
        self.offset = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def start(self, ctx: ProbeContext) -> None:
        self.ctx = ctx
        conn = self._conn()
        self.current = self._current_file(conn)
        self.offset = self._size(conn, self.current) if self.current else 0

    def _conn(self) -> psycopg.Connection[Any]:
        conn, _caps = self.ctx.db.get(self.node)
        return conn  # type: ignore[no-any-return]

    @staticmethod
    def _current_file(conn: psycopg.Connection[Any]) -> str | None:
        row = conn.execute("SELECT coalesce(pg_current_logfile('jsonlog'), "
                           "pg_current_logfile('csvlog'), pg_current_logfile())").fetchone()
        return str(row[0]) if row and row[0] else None

    @staticmethod
    def _size(conn: psycopg.Connection[Any], path: str) -> int:
        row = conn.execute("SELECT size FROM pg_ls_logdir() WHERE name = %s",
                           [os.path.basename(path)]).fetchone()
        return int(row[0]) if row else 0

    def _chunk(self, conn: psycopg.Connection[Any], path: str, offset: int, limit: int) -> bytes:
        row = conn.execute("SELECT pg_read_binary_file(%s, %s, %s, true)",
                           [path, offset, limit]).fetchone()
        return bytes(row[0]) if row and row[0] is not None else b""

    def read(self) -> str:
        try:
            conn = self._conn()
            latest = self._current_file(conn)
            data = b""
            if latest is None:
                self.problem = "the server has no current log file (logging_collector off?)"
                return ""
            if self.current is not None and latest != self.current:
                size = self._size(conn, self.current)  # the rest of the rotated file
                while self.offset < size and len(data) < READ_LIMIT:
                    chunk = self._chunk(conn, self.current, self.offset, SQL_CHUNK)
                    if not chunk:
                        break
                    data += chunk
                    self.offset += len(chunk)
                self.current, self.offset = latest, 0
            self.current = latest
            while len(data) < READ_LIMIT:
                chunk = self._chunk(conn, latest, self.offset, SQL_CHUNK)
                data += chunk
                self.offset += len(chunk)
                if len(chunk) < SQL_CHUNK:
                    break
        except psycopg.Error as exc:
            self.problem = str(exc).strip().splitlines()[0] if str(exc).strip() else "error"
            return ""
        return self._decoder.decode(data)


class CommandSource(LogSource):
    """A command's stdout (`kubectl logs -f`, `journalctl -f`), read by a thread."""

    def __init__(self, command: str) -> None:
        try:
            self.argv = shlex.split(command)
        except ValueError as exc:
            raise BadInput(f"--log command:{command}: {exc}") from None
        if not self.argv:
            raise BadInput("--log command: needs a command, e.g. "
                           "'command:kubectl logs -f pod/pg-1'")
        if shutil.which(self.argv[0]) is None:
            raise BadInput(f"--log command:{command}: {self.argv[0]}: command not found")
        self.describe = f"command:{command}"
        self._buffer: list[bytes] = []
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def start(self, ctx: ProbeContext) -> None:
        self._proc = spawn(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        threading.Thread(target=self._pump, name="observe-log-command", daemon=True).start()

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in iter(self._proc.stdout.readline, b""):
            with self._lock:
                self._buffer.append(line)
        code = self._proc.wait()
        if code != 0:
            err = self._proc.stderr.read().decode("utf-8", "replace") if self._proc.stderr \
                else ""
            last = err.strip().splitlines()[-1] if err.strip() else "(no message)"
            self.problem = f"{self.argv[0]} exited with code {code}: {last}"

    def read(self) -> str:
        with self._lock:
            data, self._buffer = b"".join(self._buffer), []
        return self._decoder.decode(data)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=3)
            if self._proc.poll() is None:
                self._proc.kill()


def make_source(spec: str, node: str = "primary") -> LogSource:
    if spec == "sql":
        return SqlSource(node)
    if spec.startswith("command:"):
        return CommandSource(spec[len("command:"):])
    return FileSource(Path(spec))


class ObservedLog(Probe):
    name = "log.events"
    help = "the server log followed during the run (see `pglab logs`)"

    def __init__(
        self, source: LogSource, node: str = "primary", prefix: LinePrefix | None = None,
        fmt: str | None = None,
    ) -> None:
        self.source = source
        self.node = node
        self.tail = LogTail(node=node, fmt=fmt, prefix=prefix)
        self._said: str | None = None

    def start(self, ctx: ProbeContext) -> None:
        self.source.start(ctx)

    def sample(self, now: dt.datetime) -> ProbeOutput:
        text = self.source.read()
        out = ProbeOutput(events=self.tail.feed(text) if text else self.tail.flush())
        problem = self.source.problem
        if problem is not None and problem != self._said:
            self._said = problem
            out.events.append(Event(now, "probe-error", self.node, attrs={
                "probe": self.name, "log": self.source.describe, "error": problem}))
        return out

    def stop(self) -> ProbeOutput:
        out = self.sample(dt.datetime.now(dt.timezone.utc))
        out.events.extend(self.tail.close())
        self.source.stop()
        return out

    def summary(self) -> dict[str, Any]:
        stats = self.tail.stats
        return {"source": self.source.describe, "format": stats.format,
                **{k: v for k, v in vars(stats).items() if isinstance(v, int | str)},
                **({"unknown_severities": dict(stats.unknown_severities)}
                   if stats.unknown_severities else {})}
