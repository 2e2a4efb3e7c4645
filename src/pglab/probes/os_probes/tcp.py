"""os.tcp: replication sockets' RTT, queues and throughput, from `ss`."""

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
    HOST,
    PROC,
    SYS,
    OsProbe,
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
    help = "RTT, queues, socket buffers and throughput of replication TCP connections (ss)"

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

    def node_ports(self) -> dict[int, str]:
        """Port -> node, read again each time: a restarted node may have moved."""
        ports = {port: name for name, port in self.shown_ports.items()}
        for node in self.ctx.nodes:
            text = read_text(node.data_dir / "postmaster.pid") if node.data_dir else None
            port = procfs.parse_postmaster_port(text) if text else None
            if port is not None:
                ports[port] = node.name
        return ports

    def run_ss(self, ports: dict[int, str]) -> str:
        if self.ss is None:
            return ""
        wanted = " or ".join(f"sport = :{p} or dport = :{p}" for p in sorted(ports))
        try:
            result = subprocess.run(
                [self.ss, "-tinpmH", "state", "established", f"( {wanted} )"],
                capture_output=True,
                text=True,
                timeout=2,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return result.stdout if result.returncode == 0 else ""

    def is_replication(self, sock: procfs.TcpSocket) -> bool:
        if not self.replication_only or sock.pid is None:
            return True
        raw = read_text(self.proc_root / str(sock.pid) / "cmdline") or ""
        return procfs.process_kind(raw) in REPLICATION_KINDS

    def owner_node(self, sock: procfs.TcpSocket, ports: dict[int, str]) -> str:
        """The node on the listening side, else the node whose postmaster is the owner's parent."""
        if sock.local_port in ports:
            return ports[sock.local_port]
        text = read_text(self.proc_root / str(sock.pid) / "stat") if sock.pid else None
        owner = procfs.parse_pid_stat(text) if text else None
        postmasters = {node.postmaster_pid(): node.name for node in self.ctx.nodes}
        return postmasters.get(owner.ppid, HOST) if owner else HOST

    def sample(self, now: dt.datetime) -> ProbeOutput:
        out = ProbeOutput()
        ports = self.node_ports()
        if not ports or self.ss is None:
            return out
        text = self.run_ss(ports)
        at = time.monotonic()
        current = {
            f"{s.local}->{s.peer}": s for s in procfs.parse_ss(text) if self.is_replication(s)
        }
        if self.previous is not None:
            for label, sock in current.items():
                node = self.owner_node(sock, ports)
                self.emit(out, now, node, label, procfs.socket_gauges(sock))
                if label in self.previous:
                    self.emit(
                        out,
                        now,
                        node,
                        label,
                        procfs.socket_rates(self.previous[label], sock, at - self.previous_at),
                    )
        self.previous, self.previous_at = current, at
        return out
