"""OS probes: exact parser results on committed procfs samples, then each probe live.

Expected numbers are worked out by hand from the sample files (quoted in comments);
every rate divides by the monotonic seconds between the two snapshots (meta.json).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from pglab.probes import procfs
from pglab.probes.base import NodeHandle, Probe, ProbeContext, ProbeOutput
from pglab.probes.os_probes import (
    KINDS,
    OS_PROBES,
    CpuProbe,
    DeviceResolver,
    DiskProbe,
    MemoryProbe,
    OsProbe,
    PressureProbe,
    ProcessesProbe,
    TcpProbe,
    Tree,
    available,
    scan_processes,
    split_tree_cpu,
    tree_of,
    walk_tree,
)
from pglab.probes.os_probes.common import READ_CHUNK, read_proc_file

SAMPLES = Path(__file__).resolve().parent / "samples" / "procfs"
META = json.loads((SAMPLES / "meta.json").read_text())
ELAPSED: float = META["elapsed_s"]  # 1.0009860440004559
MIB = 2**20
MINRTT_WALSENDER = 0.004  # t1/ss.txt: the walsender's "minrtt:"


def sample_text(name: str) -> str:
    return (SAMPLES / name).read_text()


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def no_pid() -> int | None:
    return None


def context(
    nodes: list[NodeHandle] | None = None, client_pid: Callable[[], int | None] = no_pid
) -> ProbeContext:
    return ProbeContext(nodes or [], client_pid, time.time)


def node(
    name: str,
    data_dir: Path | None,
    postmaster: Callable[[], int | None] = no_pid,
) -> NodeHandle:
    return NodeHandle(name, None, data_dir, postmaster)


def run_twice(
    probe: Probe, ctx: ProbeContext, between: Callable[[], None] = lambda: None, pause: float = 0.25
) -> ProbeOutput:
    """start(), a baseline sample that must be empty, `between`, then the measured sample."""
    probe.start(ctx)
    assert probe.sample(utc_now()).samples == []
    between()
    time.sleep(pause)
    out = probe.sample(utc_now())
    probe.stop()
    return out


def by_key(out: ProbeOutput) -> dict[tuple[str, str, str], float]:
    return {(s.node, s.label, s.metric): s.value for s in out.samples}


# --- /proc/stat -------------------------------------------------------------------------


def test_cpu_usage_from_samples() -> None:
    before = procfs.parse_stat(sample_text("t0/stat"))
    after = procfs.parse_stat(sample_text("t1/stat"))
    assert before is not None and after is not None
    assert before.all == procfs.CpuTimes(482994, 0, 215242, 1190932, 15844, 0, 14454, 2669)
    assert len(after.per_cpu) == 2
    # cpu  482994 0 215242 1190932 15844 0 14454 2669 -> 483113 0 215251 1191002 15846 ...
    # deltas: user 119, system 9, idle 70, iowait 2, the rest 0: 200 ticks in all
    usage = procfs.cpu_usage(before, after)
    assert usage == pytest.approx(
        {
            "user_pct": 59.5,
            "nice_pct": 0.0,
            "system_pct": 4.5,
            "irq_pct": 0.0,
            "iowait_pct": 1.0,
            "steal_pct": 0.0,
            "idle_pct": 35.0,
            "busy_cores": 128 / 200 * 2,
            # cpu0: user +94 system +3 iowait +2 -> 97 busy of 99; cpu1: 29 busy of 99
            "busiest_core_pct": 97 / 99 * 100,
        }
    )


def test_cpu_stat_of_an_old_kernel_has_fewer_columns() -> None:
    stat = procfs.parse_stat("cpu  10 0 5 85\ncpu0 10 0 5 85\n")
    assert stat is not None and stat.all.total == 100 and stat.all.steal == 0


# --- /proc/diskstats and mountinfo --------------------------------------------------------


def test_disk_rates_from_samples() -> None:
    before = procfs.parse_diskstats(sample_text("t0/diskstats"))["vda"]
    after = procfs.parse_diskstats(sample_text("t1/diskstats"))["vda"]
    assert (before.major, before.minor, before.write_sectors) == (254, 0, 229262624)
    # vda: reads 285654 -> 285667, read sectors 18793186 -> 18794442, read ms 772371 ->
    # 772374, writes 12627504 -> 12627554, write sectors 229262624 -> 229448416, write ms
    # 1639582 -> 1639800, io_ticks 782884 -> 782916, weighted 2705744 -> 2705967,
    # discards 225647 -> 225648 (8 sectors), flushes 5412449 -> 5412460 (ms 269885 -> 269886)
    rates = procfs.disk_rates(before, after, ELAPSED)
    assert rates == pytest.approx(
        {
            "read_iops": 13 / ELAPSED,
            "write_iops": 50 / ELAPSED,
            "read_mbps": 1256 * 512 / MIB / ELAPSED,
            "write_mbps": 185792 * 512 / MIB / ELAPSED,
            "read_await_ms": 3 / 13,
            "write_await_ms": 218 / 50,
            "util_pct": 32 / (ELAPSED * 1000) * 100,
            "queue_depth": 223 / (ELAPSED * 1000),
            "discard_iops": 1 / ELAPSED,
            "discard_mbps": 8 * 512 / MIB / ELAPSED,
            "flush_iops": 11 / ELAPSED,
            "flush_await_ms": 1 / 11,
        }
    )
    assert META["dd_bytes"] <= 185792 * 512  # dd's 50 MiB are in there (with PG's writes)


def test_disk_rates_of_an_old_kernel_and_of_a_counter_reset() -> None:
    old = "   8       0 sda 10 0 80 5 20 0 160 40 0 30 45\n"
    later = "   8       0 sda 14 0 112 9 20 0 160 40 0 32 49\n"
    before, after = procfs.parse_diskstats(old)["sda"], procfs.parse_diskstats(later)["sda"]
    rates = procfs.disk_rates(before, after, 2.0)
    assert rates["read_iops"] == 2.0 and rates["read_await_ms"] == 1.0
    assert rates["write_await_ms"] == 0.0  # no writes: 0, not a division by zero
    assert "flush_iops" not in rates and "discard_iops" not in rates
    assert procfs.disk_rates(after, before, 2.0) == {}


def test_mountinfo_from_samples() -> None:
    mounts = procfs.parse_mountinfo(sample_text("mountinfo"))
    root = procfs.mount_of("/tmp/pglab/data", mounts)
    assert root is not None
    assert (root.major, root.minor, root.fstype, root.source) == (254, 0, "ext4", "/dev/vda")
    shm = procfs.mount_of("/dev/shm/x", mounts)  # mounted twice: the later one is on top
    assert shm is not None and (shm.major, shm.minor) == (0, 27)
    memory = procfs.mount_of("/sys/fs/cgroup/memory", mounts)
    assert memory is not None and memory.mount_point == "/sys/fs/cgroup/memory"


def test_mountinfo_unescapes_paths() -> None:
    line = r"40 1 8:2 / /mnt/my\040disk rw - xfs /dev/sda2 rw"
    (mount,) = procfs.parse_mountinfo(line)
    assert mount.mount_point == "/mnt/my disk"
    assert procfs.mount_of("/mnt/my disk/pg", [mount]) == mount
    assert procfs.mount_of("/mnt/my diskette", [mount]) is None


def test_resolver_on_the_sample_machine() -> None:
    mounts = procfs.parse_mountinfo(sample_text("mountinfo"))
    disks = procfs.parse_diskstats(sample_text("t1/diskstats"))
    resolver = DeviceResolver(mounts, disks, Path("/nonexistent-sys"))
    assert resolver.devices(Path("/tmp")) == ["vda"]
    assert resolver.devices(Path("/dev/shm")) == []  # tmpfs: no block device
    assert resolver.fallback() == ["vda"]  # loop0-7 and zram0 never did any I/O


def test_resolver_follows_partitions_device_mapper_and_loop(tmp_path: Path) -> None:
    """dm-0 on sda2 (a partition of sda), loop0 backed by a file on the same filesystem."""
    sys_root, devices = tmp_path / "sys", tmp_path / "sys" / "devices"
    (devices / "sda" / "sda2").mkdir(parents=True)
    (devices / "sda" / "sda2" / "partition").write_text("2\n")
    (devices / "dm-0" / "slaves").mkdir(parents=True)
    (devices / "dm-0" / "slaves" / "sda2").mkdir()
    (devices / "loop0" / "loop").mkdir(parents=True)
    (devices / "loop0" / "loop" / "backing_file").write_text("/srv/image\n")
    block = sys_root / "class" / "block"
    block.mkdir(parents=True)
    for name, target in (
        ("sda", "sda"),
        ("sda2", "sda/sda2"),
        ("dm-0", "dm-0"),
        ("loop0", "loop0"),
    ):
        (block / name).symlink_to(devices / target)
    disks = procfs.parse_diskstats(
        "8 0 sda 1 0 1 1 1 0 1 1 0 1 1\n8 2 sda2 1 0 1 1 1 0 1 1 0 1 1\n"
        "253 0 dm-0 1 0 1 1 1 0 1 1 0 1 1\n7 0 loop0 1 0 1 1 1 0 1 1 0 1 1\n"
    )
    mounts = procfs.parse_mountinfo(
        "1 0 253:0 / / rw - ext4 /dev/mapper/vg-root rw\n"
        "2 1 7:0 / /srv/pg rw - ext4 /dev/loop0 rw\n"
    )
    resolver = DeviceResolver(mounts, disks, sys_root)
    assert resolver.devices(Path("/")) == ["dm-0", "sda2", "sda"]
    assert resolver.devices(Path("/srv/pg")) == ["loop0", "dm-0", "sda2", "sda"]
    assert resolver.fallback() == ["sda", "dm-0", "loop0"]  # no partitions


# --- /proc/meminfo, /proc/vmstat, /proc/pressure ----------------------------------------


def test_memory_from_samples() -> None:
    meminfo = procfs.parse_meminfo(sample_text("t1/meminfo"))
    vmstat = procfs.parse_vmstat(sample_text("t1/vmstat"))
    # Dirty: 15360 kB, Writeback: 0 kB, Cached: 372572 kB, MemFree: 23962280 kB,
    # MemAvailable: 24183360 kB, Shmem: 47492 kB; nr_dirty 3840, nr_writeback 0,
    # nr_dirty_threshold 1207530, nr_dirty_background_threshold 603027 (4 KiB pages)
    assert procfs.memory_gauges(meminfo, vmstat, 4096) == pytest.approx(
        {
            "dirty_mb": 15.0,
            "writeback_mb": 0.0,
            "cached_mb": 372572 / 1024,
            "free_mb": 23962280 / 1024,
            "available_mb": 24183360 / 1024,
            "shmem_mb": 47492 / 1024,
            "nr_dirty": 3840.0,
            "nr_writeback": 0.0,
            "dirty_threshold_mb": 1207530 * 4096 / MIB,
            "dirty_background_threshold_mb": 603027 * 4096 / MIB,
        }
    )
    before = procfs.reclaim_counters(procfs.parse_vmstat(sample_text("t0/vmstat")))
    after = procfs.reclaim_counters(vmstat)
    assert after == {
        "pgscan_kswapd": 0,
        "pgscan_direct": 0,
        "pgsteal_kswapd": 0,
        "pgsteal_direct": 0,
        "allocstall": 0,
        "pgmajfault": 9233,
    }
    assert before["pgmajfault"] == 9227


def test_reclaim_counters_sum_zones_but_not_throttle() -> None:
    vmstat = procfs.parse_vmstat(
        "pgscan_kswapd_normal 5\npgscan_kswapd_dma 1\n"
        "pgscan_direct_throttle 9\nallocstall_normal 2\n"
        "allocstall_movable 3\n"
    )
    assert procfs.reclaim_counters(vmstat) == {"pgscan_kswapd": 6, "allocstall": 5}


def test_pressure_from_samples() -> None:
    def pressure(name: str) -> dict[str, procfs.Pressure]:
        return procfs.parse_pressure(sample_text(name))

    # io: some total 339412377 -> 339435123 us, full 105053394 -> 105067331; avg10 now
    # some=1.92 full=1.38. cpu: some 1858280418 -> 1858332402, full stays 0.
    assert procfs.pressure_metrics(
        pressure("t0/pressure/io"), pressure("t1/pressure/io"), ELAPSED
    ) == pytest.approx(
        {
            "some_avg10": 1.92,
            "full_avg10": 1.38,
            "some_pct": 22746 / (ELAPSED * 1e6) * 100,
            "full_pct": 13937 / (ELAPSED * 1e6) * 100,
        }
    )
    cpu = procfs.pressure_metrics(pressure("t0/pressure/cpu"), pressure("t1/pressure/cpu"), ELAPSED)
    assert cpu["some_pct"] == pytest.approx(51984 / (ELAPSED * 1e6) * 100)
    assert cpu["full_pct"] == 0.0


def test_pressure_without_full_line() -> None:  # cpu before 5.13
    lines = procfs.parse_pressure("some avg10=2.50 avg60=1.00 avg300=0.50 total=1000\n")
    assert list(lines) == ["some"] and lines["some"].total_us == 1000


# --- processes ----------------------------------------------------------------------------


def test_pid_stat_from_samples() -> None:
    before = procfs.parse_pid_stat(sample_text("t0/busy_stat"))
    after = procfs.parse_pid_stat(sample_text("t1/busy_stat"))
    assert before is not None and after is not None
    assert (before.pid, before.comm, before.utime, before.stime) == (
        META["busy_pid"],
        "python3",
        48,
        0,
    )
    assert after.utime == 145 and after.starttime == before.starttime == 968451
    assert after.threads == 1
    assert (after.own_ticks - before.own_ticks) / 100 / ELAPSED == pytest.approx(0.969, abs=1e-3)


def test_pid_stat_with_awkward_comm() -> None:
    stat = procfs.parse_pid_stat(
        "42 (a) b (c)) S 7 " + " ".join(["0"] * 9) + " 3 4 5 6" + " 0" * 4 + " 99 0 0"
    )
    assert stat is not None
    assert (
        stat.comm,
        stat.ppid,
        stat.utime,
        stat.stime,
        stat.cutime,
        stat.cstime,
        stat.starttime,
    ) == ("a) b (c)", 7, 3, 4, 5, 6, 99)
    assert procfs.parse_pid_stat("garbage") is None


def test_process_kinds_of_real_titles() -> None:
    titles = [json.loads(line) for line in sample_text("postgres_titles.jsonl").splitlines()]
    assert [procfs.process_kind(t) for t in titles] == [
        "checkpointer",
        "bgwriter",
        "walwriter",
        "autovacuum",
        "other",
        "walsender",
        "backends",
        "checkpointer",
        "bgwriter",
        "startup",
        "walreceiver",
    ]


@pytest.mark.parametrize(
    ("cmdline", "kind"),
    [
        ("postgres: primary: checkpointer ", "checkpointer"),  # cluster_name
        ("postgres: autovacuum worker pglab\0\0", "autovacuum"),
        ("postgres: io worker 2", "io_worker"),
        ("postgres: parallel worker for PID 4711", "backends"),
        ("postgres: postgres pglab [local] idle", "backends"),
        ("postgres: archiver last was 000000010000000000000003", "archiver"),
        ("/usr/lib/postgresql/15/bin/postgres\0-D\0/data\0", None),  # the postmaster
        ("", None),
    ],
)
def test_process_kind(cmdline: str, kind: str | None) -> None:
    assert procfs.process_kind(cmdline) == kind


def proc(pid: int, own: int, cut: int = 0, ppid: int = 1, start: int = 100) -> procfs.ProcStat:
    return procfs.ProcStat(pid, "postgres", ppid, own, 0, cut, 0, start)


def test_split_tree_cpu_counts_processes_that_exited_and_appeared() -> None:
    before = Tree(
        proc(1, 10),
        {1: proc(1, 10), 2: proc(2, 50), 3: proc(3, 100), 5: proc(5, 7)},
        {1: "other", 2: "backends", 3: "checkpointer", 5: "autovacuum"},
        0.0,
    )
    # backend 2 (last seen at 50) exited at 70 and was reaped: the postmaster's cutime
    # grew by 70; autovacuum worker 5 went from 7 to 7 + 3 and was reaped too; pid 3 is
    # the same checkpointer (+30); pid 4 is a new backend (5 ticks since it started).
    after = Tree(
        proc(1, 12, cut=80),
        {1: proc(1, 12, cut=80), 3: proc(3, 130), 4: proc(4, 5, start=150)},
        {1: "other", 3: "checkpointer", 4: "backends"},
        1.0,
    )
    ticks = split_tree_cpu(before, after)
    # total = (12 + 80 + 130 + 5) - (10 + 50 + 100 + 7) = 60; live: 2 + 30 + 5 = 37;
    # the other 23 ticks belong to the two that exited: half each
    assert ticks == pytest.approx(
        {"other": 2, "checkpointer": 30, "backends": 5 + 11.5, "autovacuum": 11.5}
    )
    assert sum(ticks.values()) == pytest.approx(60)


def test_split_tree_cpu_does_not_mistake_a_reused_pid() -> None:
    before = Tree(proc(1, 0), {1: proc(1, 0), 3: proc(3, 100)}, {1: "other", 3: "backends"}, 0.0)
    after = Tree(
        proc(1, 0, cut=100),
        {1: proc(1, 0, cut=100), 3: proc(3, 4, start=200)},
        {1: "other", 3: "backends"},
        1.0,
    )
    assert split_tree_cpu(before, after) == {"other": 0.0, "backends": 4.0}


# --- ss -------------------------------------------------------------------------------


def test_ss_from_samples() -> None:
    before = {f"{s.local}->{s.peer}": s for s in procfs.parse_ss(sample_text("t0/ss.txt"))}
    after = {f"{s.local}->{s.peer}": s for s in procfs.parse_ss(sample_text("t1/ss.txt"))}
    port = META["ports"]["primary"]
    walsender = f"127.0.0.1:{port}->127.0.0.1:50460"
    assert len(after) == 4 and after[walsender].pid == 10245
    # skmem:(r0,rb131072,t0,tb4194304,...,w0,...) rtt:0.411/0.536 rcv_space:65483
    assert procfs.socket_gauges(after[walsender]) == {
        "recv_q_bytes": 0.0,
        "send_q_bytes": 0.0,
        "rtt_ms": 0.411,
        "rttvar_ms": 0.536,
        "min_rtt_ms": MINRTT_WALSENDER,
        "rcv_space_bytes": 65483.0,
        "rcv_buffer_fill_pct": 0.0,
        "send_buffer_fill_pct": 0.0,
    }
    # bytes_acked 631 -> 12931265, bytes_received 232 -> 583, retrans: (none) -> 0/1
    assert procfs.socket_rates(before[walsender], after[walsender], ELAPSED) == pytest.approx(
        {
            "sent_mbps": (12931265 - 631) / MIB / ELAPSED,
            "received_mbps": (583 - 232) / MIB / ELAPSED,
            "retrans_per_s": 1 / ELAPSED,
        }
    )


def test_many_sockets_of_a_pair_of_hosts_as_one_series() -> None:
    """A load generator's dozens of sockets: the median and largest RTT, the smallest
    minimum RTT, the queues and rates summed, the fullest buffer, how many sockets."""
    before = {f"{s.local}->{s.peer}": s for s in procfs.parse_ss(sample_text("t0/ss.txt"))}
    after = procfs.parse_ss(sample_text("t1/ss.txt"))
    gauges = [procfs.socket_gauges(s) for s in after]
    rtts = sorted(g["rtt_ms"] for g in gauges)  # 0.032 0.411 6.077 7.865
    assert procfs.aggregate_gauges(after) == pytest.approx({
        "sockets": 4.0,
        "rtt_ms": (rtts[1] + rtts[2]) / 2,
        "rtt_max_ms": 7.865,
        "min_rtt_ms": min(g["min_rtt_ms"] for g in gauges),
        "recv_q_bytes": sum(s.recv_q for s in after),
        "send_q_bytes": sum(s.send_q for s in after),
        "rcv_buffer_fill_pct": max(g["rcv_buffer_fill_pct"] for g in gauges),
        "send_buffer_fill_pct": max(g["send_buffer_fill_pct"] for g in gauges),
    })
    pairs = [(before[f"{s.local}->{s.peer}"], s) for s in after]
    each = [procfs.socket_rates(b, a, ELAPSED) for b, a in pairs]
    assert procfs.aggregate_rates(pairs, ELAPSED) == pytest.approx(
        {metric: sum(r[metric] for r in each) for metric in each[0]})
    assert procfs.aggregate_gauges([]) == {}
    assert procfs.clients_label("client", "primary") == "clients:client->primary"


def test_ss_receive_buffer_fill() -> None:
    text = (
        '50000  0      127.0.0.1:49157 127.0.0.1:48688 users:(("x",pid=7,fd=5))\n'
        "\t skmem:(r68923,rb131072,t0,tb3939840,f709,w0,o0,bl0,d0) rtt:0.019/0.009\n"
        "0 0 [::1]:5432 [::1]:40000\n\t rtt:1/2\n"
    )
    first, second = procfs.parse_ss(text)
    assert procfs.socket_gauges(first)["rcv_buffer_fill_pct"] == pytest.approx(68923 / 131072 * 100)
    assert first.recv_q == 50000 and first.local_port == 49157
    assert (second.pid, second.local_port, second.peer_port) == (None, 5432, 40000)


def fake_proc_of_socket_owners(root: Path) -> None:
    owners = json.loads(sample_text("socket_owners.json"))
    for pid, owner in owners.items():
        (root / pid).mkdir(parents=True)
        (root / pid / "cmdline").write_text(owner["cmdline"])
        (root / pid / "stat").write_text(
            f"{pid} (postgres) S {owner['ppid']} " + " ".join(["0"] * 40)
        )


def test_tcp_keeps_replication_sockets_and_names_their_nodes(tmp_path: Path) -> None:
    fake_proc_of_socket_owners(tmp_path)
    pids = META["postmaster_pids"]
    probe = TcpProbe(proc_root=tmp_path)
    probe.start(
        context(
            [
                node("primary", None, lambda: pids["primary"]),
                node("standby", None, lambda: pids["standby"]),
            ]
        )
    )
    ports = {META["ports"]["primary"]: "primary", META["ports"]["standby"]: "standby"}
    kept = [s for s in procfs.parse_ss(sample_text("t1/ss.txt")) if probe.is_replication(s)]
    assert [(s.pid, probe.owner_node(s, ports)) for s in kept] == [
        (10245, "primary"),
        (10244, "standby"),
    ]  # walsender, walreceiver; not psql's


# --- live probes on this machine -----------------------------------------------------------


@pytest.mark.live
def test_cpu_memory_pressure_live() -> None:
    for probe, metrics in (
        (
            CpuProbe(),
            {
                "user_pct",
                "nice_pct",
                "system_pct",
                "irq_pct",
                "iowait_pct",
                "steal_pct",
                "idle_pct",
                "busy_cores",
                "busiest_core_pct",
            },
        ),
        (
            MemoryProbe(),
            {
                "dirty_mb",
                "writeback_mb",
                "cached_mb",
                "free_mb",
                "available_mb",
                "shmem_mb",
                "nr_dirty",
                "nr_writeback",
                "dirty_threshold_mb",
                "dirty_background_threshold_mb",
                "pgscan_kswapd",
                "pgscan_direct",
                "pgsteal_kswapd",
                "pgsteal_direct",
                "allocstall",
                "pgmajfault",
            },
        ),
        (PressureProbe(), {"some_avg10", "full_avg10", "some_pct", "full_pct"}),
    ):
        if probe.unavailable_reason(context()) is not None:
            continue  # e.g. a kernel without PSI: covered by the missing-files test
        out = run_twice(probe, context(), pause=0.1)
        assert {s.metric for s in out.samples} == metrics
        assert all(s.node == "host" and s.source == probe.name for s in out.samples)
    cpu = by_key(run_twice(CpuProbe(), context(), pause=0.1))
    assert sum(
        cpu[("host", "", m)]
        for m in (
            "user_pct",
            "nice_pct",
            "system_pct",
            "irq_pct",
            "iowait_pct",
            "steal_pct",
            "idle_pct",
        )
    ) == pytest.approx(100.0)
    assert 0 <= cpu[("host", "", "busy_cores")] <= (os.cpu_count() or 1)


def device_holding(path: Path) -> str:
    st_dev = path.stat().st_dev
    for disk in procfs.parse_diskstats(Path("/proc/diskstats").read_text()).values():
        if (disk.major, disk.minor) == (os.major(st_dev), os.minor(st_dev)):
            return disk.name
    pytest.skip(f"{path} is not on a block device listed in /proc/diskstats")


@pytest.mark.disk
def test_disk_live_sees_a_write(tmp_path: Path) -> None:
    device = device_holding(tmp_path)
    (tmp_path / "pg_wal").mkdir()

    def write() -> None:
        subprocess.run(
            [
                "dd",
                "if=/dev/zero",
                f"of={tmp_path / 'f'}",
                "bs=1M",
                "count=20",
                "conv=fsync",
                "status=none",
            ],
            check=True,
        )

    probe = DiskProbe()
    out = by_key(run_twice(probe, context([node("primary", tmp_path)]), write, pause=0.05))
    assert probe.owners[device] == "primary"  # (and its whole disk, were it a partition)
    assert out[("primary", device, "write_mbps")] > 0
    assert out[("primary", device, "write_iops")] > 0
    assert 0 <= out[("primary", device, "util_pct")] <= 100


@pytest.mark.live
def test_disk_falls_back_to_every_busy_disk() -> None:
    probe = DiskProbe()
    out = run_twice(probe, context([node("primary", None)]), pause=0.05)
    assert probe.owners == {}
    assert out.samples and {s.node for s in out.samples} == {"host"}
    busy = {
        d.name
        for d in procfs.parse_diskstats(Path("/proc/diskstats").read_text()).values()
        if d.ios > 0
    }
    assert {s.label for s in out.samples} <= busy  # never-used loop/ram/zram devices are out


@pytest.fixture
def spinner() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield child
    child.kill()
    child.wait()


@pytest.mark.exclusive  # a spinner's share of a CPU, measured
def test_processes_live_client(spinner: subprocess.Popen[bytes]) -> None:
    time.sleep(0.05)
    # The truth to compare with: the spinner's own CPU time over the same interval (on a
    # busy machine it may get well under one core).
    proc = psutil.Process(spinner.pid)
    before, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
    out = by_key(run_twice(ProcessesProbe(), context(client_pid=lambda: spinner.pid), pause=0.4))
    truth = (sum(proc.cpu_times()[:2]) - before) / (time.monotonic() - t0)
    assert truth > 0.05, "the spinner got no CPU at all; nothing to check"
    assert out[("client", "pgbench", "cpu_cores")] == pytest.approx(truth, abs=0.15)
    assert out[("client", "pgbench", "max_thread_cores")] == pytest.approx(truth, abs=0.15)


# A stand-in postmaster: a "checkpointer" child that spins throughout, and one short
# "backend" after another (busy 50 ms each, then reaped), all retitled the way
# PostgreSQL retitles its processes (argv[0]).
FAKE_POSTMASTER = r"""
import subprocess, sys
spin = "import time\nend = time.monotonic() + {}\nwhile time.monotonic() < end: pass"
subprocess.Popen(["postgres: checkpointer", "-c", spin.format(30)], executable=sys.executable)
print("ready", flush=True)
while True:
    subprocess.run(["postgres: pglab pglab [local] SELECT", "-c", spin.format(0.05)],
                   executable=sys.executable)
"""


@pytest.fixture
def fake_postmaster() -> Iterator[int]:
    root = subprocess.Popen(
        [sys.executable, "-c", FAKE_POSTMASTER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert root.stdout is not None and root.stdout.readline() == "ready\n"
    yield root.pid
    os.killpg(root.pid, 9)  # its own session: the children go with it
    root.wait()


# A parent with two children and a grandchild, all asleep: a tree that holds still.
STILL_TREE = r"""
import subprocess, sys
sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
nested = [sys.executable, "-c", "import subprocess, sys; subprocess.run(sys.argv[1:])", *sleeper]
children = [subprocess.Popen(sleeper), subprocess.Popen(nested)]
print("ready", flush=True)
children[0].wait()
"""


def test_a_proc_file_is_read_whole_past_one_chunk(tmp_path: Path) -> None:
    # a postmaster of thousands of backends lists more pids than one read returns
    pids = b" ".join(str(pid).encode() for pid in range(1_000_000, 1_020_000))
    (tmp_path / "children").write_bytes(pids)
    assert len(pids) > READ_CHUNK and read_proc_file(str(tmp_path / "children")) == pids
    assert read_proc_file(str(tmp_path / "gone")) is None


@pytest.mark.live
def test_walking_a_tree_finds_what_reading_every_process_finds() -> None:
    proc = Path("/proc")
    if not (proc / "self" / "task" / str(os.getpid()) / "children").exists():
        pytest.skip("this kernel does not list children (CONFIG_PROC_CHILDREN)")
    root = subprocess.Popen([sys.executable, "-c", STILL_TREE], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert root.stdout is not None and root.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 10  # the nested child forks the grandchild once it runs
        while len(walked := walk_tree(proc, root.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        scanned = tree_of(root.pid, scan_processes(proc))
    finally:
        os.killpg(root.pid, 9)
        root.wait()
    assert len(walked) == 4 and set(walked) == set(scanned)
    assert all(walked[pid].starttime == scanned[pid].starttime for pid in walked)


# a spinner's share of a CPU, measured: beside the other tests at a low CPU weight
# (cpu_exclusive) its checkpointer can be seen at 0.0 cores. Alone the two kinds take
# some 0.95 cores each, beside four busy loops 0.45; a launcher stalled for most of half
# a second has left the backends 0.04, so the window is long enough to outlast that.
@pytest.mark.exclusive
def test_processes_live_postgres_kinds(fake_postmaster: int) -> None:
    ctx = context([node("primary", None, lambda: fake_postmaster)])
    out = by_key(run_twice(ProcessesProbe(), ctx, pause=1.5))
    kinds = {kind: out[("primary", kind, "cpu_cores")] for kind in KINDS}
    assert out[("primary", "postgres", "cpu_cores")] == pytest.approx(sum(kinds.values()))
    assert out[("primary", "postgres", "processes")] >= 2
    assert kinds["checkpointer"] > 0.3
    assert kinds["backends"] > 0.1  # processes that came and went between the samples


SERVER = r"""
import socket, sys
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
print("accepted", flush=True)
while conn.recv(65536):
    pass
"""


@pytest.mark.live
def test_tcp_live_loopback(tmp_path: Path) -> None:
    server = subprocess.Popen(
        ["postgres: walsender pglab 127.0.0.1(1) streaming 0/0", "-c", SERVER],
        executable=sys.executable,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        (tmp_path / "postmaster.pid").write_text(f"{server.pid}\n{tmp_path}\n1\n{port}\n")
        with socket.create_connection(("127.0.0.1", port)) as client:
            client_port = client.getsockname()[1]
            label = f"127.0.0.1:{port}->127.0.0.1:{client_port}"
            # Until accept() the server's socket is in no process's fds, so the first
            # sample would miss it and the second have no rates.
            assert server.stdout.readline().strip() == "accepted"
            ctx = context([node("primary", tmp_path, lambda: server.pid)])
            replication = TcpProbe()
            everything = TcpProbe(replication_only=False)
            for probe in (replication, everything):
                probe.start(ctx)
                assert probe.sample(utc_now()).samples == []
            client.sendall(b"x" * 200_000)
            time.sleep(0.1)
            out = by_key(replication.sample(utc_now()))
            labels = {s.label for s in everything.sample(utc_now()).samples}
    finally:
        server.kill()
        server.wait()
    assert {lbl for (_, lbl, _) in out} == {label}  # the client's end is no walsender
    assert out[("primary", label, "received_mbps")] > 0
    assert out[("primary", label, "rtt_ms")] > 0
    assert labels == {label, f"127.0.0.1:{client_port}->127.0.0.1:{port}"}


@pytest.mark.live
def test_tcp_runs_no_ss_while_no_node_replicates(fake_postmaster: int, tmp_path: Path) -> None:
    """`ss` costs milliseconds of CPU a call: not run without a walsender or walreceiver."""
    (tmp_path / "postmaster.pid").write_text(f"{fake_postmaster}\n{tmp_path}\n1\n5432\n")
    calls = []

    class CountingTcpProbe(TcpProbe):
        def _run_ss(self, prefix: list[str], ports: dict[int, str], with_owners: bool,
                    only_to: bool = False) -> str:
            calls.append(ports)
            return super()._run_ss(prefix, ports, with_owners, only_to)

    probe = CountingTcpProbe()
    out = run_twice(probe, context([node("primary", tmp_path, lambda: fake_postmaster)]))
    assert probe.replication_processes() == {} and probe.kinds  # it did look
    assert out.samples == [] and calls == []


def test_tcp_without_nodes_or_replication_is_silent() -> None:
    out = run_twice(TcpProbe(), context([node("primary", None)]), pause=0.0)
    assert out.samples == []


# --- nothing to read ------------------------------------------------------------------------


@pytest.mark.parametrize("cls", OS_PROBES, ids=lambda c: c.name)
def test_missing_files_give_no_samples(cls: type[OsProbe], tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    probe = cls(empty, empty)
    ctx = context([node("primary", tmp_path, os.getpid)], client_pid=os.getpid)
    probe.start(ctx)
    for _ in range(3):
        assert probe.sample(utc_now()).samples == []
    reasons = available(ctx, empty, empty)
    assert (reasons[cls.name] is None) == (cls is TcpProbe)  # ss needs no procfs to exist


def test_available_here() -> None:
    from pglab.system_parts import PARTS, is_root

    reasons = available(context())
    # os.profile needs Debian's linux-perf and root (it samples the whole machine)
    assert (reasons.pop("os.profile") is None) == (PARTS["linux-perf"].present() and is_root())
    assert reasons == dict.fromkeys(p.name for p in OS_PROBES if p.name != "os.profile")
