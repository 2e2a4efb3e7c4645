"""os.tcp: replication sockets' RTT, queues and throughput, from `ss`; and, when the load
generator has a host of its own, its sockets' figures from both ends.

`ss -p` names each socket's owner by reading the fd table of every process on the host
(about 8 ms of CPU a call here, more on a busy host), so the probe avoids it: it looks for
the nodes' walsenders and walreceivers among their postmasters' children, runs nothing
while there are none, and finds their sockets' owners from those processes' own fds
(`ss -e` gives each socket's inode). `-p` remains for nodes pglab did not start.

The load generator's sockets need no owner: on the client's host every socket to a node's
port is the load's, and its server end is the node's socket with the same two addresses
swapped. They are one `ss` more a second (in the client's namespace); the nodes' own `ss`
already lists the server ends. A run opens dozens of them, so they are summed up per pair
of hosts and end (procfs.aggregate_gauges), not a series per socket.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import subprocess
import time
from pathlib import Path

from pglab.probes import procfs
from pglab.probes.base import NodeHandle, ProbeContext, ProbeOutput
from pglab.probes.os_probes.common import (
    CLIENT,
    HOST,
    PROC,
    SYS,
    OsProbe,
    children_listed,
    read_children,
    read_stat,
    read_text,
)

REPLICATION_KINDS = frozenset({"walsender", "walreceiver"})

SS_FALLBACKS = ("/usr/sbin/ss", "/sbin/ss", "/usr/bin/ss", "/bin/ss")  # sbin is off some PATHs


def find_ss() -> str | None:
    return shutil.which("ss") or next((p for p in SS_FALLBACKS if os.access(p, os.X_OK)), None)


def port_from_server(node: NodeHandle) -> int | None:
    """`SHOW port` of a node pglab did not start (no data dir, so no postmaster.pid)."""
    if node.connect is None:
        return None
    try:
        with contextlib.closing(node.connect()) as conn:
            row = conn.execute("SHOW port").fetchone()
        return int(row[0]) if row else None
    except Exception:  # any connection or driver problem: this node just has no TCP stats
        return None


class TcpProbe(OsProbe):
    name = "os.tcp"
    help = ("RTT, queues, socket buffers and throughput of replication TCP connections, and "
            "of the load generator's on a host of its own (ss)")

    def __init__(
        self, proc_root: Path = PROC, sys_root: Path = SYS, replication_only: bool = True
    ) -> None:
        super().__init__(proc_root, sys_root)
        # Sockets whose owner ss cannot name (another user's, when not root) are kept.
        self.replication_only = replication_only

    def unavailable_reason(self, ctx: ProbeContext) -> str | None:
        return None if find_ss() else "`ss` (iproute2) is not installed"

    def start(self, ctx: ProbeContext) -> None:
        super().start(ctx)
        self.ss = find_ss()
        self.previous: dict[str, procfs.TcpSocket] | None = None
        self.previous_at = 0.0
        self.shown_ports = {
            node.name: port
            for node in ctx.nodes
            if node.data_dir is None and (port := port_from_server(node)) is not None
        }
        self.children_listed = children_listed(self.proc_root)
        self.kinds: dict[int, str | None] = {}  # pid -> kind, for the postmasters' children

    def node_ports(self) -> dict[int, str]:
        """Port -> node, read again each time: a restarted node may have moved."""
        ports = {port: name for name, port in self.shown_ports.items()}
        for node in self.ctx.nodes:
            text = read_text(node.data_dir / "postmaster.pid") if node.data_dir else None
            port = procfs.parse_postmaster_port(text) if text else None
            if port is not None:
                ports[port] = node.name
        return ports

    def replication_processes(self) -> dict[int, str] | None:
        """The local nodes' walsenders and walreceivers: pid -> node; None when they cannot
        be told without `ss -p` (no children files, or a node pglab did not start)."""
        if not self.children_listed or self.shown_ports or not self.replication_only:
            return None
        candidates: dict[int, str] = {}
        for node in self.ctx.nodes:
            root = node.postmaster_pid()
            if root is not None:
                candidates.update(dict.fromkeys([root, *read_children(self.proc_root, root)],
                                                node.name))
        # A kind, once known, holds for the process's life; None (not retitled yet, or the
        # postmaster) is asked again.
        self.kinds = {pid: self.kinds.get(pid) or procfs.process_kind(
            read_text(f"{self.proc_root}/{pid}/cmdline") or "") for pid in candidates}
        return {pid: node for pid, node in candidates.items()
                if self.kinds[pid] in REPLICATION_KINDS}

    def socket_nodes(self, owners: dict[int, str]) -> dict[int, str]:
        """Socket inode -> node, from the fds of these processes (pid -> node)."""
        nodes = {}
        for pid, node in owners.items():
            fd_dir = f"{self.proc_root}/{pid}/fd"
            with contextlib.suppress(OSError):
                for fd in os.listdir(fd_dir):
                    with contextlib.suppress(OSError):
                        inode = procfs.socket_inode(os.readlink(f"{fd_dir}/{fd}"))
                        if inode is not None:
                            nodes[inode] = node
        return nodes

    def run_ss(self, ports: dict[int, str], with_owners: bool = True
               ) -> list[tuple[str | None, str]]:
        """ss's lines for the nodes' ports, with the node whose namespace they come from:
        this host's namespace (None), or each host's own when the nodes run on hosts of
        their own (both ends of each connection)."""
        namespaces = {node.netns: node.name for node in self.ctx.nodes if node.netns}
        if not namespaces:
            return [(None, self._run_ss([], ports, with_owners))]
        return [(node, self._run_ss(["ip", "netns", "exec", ns], ports, with_owners))
                for ns, node in sorted(namespaces.items())]

    def _run_ss(self, prefix: list[str], ports: dict[int, str], with_owners: bool,
                only_to: bool = False) -> str:
        if self.ss is None:
            return ""
        wanted = " or ".join(f"dport = :{p}" if only_to else f"sport = :{p} or dport = :{p}"
                             for p in sorted(ports))
        try:
            result = subprocess.run(
                [*prefix, self.ss, "-tinmeH" + ("p" if with_owners else ""), "state",
                 "established", f"( {wanted} )"],
                capture_output=True,
                text=True,
                timeout=2,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return result.stdout if result.returncode == 0 else ""

    def client_sockets(self, ports: dict[int, str]) -> list[procfs.TcpSocket]:
        """The load generator's connections to the nodes, from its own host's namespace:
        every socket there to a node's port is the load's (nothing else of pglab's runs
        there); none when the load shares this host."""
        netns = self.ctx.client_netns
        if netns is None:
            return []
        return procfs.parse_ss(self._run_ss(["ip", "netns", "exec", netns], ports,
                                            with_owners=False, only_to=True))

    def is_replication(self, sock: procfs.TcpSocket) -> bool:
        if not self.replication_only or sock.pid is None:
            return True
        raw = read_text(self.proc_root / str(sock.pid) / "cmdline") or ""
        return procfs.process_kind(raw) in REPLICATION_KINDS

    def owner_node(self, sock: procfs.TcpSocket, ports: dict[int, str]) -> str:
        """The node on the listening side, else the node whose postmaster is the owner's parent."""
        if sock.local_port in ports:
            return ports[sock.local_port]
        owner = read_stat(f"{self.proc_root}/{sock.pid}/stat") if sock.pid else None
        postmasters = {node.postmaster_pid(): node.name for node in self.ctx.nodes}
        return postmasters.get(owner.ppid, HOST) if owner else HOST

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        ports = self.node_ports()
        if not ports or self.ss is None:
            return out
        owners = self.replication_processes()
        clients = self.client_sockets(ports)
        if owners == {} and not clients:  # nothing to look at: no need to run ss again
            self.previous, self.previous_at = {}, time.monotonic()
            return out
        texts = self.run_ss(ports, with_owners=owners is None)
        at = time.monotonic()
        current: dict[str, tuple[str, procfs.TcpSocket]] = {}  # label -> node, socket
        # The load's sockets, each end: "<host> local->peer" -> (node, series label, socket).
        loads: dict[str, tuple[str, str, procfs.TcpSocket]] = {}
        nodes = self.socket_nodes(owners) if owners is not None else {}
        # A client socket's server end is the node's socket with the two addresses swapped
        # (which also names the node that client is connected to).
        client_ends = {(sock.local, sock.peer): sock for sock in clients}
        for node, text in texts:
            for sock in procfs.parse_ss(text):
                client = client_ends.get((sock.peer, sock.local))
                if client is not None and node is not None:
                    loads[f"{node} {sock.local}->{sock.peer}"] = (
                        node, procfs.clients_label(node, CLIENT), sock)
                    loads[f"{CLIENT} {client.local}->{client.peer}"] = (
                        CLIENT, procfs.clients_label(CLIENT, node), client)
                elif owners is None:  # ss -p named each socket's owner
                    if self.is_replication(sock):
                        current[f"{sock.local}->{sock.peer}"] = (self.owner_node(sock, ports),
                                                                 sock)
                elif sock.inode in nodes:
                    current[f"{sock.local}->{sock.peer}"] = (nodes[sock.inode], sock)
        if self.previous is not None:
            seconds = at - self.previous_at
            for label, (node, sock) in current.items():
                self.emit(out, now, node, label, procfs.socket_gauges(sock))
                if label in self.previous:
                    self.emit(out, now, node, label,
                              procfs.socket_rates(self.previous[label], sock, seconds))
            self.emit_loads(out, now, loads, seconds)
        self.previous = {label: sock for label, (_, sock) in current.items()}
        self.previous |= {key: sock for key, (_, _, sock) in loads.items()}
        self.previous_at = at
        return out

    def emit_loads(self, out: ProbeOutput, now: dt.datetime,
                   loads: dict[str, tuple[str, str, procfs.TcpSocket]], seconds: float) -> None:
        """The load generator's sockets as one series per pair of hosts and end (a run
        opens dozens of them): procfs.aggregate_gauges and aggregate_rates."""
        assert self.previous is not None
        series: dict[tuple[str, str], list[tuple[str, procfs.TcpSocket]]] = {}
        for key, (node, label, sock) in loads.items():
            series.setdefault((node, label), []).append((key, sock))
        for (node, label), socks in series.items():
            self.emit(out, now, node, label, procfs.aggregate_gauges([s for _, s in socks]))
            self.emit(out, now, node, label, procfs.aggregate_rates(
                [(self.previous[key], sock) for key, sock in socks if key in self.previous],
                seconds))
