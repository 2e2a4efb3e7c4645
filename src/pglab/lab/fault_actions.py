"""What each fault does to a node: one small class per action, listed in ACTIONS.

An action begins (and, when it has a duration, ends) on the run's timeline; what it
returns is recorded in the fault's event. Actions that run SQL for as long as they take
(VACUUM, a bulk UPDATE) run in their own thread and end when the statement does.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import psutil
import psycopg
from psycopg import sql

from pglab.errors import PglabError
from pglab.lab.local import LocalServer, kill_server_tree
from pglab.network.hosts import LabNetwork
from pglab.processes import in_keeper_thread, kill_tree, spawn
from pglab.scenario.fault_kinds import FAULT_KINDS, FaultKind
from pglab.units import parse_duration

ArgSpec = tuple[type, Any]  # (type, default)


@dataclass
class FaultTarget:
    """The node a fault acts on, and what the lab offers for it."""

    node: str
    server: LocalServer
    set_disk_limits: Callable[[dict[str, float]], dict[str, Any]] | None = None
    memory_cgroup_procs: list[Any] | None = None  # cgroup.procs paths of the node, if any
    # Changes the behaviour of the node's emulated volume devices (storage/), if any.
    set_device: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # A power loss of the node's volumes (storage/volume.py): the cut (filesystem shut
    # down, device cache dropped; returns what was dropped) and the reboot (returns the
    # seconds each mount took), when the node's data is on an emulated device.
    power_cut: Callable[[], dict[str, Any]] | None = None
    power_restore: Callable[[], dict[str, float]] | None = None
    # The lab's hosts and links, when each node has a host of its own (network/).
    network: LabNetwork | None = None


class FaultAction(ABC):
    name: ClassVar[str]
    help: ClassVar[str]
    duration: ClassVar[Literal["required", "optional", "none"]] = "optional"
    args: ClassVar[dict[str, ArgSpec]] = {}
    runs_until_done: ClassVar[bool] = False  # ends by itself (a statement), not by duration
    default_duration: ClassVar[float | None] = None  # None: active until the run ends
    kind: ClassVar[FaultKind]  # what it is (its nodes, whether it cuts): FAULT_KINDS

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:  # an action, not a base of some: its kind must exist
            cls.kind = FAULT_KINDS[cls.name]

    def __init__(self, args: dict[str, Any]) -> None:
        self.values: dict[str, Any] = {name: args.get(name, default) for name, (_t, default) in
                       self.args.items()}

    @abstractmethod
    def begin(self, target: FaultTarget) -> dict[str, Any]:
        """Do it; returns attributes for the fault's event."""

    def end(self, target: FaultTarget) -> dict[str, Any]:
        """Undo it (resume, unthrottle...); must be safe to call after a failed begin."""
        return {}

    def wait_done(self, timeout: float | None) -> bool:
        """For runs_until_done actions: True once the work has finished."""
        return True


def _walreceiver_pids(server: LocalServer) -> list[int]:
    if server.process is None:
        return []
    pids = []
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(server.process.pid).children():
            with contextlib.suppress(psutil.NoSuchProcess):
                if "walreceiver" in " ".join(child.cmdline()):
                    pids.append(child.pid)
    return pids


class PauseStandby(FaultAction):
    name = "pause-standby"
    help = ("SIGSTOP a standby (part = 'node': every process; 'walreceiver': only its WAL "
            "receiver) and SIGCONT it after `duration` (or at the end of the run)")
    args: ClassVar[dict[str, ArgSpec]] = {"part": (str, "node")}

    def __init__(self, args: dict[str, Any]) -> None:
        super().__init__(args)
        self._stopped: list[int] = []

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        if self.values["part"] == "walreceiver":
            self._stopped = _walreceiver_pids(target.server)
            for pid in self._stopped:
                with contextlib.suppress(ProcessLookupError):
                    psutil.Process(pid).send_signal(signal.SIGSTOP)
            return {"paused_pids": self._stopped}
        target.server.signal_tree(signal.SIGSTOP)
        self._stopped = [-1]
        return {}

    def end(self, target: FaultTarget) -> dict[str, Any]:
        if self._stopped == [-1]:
            target.server.signal_tree(signal.SIGCONT)
        else:
            for pid in self._stopped:
                with contextlib.suppress(psutil.NoSuchProcess):
                    psutil.Process(pid).send_signal(signal.SIGCONT)
        self._stopped = []
        return {}


class ThrottleDisk(FaultAction):
    name = "throttle-disk"
    help = ("change the node's disk limits (write_mbps, read_mbps, write_iops, read_iops; "
            "0 = unlimited) and put its own back after `duration`: on its storage volume's "
            "device when it has one (every byte), else with its cgroup")
    args: ClassVar[dict[str, ArgSpec]] = {
        "write_mbps": (float, 0.0), "read_mbps": (float, 0.0),
        "write_iops": (int, 0), "read_iops": (int, 0),
    }

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        assert target.set_disk_limits is not None  # checked before the run
        return target.set_disk_limits({k: float(v) for k, v in self.values.items()})

    def end(self, target: FaultTarget) -> dict[str, Any]:
        assert target.set_disk_limits is not None
        return {"restored": target.set_disk_limits({})}


class _Statement(FaultAction):
    """SQL on a side connection, in a thread, for as long as it takes."""

    duration = "none"
    runs_until_done = True

    def __init__(self, args: dict[str, Any]) -> None:
        super().__init__(args)
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self.result: dict[str, Any] = {}

    @abstractmethod
    def statement(self) -> sql.Composed: ...

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        self._conn = target.server.connect()
        query = self.statement()
        conn = self._conn

        def work() -> None:
            started = time.monotonic()
            try:
                cur = conn.execute(query)
                self.result = {"rows": cur.rowcount} if cur.rowcount >= 0 else {}
            except psycopg.Error as exc:
                self.result = {"error": (exc.diag.message_primary or str(exc)).strip()}
            self.result["elapsed_s"] = round(time.monotonic() - started, 3)

        self._thread = threading.Thread(target=work, name=f"fault-{self.name}", daemon=True)
        self._thread.start()
        return {"statement": query.as_string(conn)}

    def wait_done(self, timeout: float | None) -> bool:
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def end(self, target: FaultTarget) -> dict[str, Any]:
        """At the end of the run: cancel a statement still running, then close."""
        if self._conn is not None:
            if self._thread is not None and self._thread.is_alive():
                with contextlib.suppress(psycopg.Error):
                    self._conn.cancel()
                self._thread.join(10)
                self.result.setdefault("cancelled", True)
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None
        return dict(self.result)


class Vacuum(_Statement):
    name = "vacuum"
    help = "VACUUM a table (args: table, full = false, analyze = false) on a side connection"
    args: ClassVar[dict[str, ArgSpec]] = {
        "table": (str, "pgbench_accounts"), "full": (bool, False), "analyze": (bool, False),
    }

    def statement(self) -> sql.Composed:
        options = [sql.SQL(o) for o, on in (("FULL", self.values["full"]),
                                             ("ANALYZE", self.values["analyze"])) if on]
        opts = sql.SQL(" ({})").format(sql.SQL(", ").join(options)) if options else sql.SQL("")
        return sql.SQL("VACUUM{} {}").format(opts, sql.Identifier(self.values["table"]))


class BulkUpdate(_Statement):
    name = "bulk-update"
    help = ("UPDATE the first `rows` rows of pgbench_accounts (args: rows = 100000) in one "
            "transaction: a burst of WAL, dirty pages and dead tuples")
    args: ClassVar[dict[str, ArgSpec]] = {"rows": (int, 100000)}

    def statement(self) -> sql.Composed:
        return sql.SQL("UPDATE pgbench_accounts SET abalance = abalance + 1 "
                       "WHERE aid <= {}").format(sql.Literal(int(self.values["rows"])))


class Sql(_Statement):
    name = "sql"
    help = ("run your own SQL (args: sql = \"...\"; several statements separated by ; run "
            "as one transaction unless they say BEGIN/COMMIT) on a side connection to the "
            "benchmark database, for as long as it takes: a lock held (\"BEGIN; LOCK TABLE t; "
            "SELECT pg_sleep(5); COMMIT\"), an index dropped, a table analysed")
    args: ClassVar[dict[str, ArgSpec]] = {"sql": (str, "")}

    def statement(self) -> sql.Composed:
        # The user's own text, as written: sql.SQL composes it without quoting.
        return sql.Composed([sql.SQL(self.values["sql"])])


class IdleInTransaction(FaultAction):
    name = "idle-in-transaction"
    help = ("a session (application `application`) locks one row (SELECT ... FOR UPDATE of "
            "`table` where `key` = `value`) and sits idle in its transaction until "
            "`duration` ends, then rolls back: every transaction that updates the row "
            "queues behind it (what a forgotten psql session does)")
    args: ClassVar[dict[str, ArgSpec]] = {
        "table": (str, "pgbench_branches"), "key": (str, "bid"), "value": (int, 1),
        "application": (str, "psql"),
    }

    def __init__(self, args: dict[str, Any]) -> None:
        super().__init__(args)
        self._conn: psycopg.Connection[Any] | None = None

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        self._conn = conn = target.server.connect(autocommit=False)
        conn.execute(sql.SQL("SET application_name = {}").format(
            sql.Literal(self.values["application"])))
        query = sql.SQL("SELECT 1 FROM {} WHERE {} = {} FOR UPDATE").format(
            sql.Identifier(self.values["table"]), sql.Identifier(self.values["key"]),
            sql.Literal(int(self.values["value"])))
        conn.execute(query)
        return {"statement": query.as_string(conn)}

    def end(self, target: FaultTarget) -> dict[str, Any]:
        """Roll back; a server that ended the session first (a timeout) is recorded."""
        conn, self._conn = self._conn, None
        if conn is None:
            return {}
        try:
            conn.rollback()
            found: dict[str, Any] = {}
        except psycopg.Error as exc:
            found = {"ended_by_server": (exc.diag.message_primary or str(exc)).strip()}
        with contextlib.suppress(psycopg.Error):
            conn.close()
        return found


class Checkpoint(FaultAction):
    name = "checkpoint"
    help = "CHECKPOINT now (a restartpoint on a standby)"
    duration = "none"

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        started = time.monotonic()
        with target.server.connect() as conn:
            conn.execute("CHECKPOINT")
        return {"elapsed_s": round(time.monotonic() - started, 3)}


class SwitchWal(FaultAction):
    name = "switch-wal"
    help = ("pg_switch_wal() now: the next WAL record starts a new segment, as with "
            "archive_timeout (with wal_recycle off or none to reuse, it is created)")
    duration = "none"

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        with target.server.connect() as conn:
            row = conn.execute("SELECT pg_switch_wal()::text").fetchone()
        return {"lsn": row[0] if row else None}


class Crash(FaultAction):
    name = "crash"
    help = ("kill -9 every process of the node (the kernel keeps its writes: a process "
            "crash, not a power loss), keep it down for `duration` (default 0), restart it "
            "and record the recovery time")
    duration = "optional"
    default_duration = 0.0

    def __init__(self, args: dict[str, Any]) -> None:
        super().__init__(args)
        self._cut_at = time.monotonic()

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        self._cut_at = time.monotonic()
        return {"killed": True, **kill_node(target.server)}

    def end(self, target: FaultTarget) -> dict[str, Any]:
        server = target.server
        if server.is_running():
            return {}
        attrs = restart_after_cut(server)
        attrs["downtime_s"] = round(time.monotonic() - self._cut_at, 3)  # kill to ready
        return attrs


RECOVERY_PHRASES = ("not properly shut down", "was interrupted", "automatic recovery",
                    "redo starts", "redo done", "invalid record length", "PANIC",
                    "could not", "checkpoint complete", "database system is ready")


def _log_sizes(server: LocalServer) -> dict[Path, int]:
    sizes = {}
    for path in [server.postmaster_out, *server.log_dir.glob("postgresql.*")]:
        with contextlib.suppress(OSError):
            sizes[path] = path.stat().st_size
    return sizes


def _new_log_lines(server: LocalServer, before: dict[Path, int]) -> list[str]:
    """What the server logged since `before` about its recovery (messages only)."""
    found: list[str] = []
    for path in [server.postmaster_out, *sorted(server.log_dir.glob("postgresql.*"))]:
        try:
            with path.open("rb") as f:
                f.seek(before.get(path, 0))
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        for raw in text.splitlines():
            line = raw
            if raw.startswith("{"):
                with contextlib.suppress(ValueError):
                    record = json.loads(raw)
                    line = f"{record.get('error_severity')}:  {record.get('message')}"
            if any(p in line for p in RECOVERY_PHRASES) and line not in found:
                found.append(line.strip())
    return found[:20]


# How long a killed node's processes may take to exit: one blocked in the I/O of a paused
# or hung device exits only when that I/O ends (SIGKILL waits for it), and PostgreSQL
# refuses to start while an old backend still holds the shared memory.
EXIT_WAIT_S = 300.0


def kill_node(server: LocalServer) -> dict[str, Any]:
    """kill -9 of the node's postmaster and every process below it, then wait until all
    of them have exited; `exit_wait_s` when that took a noticeable time."""
    if server.process is None:
        return {}
    started = time.monotonic()
    left = kill_server_tree(server.process.pid, timeout=EXIT_WAIT_S)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.process.wait(timeout=max(1.0, EXIT_WAIT_S - (time.monotonic() - started)))
    waited = round(time.monotonic() - started, 3)
    attrs: dict[str, Any] = {"exit_wait_s": waited} if waited >= 1.0 else {}
    if left:
        attrs["not_exited"] = left  # the restart will say what PostgreSQL thinks of them
    return attrs


def restart_after_cut(server: LocalServer) -> dict[str, Any]:
    """Start a node that was killed; the recovery time and log lines, or why it cannot
    start (the PANIC or FATAL line): a node that does not come back is a finding."""
    before = _log_sizes(server)
    started = time.monotonic()
    try:
        in_keeper_thread(lambda: server.start(timeout=300))
    except PglabError as exc:
        return {"recovered": False, "start_error": str(exc),
                "recovery_log": _new_log_lines(server, before)}
    return {"recovered": True, "recovery_s": round(time.monotonic() - started, 3),
            "recovery_log": _new_log_lines(server, before)}


class PowerLoss(FaultAction):
    name = "power-loss"
    help = ("cut the node's power: its filesystems stop without flushing (dirty pages and "
            "unflushed journal lost), its emulated devices drop their volatile caches, every "
            "process is killed; after `duration` (default 0) the volumes are remounted "
            "(journal replay) and the node restarts (needs an ext4 or XFS volume)")
    duration = "optional"
    default_duration = 0.0

    def __init__(self, args: dict[str, Any]) -> None:
        super().__init__(args)
        self._cut_at: float | None = None

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        assert target.power_cut is not None  # checked before the run
        self._cut_at = time.monotonic()
        # The filesystem and device first, at one instant: nothing the processes or the
        # kernel's flusher do after this reaches the medium.
        dropped = target.power_cut()
        return {**kill_node(target.server), "dropped": dropped,
                "lost_bytes": sum(int(d.get("lost_bytes", 0)) for d in dropped.values()),
                "lost_blocks": sum(int(d.get("lost_blocks", 0)) for d in dropped.values()),
                # how long the oldest write a cache dropped had waited in it
                "held_s": max((float(d.get("held_s", 0)) for d in dropped.values()),
                              default=0.0)}

    def end(self, target: FaultTarget) -> dict[str, Any]:
        if self._cut_at is None or target.power_restore is None:
            return {}
        cut_at = self._cut_at
        self._cut_at = None
        mount_s = target.power_restore()
        attrs: dict[str, Any] = {"mount_s": mount_s}
        attrs.update(restart_after_cut(target.server))
        attrs["downtime_s"] = round(time.monotonic() - cut_at, 3)
        return attrs


class MemoryPressure(FaultAction):
    name = "memory-pressure"
    help = ("a process that allocates and touches `mb` MB (args: mb = 1024), inside the "
            "node's memory envelope when it has one, until `duration` ends")
    args: ClassVar[dict[str, ArgSpec]] = {"mb": (int, 1024)}

    def __init__(self, args: dict[str, Any]) -> None:
        super().__init__(args)
        self._proc: subprocess.Popen[bytes] | None = None

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        code = ("import time\nb = bytearray({n})\nfor i in range(0, len(b), 4096):\n"
                "    b[i] = 1\ntime.sleep(1e6)\n").format(n=int(self.values["mb"]) << 20)
        self._proc = spawn([sys.executable, "-c", code],
                           cgroup_procs=list(target.memory_cgroup_procs or []),
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        return {"pid": self._proc.pid}

    def end(self, target: FaultTarget) -> dict[str, Any]:
        if self._proc is None:
            return {}
        killed_by_oom = self._proc.poll() is not None
        kill_tree(self._proc.pid)
        self._proc.wait(timeout=10)
        self._proc = None
        return {"ended_early": killed_by_oom}


class _DeviceState(FaultAction):
    """A state of the node's emulated volume devices (storage/), undone at the end."""

    duration = "required"
    state: ClassVar[dict[str, Any]]
    undo: ClassVar[dict[str, Any]]
    device_fault = True

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        assert target.set_device is not None  # checked before the run (storage/volume.py)
        target.set_device(self.device_state())
        return {"devices": "all volumes of the node"}

    def device_state(self) -> dict[str, Any]:
        return dict(self.state)

    def end(self, target: FaultTarget) -> dict[str, Any]:
        if target.set_device is not None:
            target.set_device(self.device_undo())
        return {}

    def device_undo(self) -> dict[str, Any]:
        return dict(self.undo)


class PauseDisk(_DeviceState):
    name = "pause-disk"
    help = ("the node's storage volumes stop answering (every request waits) for "
            "`duration`: a hung device or a stalled network volume")
    state: ClassVar[dict[str, Any]] = {"paused": True}
    undo: ClassVar[dict[str, Any]] = {"paused": False}


class FailDisk(_DeviceState):
    name = "fail-disk"
    help = ("every read and write of the node's storage volumes fails with EIO for "
            "`duration` (PostgreSQL PANICs on a failed WAL or data fsync)")
    state: ClassVar[dict[str, Any]] = {"failing": True}
    undo: ClassVar[dict[str, Any]] = {"failing": False}


class SlowDisk(_DeviceState):
    name = "slow-disk"
    help = ("add `latency_ms` (args: latency_ms = 20) to every read, write and flush of the "
            "node's storage volumes for `duration`")
    args: ClassVar[dict[str, ArgSpec]] = {"latency_ms": (float, 20.0)}
    state: ClassVar[dict[str, Any]] = {}
    undo: ClassVar[dict[str, Any]] = {}

    def device_state(self) -> dict[str, Any]:
        return {"latency_s": float(self.values["latency_ms"]) / 1000}

    def device_undo(self) -> dict[str, Any]:
        return {"restore": "latency_s"}


class NetworkPartition(FaultAction):
    name = "network-partition"
    help = ("every link of the node carries nothing (args: peer = a host: only the link to "
            "it) for `duration`: packets are dropped at both ends, sessions stay open and "
            "retransmit, then the link heals (needs network.hosts = 'separate')")
    duration = "required"
    args: ClassVar[dict[str, ArgSpec]] = {"peer": (str, "")}

    def __init__(self, args: dict[str, Any]) -> None:
        super().__init__(args)
        self._partition: str | None = None

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        assert target.network is not None  # checked before the run
        peer = str(self.values["peer"]) or None
        self._partition = target.network.partition(target.node, peer)
        links = ([f"{target.node}-{peer}"] if peer else
                 [link.name for link in target.network.plan.links_of(target.node)])
        return {"links": links}

    def end(self, target: FaultTarget) -> dict[str, Any]:
        if self._partition is not None and target.network is not None:
            target.network.heal(self._partition)
        self._partition = None
        return {}


class NetworkLatency(FaultAction):
    name = "network-latency"
    help = ("the node's links (args: peer = a host: only the link to it) get a round trip "
            "of `rtt` (args: rtt = '20ms', jitter = '0ms') and/or a bandwidth of "
            "`bandwidth_mbps` each way (args: bandwidth_mbps = 10; 0 or absent: as it is) "
            "for `duration`, then their own back; the round trip measured at each change "
            "and the rate read back from the links' buckets are recorded (measured_rtt_ms, "
            "restored_rtt_ms, measured_mbps, restored_mbps; needs network.hosts = "
            "'separate')")
    duration = "required"
    args: ClassVar[dict[str, ArgSpec]] = {"rtt": (str, ""), "jitter": (str, "0ms"),
                                          "bandwidth_mbps": (float, 0.0), "peer": (str, "")}

    def begin(self, target: FaultTarget) -> dict[str, Any]:
        assert target.network is not None  # checked before the run
        peer = str(self.values["peer"]) or None
        done: dict[str, Any] = {}
        if self.values["rtt"]:
            done["measured_rtt_ms"] = target.network.delay(
                target.node, peer, parse_duration(self.values["rtt"]),
                parse_duration(self.values["jitter"]))
        if self.values["bandwidth_mbps"]:
            done["measured_mbps"] = target.network.limit(
                target.node, peer, float(self.values["bandwidth_mbps"]))
        return done

    def end(self, target: FaultTarget) -> dict[str, Any]:
        if target.network is None:
            return {}
        peer = str(self.values["peer"]) or None
        done: dict[str, Any] = {}
        if self.values["rtt"]:
            done["restored_rtt_ms"] = target.network.delay(target.node, peer, None)
        if self.values["bandwidth_mbps"]:
            done["restored_mbps"] = target.network.limit(target.node, peer, None)
        return done


ACTIONS: tuple[type[FaultAction], ...] = (
    PauseStandby, ThrottleDisk, Vacuum, BulkUpdate, Sql, IdleInTransaction, Checkpoint,
    SwitchWal, Crash, PowerLoss, MemoryPressure, PauseDisk, FailDisk, SlowDisk,
    NetworkPartition, NetworkLatency,
)
