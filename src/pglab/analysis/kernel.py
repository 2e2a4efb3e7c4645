"""Evidence from below PostgreSQL's edge: what the processes behind a wait did in the kernel
(os.kernel: syscall and kernel-frame shares per kind and second).

A kind's share over a set of seconds is the mean of its per-second shares: each second
holds the same number of reads of a process (wait_sampling_hz), so seconds weigh alike
while the kind's processes stay the same.
"""

from __future__ import annotations

from pglab.analysis.evidence import Segment, WindowEvidence
from pglab.results.kernel_series import ON_CPU, USER, frames_summary

SOURCE = "os.kernel"
# The wait sampler's backend types -> os.kernel's kinds (process titles)
KIND_OF_BACKEND = {
    "client backend": "backends",
    "walwriter": "walwriter",
    "checkpointer": "checkpointer",
    "background writer": "bgwriter",
    "walreceiver": "walreceiver",
    "walsender": "walsender",
    "startup": "startup",
    "autovacuum worker": "autovacuum",
    "archiver": "archiver",
}
NOT_A_CALL = (ON_CPU, USER)


def has_kernel_samples(segment: Segment, node: str) -> bool:
    return any(n == node and source == SOURCE for n, source, _ in segment.sums)


def shares(segment: Segment, node: str, kind: str, prefix: str) -> dict[str, float]:
    """Mean share (%) per name of a kind's `prefix` metrics ("syscall:", "stack:", ...)."""
    seconds = segment.sums.get((node, SOURCE, "samples"), {})
    if kind not in seconds or segment.seconds == 0:
        return {}
    found = {}
    for (n, source, metric), by_label in segment.sums.items():
        if n == node and source == SOURCE and metric.startswith(prefix) and kind in by_label:
            found[metric.removeprefix(prefix)] = by_label[kind] / segment.seconds
    return found


def _top(found: dict[str, float], skip: tuple[str, ...] = ()) -> tuple[str, float] | None:
    ranked = sorted(((v, k) for k, v in found.items() if k not in skip), reverse=True)
    return (ranked[0][1], ranked[0][0]) if ranked else None


def _risen(ev: WindowEvidence, node: str, kind: str, prefix: str,
           skip: tuple[str, ...] = ()) -> tuple[str, float, float] | None:
    """The name whose share rose most against the healthy seconds (at least 10% of the
    window's samples): (name, window %, healthy %). What is new in the window, not the
    idle sleep every kind has (a backend waiting for a lock or its client is in
    epoll_wait in healthy seconds too)."""
    inside = shares(ev.inside, node, kind, prefix)
    healthy = shares(ev.healthy, node, kind, prefix)
    ranked = sorted(((v - healthy.get(k, 0.0), k) for k, v in inside.items()
                     if k not in skip and v >= 10), reverse=True)
    if not ranked:
        return None
    name = ranked[0][1]
    return name, inside[name], healthy.get(name, 0.0)


def in_the_kernel(ev: WindowEvidence, node: str, kind: str) -> str | None:
    """"fdatasync 46% (healthy 8%) -> folio_wait_bit ... ext4_sync_file 40%, uninterruptible
    (D) 46%": the kind's call that rose most in the window, the frames that rose most, and
    its share of uninterruptible sleep."""
    call = _risen(ev, node, kind, "syscall:", NOT_A_CALL)
    if call is None:
        return None
    text = f"{call[0]} {call[1]:.0f}% (healthy {call[2]:.0f}%)"
    frames = _risen(ev, node, kind, "stack:") or _risen(ev, node, kind, "wchan:")
    if frames is not None:
        text += f" -> {frames_summary(frames[0])} {frames[1]:.0f}%"
    stuck = shares(ev.inside, node, kind, "state:").get("uninterruptible", 0.0)
    if stuck >= 5:
        text += f", uninterruptible (D) {stuck:.0f}%"
    return text


def dominant_wait_line(ev: WindowEvidence) -> str | None:
    """The kernel side of the window's dominant wait of client backends, on the node where
    it is largest: "client backends in IO:WalSync (62% of samples) were in the kernel in
    fdatasync 80% -> ..."."""
    best: tuple[float, str, str] | None = None
    for node in ev.nodes:
        top = ev.top_waits(node, 1)
        if top and (best is None or top[0][1] > best[0]):
            best = (top[0][1], node, top[0][0])
    if best is None or not has_kernel_samples(ev.inside, best[1]):
        return None
    share, node, wait = best
    kernel = in_the_kernel(ev, node, "backends")
    if kernel is None:
        return None
    return (f"client backends on {node}, {share:.0%} of whose samples were in {wait}, were "
            f"in the kernel in {kernel}")


def receiver_line(ev: WindowEvidence, node: str) -> str | None:
    """The WAL receiver writing vs flushing: its write and sync calls' shares, window and
    healthy (the receive queue, next to it, says whether it kept up with the network)."""
    calls = shares(ev.inside, node, "walreceiver", "syscall:")
    if not calls:
        return None
    healthy = shares(ev.healthy, node, "walreceiver", "syscall:")
    writes = ("pwrite64", "write", "pwritev", "pwritev2")
    syncs = ("fdatasync", "fsync", "sync_file_range")

    def part(names: tuple[str, ...], found: dict[str, float]) -> tuple[float, str]:
        """Their summed share, and which of them, commonest first ("fdatasync/fsync")."""
        hits = sorted(((found[n], n) for n in names if found.get(n, 0.0) > 0), reverse=True)
        return sum(v for v, _ in hits), "/".join(n for _, n in hits) or names[0]

    write, write_name = part(writes, calls)
    sync, sync_name = part(syncs, calls)
    write_h, _ = part(writes, healthy)
    sync_h, _ = part(syncs, healthy)
    text = (f"the WAL receiver on {node} spent {write:.0f}% of its samples in {write_name} "
            f"and {sync:.0f}% in {sync_name} (healthy {write_h:.0f}% and {sync_h:.0f}%)")
    frames = _top(shares(ev.inside, node, "walreceiver", "stack:"))
    if frames is not None and frames[1] >= 10:
        text += f"; waiting in {frames_summary(frames[0])} {frames[1]:.0f}%"
    return text
