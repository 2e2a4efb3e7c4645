"""Checkpoints and restartpoints: a `starting:` line paired with its `complete:` line,
and the `checkpoints are occurring too frequently` warning."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pglab.events import Event
from pglab.serverlog.event_parts import before, float_or_none, int_or_none, new_event
from pglab.serverlog.records import LogRecord

_CKPT_START_RE = re.compile(r"(checkpoint|restartpoint) starting:(.*)")
_CKPT_DONE_RE = re.compile(
    r"(?P<kind>checkpoint|restartpoint) complete:[^:;]*?:? ?"
    r"wrote (?P<buffers>\d+) buffers \((?P<pct>[\d.]+)%\)"
    r"(?:, wrote (?P<slru>\d+) SLRU buffers)?; "
    r"(?P<added>\d+) (?:WAL|transaction log) file\(s\) added, (?P<removed>\d+) removed, "
    r"(?P<recycled>\d+) recycled; "
    r"write=(?P<write>[\d.]+) s, sync=(?P<sync>[\d.]+) s, total=(?P<total>[\d.]+) s"
    r"(?:; sync files=(?P<files>\d+), longest=(?P<longest>[\d.]+) s, average=(?P<avg>[\d.]+) s)?"
    r"(?:; distance=(?P<distance>\d+) kB, estimate=(?P<estimate>\d+) kB)?"
    r"(?:; lsn=(?P<lsn>[0-9A-Fa-f]+/[0-9A-Fa-f]+), redo lsn=(?P<redo>[0-9A-Fa-f]+/[0-9A-Fa-f]+))?"
)
_TOO_FREQUENT_RE = re.compile(r"checkpoints are occurring too frequently \((\d+) seconds? apart\)")


@dataclass
class _PendingCheckpoint:
    t: datetime
    restartpoint: bool
    flags: list[str]


class CheckpointRules:
    """Pairs each checkpoint (restartpoint on a standby) start with its completion."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._pending: _PendingCheckpoint | None = None

    def message(self, rec: LogRecord, msg: str, out: list[Event]) -> bool:
        """A LOG message starting "checkpoint"/"restartpoint"; False if not understood."""
        if msg.startswith("checkpoints are occurring too frequently"):
            m = _TOO_FREQUENT_RE.match(msg)
            if m is None:
                return False
            out.append(
                new_event(
                    rec.t,
                    "checkpoint-too-frequent",
                    self.node,
                    None,
                    {"seconds_apart": int(m.group(1))},
                )
            )
            return True
        m = _CKPT_START_RE.match(msg)
        if m is not None:
            # A start while another is open: the previous one never completed (crash).
            self.flush(out)
            self._pending = _PendingCheckpoint(
                rec.t, m.group(1) == "restartpoint", m.group(2).split()
            )
            return True
        if " complete:" in msg[:25]:
            return self._complete(rec, msg, out)
        return True  # other "checkpoint..." messages (e.g. "checkpoint request failed")

    def flush(self, out: list[Event]) -> None:
        """The open checkpoint (if any) becomes an event without an end."""
        pending = self._pending
        if pending is None:
            return
        self._pending = None
        attrs = _checkpoint_attrs(pending.flags, pending.restartpoint)
        out.append(new_event(pending.t, "checkpoint", self.node, None, attrs))

    def _complete(self, rec: LogRecord, msg: str, out: list[Event]) -> bool:
        m = _CKPT_DONE_RE.match(msg)
        if m is None:
            return False
        (
            kind,
            buffers,
            pct,
            slru,
            added,
            removed,
            recycled,
            write_text,
            sync,
            total_text,
            files,
            longest,
            avg,
            distance,
            estimate,
            lsn,
            redo,
        ) = m.groups()
        total = float(total_text)
        write = float(write_text)
        restartpoint = kind == "restartpoint"
        pending = self._pending
        if pending is not None and pending.restartpoint == restartpoint:
            t_start, flags = pending.t, pending.flags
            self._pending = None
        else:
            # No starting line (log began mid-checkpoint, or log_checkpoints only on end).
            t_start, flags = before(rec.t, total), []
        attrs = _checkpoint_attrs(flags, restartpoint)
        attrs.update(
            {
                "complete": True,
                "buffers": int(buffers),
                "buffers_pct": float(pct),
                "slru_buffers": int_or_none(slru),
                "wal_added": int(added),
                "wal_removed": int(removed),
                "wal_recycled": int(recycled),
                "write_s": write,
                "sync_s": float(sync),
                "total_s": total,
                "sync_files": int_or_none(files),
                "longest_s": float_or_none(longest),
                "average_s": float_or_none(avg),
                "distance_kb": int_or_none(distance),
                "estimate_kb": int_or_none(estimate),
                "lsn": lsn,
                "redo_lsn": redo,
                "write_phase_end": (t_start + timedelta(seconds=write)).isoformat(),
            }
        )
        out.append(new_event(t_start, "checkpoint", self.node, rec.t, attrs))
        return True


def _checkpoint_attrs(flags: list[str], restartpoint: bool) -> dict[str, Any]:
    """The stable key set of a checkpoint event; values filled by the complete line."""
    return {
        "flags": flags,
        "restartpoint": restartpoint,
        "complete": False,
        "buffers": None,
        "buffers_pct": None,
        "slru_buffers": None,
        "wal_added": None,
        "wal_removed": None,
        "wal_recycled": None,
        "write_s": None,
        "sync_s": None,
        "total_s": None,
        "sync_files": None,
        "longest_s": None,
        "average_s": None,
        "distance_kb": None,
        "estimate_kb": None,
        "lsn": None,
        "redo_lsn": None,
        "write_phase_end": None,
    }
