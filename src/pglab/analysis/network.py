"""The `network` cause: a link between the lab's hosts that holds commits or statements
back, told apart from a standby that cannot take in what arrives.

Each sub-cause is read from the sockets' own figures (os.tcp: `ss` on both ends of each
replication connection, in each host's namespace), the links' counters (os.links) and the
links the run measured at setup (the manifest's `network`):
- link-latency: commits wait on SyncRep, and the replication link's round trip is most of
  what the standby takes to confirm a flush (a commit costs at least rtt + flush);
- narrow-link: the WAL waits in the sending socket's queue (the primary's Send-Q) while
  the receiving socket's (the standby's Recv-Q) stays near empty: the link carries less
  than is written. A standby that cannot take in what arrives fills its own Recv-Q
  instead, and so, once its window closes, the primary's Send-Q too: that is the
  standby's (sync-replication), never the link's;
- partition: a replication socket retransmits while it delivers nothing: the link drops
  what is sent and TCP keeps the session open;
- client-far: the backends wait for the client most of the time, and the clients' route
  to the primary (their link, or through the pooler's own host its two) has a round trip
  that is the larger part of that wait (measured at setup, and on the clients' own
  sockets from the client's host: os.tcp's `clients:` series).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from pglab.analysis.evidence import WindowEvidence
from pglab.analysis.signals import Finding, Score, pct, queue_head_waits, wait_signal
from pglab.probes.procfs.tcp import CLIENTS, clients_label

SEND_BACKLOG_BYTES = 2**20  # WAL queued in a sending socket: more than a round trip's worth
RECEIVE_QUIET_BYTES = 64 * 1024  # a receiving socket this empty read what arrived
STUCK_BYTES = 4096  # unacknowledged data waiting on average: more than a reply or two
DELIVERED_SHARE = 0.25  # of the healthy seconds' bytes acknowledged: little got through
LINK_FULL = 0.8  # of the configured bandwidth: the link ran at its limit
LINK_SHARE = 0.5  # of the standby's confirmation time (or a backend's ClientRead) the rtt is
FAR_MS = 0.3  # a round trip this long is a link's, not a host's loopback (~0.03 ms)
DOMINANT = 0.3  # share of client-backend samples from which a wait holds a run back
CLIENT_HOST = "client"  # the load generator's host (scenario.host_names)


def connection(label: str) -> frozenset[str]:
    """Both ends of a TCP connection, the same whichever end's socket `label` names: the
    one connection shows twice, as the walsender's socket and the walreceiver's."""
    local, _, peer = label.partition("->")
    return frozenset((local, peer))


def tcp_labels(ev: WindowEvidence, metric: str) -> list[tuple[str, str]]:
    """(node, socket label) of the replication sockets that have `metric` in the window
    (the load generator's sockets, summed up per pair of hosts, are not one of them)."""
    return [(node, label) for (node, source, m), labels in ev.inside.sums.items()
            if source == "os.tcp" and m == metric for label in labels
            if not label.startswith(CLIENTS)]


def receive_backlogs(ev: WindowEvidence) -> dict[frozenset[str], tuple[str, str, float]]:
    """Connections whose receiving socket filled up (connection -> node, label, peak
    bytes queued): the receiving process did not read what had arrived."""
    found = {}
    for node, label in tcp_labels(ev, "recv_q_bytes"):
        key = (node, "os.tcp", "recv_q_bytes")
        queued = ev.inside.peak(*key, label) or 0.0
        fill = ev.inside.peak(node, "os.tcp", "rcv_buffer_fill_pct", label) or 0.0
        if (queued > 2**20 or fill >= 90) and queued > 4 * (ev.healthy.peak(*key, label) or 0):
            found[connection(label)] = (node, label, queued)
    return found


def worst_ends(ev: WindowEvidence, metric: str, rose: Callable[[float, float], bool],
               skip: Collection[frozenset[str]] = ()) -> list[tuple[float, float, str]]:
    """Per connection (not in `skip`), the end whose `metric` rose the most against the
    healthy seconds: (inside mean, healthy mean, socket label)."""
    worst: dict[frozenset[str], tuple[float, float, str]] = {}
    for node, label in tcp_labels(ev, metric):
        inside = ev.inside.mean(node, "os.tcp", metric, label) or 0.0
        healthy = ev.healthy.mean(node, "os.tcp", metric, label) or 0.0
        key = connection(label)
        if (key not in skip and rose(inside, healthy)
                and inside > worst.get(key, (0.0, 0.0, ""))[0]):
            worst[key] = (inside, healthy, label)
    return list(worst.values())


def _ends(ev: WindowEvidence) -> dict[frozenset[str], dict[str, str]]:
    """connection -> {node: its socket's label}: which host holds which end."""
    ends: dict[frozenset[str], dict[str, str]] = {}
    for node, label in tcp_labels(ev, "send_q_bytes"):
        ends.setdefault(connection(label), {})[node] = label
    return ends


def _links(ev: WindowEvidence) -> list[dict[str, Any]]:
    network = ev.manifest.network or {}
    return [link for link in network.get("links") or [] if isinstance(link, dict)]


def link_between(ev: WindowEvidence, one: str, other: str) -> dict[str, Any]:
    """The run's link between two hosts (configured and measured), or {}."""
    return next((link for link in _links(ev)
                 if set(link.get("between") or []) == {one, other}), {})


def _measured_rtt(link: dict[str, Any]) -> float | None:
    rtt = ((link.get("measured") or {}).get("rtt_ms") or {}).get("p50")
    return float(rtt) if isinstance(rtt, int | float) else None


def _narrow_link(s: Score, ev: WindowEvidence, primary: str) -> bool:
    """The sender's queue filled while the receiver's stayed empty (per connection)."""
    found = False
    for ends in _ends(ev).values():
        sender = ends.get(primary)
        receivers = [(node, label) for node, label in ends.items() if node != primary]
        if sender is None or not receivers:
            continue
        node, receiver = receivers[0]
        key = (primary, "os.tcp", "send_q_bytes")
        queued = ev.inside.peak(*key, sender) or 0.0
        healthy = ev.healthy.peak(*key, sender) or 0.0
        received = ev.inside.peak(node, "os.tcp", "recv_q_bytes", receiver) or 0.0
        if queued < SEND_BACKLOG_BYTES or queued < 4 * healthy or received > RECEIVE_QUIET_BYTES:
            continue
        found = True
        s.add(0.5, f"up to {queued / 2**20:.1f} MB of WAL waited in the primary's Send-Q of "
                   f"{sender} while {node}'s Recv-Q held at most {received / 1024:.0f} kB: "
                   "the standby read all that arrived, the link carried less than was sent")
        configured = float((link_between(ev, primary, node).get("configured") or {}).get(
            "bandwidth_mbps") or 0)
        carried = ev.inside.peak(primary, "os.links", "sent_mbit_s", node)
        if configured and carried is not None and carried >= LINK_FULL * configured:
            s.add(0.2, f"the link {primary} -> {node} carried up to {carried:.1f} Mbit/s of "
                       f"its {configured:g} Mbit/s")
    return found


def _partition(s: Score, ev: WindowEvidence, primary: str) -> bool:
    """A replication connection whose sending end held data that its peer acknowledged
    almost none of, while the peer's receive queue stayed empty: what was sent did not
    arrive (a standby that stopped reading fills its Recv-Q instead, its kernel still
    acknowledging until the window closes)."""
    found = False
    for ends in _ends(ev).values():
        sender = ends.get(primary)
        receivers = [(node, label) for node, label in ends.items() if node != primary]
        if sender is None or not receivers:
            continue
        node, receiver = receivers[0]
        waiting = ev.inside.mean(primary, "os.tcp", "send_q_bytes", sender) or 0.0
        waiting_h = ev.healthy.mean(primary, "os.tcp", "send_q_bytes", sender) or 0.0
        sent = ev.inside.mean(primary, "os.tcp", "sent_mbps", sender) or 0.0
        sent_h = ev.healthy.mean(primary, "os.tcp", "sent_mbps", sender) or 0.0
        arrived = ev.inside.peak(node, "os.tcp", "recv_q_bytes", receiver) or 0.0
        if (waiting < STUCK_BYTES or waiting < 4 * waiting_h or sent_h <= 0
                or sent > DELIVERED_SHARE * sent_h or arrived > RECEIVE_QUIET_BYTES):
            continue
        found = True
        s.add(0.6, f"{waiting / 1024:,.0f} kB waited on average in the primary's Send-Q of "
                   f"{sender} (healthy {waiting_h / 1024:,.0f} kB) while {node} acknowledged "
                   f"{sent * 1024:,.0f} kB/s of it (healthy {sent_h * 1024:,.0f} kB/s) and "
                   f"its Recv-Q held at most {arrived / 1024:,.0f} kB: what was sent did not "
                   "arrive, and the session stayed open")
        retrans = ev.inside.total(primary, "os.tcp", "retrans_per_s", sender)
        if retrans > 0:
            s.add(0.1, f"{retrans:.0f} TCP retransmission(s) on {sender} meanwhile, backing "
                       "off")
    return found


LATENCY_HELD = 0.5  # of client backends' samples: most sessions wait for the standby


def network(ev: WindowEvidence) -> Finding | None:
    """One stall window: a link that was cut, narrower than the WAL, or slower."""
    s = Score("network")
    primary = ev.nodes[0]
    if _partition(s, ev, primary):
        s.sub = "partition"
    if _narrow_link(s, ev, primary):
        s.sub = s.sub or "narrow-link"
    if s.sub is None:
        for inside, _healthy, label in worst_ends(
                ev, "retrans_per_s", lambda inside, healthy: inside > 1 and inside > 3 * healthy):
            s.add(0.3, f"{inside:.0f} TCP retransmissions/s on {label}")
    # A receiver that stops reading stretches the round trips too: that delay is the
    # receiver's (sync-replication says so), not the wire's.
    for inside, healthy, label in worst_ends(
            ev, "rtt_ms", lambda inside, healthy: inside > 5 * max(healthy, 0.05) and inside > 1,
            skip=receive_backlogs(ev)):
        s.add(0.4, f"round-trip time {inside:.1f} ms on {label} (healthy {healthy:.2f} ms)")
        s.sub = s.sub or "link-latency"
    held, held_h = _held_for_the_standby(ev, primary)
    if s.sub == "link-latency" and held >= LATENCY_HELD:
        # A synchronous standby's commits wait on SyncRep in healthy seconds too, so the
        # share hardly rises when the round trip does: that most sessions wait for the
        # standby while the replication connection's round trip is 5x its usual says the
        # link holds them.
        s.add(0.2, f"{pct(held)} of sampled client backends waited for the standby, on "
                   f"SyncRep or queued behind sessions waiting there (healthy {pct(held_h)}): "
                   "each commit waits for it across that link")
    elif s.value > 0:
        wait_signal(s, ev, ("IPC:SyncRep",), "SyncRep, for a standby behind the link",
                    weight=0.2)
    return s.finding()


def _held_for_the_standby(ev: WindowEvidence, primary: str) -> tuple[float, float]:
    """(window, healthy) share of client backends waiting for the standby: on SyncRep,
    and, when the lock queues' heads mostly waited on SyncRep themselves (a hot row whose
    holder's commit waits for the standby), those queued on heavyweight locks."""
    syncrep, syncrep_h = ev.shares(primary, ("IPC:SyncRep",))
    heads = queue_head_waits(ev)
    if 2 * heads.get("IPC:SyncRep", 0) <= sum(heads.values()):
        return syncrep, syncrep_h
    locks, locks_h = ev.shares(primary, prefix="Lock:")
    return syncrep + locks, syncrep_h + locks_h


def link_held_back(ev: WindowEvidence) -> str | None:
    """The sub-cause when a stall's SyncRep waits are the link's (cut or narrower than the
    WAL), for sync-replication to give way to; None when they are not."""
    finding = network(ev)
    if finding is None or finding.sub not in ("partition", "narrow-link"):
        return None
    return finding.sub


def commit_quorum(manifest_scenario: dict[str, Any], standbys: list[str]
                  ) -> tuple[list[str], int]:
    """The standbys a commit waits on and how many of them must confirm: topology
    synchronous "on" is the first standby alone, "any:K" the K fastest of all, "off"
    none (lab/topology.py makes synchronous_standby_names so)."""
    topology = manifest_scenario.get("topology")
    mode = str(topology.get("synchronous", "off")) if isinstance(topology, dict) else "off"
    if mode == "on":
        return standbys[:1], 1
    if mode.startswith("any:") and mode[4:].isdigit():
        return standbys, int(mode[4:])
    return [], 0


def clients_route(manifest_scenario: dict[str, Any]) -> list[tuple[str, str]]:
    """The links the clients' statements cross to the primary: theirs, or through a
    pooler on a host of its own (lab/lab.py puts it there) the client's link to it and
    its link to the primary."""
    topology = manifest_scenario.get("topology")
    workload = manifest_scenario.get("workload")
    topology = topology if isinstance(topology, dict) else {}
    path = workload.get("path") if isinstance(workload, dict) else None
    if (topology.get("pooler", "none") != "none" and path == "pooler"
            and topology.get("pooler_host", "own") == "own"):
        return [("client", "pooler"), ("pooler", "primary")]
    return [("client", "primary")]


def _clients_rtt(ev: WindowEvidence) -> tuple[float, str] | None:
    """The round trip of the clients' route to the primary as measured at setup (ms),
    and that route in words; None when a link of it was not measured."""
    route = clients_route(ev.manifest.scenario)
    rtts = [_measured_rtt(link_between(ev, a, b)) for a, b in route]
    if any(rtt is None for rtt in rtts):
        return None
    total = sum(rtt for rtt in rtts if rtt is not None)
    if len(route) == 1:
        return total, "whose link to the primary"
    hops = ", ".join(f"{a} <-> {b} {rtt:.2f} ms" for (a, b), rtt in zip(route, rtts,
                                                                        strict=True))
    return total, f"whose route to the primary through the pooler's host ({hops})"


def _quorum(ev: WindowEvidence) -> tuple[list[str], int]:
    return commit_quorum(ev.manifest.scenario, list(ev.nodes[1:]))


def _kth(found: list[tuple[float, str]], k: int) -> tuple[float, str] | None:
    """The K-th smallest: what a quorum of K waits for."""
    return sorted(found)[k - 1] if 0 < k <= len(found) else None


def _standby_rtt(ev: WindowEvidence) -> tuple[float, str] | None:
    """The round trip a commit waits for, as pglab measured it on the links at setup:
    the synchronous standby's, or in a quorum of K the K-th nearest's (ss's RTT on the
    walsender's socket is no measure of the link: the standby's acknowledgements ride on
    its replies, sent after its flush). An asynchronous standby's link is no commit's."""
    primary = ev.nodes[0]
    waited_on, k = _quorum(ev)
    found = [(rtt, node) for node in waited_on
             if (rtt := _measured_rtt(link_between(ev, primary, node))) is not None]
    return _kth(found, k)


def confirm_time_ms(ev: WindowEvidence) -> float | None:
    """How long the standbys a commit waits on took to confirm a flush on average (ms):
    pg_stat_replication's flush_lag (the round trip, the standby's write and flush), the
    synchronous standby's or the quorum's K-th fastest."""
    key = (ev.nodes[0], "db.replication", "flush_lag_s")
    waited_on, k = _quorum(ev)
    lags = [(1000 * lag, label) for label in ev.inside.labels(*key)
            if (not waited_on or label in waited_on) and (lag := ev.inside.mean(*key, label))]
    found = _kth(lags, k or 1)
    return found[0] if found else None


def far_standby(ev: WindowEvidence, share_of_wait: float = LINK_SHARE / 2
                ) -> tuple[float, str, float | None] | None:
    """(rtt ms, standby, its confirmation time ms) when commits waited on SyncRep for much
    of a run and the link's round trip is at least `share_of_wait` of the standby's
    confirmation (a commit costs rtt + the standby's flush: each is a part)."""
    share, _ = ev.shares(ev.nodes[0], ("IPC:SyncRep",))
    found = _standby_rtt(ev)
    if share < DOMINANT or found is None or found[0] < FAR_MS:
        return None
    confirm = confirm_time_ms(ev)
    if confirm is not None and found[0] < share_of_wait * confirm:
        return None  # the standby's own work (its disk, its CPU) is the larger part
    return found[0], found[1], confirm


def steady(ev: WindowEvidence) -> Finding | None:
    """The whole run: a synchronous standby far away, or a client far from its database."""
    s = Score("network")
    primary = ev.nodes[0]
    far = far_standby(ev)
    if far is not None:
        rtt, standby, confirm = far
        share, _ = ev.shares(primary, ("IPC:SyncRep",))
        s.add(0.3 * min(1.0, share / 0.6), f"{pct(share)} of sampled client backends waited "
                                           "on SyncRep (synchronous standby confirmation)")
        part = min(1.0, rtt / confirm) if confirm else 1.0
        of = (f", {pct(part)} of the {confirm:.2f} ms {standby} took to confirm a flush"
              if confirm else "")
        s.add(0.2 + 0.5 * min(1.0, part / LINK_SHARE),
              f"the link primary <-> {standby} has a round trip of {rtt:.2f} ms (measured "
              f"on the link){of}: a commit takes at least that, one client at most "
              f"{1000 / rtt:,.0f} commits/s")
        s.sub = "link-latency"
    route = _clients_rtt(ev)
    seen = clients_round_trip(ev, primary)
    reading, _ = ev.shares(primary, ("Client:ClientRead",))
    how = "measured at setup"
    if route is None and seen is not None:  # a run whose links were not measured
        route, how = (seen[0], "whose link to the primary"), "its smallest on the clients' sockets"
    if route is not None and route[0] >= FAR_MS and reading >= 0.5:
        client_rtt, whose = route
        s.add(0.6 * min(1.0, reading / 0.7),
              f"{pct(reading)} of sampled client backends waited for the client "
              f"(ClientRead), {whose} has a round trip of "
              f"{client_rtt:.2f} ms ({how}): every statement pays it")
        if seen is not None and seen[0] >= FAR_MS:
            least, median, sockets = seen
            s.add(0.1, f"the clients' {sockets:.0f} connection(s) to the primary saw a round "
                       f"trip of at least {least:.2f} ms all run, {median:.2f} ms smoothed "
                       "(ss on the client's host): the statements crossed that link")
        s.sub = s.sub or "client-far"
    return s.finding()


def clients_round_trip(ev: WindowEvidence, primary: str) -> tuple[float, float, float] | None:
    """What the load generator's own sockets to the primary measured (os.tcp from the
    client's host): the smallest round trip of the run (minrtt: the link's, without the
    server's work that a reply's ACK waits for), the mean of the per-second median
    smoothed RTT, and the most sockets at once; None without them."""
    label = clients_label(CLIENT_HOST, primary)
    least = ev.inside.low(CLIENT_HOST, "os.tcp", "min_rtt_ms", label)
    median = ev.inside.mean(CLIENT_HOST, "os.tcp", "rtt_ms", label)
    sockets = ev.inside.peak(CLIENT_HOST, "os.tcp", "sockets", label)
    if least is None or median is None or sockets is None:
        return None
    return least, median, sockets
