"""The cause registry: one small function per cause, each scoring one stall window.

A cause function reads a window's evidence (evidence.WindowEvidence) and returns a
Finding (confidence 0..1 and the evidence lines a DBA would read) or None. Confidence
is built from independent signals, each adding a fixed weight, capped at 0.99: a wait
share that rose against the healthy seconds counts most, corroborating events and
resource figures add to it. ranked_causes() keeps findings of MIN_CONFIDENCE or more,
most likely first, and puts `unknown` first when none reaches WEAK_BELOW.
docs/ANALYSIS.md lists the causes; a test checks that the two agree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pglab.analysis import network as network_cause
from pglab.analysis import steady as steady_state
from pglab.analysis.evidence import EventView, Segment, WindowEvidence
from pglab.analysis.flush_layers import FLUSH_LAYERS, flush_scorer
from pglab.analysis.kernel import receiver_line
from pglab.analysis.names import busiest_queue, largest_queue
from pglab.analysis.plans import access, change_entry, change_line, indexes_gone
from pglab.analysis.profile import busiest_kind, kind_line
from pglab.analysis.signals import (
    HEAD_HELD_UP,
    Finding,
    Score,
    at,
    cpu_busy,
    disk_limits,
    disk_write,
    flush_lag_key,
    foreign_writeback,
    lock_kind,
    long_holder,
    pct,
    queue_head_waits,
    setting,
    volume_devices,
    wait_signal,
    waited_on_the_disk,
)
from pglab.analysis.statements import CLIENTS_TURN
from pglab.results.manifest import Manifest

MIN_CONFIDENCE = 0.2
VACUUM_IO_MB = 64  # an autovacuum that read or dirtied less is no IO burden
WRITEBACK_BURST_MB = 64  # this much page cache under writeback at once is a burst
WEAK_BELOW = 0.4
HEAD_HELD_SHARE = 0.5  # a queue's head seen waiting on IO this often: the queue is a symptom

WAL_INIT = ("IO:WalInitWrite", "IO:WalInitSync")
WAL_WRITE = ("IO:WalWrite", "IO:WalSync", "LWLock:WALWrite", "LWLock:WALInsert",
             "LWLock:WALBufMapping")
DATA_IO = ("IO:DataFileWrite", "IO:DataFileFlush", "IO:DataFileSync", "IO:DataFileRead",
           "IO:DataFileExtend", "IPC:CheckpointDone", "IPC:CheckpointStart",
           "IPC:CheckpointDelayStart", "IPC:CheckpointDelayComplete")


@dataclass(frozen=True)
class Cause:
    id: str
    title: str  # in a DBA's words
    score: Callable[[WindowEvidence], Finding | None] | None  # one stall window
    # the whole run, for a cause that can hold a run back without a stall (steady.py)
    steady: Callable[[WindowEvidence], Finding | None] | None = None
    # what the run's cuts cost in data (the durability section, durability/section.py): a cause
    # of lost or damaged data rather than of lost time
    durability: Callable[[dict[str, Any], Manifest], Finding | None] | None = None


def _checkpoints(ev: WindowEvidence) -> list[EventView]:
    # the checkpoint that ends crash recovery is part of the crash's outage, not a cause
    return [e for e in ev.events_of("checkpoint")
            if "end-of-recovery" not in (e.attrs.get("flags") or [])]


def _during_a_cut(s: Score, ev: WindowEvidence) -> None:
    """A window with a crash or power loss in it: the IO seen then is the cut's own
    (remount, journal replay, crash recovery); server-crash names the window."""
    cuts = [e for e in ev.events_of("fault") if str(e.attrs.get("action")) in CUT_WORDS]
    if cuts:
        _halve(s, f"{cuts[0].node} was cut ({cuts[0].attrs.get('action')}) at "
                  f"{at(cuts[0])} and recovering meanwhile")


def _halve(s: Score, because: str) -> None:
    """A cause whose evidence in the window is another's doing: half its score, and why."""
    if s.value > 0:
        s.value /= 2
        s.lines.append(f"(halved: {because})")


# An unfinished checkpoint whose checkpointer spent at least this share of the window's
# samples in IO:DataFileSync was in its sync phase (its write phase logs nothing until the
# checkpoint completes).
SYNC_PHASE_SHARE = 0.5


def _write_phase_end(e: EventView, ev: WindowEvidence) -> dt.datetime | None:
    """When the checkpoint's write phase ended: logged when it completed; for a timed
    checkpoint still running, its target (checkpoint_timeout x completion_target)."""
    try:
        return dt.datetime.fromisoformat(str(e.attrs.get("write_phase_end")))
    except ValueError:
        pass
    if "time" not in (e.attrs.get("flags") or []):
        return None  # a requested checkpoint writes as fast as it can: its end is unknown
    try:
        timeout = float(setting(ev.manifest, "checkpoint_timeout") or 300)
        target = float(setting(ev.manifest, "checkpoint_completion_target") or 0.9)
    except ValueError:
        return None
    return e.start + dt.timedelta(seconds=timeout * target)


def _flush_hints_off(ev: WindowEvidence) -> bool:
    """checkpoint_flush_after = 0: the checkpointer's writes pile up as dirty page cache."""
    return setting(ev.manifest, "checkpoint_flush_after") in ("0", "0kB")


def _phase(e: EventView, ev: WindowEvidence) -> str:
    """Which of the checkpoint's phases the window saw: write, then sync (fsyncs)."""
    write_end = _write_phase_end(e, ev)
    if write_end is None:  # an unfinished requested checkpoint: its log says nothing yet,
        # but its own waits do (sampled at 10 Hz): fsyncing data files is the sync phase
        syncing = ev.inside.wait_shares(e.node, "checkpointer").get("IO:DataFileSync", 0.0)
        return "sync phase" if syncing >= SYNC_PHASE_SHARE else "write or sync phase"
    if ev.window.end <= write_end:
        return "write phase"
    if ev.window.start >= write_end:
        return "sync phase"
    return "write and sync phases"


def _syncing(ev: WindowEvidence) -> list[EventView]:
    """The checkpoints whose fsyncs ran in the window."""
    return [e for e in _checkpoints(ev)
            if _phase(e, ev) in ("sync phase", "write and sync phases")]


def lock_contention(ev: WindowEvidence) -> Finding | None:
    s = Score("lock-contention")
    shift = _lock_kind_shift(ev)
    if shift is None:
        wait_signal(s, ev, None, "heavyweight locks (Lock:*)", prefix="Lock:", weight=0.7)
    else:
        wait, inside, healthy, locks_healthy = shift
        s.add(0.7 * min(1.0, (inside - healthy) / 0.5),
              f"{pct(inside)} of sampled client backends waited on {wait} (healthy seconds "
              f"{pct(healthy)}; they queued on other locks instead, {pct(locks_healthy)} "
              "on Lock:* in all)")
    waits = ev.events_of("lock-wait")
    if waits:
        e = max(waits, key=lambda w: float(w.attrs.get("waited_ms") or 0))
        holders = ",".join(str(h) for h in e.attrs.get("holders") or [])
        row = f" (a row of {e.attrs['relation']})" if e.attrs.get("relation") else ""
        s.add(0.2, f"{len(waits)} lock wait(s) logged: e.g. pid {e.attrs.get('pid')} waited "
                   f"{float(e.attrs.get('waited_ms') or 0) / 1000:.1f} s for "
                   f"{e.attrs.get('lock_mode')} on "
                   f"{ev.names.name(str(e.attrs.get('lock_object')), e.node)}{row}"
                   # the holders are in the wait's first message, which a followed log
                   # may have begun after
                   + (f" held by pid {holders}" if holders else ""))
    queues = ev.lock_queues()
    queue_line = busiest_queue(queues)
    biggest = largest_queue(queues) if ev.window.kind != "steady" else None
    # A queue behind a table lock, or behind a session that sat in its open transaction
    # for seconds without itself waiting on IO or a standby, is the stall seen directly,
    # whatever baseline the waits are compared with: a short observation's only one can
    # be the lead-in second in which the lock was taken, its waits already the lock's.
    direct = biggest is not None and (biggest.get("locktype") == "relation"
                                      or long_holder(biggest) is not None)
    if queue_line and (s.value > 0 or direct):
        s.add(0.3 if direct else 0.1, queue_line)
    blocked = ev.inside.peak(ev.nodes[0], "db.locks", "blocked_backends")
    if blocked and blocked >= 1 and s.value > 0:
        s.add(0.1, f"up to {blocked:.0f} backends blocked on locks")
    deadlocks = ev.events_of("deadlock")
    if deadlocks:
        s.add(0.2, f"{len(deadlocks)} deadlock(s) detected")
    if s.value > 0:
        lock_kind(s, ev)
        _head_held_up(s, ev)
    return s.finding()


def _lock_kind_shift(ev: WindowEvidence) -> tuple[str, float, float, float] | None:
    """A lock the healthy seconds did not queue on, when its rise outgrows that of all
    heavyweight locks together: a workload whose healthy seconds already queue on rows (a
    few hot rows) stalls behind a LOCK TABLE with its Lock:* share barely higher, the
    row waits given way to table waits. (wait, share in the window, healthy share, healthy
    share of all Lock:* waits) on the first node, or None."""
    node = ev.nodes[0]
    inside = ev.inside.wait_shares(node)
    healthy = ev.healthy.wait_shares(node)
    locks = [w for w in inside if w.startswith("Lock:")]
    if not locks:
        return None
    top = max(locks, key=lambda w: inside[w] - healthy.get(w, 0.0))
    lift = inside[top] - healthy.get(top, 0.0)
    all_inside, all_healthy = ev.shares(node, prefix="Lock:")
    if inside[top] < 0.15 or lift < 0.1 or min(lift, 0.5) <= all_inside - all_healthy:
        return None  # the rise of all Lock:* waits says as much (0.5 is worth the most)
    return top, inside[top], healthy.get(top, 0.0), all_healthy



def _head_held_up(s: Score, ev: WindowEvidence) -> None:
    """Sessions queue on a row behind a transaction that is itself waiting, most of the
    time, on IO or a standby (a paused disk, a slow flush): the queue is then what that
    wait looks like from the other sessions, and the wait's own cause is the stall's."""
    seen = queue_head_waits(ev)
    total = sum(seen.values())
    held = {w: c for w, c in seen.items() if w.startswith(HEAD_HELD_UP)}
    if not total or sum(held.values()) < HEAD_HELD_SHARE * total:
        return
    top = max(held, key=lambda w: held[w])
    s.value /= 2
    s.lines.append(f"(halved: the sessions at the head of the lock queues were seen waiting "
                   f"on {top} {pct(sum(held.values()) / total)} of the time: the queue "
                   "waits on what holds them)")


def wal_segment_init(ev: WindowEvidence) -> Finding | None:
    s = Score("wal-segment-init")
    share = wait_signal(s, ev, WAL_INIT, "WalInitWrite/WalInitSync (new WAL segment)")
    node = ev.nodes[0]
    count = ev.wait_count(node, WAL_INIT)
    if count == 0:
        return s.finding()
    if share == 0:
        s.add(0.3, f"{count:.0f} wait sample(s) of a process zero-filling/fsyncing a new WAL "
                   "segment")
    # The process creating a segment holds WALWriteLock: the others queue behind it.
    queued, queued_h = ev.shares(node, (*WAL_INIT, "LWLock:WALWrite"))
    if queued - queued_h >= 0.1:
        s.add(0.4 * min(1.0, (queued - queued_h) / 0.3),
              f"{pct(queued)} of sampled client backends waited on the new segment or "
              f"on LWLock:WALWrite behind it (healthy {pct(queued_h)})")
    else:
        # A queue as long in the healthy seconds (every commit queues on WALWrite on a
        # slow disk) still waits on what its holder does in the window: creating segments
        head = steady_state.wal_init_head(ev, span="in the window")
        if queued >= steady_state.DOMINANT and head is not None and (
                head[0] >= steady_state.INIT_HEAD):
            s.add(0.2, f"{pct(queued)} of sampled client backends queued on LWLock:WALWrite "
                       f"behind a holder that spent {pct(head[0])} of its WAL IO creating "
                       f"segments: {head[1]}")
    # zero-filling and fsyncing 16 MB+ is slow because the disk is: the saturation
    # evidence counts for this IO cause as it does for the checkpoint's
    disk_write(s, ev, 0.2, role="wal")
    added = sum(int(e.attrs.get("wal_added") or 0) for e in _checkpoints(ev))
    if added:
        s.add(0.1, f"{added} WAL file(s) added by the checkpoint(s) during the window")
    init_mb = sum(v for label, v in ev.inside.labels(node, "db.io", "write_bytes").items()
                  if label.endswith("/wal/init")) / 2**20
    if init_mb:
        s.add(0.2, f"{init_mb:.0f} MB written to initialise WAL segments (pg_stat_io)")
    writeback = ev.inside.peak("host", "os.memory", "writeback_mb") or 0.0
    if writeback >= WRITEBACK_BURST_MB and writeback > 4 * max(init_mb, 16.0):
        # a segment is 16 MB+: its zero-fill and fsync queued behind the flush
        s.value /= 2
        s.lines.append(f"(halved: {writeback:.0f} MB of page cache was under writeback "
                       "meanwhile; the new segment's writes queued behind it)")
    return s.finding()


def wal_write(ev: WindowEvidence) -> Finding | None:
    s = Score("wal-write")
    wait_signal(s, ev, WAL_WRITE, "WAL write/flush (WalWrite, WalSync, WALWrite lock)",
                 weight=0.5)
    node = ev.nodes[0]
    if s.value > 0:
        full = ev.inside.mean(node, "db.wal", "wal_buffers_full") or 0.0
        if full > 0:
            s.add(0.1, f"WAL buffers full {full:.0f} times/s")
        await_ms = ev.inside.mean(node, "os.disk", "write_await_ms")
        await_h = ev.healthy.mean(node, "os.disk", "write_await_ms") or 0.0
        if await_ms is not None and await_ms > 3 * max(await_h, 0.1):
            s.add(0.2, f"disk write latency {await_ms:.1f} ms (healthy {await_h:.1f} ms)")
        if ev.wait_count(node, WAL_INIT) > 0:
            # the WAL queue is then the symptom of a segment being created, not the cause
            s.value /= 2
            s.lines.append("(halved: a new WAL segment was being created meanwhile)")
    return s.finding()


def checkpoint_io(ev: WindowEvidence) -> Finding | None:
    s = Score("checkpoint-io")
    node = ev.nodes[0]
    # the first overlapping checkpoint is the evidence; a second one (back to back)
    # adds to it, but less: it is the same story told again
    for weight, e in zip((0.3, 0.15), _checkpoints(ev), strict=False):
        # no flags: its "starting" line was not read (a log followed from its end)
        flags = ",".join(e.attrs.get("flags") or []) or "started before the log was read"
        if e.attrs.get("buffers") is None:  # started, not complete when the run ended
            s.add(weight, f"checkpoint ({flags}) started {at(e)}, still running, in its "
                          f"{_phase(e, ev)}")
            continue
        s.add(weight, f"checkpoint ({flags}) in its {_phase(e, ev)} (started {at(e)}): "
                      f"{e.attrs['buffers']} buffers ({e.attrs.get('buffers_pct', '?')}%), "
                      f"write {e.attrs.get('write_s', '?')} s, sync "
                      f"{e.attrs.get('sync_s', '?')} s")
    written = ev.inside.mean(node, "db.checkpointer", "buffers_checkpoint") or 0.0
    written_h = ev.healthy.mean(node, "db.checkpointer", "buffers_checkpoint") or 0.0
    # a burden on the disk: a quarter of its limit (or of what it wrote), 2 MB/s at least
    limit = float(disk_limits(ev.manifest, node).get("write_mbps") or 0) or (
        ev.inside.mean(node, "os.disk", "write_mbps") or 0.0)
    if written > 2 * written_h and written * 8 / 1024 >= max(2.0, limit / 4):
        s.add(0.2, f"checkpointer wrote {written * 8 / 1024:.0f} MB/s of buffers (healthy "
                   f"{written_h * 8 / 1024:.0f} MB/s)")
    if s.value > 0:
        wait_signal(s, ev, DATA_IO, "data file IO / checkpoint waits", weight=0.3)
        disk_write(s, ev, 0.2, role="data")
        # its own writes being flushed; with write-back hints off, memory_reclaim's pile
        burst = ev.inside.peak("host", "os.memory", "writeback_mb") or 0.0
        if burst >= WRITEBACK_BURST_MB and not _flush_hints_off(ev) and _syncing(ev):
            s.add(0.2, f"its fsyncs put {burst:.0f} MB of page cache under writeback")
        fpi = ev.inside.mean(node, "db.wal", "wal_fpi") or 0.0
        fpi_h = ev.healthy.mean(node, "db.wal", "wal_fpi") or 0.0
        if fpi > 2 * fpi_h and fpi > 50:
            s.add(0.1, f"{fpi:.0f} full-page images/s written to WAL after the checkpoint "
                       f"(healthy {fpi_h:.0f}/s)")
    for e in ev.events_of("checkpoint-too-frequent")[:1]:
        s.add(0.1, f"checkpoints occurring too frequently "
                   f"({e.attrs.get('seconds_apart')} s apart)")
    if s.value > 0:
        _checkpoint_kind(s, ev)
    _during_a_cut(s, ev)
    return s.finding()


def _checkpoint_kind(s: Score, ev: WindowEvidence) -> None:
    """Why the checkpoint hurt, which decides the advice: started by WAL volume (a small
    max_wal_size: space them out), a surge of full-page images after it (compress them),
    or a device that the checkpoint's writes saturate however they are spaced (spread
    and hint the writes, or a faster disk)."""
    flags = {str(f) for e in _checkpoints(ev) for f in (e.attrs.get("flags") or [])}
    if "wal" in flags or ev.events_of("checkpoint-too-frequent"):
        s.sub = "wal-volume"
    elif any("full-page images/s" in line for line in s.lines):
        s.sub = "full-page-images"
    elif any(line.startswith(("disk write at its", "disk writes at the")) for line in s.lines):
        s.sub = "device-saturated"


def sync_replication(ev: WindowEvidence) -> Finding | None:
    s = Score("sync-replication")
    wait_signal(s, ev, ("IPC:SyncRep",), "SyncRep (synchronous standby confirmation)",
                 weight=0.8)
    primary = ev.nodes[0]
    lag_key = flush_lag_key(ev, primary)
    for label in ev.inside.labels(*lag_key):
        lag = ev.inside.peak(*lag_key, label) or 0.0
        lag_h = ev.healthy.mean(*lag_key, label) or 0.0
        if lag > 3 * max(lag_h, 0.01):
            s.add(0.2, f"standby {label} up to {lag:.2f} s behind in confirming WAL flushed "
                       f"(healthy {lag_h:.2f} s)")
    if _applies_each_commit(ev, primary):  # commits wait for the replay, not the flush
        for label, (lag, lag_h) in _replay_behind(ev, primary).items():
            s.add(0.2, f"standby {label} up to {lag:.2f} s behind in applying WAL (healthy "
                       f"{lag_h:.2f} s), which each commit waits for (synchronous_commit = "
                       "remote_apply)")
    for node, label, queued in network_cause.receive_backlogs(ev).values():
        s.add(0.2, f"{queued / 2**20:.1f} MB waiting in the receive queue of {label} on "
                   f"{node}: the data arrived, the receiving side did not read it in time")
    for e in ev.events_of("replication-state")[:2]:
        s.add(0.2, f"replication state of {e.attrs.get('standby')} changed to "
                   f"{e.attrs.get('state')}/{e.attrs.get('sync_state')} at {at(e)}")
    waiting = ev.wait_count(primary, ("IPC:SyncRep",))
    inside, _healthy = ev.shares(primary, ("IPC:SyncRep",))
    if ev.window.kind == "drop-to-zero" and inside >= 0.15:
        # With synchronous replication SyncRep is common in healthy seconds too, so its
        # rise says little; but when nothing commits, the few SyncRep waiters hold the
        # row locks that everyone else queues on.
        s.add(0.2 + 0.6 * inside, f"while no transaction committed, {pct(inside)} of "
                                  "sampled client backends waited on SyncRep (the rest "
                                  "queued behind them)")
    if s.value > 0:
        _name_the_standby(s, ev, primary)
    for e in ev.events_of("fault"):
        action = str(e.attrs.get("action"))
        if waiting and e.node.startswith("standby") and action in ("pause-standby",
                                                                     "throttle-disk"):
            s.add(0.5, f"fault {action} on {e.node} from {at(e)} while commits waited on "
                       "SyncRep")
            break
    if s.value > 0:
        _standby_kind(s, ev)
        for node in ev.nodes[1:]:  # below the wait events: writing or flushing WAL
            if (line := receiver_line(ev, node)) is not None:
                s.lines.append(line)
        if (link := network_cause.link_held_back(ev)) is not None:
            _halve(s, f"the standby's link held the WAL back ({link}): see network")
    return s.finding()


def _name_the_standby(s: Score, ev: WindowEvidence, primary: str) -> None:
    """Which standby: the one furthest behind in confirming WAL (a standby's pause shows
    no flush lag in seconds, which PostgreSQL measures only when a reply arrives)."""
    key = (primary, "db.replication", "flush_lag_bytes")
    behind = [(ev.inside.peak(*key, label) or 0.0, label) for label in ev.inside.labels(*key)]
    if behind:
        peak, label = max(behind)
        usual = ev.healthy.mean(*key, label) or 0.0
        if peak > 0 and peak > 2 * usual and not any(label in line for line in s.lines):
            s.add(0.1, f"standby {label} had up to {peak / 1024:,.0f} kB of WAL not yet "
                       f"confirmed flushed (healthy {usual / 1024:,.0f} kB)")


SILENT_BELOW = 0.5  # of the healthy rate of wait samples: the standby did not answer
SILENT_SECONDS = 2  # whole seconds of a window without one answer: it stopped answering
RECEIVER_IO = 0.5  # share of the WAL receiver's samples writing or fsyncing WAL


def _standby_kind(s: Score, ev: WindowEvidence) -> None:
    """Unresponsive or slow: the advice differs (quorum commit vs a faster disk).

    A standby that stopped answering (paused, hung, its host gone) also stops answering
    the wait sampler's queries: its rate of samples falls, whatever its WAL receiver
    last showed. A slow standby keeps answering, and its WAL receiver is seen busy:
    writing and fsyncing WAL (its disk) or on CPU (its cores). The fault events are
    left out on purpose: the verdict must hold for a standby nobody paused."""
    primary = ev.nodes[0]
    # The seconds the observer heard the primary: when the observer itself was held up
    # (its host starved of CPU), every node fell silent, which says nothing of the standby.
    heard = ev.inside.seconds_with(primary, "db.waits", "sampled")
    heard_h = ev.healthy.seconds_with(primary, "db.waits", "sampled")
    for node in ev.nodes[1:]:
        rate = ev.inside.total(node, "db.waits", "sampled") / max(1, heard)
        rate_h = ev.healthy.total(node, "db.waits", "sampled") / max(1, heard_h)
        # A window longer than the silence (the standby catching up after it, its WAL
        # receiver fsyncing the backlog) can bring the rate back over half: the whole
        # seconds it gave no answer at all still tell.
        silent = max(0, heard - ev.inside.seconds_with(node, "db.waits", "sampled"))
        if rate_h > 0 and (rate < SILENT_BELOW * rate_h or silent >= SILENT_SECONDS):
            s.sub = "standby-unresponsive"
            s.lines.append(f"{node} answered {rate:.1f} telemetry samples/s (healthy "
                           f"{rate_h:.1f}/s), none at all in {silent} of the window's "
                           f"{ev.inside.seconds} s: the standby stopped responding, it "
                           "was not merely slow")
            return
    for node in ev.nodes[1:]:
        if (replay := _replay_bound(ev, primary, node)) is not None:
            s.sub = "standby-replay"
            s.lines.append(replay)
            for kind in ("startup", "walreceiver"):  # replaying, receiving
                _what_it_computed(s, ev, node, kind)
            return
        receiver = ev.inside.wait_shares(node, "walreceiver")
        io = sum(v for w, v in receiver.items() if w.startswith("IO:Wal"))
        if io >= RECEIVER_IO:
            s.sub = "standby-slow-disk"
            s.lines.append(f"the WAL receiver on {node} spent {pct(io)} of its samples "
                           "writing or fsyncing WAL: the standby's disk is the limit")
            return
        idle, _ = cpu_busy(ev)
        if receiver.get("CPU", 0.0) >= RECEIVER_IO and idle is not None and idle < 5:
            s.sub = "standby-slow-cpu"
            s.lines.append(f"the WAL receiver on {node} was on CPU in "
                           f"{pct(receiver['CPU'])} of its samples with no idle CPU left: "
                           "the standby's cores are the limit")
            for kind in ("startup", "walreceiver"):  # replaying, receiving
                _what_it_computed(s, ev, node, kind)
            return


REPLAY_ON_CPU = 0.5  # share of the startup process's samples with no wait: computing
REPLAY_BEHIND = 3  # times the healthy replay lag (at least REPLAY_FLOOR_S): it fell behind
REPLAY_FLOOR_S = 0.1
REPLAY_AFTER_FLUSH = 0.5  # at most this share of the replay lag was the flush's


def _applies_each_commit(ev: WindowEvidence, primary: str) -> bool:
    """synchronous_commit = remote_apply: a commit returns once the standby replayed it."""
    return setting(ev.manifest, "synchronous_commit", primary) == "remote_apply"


def _replay_behind(ev: WindowEvidence, primary: str) -> dict[str, tuple[float, float]]:
    """standby -> (peak, healthy mean) of how far its replay fell behind, in seconds, for
    the standbys whose replay fell REPLAY_BEHIND times its healthy lag behind."""
    key = (primary, "db.replication", "replay_behind_s")
    if not (ev.inside.labels(*key) or ev.healthy.labels(*key)):
        key = (primary, "db.replication", "replay_lag_s")  # runs recorded before it
    found = {}
    for label in ev.inside.labels(*key):
        lag = ev.inside.peak(*key, label) or 0.0
        lag_h = ev.healthy.mean(*key, label) or 0.0
        if lag >= REPLAY_BEHIND * max(lag_h, REPLAY_FLOOR_S):
            found[label] = (lag, lag_h)
    return found


def _replay_bound(ev: WindowEvidence, primary: str, node: str) -> str | None:
    """Commits that wait for the standby to apply their WAL (remote_apply) wait for its
    startup process, which replays WAL in one process: when its replay fell behind while
    it was on the CPU (not waiting on a read or a lock), the standby's replay is
    CPU-bound. Without remote_apply a commit waits for the flush only, and a slow replay
    holds no commit."""
    behind = _replay_behind(ev, primary)
    if not _applies_each_commit(ev, primary) or node not in behind:
        return None
    # Replay comes after the flush: a standby whose disk is slow falls as far behind in
    # flushing; a replay-bound one had most of its lag after the WAL was on its disk.
    flushed = ev.inside.peak(*flush_lag_key(ev, primary), node) or 0.0
    if flushed > REPLAY_AFTER_FLUSH * behind[node][0]:
        return None
    on_cpu = ev.inside.wait_shares(node, "startup").get("CPU", 0.0)
    if on_cpu < REPLAY_ON_CPU:
        return None
    unreplayed = ev.inside.peak(primary, "db.replication", "replay_lag_bytes", node) or 0.0
    answered = ev.inside.seconds_with(node, "db.waits", "sampled")
    answered_h = ev.healthy.seconds_with(node, "db.waits", "sampled")
    busy = ev.inside.total(node, "db.waits", "CPU", "startup") / max(1, answered)
    busy_h = ev.healthy.total(node, "db.waits", "CPU", "startup") / max(1, answered_h)
    return (f"the startup process on {node} was on CPU in {pct(on_cpu)} of its samples "
            f"({busy:.1f} samples/s, healthy {busy_h:.1f}/s) with up to "
            f"{unreplayed / 2**20:,.1f} MB of WAL not yet applied: replaying WAL on the "
            "standby's CPU is the limit")


def vacuum_io(ev: WindowEvidence) -> Finding | None:
    s = Score("vacuum-io")
    for e in ev.events_of("vacuum"):  # seen running by db.vacuum: size unknown
        s.add(0.15, f"vacuum of table {e.attrs.get('table')} running since {at(e)}")
    for e in ev.events_of("autovacuum"):
        pages = sum(int(e.attrs.get(k) or 0) for k in ("buffer_reads", "buffer_dirtied"))
        if pages * 8 / 1024 >= VACUUM_IO_MB:
            s.add(0.3, f"autovacuum of table {e.attrs.get('table')} from {at(e)}: read or "
                       f"dirtied {pages * 8 / 1024:.0f} MB in {e.attrs.get('elapsed_s')} s")
    if s.value > 0:
        wait_signal(s, ev, ("Timeout:VacuumDelay", "IO:DataFileRead", "IO:DataFileWrite"),
                     "data file IO", weight=0.2)
        disk_write(s, ev, 0.2, role="data")
    return s.finding()


def memory_reclaim(ev: WindowEvidence) -> Finding | None:
    s = Score("memory-reclaim")
    for metric, what in (("allocstall", "direct reclaim stalls"),
                         ("pgscan_direct", "pages scanned by direct reclaim")):
        inside = ev.inside.mean("host", "os.memory", metric) or 0.0
        healthy = ev.healthy.mean("host", "os.memory", metric) or 0.0
        if inside > 0 and inside > 3 * healthy:
            s.add(0.3, f"{inside:.0f} {what}/s (healthy {healthy:.0f}/s)")
    psi = ev.inside.mean("host", "os.pressure", "some_pct", "memory")
    if psi is not None and psi > 10:
        s.add(0.2, f"memory pressure: some tasks stalled {psi:.0f}% of the time")
    dirty = ev.inside.peak("host", "os.memory", "dirty_mb") or 0.0
    limit = ev.inside.peak("host", "os.memory", "dirty_threshold_mb") or 0.0
    if limit and dirty > 0.8 * limit:
        s.add(0.3, f"dirty page cache {dirty:.0f} MB near the {limit:.0f} MB throttle limit")
    _writeback_burst(s, ev)
    # In a checkpoint's sync phase its fsyncs flush what PostgreSQL wrote before the
    # window, which the window's own write counters do not show: the disk then writes
    # PostgreSQL's pages, not "other" page cache (checkpoint-flush-storm's fsyncs flush
    # ~400 MB left dirty by the data load and the run: read as other page cache, they would
    # give memory-reclaim half its score and put it over checkpoint-io).
    if not _syncing(ev):
        foreign_writeback(s, ev)
    _beside_a_device_fault(s, ev)
    _during_a_cut(s, ev)
    return s.finding()


def _beside_a_device_fault(s: Score, ev: WindowEvidence) -> None:
    """A window with a fault of a volume's device in it: the writeback seen then is that
    device's queue, held up by the fault and let go after it (read as other page cache,
    it would put memory-reclaim over the pause itself); storage-device names the
    window."""
    fault = _device_fault(ev)
    if fault is not None:
        _halve(s, f"{fault.node}'s storage device had a fault ({fault.attrs.get('action')}) "
                  f"at {at(fault)}, and its writes waited on it")


def _writeback_burst(s: Score, ev: WindowEvidence) -> None:
    """Dirty page cache written back all at once: the kernel had not started background
    writeback (its threshold is above what piled up), and an fsync, typically the
    checkpoint's, forced it out; worse when PostgreSQL's write-back hints are off. Only
    where the client backends waited on the disk: other programs' page cache goes under
    writeback too (237 MB at once beside a test suite), and a read-only load whose
    backends never wait on it is not held up by it."""
    burst = ev.inside.peak("host", "os.memory", "writeback_mb") or 0.0
    # the healthy seconds' mean, not their peak: the usual level, not one odd second
    usual = ev.healthy.mean("host", "os.memory", "writeback_mb") or 0.0
    if burst < WRITEBACK_BURST_MB or burst < 4 * max(usual, 1.0) or not waited_on_the_disk(ev):
        return
    s.add(0.3, f"{burst:.0f} MB of page cache under writeback at once (healthy seconds "
               f"averaged {usual:.0f} MB)")
    background = ev.inside.low("host", "os.memory", "dirty_background_threshold_mb")
    if background is not None and background > 2 * burst:
        s.add(0.2, f"the kernel starts background writeback only at {background:.0f} MB "
                   "of dirty memory (vm.dirty_background_ratio/bytes), so writes pile up "
                   "until an fsync forces them out")
    # With write-back hints on, a checkpoint's fsync flushes its own recent writes:
    # checkpoint IO (checkpoint_io counts it). With them off, its writes piled up as
    # dirty page cache, and the fsync had to write the whole pile at once.
    syncing = _syncing(ev)
    if syncing and _flush_hints_off(ev):
        s.add(0.4, f"the checkpoint started {at(syncing[0])} was in its sync phase with "
                   "checkpoint_flush_after = 0: its writes had piled up in the page cache "
                   "and its fsyncs wrote them at once")


def cpu_saturation(ev: WindowEvidence) -> Finding | None:
    s = Score("cpu-saturation")
    idle, idle_h = cpu_busy(ev)
    psi = ev.inside.mean("host", "os.pressure", "some_pct", "cpu") or 0.0
    psi_h = ev.healthy.mean("host", "os.pressure", "some_pct", "cpu") or 0.0
    if idle is not None and idle < 5 and idle < idle_h - 5:
        s.add(0.3, f"CPU idle {idle:.0f}% (healthy {idle_h:.0f}%)")
    if psi > 50 and psi > psi_h + 20:
        s.add(0.3, f"CPU pressure: runnable tasks waited {psi:.0f}% of the time "
                   f"(healthy {psi_h:.0f}%)")
    if s.value > 0:
        wait_signal(s, ev, ("CPU",), "CPU (running, no wait)", weight=0.2)
        _what_it_computed(s, ev, ev.nodes[0], busiest_kind(ev, ev.nodes[0]))
    _cpu_taken_by_others(s, ev, idle)
    _backends_waited_elsewhere(s, ev)
    return s.finding()


def _what_it_computed(s: Score, ev: WindowEvidence, node: str, kind: str | None) -> None:
    """The on-CPU profile's word (os.profile) on a CPU-bound cause: the function whose
    share of the kind's samples rose in the window. Evidence, not weight: it says where
    the CPU went, not whether CPU was the limit."""
    line = kind_line(ev, node, kind) if kind is not None else None
    if line is not None and line not in s.lines:
        s.lines.append(line)


# The backends waited on something else in at least this share of their samples, and ran
# on the CPU in less than ON_CPU_SHARE of them: the CPU did not hold them up.
ELSEWHERE_SHARE, ON_CPU_SHARE = 0.5, 0.25


def _backends_waited_elsewhere(s: Score, ev: WindowEvidence) -> None:
    """A busy CPU explains the stall of backends that wanted it, not of those the sampler
    found waiting on one thing (commits held by a standby's slow disk put 64% of a
    window's samples in IPC:SyncRep, whatever else keeps the machine's CPU busy: that
    is sync-replication, not cpu-saturation)."""
    top = ev.top_waits(ev.nodes[0], 1)
    if not top:
        return  # no waits sampled, or no backend active: no evidence either way
    (wait, share, _), (on_cpu, _) = top[0], ev.shares(ev.nodes[0], ("CPU",))
    if wait != "CPU" and share >= ELSEWHERE_SHARE and on_cpu < ON_CPU_SHARE:
        _halve(s, f"the backends waited on {wait} in {pct(share)} of their samples, and "
                  f"ran on the CPU in {pct(on_cpu)}")


def _cpu_taken_by_others(s: Score, ev: WindowEvidence, idle: float | None) -> None:
    """The machine had no idle CPU, the backends wanted it (mostly on CPU, not waiting),
    and the lab got less of it than in healthy seconds: other processes (a noisy
    neighbour) took it. A real stall, not the server's fault."""
    on_cpu, _ = ev.shares(ev.nodes[0], ("CPU",))
    if idle is None or idle >= 5 or on_cpu < 0.5:
        return
    server, client = (ev.nodes[0], "os.processes", "cpu_cores", "postgres"), (
        "client", "os.processes", "cpu_cores", "pgbench")
    # the lowest second of the window: its second after (in the segment) has recovered
    inside = (ev.inside.low(*server) or 0.0) + (ev.inside.low(*client) or 0.0)
    healthy = (ev.healthy.mean(*server) or 0.0) + (ev.healthy.mean(*client) or 0.0)
    if not healthy or inside > 0.8 * healthy:
        return
    s.add(0.5, f"the machine had no idle CPU and PostgreSQL with pgbench got {inside:.2f} "
               f"of {ev.cores} cores (healthy {healthy:.2f}): other processes took the rest",
          outside=True)


def too_many_connections(ev: WindowEvidence) -> Finding | None:
    """Many backends per core contending on shared-memory locks; without that contention
    many connections are only many connections."""
    node = ev.nodes[0]
    clients = ev.inside.peak(node, "db.backends", "client_backends") or 0.0
    spin = ev.shares(node, ("LWLock:ProcArray", "LWLock:LockManager", "Timeout:SpinDelay",
                            "LWLock:XactSLRU", "LWLock:BufferMapping"))
    if clients <= 4 * ev.cores or spin[0] < 0.2 or spin[0] < spin[1] + 0.1:
        return None
    s = Score("too-many-connections")
    s.sub = "too-many-sessions"
    s.add(0.3, f"{pct(spin[0])} waited on shared-memory locks (ProcArray, LockManager, "
               f"spin delays; healthy {pct(spin[1])})")
    s.add(0.2, f"{clients:.0f} client backends on {ev.cores} cores")
    idle, _ = cpu_busy(ev)
    if idle is not None and idle < 5:
        s.add(0.2, f"CPU idle {idle:.0f}%")
    return s.finding()


def client_bound(ev: WindowEvidence) -> Finding | None:
    thread = ev.inside.mean("client", "os.processes", "max_thread_cores", "pgbench")
    server = ev.inside.mean(ev.nodes[0], "os.processes", "cpu_cores", "postgres")
    if thread is None or server is None:
        return None
    s = Score("client-bound")
    if thread >= 0.9 and server < ev.cores - 0.5:
        s.add(0.4, f"a pgbench thread used {thread:.2f} of a core while PostgreSQL used "
                   f"{server:.1f} of {ev.cores} cores")
        wait_signal(s, ev, ("Client:ClientRead",), "ClientRead (waiting for the client)",
                     weight=0.3)
        _what_it_computed(s, ev, "client", "pgbench")
    return s.finding()


DEVICE_FAULT_WORDS = {
    "pause-disk": "stopped answering",
    "fail-disk": "failed every request with EIO",
    "slow-disk": "answered late",
    "throttle-disk": "was throttled",
}


def _device_fault(ev: WindowEvidence) -> EventView | None:
    """The window's first fault of a storage volume's device (a throttle-disk counts only
    on a node with volumes: without, it is the cgroup envelope's)."""
    for e in ev.events_of("fault"):
        action = str(e.attrs.get("action"))
        if action in DEVICE_FAULT_WORDS and (
                action != "throttle-disk" or volume_devices(ev.manifest, e.node)):
            return e
    return None


def storage_device(ev: WindowEvidence) -> Finding | None:
    """A storage volume's device that hung, failed or slowed (a device fault)."""
    s = Score("storage-device")
    e = _device_fault(ev)
    if e is not None:
        action = str(e.attrs.get("action"))
        names = ", ".join(volume_devices(ev.manifest, e.node)) or "its device"
        s.add(0.6, f"{e.node}'s storage ({names}) {DEVICE_FAULT_WORDS[action]} from "
                   f"{at(e)} (fault {action})")
    if s.value > 0:
        wait_signal(s, ev, (*WAL_WRITE, *DATA_IO), "WAL and data file IO", weight=0.3)
        for node in ev.nodes:
            for name in volume_devices(ev.manifest, node):
                wait = ev.inside.peak(node, "os.disk", "write_await_ms", name)
                healthy = ev.healthy.mean(node, "os.disk", "write_await_ms", name) or 0.0
                if wait is not None and wait > 5 * max(healthy, 1.0):
                    s.add(0.1, f"writes to {name} took up to {wait:.0f} ms (healthy "
                               f"{healthy:.1f} ms)")
    return s.finding()


CUT_WORDS = {"crash": "crashed (kill -9 of every process)",
             "power-loss": "lost power (every process killed, unflushed writes dropped)"}


def _load_restarted_after(manifest: Manifest, cut: dt.datetime) -> bool:
    """A pgbench of the run started after the cut (workload.segments: one per pgbench)."""
    for segment in (manifest.workload or {}).get("segments") or []:
        try:
            started = dt.datetime.fromisoformat(str(segment.get("started_at")).replace(
                "Z", "+00:00"))
        except ValueError:
            continue
        if started > cut:
            return True
    return False


def server_crash(ev: WindowEvidence) -> Finding | None:
    s = Score("server-crash")
    for e in ev.events_of("fault"):
        # a crash or power loss the scenario injected: the outage is the cut's downtime
        # (kill, remount, restart) and the load's restart after it
        action = str(e.attrs.get("action"))
        if action not in CUT_WORDS:
            continue
        down = e.attrs.get("downtime_s")
        recovery = e.attrs.get("recovery_s")
        after = ("then the load restarted" if _load_restarted_after(ev.manifest, e.start)
                 else "and the load was not restarted: its clients died with the server")
        exited = e.attrs.get("exit_wait_s")
        exiting = (f" (its killed processes took {exited} s to exit: blocked in I/O, which "
                   "a kill -9 waits for)" if exited is not None else "")
        s.add(0.8, f"{e.node} {CUT_WORDS[action]} at {at(e)} (fault {action}): down "
                   f"{down if down is not None else '?'} s{exiting}, crash recovery "
                   f"{recovery if recovery is not None else '?'} s, {after}")
        break
    for e in ev.events_of("crash")[:1]:
        what = e.attrs.get("signal") or e.attrs.get("exit_code")
        s.add(0.8, f"{e.attrs.get('process') or 'server process'} (pid {e.attrs.get('pid')}) "
                   f"terminated ({what}) at {at(e)}")
    # a recovery from a base backup (a standby's first start) is no outage; events of
    # older runs have no after_crash and count as before
    outages = [e for e in ev.events_of("recovery", "server-stop")
               if e.kind != "recovery" or e.attrs.get("after_crash", True)]
    for e in outages[:1]:
        s.add(0.2, f"{e.kind} at {at(e)}")
    for e in ev.events_of("server-start")[:1]:
        if e.attrs.get("after_crash"):
            s.add(0.2, f"server restarted after a crash at {at(e)}")
    if s.value > 0:
        errors = ev.events_of("probe-error", "connection-reset")
        if errors:
            s.add(0.1, f"{len(errors)} lost connection(s) reported by telemetry/server")
    return s.finding()


PLAN_SHARE = 0.3  # of a window's statement samples: the changed statement held the stall
PLAN_SLOWER = 5.0  # its time per call this many times the healthy seconds'
# the waits of a backend executing its plan, not waiting on something else
PLAN_EXECUTING = frozenset({"CPU", "IO:DataFileRead", "IO:DataFilePrefetch",
                            "IO:BufFileRead", "IO:BufFileWrite"})


def _time_per_call(segment: Segment, node: str, queryid: str) -> float | None:
    calls = segment.total(node, "db.statements", "calls", queryid)
    spent = segment.total(node, "db.statements", "exec_ms", queryid)
    return spent / calls if calls > 0 else None


def plan_change(ev: WindowEvidence) -> Finding | None:
    """A statement whose plan changed (auto_explain's plans, its generic plan when it
    first ran) took the window's backends: its share of their samples, its time per
    call against the healthy seconds'. Sub-causes: `index-gone` when the plan before used
    an index the plan after does not and that index was dropped (RunPlans.went), else
    `plan-flip` (statistics, settings)."""
    changes = ev.plans.changed(ev.window.start, ev.window.end)
    if not changes:
        return None
    s = Score("plan-change")
    node = ev.nodes[0]
    # A plan is what a backend executes: its samples on the CPU or reading pages. A
    # statement made slow by waiting (a lock, the WAL, a checkpoint's I/O) would be as
    # slow with any plan, and auto_explain's plan of it (a custom plan) can differ from
    # its generic one while nothing changed.
    executing: dict[str, float] = {}
    total = 0.0
    for (where, source, wait), by_label in ev.inside.sums.items():
        if where == node and source == "db.statement_waits" and wait != CLIENTS_TURN:
            for label, count in by_label.items():
                total += count
                if wait in PLAN_EXECUTING:
                    executing[label] = executing.get(label, 0.0) + count
    best = 0.0
    for statement, before, after in changes[:3]:
        line = change_line(change_entry(statement, before, after))
        share = (executing.get(statement.queryid or "", 0.0) / total) if total else None
        part = 0.8 if share is None else min(1.0, share / PLAN_SHARE)
        weight = 0.5 * part
        if share is not None:
            line += (f"; {pct(share)} of the window's statement samples executing it "
                     "(on the CPU or reading pages)")
        inside = _time_per_call(ev.inside, node, statement.queryid or "")
        healthy = _time_per_call(ev.healthy, node, statement.queryid or "")
        if inside is not None and healthy:
            line += f"; {healthy:.3g} ms a call in the healthy seconds, {inside:.3g} ms here"
            if inside >= PLAN_SLOWER * healthy:
                weight += 0.3 * part
        s.add(weight if weight > best else 0.05, line)
        best = max(best, weight)
        gone = [name for name in indexes_gone(before, after) if ev.plans.went(name)]
        if gone:
            s.sub = "index-gone"
            s.add(0.0, f"the plan before used {', '.join(gone)}; the plan after "
                       f"({access(after.outline)}) does not")
        elif s.sub is None:
            s.sub = "plan-flip"
    if ev.plans.cut:
        s.add(0.0, f"{ev.plans.cut} plan(s) were cut short in the log and not compared")
    return s.finding()


def _where(cut: dict[str, Any]) -> str:
    return f"the {cut['kind']} of {cut['node']} at {float(cut.get('at_s') or 0):g} s"


def _setting_off(manifest: Manifest, name: str) -> bool:
    value = manifest.node_settings().get(name)
    return isinstance(value, dict) and str(value.get("setting")) == "off"


def data_loss(section: dict[str, Any], manifest: Manifest) -> Finding | None:
    """Acknowledged commits missing after a cut, damaged relations, broken invariants,
    or a server that did not come back: what a cut must never cost."""
    s = Score("data-loss")
    for cut in section["cuts"]:
        if cut.get("lost_commits") and not cut.get("loss_allowed"):
            window = cut.get("lost_window_s")
            # counted exactly by the ledger: a fact, not an inference
            s.add(0.99, f"{cut['lost_commits']:,} acknowledged commits lost at {_where(cut)}"
                       + (f", acknowledged {window[0]:.1f}-{window[1]:.1f} s before it"
                          if window else "")
                       + f" (ledger: {section['acknowledged'] or 0:,} acknowledged in all)")
            s.sub = "unexpected"
        if cut.get("server_up") is False:
            s.add(0.9, f"the server did not come back after {_where(cut)}: "
                       f"{cut.get('start_error') or '?'}")
            s.sub = "unrecoverable"
    for item in section["corruption"][:3]:
        s.add(0.9, f"corruption found {item['found']}: {item['relation'] or '(no relation)'}"
                   f"{', ' + item['where'] if item.get('where') else ''}: {item['message']}")
        s.sub = s.sub or "corruption"
    for item in section["invariant_violations"][:1]:
        s.add(0.9, f"{item['invariant']} broken {item['found']}: {item['sums']}")
        s.sub = s.sub or "corruption"
    if section["allowed_lost_commits"] and s.value == 0:
        s.add(0.6, f"{section['allowed_lost_commits']:,} acknowledged commits lost, within "
                   "what synchronous_commit = off allows (commits acknowledged before their "
                   f"WAL was flushed, up to {section.get('allowed_loss_window_s', 0.6):g} s)")
        s.sub = "synchronous-commit-off"
    if s.value > 0:
        for name in ("fsync", "full_page_writes"):
            if _setting_off(manifest, name):
                s.add(0.1, f"{name} = off: PostgreSQL itself does not make its writes "
                           "durable" if name == "fsync" else
                           f"{name} = off: a page torn by the cut cannot be repaired from WAL")
    return s.finding()


CAUSES: tuple[Cause, ...] = (
    Cause("checkpoint-io", "checkpoint flush IO saturation", checkpoint_io),
    Cause("wal-segment-init", "WAL segment creation (zero-fill and fsync)", wal_segment_init,
          steady_state.wal_segment_init),
    Cause("wal-write", "WAL write/flush latency", wal_write, steady_state.wal_write),
    Cause("lock-contention", "row or relation lock contention", lock_contention,
          steady_state.lock_contention),
    Cause("sync-replication", "synchronous replication wait / standby cannot keep up",
          sync_replication, steady_state.sync_replication),
    Cause("vacuum-io", "vacuum/autovacuum IO", vacuum_io),
    Cause("memory-reclaim", "memory reclaim and dirty writeback", memory_reclaim),
    Cause("cpu-saturation", "CPU saturation", cpu_saturation),
    Cause("too-many-connections", "too many connections for the cores", too_many_connections,
          steady_state.too_many_connections),
    Cause("client-bound", "client-bound load generator", client_bound, steady_state.client_bound),
    Cause("server-crash", "server crash/restart", server_crash),
    Cause("storage-device", "storage device hung, failed or slowed", storage_device),
    Cause("network", "network: a link cut, narrower than the WAL, or far away",
          network_cause.network, network_cause.steady),
    Cause("plan-change", "a statement's plan changed (an index gone, statistics)",
          plan_change),
    Cause("data-loss", "acknowledged commits lost or data damaged by a crash or power loss",
          None, durability=data_loss),
    # one per layer that can drop a flush PostgreSQL asked for (durability.FLUSH_LAYERS)
    *(Cause(layer.cause, layer.title, None, durability=flush_scorer(layer))
      for layer in FLUSH_LAYERS),
)
UNKNOWN = Cause("unknown", "unknown: the evidence is weak", lambda ev: None)
CAUSE_IDS = (*(c.id for c in CAUSES), UNKNOWN.id)


def _unknown(ev: WindowEvidence, best: float) -> Finding:
    lines = [f"no cause reaches confidence {WEAK_BELOW} (best {best:.2f})"]
    for node in ev.nodes[:2]:
        top = ev.top_waits(node)
        if top:
            lines.append("top waits of client backends: " + ", ".join(
                f"{w} {pct(s)} (healthy {pct(h)})" for w, s, h in top))
    if ev.missing:
        lines.append("missing: " + "; ".join(ev.missing))
    return Finding(UNKNOWN.id, round(1.0 - best, 2), lines)


def ranked_causes(ev: WindowEvidence) -> list[Finding]:
    """Findings for one window, most likely first."""
    findings = [f for c in CAUSES if c.score is not None and (f := c.score(ev)) is not None
                and f.confidence >= MIN_CONFIDENCE]
    findings.sort(key=lambda f: f.confidence, reverse=True)
    best = findings[0].confidence if findings else 0.0
    if best < WEAK_BELOW:
        findings.insert(0, _unknown(ev, best))
    return findings


def steady_causes(ev: WindowEvidence) -> list[Finding]:
    """What held the whole run back, most likely first (steady.py): findings of
    steady_state.STEADY_FLOOR or more; none for a run that was only doing its work."""
    findings = [f for c in CAUSES if c.steady is not None
                and (f := c.steady(ev)) is not None and f.confidence >= steady_state.STEADY_FLOOR]
    return sorted(findings, key=lambda f: f.confidence, reverse=True)


def durability_causes(section: dict[str, Any], manifest: Manifest) -> list[Finding]:
    """What the run's cuts cost in data, most likely first (durability/section.py)."""
    findings = [f for c in CAUSES if c.durability is not None
                and (f := c.durability(section, manifest)) is not None]
    return sorted(findings, key=lambda f: f.confidence, reverse=True)
