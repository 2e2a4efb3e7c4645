"""Signals shared by the causes: weighted evidence lines, wait-share rises, disk and CPU.

A Score accumulates weighted signals for one cause; each signal brings the line of
evidence a DBA reads. The weights are documented in docs/ANALYSIS.md by what they
measure, not by number: a wait share that rose counts most, corroboration adds to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pglab.analysis.evidence import EventView, WindowEvidence
from pglab.analysis.names import largest_queue, queued_tables
from pglab.results.manifest import Manifest


@dataclass(frozen=True)
class Finding:
    cause: str
    confidence: float
    evidence: list[str]
    outside: bool = False  # only signals from outside the lab: nothing to change in it
    # which kind of the cause the evidence shows (recommendation rules answer it): e.g.
    # sync-replication's standby-unresponsive or standby-slow-disk; None when it cannot
    # tell them apart
    sub: str | None = None


def pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def at(e: EventView) -> str:
    """An event's time in an evidence line: events are in UTC, and a time says its zone."""
    return e.start.strftime("%H:%M:%S UTC")


class Score:
    """Accumulates weighted signals and their evidence lines for one cause."""

    def __init__(self, cause: str) -> None:
        self.cause = cause
        self.value = 0.0
        self.outside_value = 0.0
        self.lines: list[str] = []
        self.sub: str | None = None

    def add(self, weight: float, line: str, outside: bool = False) -> None:
        """One signal; `outside` when it points outside the lab (another process)."""
        self.value += weight
        self.outside_value += weight if outside else 0.0
        self.lines.append(line)

    def finding(self) -> Finding | None:
        if self.value <= 0:
            return None
        return Finding(self.cause, round(min(0.99, self.value), 2), list(self.lines),
                       outside=self.outside_value >= self.value, sub=self.sub)


def wait_signal(s: Score, ev: WindowEvidence, waits: tuple[str, ...] | None, what: str,
                 prefix: str = "", weight: float = 0.6) -> float:
    """Adds the rise of a wait share (client backends) on any node; returns the share."""
    best = 0.0
    for node in ev.nodes:
        inside, healthy = ev.shares(node, waits, prefix)
        lift = inside - healthy
        if inside >= 0.15 and lift >= 0.1:
            where = "" if node == "primary" else f" on {node}"
            s.add(weight * min(1.0, lift / 0.5),
                  f"{pct(inside)} of sampled client backends{where} waited on {what} "
                  f"(healthy seconds {pct(healthy)})")
            best = max(best, inside)
    return best


HOT_ROW_TUPLE = 0.05  # share of Lock:tuple samples from which waiters queue on one row
# A holder whose transaction has been open this long while sessions queue behind it is a
# long holder (idle in transaction, a slow batch, a forgotten session): OLTP transactions
# that take turns on a hot row hold it for milliseconds.
LONG_HOLDER_S = 2.0
# What a queue's head can wait on that is not the lock: its commit's WAL flush, a data
# file, the synchronous standby's confirmation.
HEAD_HELD_UP = ("IO:", "LWLock:WAL", "IPC:SyncRep")


def queue_head_waits(ev: WindowEvidence) -> dict[str, int]:
    """What the sessions at the head of the window's lock queues were seen waiting on:
    wait -> samples, over every lock-queue event."""
    seen: dict[str, int] = {}
    for queue in ev.events_of("lock-queue"):
        for wait, count in ((queue.attrs.get("holder") or {}).get("waits") or {}).items():
            seen[str(wait)] = seen.get(str(wait), 0) + int(count)
    return seen


def long_holder(queue: dict[str, Any]) -> dict[str, Any] | None:
    """The queue's holder if its transaction was open LONG_HOLDER_S or more, not mostly
    waiting itself on IO or a standby (its queue is then that wait's symptom), else None."""
    holder = queue.get("holder") or {}
    waits = {str(w): int(c) for w, c in (holder.get("waits") or {}).items()}
    held_up = sum(c for w, c in waits.items() if w.startswith(HEAD_HELD_UP))
    if float(holder.get("xact_s") or 0) < LONG_HOLDER_S or held_up * 2 > sum(waits.values()):
        return None
    return dict(holder)


def lock_kind(s: Score, ev: WindowEvidence) -> None:
    """Which locks the queue is on (the advice differs): a table lock (DDL, LOCK TABLE:
    Lock:relation), one hot row (Lock:tuple: a second waiter on the same row queues on
    its tuple lock behind the first, so it appears only where rows are shared), or many
    row locks (Lock:transactionid alone: each waits for another transaction's row).
    The largest lock queue (in session-seconds) decides first when its head holds a table
    lock: the sessions behind the first ones in line wait on rows those hold, and their
    waits look like row locks (a LOCK TABLE on pgbench_branches queued a whole pgbench on
    Lock:transactionid and Lock:tuple). Only in a stall: over a whole run the queues of
    its stalls are not what held its healthy seconds back."""
    biggest = largest_queue(ev.lock_queues()) if ev.window.kind != "steady" else None
    holder = long_holder(biggest) if biggest is not None else None
    if biggest is not None and holder is not None and biggest.get("locktype") != "relation":
        s.sub = "long-holder"
        state = f", {holder['state']}" if holder.get("state") else ""
        s.lines.append(f"the longest queue ({biggest.get('object')}) waited behind one "
                       f"session whose transaction was open {float(holder['xact_s']):.1f} s"
                       f"{state}: a long holder (left idle in its transaction, a slow "
                       "batch, a forgotten session), not a row every transaction updates")
        return
    if biggest is not None and biggest.get("locktype") == "relation":
        s.sub = "table-lock"
        modes = ", ".join(m.split(":", 1)[1] for m in biggest.get("modes") or []
                          if m.startswith("relation:"))
        s.lines.append(f"the longest queue is on a table lock ({biggest.get('object')}"
                       + (f", wanted as {modes}" if modes else "") + "): DDL, LOCK TABLE "
                       "or a long transaction holding a strong lock")
        return
    shares = ev.inside.wait_shares(ev.nodes[0])
    relation = shares.get("Lock:relation", 0.0)
    tuple_ = shares.get("Lock:tuple", 0.0)
    rows = tuple_ + shares.get("Lock:transactionid", 0.0)
    if relation > 0 and relation >= rows:
        s.sub = "table-lock"
        s.lines.append(f"the queue is on a table lock (Lock:relation {pct(relation)}): DDL, "
                       "LOCK TABLE or a long transaction holding a strong lock")
    elif rows > 0 and tuple_ >= HOT_ROW_TUPLE:
        s.sub = "hot-row"
        s.lines.append(f"waiters queued on the same rows{_of(ev)} (Lock:tuple "
                       f"{pct(tuple_)}, row locks {pct(rows)} in all): a few hot rows every "
                       "transaction updates")
    elif rows > 0:
        s.sub = "row-locks"
        s.lines.append(f"row locks of many rows{_of(ev)} (Lock:transactionid "
                       f"{pct(rows - tuple_)}, no queue on one row): transactions that hold "
                       "rows long")


def _of(ev: WindowEvidence) -> str:
    """' of TABLE' (the two tables whose rows held the most sessions), or ''."""
    tables = queued_tables(ev.lock_queues())
    return f" of {' and '.join(tables[:2])}" if tables else ""


def setting(manifest: Manifest, name: str, node: str = "primary") -> str | None:
    """A server setting as the manifest recorded it (non-default ones only; None when it
    was at its default or not recorded)."""
    found = manifest.node_settings(node).get(name)
    return str(found["setting"]) if isinstance(found, dict) and "setting" in found else None


def volume_devices(manifest: Manifest, node: str,
                   role: str | None = None) -> dict[str, dict[str, Any]]:
    """The node's storage volume devices by name (loop0...) with their limits; with
    `role`, only the device that holds it: "data" (data files), or "wal" (pg_wal: its own
    volume if it has one, else the data volume's)."""
    volumes = [v for v in manifest.node_storage(node) if (v.get("device") or {}).get("name")]
    if role is not None:
        roles = {v.get("role") for v in volumes}
        wanted = role if role in roles else "data"
        volumes = [v for v in volumes if v.get("role") == wanted]
    return {str(v["device"]["name"]): dict(v["device"]) for v in volumes}


def disk_limits(manifest: Manifest, node: str) -> dict[str, Any]:
    """The node's disk limits as applied (disk profile resolved), else as the scenario
    wrote them (older manifests)."""
    applied = manifest.node_envelope(node)
    if applied.get("limits"):
        return dict(applied["limits"])
    return dict(manifest.envelope.get("disk") or {}) if node == "primary" else {}


def disk_write(s: Score, ev: WindowEvidence, weight: float, role: str | None = None) -> None:
    """Disk writes at the envelope's limit (MB/s or IOPS) or well above the healthy rate;
    with `role` ("data", "wal"), on the volume that holds what the cause writes only (a
    checkpoint's writes do not reach pg_wal's own volume, nor WAL the data volume's)."""
    for node in ev.nodes:
        # A storage volume's device has its own limits, which hold for every byte; the
        # envelope's apply to the node's one disk otherwise (label None: the busiest).
        volumes = volume_devices(ev.manifest, node, role)
        targets: list[tuple[str | None, dict[str, Any], str]] = [
            (name, dev, f"volume device {name}") for name, dev in volumes.items()
        ] or [(None, disk_limits(ev.manifest, node), "device")]
        for label, disk, where in targets:
            _disk_write_at(s, ev, node, label, disk, where, weight)
    iowait = ev.inside.mean("host", "os.cpu", "iowait_pct")
    iowait_h = ev.healthy.mean("host", "os.cpu", "iowait_pct") or 0.0
    if iowait is not None and iowait > 2 * iowait_h and iowait > 10:
        s.add(weight * 0.3, f"CPU iowait {iowait:.0f}% (healthy {iowait_h:.0f}%)")
    psi = ev.inside.mean("host", "os.pressure", "some_pct", "io")
    psi_h = ev.healthy.mean("host", "os.pressure", "some_pct", "io") or 0.0
    if psi is not None and psi > 20 and psi > psi_h + 10:
        s.add(weight * 0.3, f"IO pressure: tasks stalled on IO {psi:.0f}% of the time "
                            f"(healthy {psi_h:.0f}%)")


def _disk_write_at(s: Score, ev: WindowEvidence, node: str, label: str | None,
                   disk: dict[str, Any], where: str, weight: float) -> None:
    mbps = ev.inside.mean(node, "os.disk", "write_mbps", label)
    if mbps is None:
        return
    healthy = ev.healthy.mean(node, "os.disk", "write_mbps", label) or 0.0
    iops = ev.inside.mean(node, "os.disk", "write_iops", label) or 0.0
    limit, iops_limit = float(disk.get("write_mbps") or 0), float(disk.get("write_iops") or 0)
    # os.disk counts the whole device: other writers and unthrottled writeback too
    if limit > 0 and mbps >= 0.9 * limit:
        s.add(weight, f"disk write at its {limit:g} MB/s limit ({mbps:.0f} MB/s on the "
                      f"{where}{', other writers included' if mbps > 1.1 * limit else ''})")
    elif iops_limit > 0 and iops >= 0.9 * iops_limit:
        s.add(weight, f"disk writes at the {iops_limit:g} IOPS limit ({iops:.0f}/s on "
                      f"the {where})")
    elif mbps > 2 * healthy and mbps > 5:
        s.add(weight * 0.7, f"disk write {mbps:.0f} MB/s on the {where} (healthy seconds "
                            f"{healthy:.0f} MB/s)")


# Waits of a backend held up by the disk: its own IO, or the WAL lock whose holder is in
# a flush (a commit queued behind another's WAL fsync).
DISK_BOUND_WAITS = ("IO:", "LWLock:WAL")
# From this share of their samples, client backends spent the window on the disk.
DISK_BOUND_SHARE = 0.1


def waited_on_the_disk(ev: WindowEvidence) -> bool:
    """Whether the client backends spent the window waiting on the disk, or their waits
    were not sampled (no evidence against it). Writeback, however much, does not stall
    backends that run on the CPU or wait for their client (an in-memory read-only load:
    at 40,000 TPS the 10 Hz sampler hardly ever finds one active) and never on it."""
    node = ev.nodes[0]
    if not ev.inside.seconds_with(node, "db.waits", "sampled"):
        return True
    shares = ev.inside.wait_shares(node)
    return sum(v for w, v in shares.items() if w.startswith(DISK_BOUND_WAITS)) >= DISK_BOUND_SHARE


def foreign_writeback(s: Score, ev: WindowEvidence) -> None:
    """The disk wrote far more than PostgreSQL did: the kernel flushing dirty page cache,
    where the client backends waited on the disk."""
    node = ev.nodes[0]
    disk = ev.inside.mean(node, "os.disk", "write_mbps")
    disk_h = ev.healthy.mean(node, "os.disk", "write_mbps") or 0.0
    if disk is None or disk < 50 or disk < 3 * disk_h or not waited_on_the_disk(ev):
        return
    own = ev.inside.total(node, "db.io", "write_bytes") / 2**20 / max(1, ev.inside.seconds)
    own += (ev.inside.mean(node, "db.wal", "wal_bytes") or 0.0) / 2**20
    if own < disk / 3:
        s.add(0.4, f"disk wrote {disk:.0f} MB/s (healthy {disk_h:.0f} MB/s) while PostgreSQL "
                   f"wrote {own:.0f} MB/s: the kernel flushing other dirty page cache")
        await_ms = ev.inside.mean(node, "os.disk", "write_await_ms")
        if await_ms is not None:
            s.add(0.1, f"disk write latency {await_ms:.1f} ms meanwhile")


def cpu_busy(ev: WindowEvidence) -> tuple[float | None, float]:
    idle = ev.inside.mean("host", "os.cpu", "idle_pct")
    idle_h = ev.healthy.mean("host", "os.cpu", "idle_pct") or 0.0
    return idle, idle_h


def flush_lag_key(ev: WindowEvidence, primary: str) -> tuple[str, str, str]:
    """A standby's lag in seconds: how long the WAL it had not confirmed flushed had been
    written (grows while it is silent), or, in runs recorded before that existed,
    pg_stat_replication's flush_lag (frozen at its last reply while it is silent)."""
    behind = (primary, "db.replication", "flush_behind_s")
    if ev.inside.labels(*behind) or ev.healthy.labels(*behind):
        return behind
    return (primary, "db.replication", "flush_lag_s")
