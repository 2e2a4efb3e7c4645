"""Whole-run diagnosis: what holds a run back when it never stalls.

Stall attribution compares a window with the run's healthy seconds; a run that is held
back all the time (every transaction queues on one row, every transaction forks a new
backend) has no stall and no healthy seconds to compare with. These scorers read the
run's healthy seconds (all of them when it never stalled) against fixed thresholds
instead, and only for causes that are a fault in a healthy-looking run: a CPU-bound
benchmark is not one (pgbench is meant to saturate something), so there is no
steady-state CPU cause.

Each scorer is registered on its cause in causes.CAUSES (Cause.steady). A run's
steady-state causes are those reaching STEADY_FLOOR, most likely first.
"""

from __future__ import annotations

from pglab.analysis import network
from pglab.analysis.evidence import EventView, WindowEvidence
from pglab.analysis.names import busiest_queue
from pglab.analysis.signals import Finding, Score, cpu_busy, flush_lag_key, lock_kind, pct

STEADY_FLOOR = 0.4
DOMINANT = 0.3  # share of client-backend samples from which a wait holds a run back
CHURN_PER_COMMIT = 0.3  # new sessions per commit from which connections are churned
CHURN_MIN_PER_S = 10.0
WAL_WAITS = ("IO:WalWrite", "IO:WalSync", "LWLock:WALWrite", "LWLock:WALInsert",
             "LWLock:WALBufMapping")
WAL_INIT = ("IO:WalInitWrite", "IO:WalInitSync")
WAL_FLUSH = ("IO:WalWrite", "IO:WalSync")
# from this share of the WAL IO of WALWriteLock's holders spent creating segments, the
# queue on that lock is the segments' (a quarter: the zero-fill is then a cost as large
# as a third of the WAL itself, on the same disk)
INIT_HEAD = 0.25


def _top(ev: WindowEvidence, prefix: str = "", waits: tuple[str, ...] = ()) -> str:
    shares = ev.inside.wait_shares(ev.nodes[0])
    picked = sorted(((w, v) for w, v in shares.items()
                     if (prefix and w.startswith(prefix)) or w in waits),
                    key=lambda kv: kv[1], reverse=True)[:3]
    return ", ".join(f"{w} {pct(v)}" for w, v in picked)


def _span(ev: WindowEvidence) -> str:
    """The seconds the whole-run evidence covers: all, or those outside the stalls."""
    return "over the whole run" if ev.inside.seconds >= ev.window.seconds \
        else "outside its stalls"


def _dominant(s: Score, ev: WindowEvidence, what: str, prefix: str = "",
              waits: tuple[str, ...] = (), weight: float = 0.6) -> float:
    """Adds the share of client-backend time spent in these waits (see _span)."""
    share, _ = ev.shares(ev.nodes[0], waits or None, prefix)
    if share >= DOMINANT:
        s.add(weight * min(1.0, share / 0.6),
              f"{pct(share)} of sampled client backends waited on {what} {_span(ev)} "
              f"({_top(ev, prefix, waits)})")
    return share


def lock_contention(ev: WindowEvidence) -> Finding | None:
    s = Score("lock-contention")
    if _dominant(s, ev, "heavyweight locks", prefix="Lock:") < DOMINANT:
        return None
    node = ev.nodes[0]
    blocked = ev.inside.mean(node, "db.locks", "blocked_backends") or 0.0
    if blocked >= 1:
        peak = ev.inside.peak(node, "db.locks", "blocked_backends") or blocked
        s.add(0.2, f"{blocked:.1f} backends blocked on locks on average (up to {peak:.0f})")
    queue_line = busiest_queue(ev.lock_queues())
    if queue_line:
        s.add(0.1, queue_line)
    waits = ev.events_of("lock-wait")
    if waits:
        s.add(0.2, f"{len(waits)} lock waits logged, most often for "
                   f"{_most_waited(waits, ev)}")
    deadlocks = ev.events_of("deadlock")
    if deadlocks:
        s.add(0.1, f"{len(deadlocks)} deadlock(s) detected")
    lock_kind(s, ev)
    _behind_slow_commits(s, ev)
    return s.finding()


def _behind_slow_commits(s: Score, ev: WindowEvidence) -> None:
    """Row locks are held until commit: when the backends that were not queued on a lock
    mostly waited for their commit to be flushed or confirmed, the lock queue is the
    symptom of slow commits, not its own cause."""
    shares = ev.inside.wait_shares(ev.nodes[0])
    others = {w: v for w, v in shares.items() if not w.startswith("Lock:")}
    total = sum(others.values())
    commit = sum(v for w, v in others.items() if w in (*WAL_WAITS, "IPC:SyncRep"))
    if total > 0 and commit / total > 0.5:
        s.value /= 3
        s.lines.append(f"(a third: {pct(commit / total)} of the backends not queued on a lock "
                       "waited on WAL flush or synchronous replication; slow commits hold "
                       "row locks longer)")


def _most_waited(waits: list[EventView], ev: WindowEvidence) -> str:
    """The lock most waited for; a wait for a transaction is a wait for a row it changed
    (their ids differ every time), a tuple lock names the row itself; the table, where the
    log's CONTEXT names it."""
    counts: dict[str, int] = {}
    for e in waits:
        target = ev.names.name(str(e.attrs.get("lock_object")), e.node)
        relation = e.attrs.get("relation")
        if target.startswith("transaction "):
            target = (f"the transaction that changed a row of {relation}" if relation
                      else "the transaction that changed a row")
        elif relation:
            target = f"{target} ({relation})"
        key = f"{e.attrs.get('lock_mode')} on {target}"
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts, key=lambda k: counts[k], reverse=True)
    return "; ".join(f"{k} ({counts[k]} times)" for k in ranked[:2])


def too_many_connections(ev: WindowEvidence) -> Finding | None:
    """Connection churn (a new session, so a forked backend, per transaction), or many
    backends per core contending on shared-memory locks."""
    s = Score("too-many-connections")
    node = ev.nodes[0]
    sessions = ev.inside.mean(node, "db.database", "sessions") or 0.0
    commits = ev.inside.mean(node, "db.database", "xact_commit") or 0.0
    tps = ev.window.reference_tps  # the run's median TPS
    churn = sessions >= CHURN_MIN_PER_S and sessions >= CHURN_PER_COMMIT * max(tps, commits / 2)
    if churn:
        s.add(0.5, f"{sessions:.0f} new sessions per second for {tps:.0f} transactions per "
                   "second: the clients connect for (nearly) every transaction, and each "
                   "connection forks and initialises a backend")
    clients = ev.inside.peak(node, "db.backends", "client_backends") or 0.0
    spin, _ = ev.shares(node, ("LWLock:ProcArray", "LWLock:LockManager",
                               "Timeout:SpinDelay", "LWLock:XactSLRU"))
    crowded = clients > 4 * ev.cores and spin >= 0.2
    if crowded:
        s.add(0.4, f"{clients:.0f} client backends on {ev.cores} cores, {pct(spin)} of them "
                   "waiting on shared-memory locks (ProcArray, LockManager, spin delays)")
    if not (churn or crowded):
        return None
    # churn first: a pool of persistent connections answers it whatever the count
    s.sub = "connection-churn" if churn else "too-many-sessions"
    idle, _ = cpu_busy(ev)
    system = ev.inside.mean("host", "os.cpu", "system_pct")
    if idle is not None and idle < 10:
        kernel = (f"; the kernel took {system:.0f}% of the CPU time (creating and tearing "
                  "down backend processes)" if churn and system is not None else "")
        s.add(0.2, f"CPU idle {idle:.0f}%{kernel}")
    return s.finding()


def sync_replication(ev: WindowEvidence) -> Finding | None:
    s = Score("sync-replication")
    if _dominant(s, ev, "SyncRep (synchronous standby confirmation)",
                 waits=("IPC:SyncRep",), weight=0.7) < DOMINANT:
        return None
    key = flush_lag_key(ev, ev.nodes[0])
    for label in ev.inside.labels(*key):
        lag = ev.inside.mean(*key, label) or 0.0
        if lag > 0.01:
            s.add(0.2, f"standby {label} confirmed flushes {lag * 1000:.0f} ms late on "
                       "average")
            break
    far = network.far_standby(ev, share_of_wait=network.LINK_SHARE)
    if far is not None:
        s.value /= 2
        s.lines.append(f"(halved: the replication link's round trip, {far[0]:.2f} ms, is most "
                       "of the wait: see network)")
    return s.finding()


def wal_init_head(ev: WindowEvidence, span: str | None = None) -> tuple[float, str] | None:
    """What share of the WAL IO of WALWriteLock's holders went to creating segments,
    and the line that shows it. The backends queued on the lock wait for its holder,
    which writes and flushes WAL or, when it needs a new segment, zero-fills and fsyncs
    it (IO:WalInit*): the queue is what the holder does. pg_stat_io's WAL bytes (PG 18:
    wal/init vs wal/normal writes) measure it on the same disk; wait samples otherwise,
    though at 10 Hz a creation of a few ms is seldom caught. `span` words the seconds
    read (a stall window's scorer says so; the whole-run default is _span)."""
    span = span or _span(ev)
    node = ev.nodes[0]
    writes = ev.inside.labels(node, "db.io", "write_bytes")
    init = sum(v for label, v in writes.items() if label.endswith("/wal/init"))
    normal = sum(v for label, v in writes.items() if label.endswith("/wal/normal"))
    if init + normal > 0:
        return init / (init + normal), (
            f"{init / 2**20:.0f} MB of the {(init + normal) / 2**20:.0f} MB of WAL IO "
            f"{span} zero-filled new segments (pg_stat_io wal/init writes)")
    creating, flushing = ev.wait_count(node, WAL_INIT), ev.wait_count(node, WAL_FLUSH)
    if creating + flushing > 0:
        return creating / (creating + flushing), (
            f"{creating:.0f} of {creating + flushing:.0f} wait samples of WAL IO {span} "
            "were a process creating a segment (IO:WalInitWrite/WalInitSync)")
    return None


def wal_segment_init(ev: WindowEvidence) -> Finding | None:
    """A queue on WALWriteLock whose holder spends a good part of its IO creating
    segments (tiny segments, wal_recycle off, a slow disk): the segments' doing."""
    node = ev.nodes[0]
    queue, _ = ev.shares(node, ("LWLock:WALWrite", *WAL_INIT))
    head = wal_init_head(ev)
    if queue < DOMINANT or head is None or head[0] < INIT_HEAD:
        return None
    s = Score("wal-segment-init")
    s.add(0.6 * min(1.0, queue / 0.6),
          f"{pct(queue)} of sampled client backends queued on LWLock:WALWrite (or a new "
          f"segment) {_span(ev)}, behind a holder that spent {pct(head[0])} of its WAL IO "
          "creating segments")
    s.add(0.2, head[1])
    added = sum(int(e.attrs.get("wal_added") or 0) for e in ev.events_of("checkpoint"))
    if added:
        s.add(0.1, f"{added} WAL file(s) added by the checkpoints")
    return s.finding()


def wal_write(ev: WindowEvidence) -> Finding | None:
    s = Score("wal-write")
    share = _dominant(s, ev, "WAL write/flush (WalWrite, WalSync, WALWrite lock)",
                      waits=WAL_WAITS, weight=0.5)
    if share < DOMINANT:
        return None
    head = wal_init_head(ev)
    if head is not None and head[0] >= INIT_HEAD:
        # as in a stall window: the queue is then the symptom of segment creation
        s.value /= 2
        s.lines.append(f"(halved: the WALWrite lock's holder spent {pct(head[0])} of its "
                       "WAL IO creating segments: wal-segment-init)")
    full = ev.inside.mean(ev.nodes[0], "db.wal", "wal_buffers_full") or 0.0
    if full > 0:
        s.add(0.1, f"WAL buffers full {full:.0f} times/s")
    await_ms = ev.inside.mean(ev.nodes[0], "os.disk", "write_await_ms")
    if await_ms is not None and await_ms > 5:
        s.add(0.1, f"disk write latency {await_ms:.1f} ms on average")
    return s.finding()


def client_bound(ev: WindowEvidence) -> Finding | None:
    thread = ev.inside.mean("client", "os.processes", "max_thread_cores", "pgbench")
    server = ev.inside.mean(ev.nodes[0], "os.processes", "cpu_cores", "postgres")
    if thread is None or server is None or thread < 0.9 or server >= ev.cores - 0.5:
        return None
    s = Score("client-bound")
    s.add(0.4, f"a pgbench thread used {thread:.2f} of a core {_span(ev)} while "
               f"PostgreSQL used {server:.1f} of {ev.cores} cores")
    share, _ = ev.shares(ev.nodes[0], ("Client:ClientRead",))
    if share >= 0.5:
        s.add(0.3, f"{pct(share)} of sampled client backends waited for the client "
                   "(ClientRead)")
    return s.finding()
