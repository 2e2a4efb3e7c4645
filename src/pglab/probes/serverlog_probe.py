"""The server log as a probe: follows each node's log during the run, emits its events.

Events come out as their log lines arrive, so they reach events.jsonl during the run like
every other sample, and survive an interrupted run. Events carry the log's own times.
"""

from __future__ import annotations

import codecs
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from pglab.probes.base import Probe, ProbeContext, ProbeOutput
from pglab.serverlog import LogTail

# pglab's servers log to log/postgresql.json (jsonlog, 15+) or log/postgresql.csv.
LOG_FILES = ("postgresql.json", "postgresql.csv")
READ_LIMIT = 64 * 1024 * 1024  # per node and interval: a burst must not stall the sampler


@dataclass
class _Followed:
    node: str
    log_dir: Path
    tail: LogTail
    path: Path | None = None
    offset: int = 0
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))


class ServerLogEvents(Probe):
    name = "log.events"
    help = ("server log followed during the run: checkpoints, autovacuum, lock waits, "
            "deadlocks, temp files, slow statements, crashes, recovery (see `pglab logs`)")

    def start(self, ctx: ProbeContext) -> None:
        self._nodes = [_Followed(n.name, n.log_dir, LogTail(node=n.name))
                       for n in ctx.nodes if n.log_dir is not None]

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        for followed in self._nodes:
            out.events.extend(followed.tail.feed(self._read_new(followed)))
        return out

    def stop(self) -> ProbeOutput:
        out = self.sample(dt.datetime.now(dt.timezone.utc))
        for followed in self._nodes:
            out.events.extend(followed.tail.close())
        return out

    @staticmethod
    def _read_new(followed: _Followed) -> str:
        if followed.path is None:
            found = [followed.log_dir / name for name in LOG_FILES
                     if (followed.log_dir / name).is_file()]
            if not found:
                return ""
            followed.path = found[0]
        try:
            with open(followed.path, "rb") as handle:
                handle.seek(followed.offset)
                data = handle.read(READ_LIMIT)
        except OSError:
            return ""
        followed.offset += len(data)
        return followed.decoder.decode(data)
