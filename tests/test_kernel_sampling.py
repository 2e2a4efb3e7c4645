"""os.kernel: parsers on committed procfs samples of real processes, the probe's tallies on a
/proc tree rebuilt from them, then live: a backend blocked in fdatasync on a paused device.

The samples (tests/samples/procfs/kernel/, made by make_kernel_samples.py there): every
process of a PostgreSQL 18 server whose ext4 volume's device was paused while one session
committed; the committing backend, the idle one, a spinning and a stopped Python child.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from pglab.probes.base import NodeHandle, ProbeContext, ProbeOutput
from pglab.probes.os_probes.kernel import KernelProbe
from pglab.probes.procfs import kernel as kproc
from pglab.probes.procfs.syscall_names import SYSCALL_NAMES
from pglab.results import kernel_series

SAMPLES = Path(__file__).resolve().parent / "samples" / "procfs" / "kernel"
META = json.loads((SAMPLES / "meta.json").read_text())
PROCESSES: list[dict[str, Any]] = json.loads((SAMPLES / "processes.json").read_text())
SPINNER: list[dict[str, str]] = json.loads((SAMPLES / "spinner.json").read_text())
X86 = SYSCALL_NAMES["x86_64"]


def files_of(pid: int) -> dict[str, str]:
    files: dict[str, str] = next(p["files"] for p in PROCESSES if p["pid"] == pid)
    return files


COMMITTING = files_of(META["backend_pids"]["committing"])
IDLE = files_of(META["backend_pids"]["idle"])


# --- parsers ------------------------------------------------------------------------------

def test_syscall_table_names_this_machines_numbers() -> None:
    assert META["machine"] == "x86_64"  # the samples' numbers are x86_64's
    assert (X86[74], X86[75], X86[232], X86[18]) == ("fsync", "fdatasync", "epoll_wait",
                                                     "pwrite64")
    arm = SYSCALL_NAMES["aarch64"]  # the generic table: no epoll_wait, fcntl as 64-bit
    assert (arm[82], arm[83], arm[22], arm[68], arm[25], arm[79]) == (
        "fsync", "fdatasync", "epoll_pwait", "pwrite64", "fcntl", "newfstatat")
    assert kproc.syscall_table("x86_64") is X86 and kproc.syscall_table("arm64") is arm
    assert kproc.syscall_table("riscv64") == {}


def test_committing_backend_blocked_in_fdatasync_under_ext4() -> None:
    assert kproc.parse_state(COMMITTING["stat"]) == "D"
    assert kproc.state_name("D") == "uninterruptible"
    assert kproc.parse_syscall(COMMITTING["syscall"], X86) == "fdatasync"
    assert kproc.parse_wchan(COMMITTING["wchan"]) == "folio_wait_bit"
    frames = kproc.parse_stack(COMMITTING["stack"])
    assert frames == ["folio_wait_bit", "folio_wait_writeback", "__filemap_fdatawait_range",
                      "file_write_and_wait_range", "ext4_sync_file", "do_fsync",
                      "__x64_sys_fdatasync", "do_syscall_64",
                      "entry_SYSCALL_64_after_hwframe"]
    chain = kproc.top_frames(frames)
    assert chain == ("folio_wait_bit < folio_wait_writeback < __filemap_fdatawait_range < "
                     "file_write_and_wait_range < ext4_sync_file < do_fsync")
    assert kernel_series.frames_summary(chain) == "folio_wait_bit ... ext4_sync_file"
    io = kproc.parse_pid_io(COMMITTING["io"])
    assert io == kproc.ProcIo(rchar=580391, wchar=345128, syscr=116, syscw=189, read_bytes=0,
                              write_bytes=593920, cancelled_write_bytes=28672)


def test_idle_backend_waits_for_its_client_in_epoll() -> None:
    assert kproc.parse_state(IDLE["stat"]) == "S"
    assert kproc.parse_syscall(IDLE["syscall"], X86) == "epoll_wait"
    chain = kproc.top_frames(kproc.parse_stack(IDLE["stack"]))
    assert chain == "do_epoll_wait"
    assert kernel_series.frames_summary(chain) == "do_epoll_wait"
    assert kproc.parse_wchan(IDLE["wchan"]) == "do_epoll_wait"


def test_running_and_stopped_processes() -> None:
    running, stopped = SPINNER[0], SPINNER[-1]
    assert kproc.parse_state(running["stat"]) == "R"
    assert kproc.parse_syscall(running["syscall"], X86) == kernel_series.ON_CPU
    assert kproc.parse_wchan(running["wchan"]) is None  # "0": not waiting
    assert kproc.parse_state(stopped["stat"]) == "T"
    assert kproc.parse_syscall(stopped["syscall"], X86) == kernel_series.USER  # "-1 SP PC"
    assert kproc.parse_wchan(stopped["wchan"]) == "do_signal_stop"


def test_unknown_numbers_and_unreadable_text() -> None:
    assert kproc.parse_syscall("999 0x0 0x0 0x0 0x0 0x0 0x0 0x1 0x2\n", X86) == "syscall_999"
    assert kproc.parse_syscall("", X86) is None
    assert kproc.parse_pid_io("rchar: 1\n") is None
    assert kproc.parse_state("garbage") is None
    assert kproc.parse_stack("[<0>] zil_commit_impl+0x1c/0x40 [zfs]\n") == ["zil_commit_impl"]
    assert kproc.parse_wchan("ext4_fsync_nojournal.constprop.0") == "ext4_fsync_nojournal"


# --- the probe on a /proc tree rebuilt from the samples -------------------------------

def fake_proc(root: Path, postmaster: int) -> None:
    """Regular files where procfs has its own: the probe preads them the same way."""
    me = os.getpid()
    (root / str(me) / "task" / str(me)).mkdir(parents=True)
    (root / str(me) / "task" / str(me) / "children").write_text("")
    (root / "self").mkdir()
    (root / "self" / "syscall").write_text("running\n")
    (root / str(postmaster) / "task" / str(postmaster)).mkdir(parents=True)
    (root / str(postmaster) / "task" / str(postmaster) / "children").write_text(
        " ".join(str(p["pid"]) for p in PROCESSES) + " ")
    for process in PROCESSES:
        folder = root / str(process["pid"])
        folder.mkdir()
        for name, text in process["files"].items():
            (folder / name).write_text(text)


def test_probe_tallies_shares_per_second_and_kind(tmp_path: Path) -> None:
    postmaster = 1_000_000
    fake_proc(tmp_path, postmaster)
    node = NodeHandle("primary", None, None, lambda: postmaster)
    probe = KernelProbe(proc_root=tmp_path)
    probe.start(ProbeContext([node], lambda: None, time.time))
    probe.names = X86  # the samples' architecture, whatever this machine's is
    second = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    outputs = [probe.sample(second + dt.timedelta(seconds=0.05 + 0.1 * i)) for i in range(10)]
    assert all(not o.samples for o in outputs)  # nothing until the second is over
    after = probe.sample(second + dt.timedelta(seconds=1.05))
    values = {(s.label, s.metric): s.value for s in after.samples if s.t == second}
    assert values[("backends", "samples")] == 20  # two backends, ten reads
    assert values[("backends", "processes")] == 2
    assert values[("backends", "syscall:fdatasync")] == 50
    assert values[("backends", "syscall:epoll_wait")] == 50
    assert values[("backends", "state:uninterruptible")] == 50
    assert values[("backends", "stack:" + kproc.top_frames(kproc.parse_stack(
        COMMITTING["stack"])))] == 50
    assert values[("walwriter", "syscall:epoll_wait")] == 100
    assert values[("io_worker", "samples")] == 30
    assert {s.node for s in after.samples} == {"primary"}
    assert {s.source for s in after.samples} == {"os.kernel"}
    assert not any(m.startswith("read_mbps") for _, m in values)  # I/O: baseline only
    probe.stop()


def test_probe_says_once_what_it_cannot_read(tmp_path: Path) -> None:
    postmaster = 1_000_000
    fake_proc(tmp_path, postmaster)
    for process in PROCESSES:  # a kernel without /proc/<pid>/stack
        (tmp_path / str(process["pid"]) / "stack").unlink()
    probe = KernelProbe(proc_root=tmp_path)
    probe.start(ProbeContext([NodeHandle("primary", None, None, lambda: postmaster)],
                             lambda: None, time.time))
    probe.names = X86
    start = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    outputs: list[ProbeOutput] = [
        probe.sample(start + dt.timedelta(seconds=0.1 * i)) for i in range(12)]
    events = [e for o in outputs for e in o.events]
    assert [(e.kind, e.attrs["file"]) for e in events] == [
        ("probe-unreadable", "/proc/<pid>/stack")]
    assert "this kernel has no such file: no kernel frames (wchan instead)" in str(
        events[0].attrs["reason"])
    values = {(s.label, s.metric): s.value for o in outputs for s in o.samples}
    assert values[("backends", "wchan:folio_wait_bit")] == 50  # the fallback
    probe.stop()


def test_a_kernel_without_the_syscall_file_is_said_once(tmp_path: Path) -> None:
    probe = KernelProbe(proc_root=tmp_path)  # an empty /proc: no /proc/self/syscall
    probe.start(ProbeContext([], lambda: None, time.time))
    outputs = [probe.sample(dt.datetime.now(dt.timezone.utc)) for _ in range(3)]
    assert [o.samples for o in outputs] == [[], [], []]
    events = [e for o in outputs for e in o.events]
    assert len(events) == 1 and events[0].kind == "probe-unreadable", events
    assert "self/syscall is not readable" in str(events[0].attrs["reason"])


# --- analysis and report, on a committed run with os.kernel ---------------------------

RUN = Path(__file__).resolve().parent / "samples" / "runs" / "sync-slow-disk-kernel"


def test_sync_standby_analysis_cites_the_wal_receivers_syscalls() -> None:
    """The built-in sync-standby-slow-disk, shortened, sampled by os.kernel: commits wait
    on SyncRep while the standby's WAL receiver is in its flush calls."""
    import re

    from pglab.analysis.analyze import build_analysis
    from pglab.analysis.loading import load_run_frames

    analysis = build_analysis(load_run_frames(RUN)).to_json()
    worst = max(analysis["stalls"], key=lambda s: s["deficit_transactions"])
    top = worst["causes"][0]
    assert top["cause"] == "sync-replication", worst
    receiver = re.compile(r"the WAL receiver on standby1 spent (\d+)% of its samples in "
                          r"\S+ and (\d+)% in (fdatasync|fsync)\S* \(healthy (\d+)% and "
                          r"(\d+)%\); waiting in \S+ \.\.\. ext4_\w+ \d+%")
    found = [m for line in top["evidence"] if (m := receiver.match(line))]
    assert found, top["evidence"]
    # most of the window in its flush calls (on the 6 MB/s disk, healthy seconds too: a
    # receiver that keeps up also flushes all the time, only less WAL)
    assert int(found[0][2]) >= 50, found[0][0]
    # the stall's dominant wait seen from the kernel: backends sleeping in epoll_wait
    # (a latch wait for the standby's confirmation), not in any IO call
    (line,) = worst["kernel"]
    assert re.match(r"client backends on primary, \d+% of whose samples were in IPC:SyncRep, "
                    r"were in the kernel in epoll_wait \d+% \(healthy \d+%\) -> "
                    r"do_epoll_wait \d+%", line), line
    assert top["evidence"][-1] == line


def test_report_has_a_kernel_chart_per_node_beside_the_waits() -> None:
    from pglab.report.model import build_model

    model = build_model(RUN)
    charts = model.timeline["charts"]
    ids = [c["id"] for c in charts]
    at = ids.index("waits")
    assert ids[at + 1:at + 3] == ["kernel_primary", "kernel_standby1"], ids
    standby = charts[at + 2]
    names = [series["n"] for series in standby["series"]]
    assert any(n.startswith("walreceiver f") and "sync" in n for n in names), names
    assert not any(n.endswith("epoll_wait") for n in names), names  # idle: left out
    assert standby["x"] and set(standby["x"]) <= set(charts[at]["x"]) | set(range(
        max(charts[at]["x"]) + 2))  # the same time axis as the waits


# --- live -----------------------------------------------------------------------------

PAUSED = """name = "kernel-live"
[workload]
scale = 1
clients = 1
duration = "2s"
warmup = "0s"
[server.settings]
wal_writer_delay = "10s"
[storage]
filesystem = "ext4"
size = "256MB"
[[faults]]
at = "1s"
action = "pause-disk"
duration = "1s"
"""


@pytest.mark.live
@pytest.mark.root
def test_backend_blocked_in_fdatasync_on_a_paused_device(storage_packages: None) -> None:
    """One session commits while the volume's device is paused, another sleeps in
    pg_sleep: a whole second of samples shows the first in fdatasync under ext4's frames
    and the second in its idle wait (epoll_wait). The WAL writer waits 10 s between
    rounds, so it does not flush the commit first (the backend would wait on its lock)."""
    from pglab.lab.lab import Lab
    from pglab.runner import probe_nodes
    from pglab.scenario import load_text

    scenario = load_text(PAUSED, "kernel-live.toml").scenario  # the fault: an emulated device
    with Lab(scenario, "kernel-live.toml", f"kernel-live-{time.time_ns()}") as lab:
        server = lab.primary
        assert server is not None
        committing, sleeping = server.connect(), server.connect()
        committing.execute("CREATE TABLE blocked (x int)")
        devices = lab.storage.emulated("primary")
        probe = KernelProbe()
        probe.start(ProbeContext(probe_nodes(lab), lambda: None, time.time))
        import threading

        threads = [threading.Thread(target=lambda: committing.execute(
                       "INSERT INTO blocked VALUES (1)"), daemon=True),
                   threading.Thread(target=lambda: sleeping.execute("SELECT pg_sleep(3)"),
                                    daemon=True)]
        samples = []
        try:
            for device in devices:
                device.set_behaviour({"paused": True})
            for thread in threads:
                thread.start()
            # both in their calls, the commit's flush blocked on the paused device (beside
            # the whole suite, a fixed 0.3 s is not enough: the first whole second can have
            # no fdatasync). Seen from /proc: a session asking would be a third backend.
            _wait_for_disk_sleep(committing.info.backend_pid)
            end = time.time() + 2.2  # two whole seconds at least begin and end in it
            while time.time() < end:
                samples += probe.sample(dt.datetime.now(dt.timezone.utc)).samples
                time.sleep(0.1)
        finally:
            for device in devices:
                device.set_behaviour({"paused": False})
            probe.stop()
        for thread in threads:
            thread.join(timeout=10)
        committing.close()
        sleeping.close()
    by_second: dict[dt.datetime, dict[str, float]] = {}
    for s in samples:
        if s.node == "primary" and s.label == "backends":
            by_second.setdefault(s.t, {})[s.metric] = s.value
    whole = [v for v in by_second.values() if v.get("samples", 0) >= 18]  # 2 backends, 9+ reads
    assert whole, by_second
    second = whole[0]
    assert second["processes"] == 2
    assert second["syscall:fdatasync"] == pytest.approx(50, abs=6), second
    assert second["syscall:epoll_wait"] == pytest.approx(50, abs=6), second
    assert second["state:uninterruptible"] == pytest.approx(50, abs=6), second
    fsync_frames = [m for m in second if m.startswith("stack:") and "ext4_sync_file" in m]
    assert fsync_frames and second[fsync_frames[0]] >= 40, second
    assert second.get("stack:do_epoll_wait", 0) >= 40, second


def _wait_for_disk_sleep(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while psutil.Process(pid).status() != psutil.STATUS_DISK_SLEEP:
        assert time.monotonic() < deadline, f"backend {pid} not blocked within {timeout} s"
        time.sleep(0.02)
    time.sleep(0.1)  # the other session, started just after, into pg_sleep


# --- opt-in ---------------------------------------------------------------------------

@pytest.mark.parametrize(("include", "message"), [
    ('["os.kernal"]', "s.toml: telemetry.include = ['os.kernal'] is not valid: 'os.kernal' "
                      "is not an opt-in probe (did you mean 'os.kernel'?)"),
    ('["db.io"]', "'db.io' is not an opt-in probe; include turns on os.kernel, os.profile "
                  "(the others are on unless excluded)"),
])
def test_include_names_opt_in_probes_only(include: str, message: str) -> None:
    from pglab.errors import BadInput
    from pglab.scenario import load_text

    with pytest.raises(BadInput) as info:
        load_text(f'name = "s"\n[telemetry]\ninclude = {include}\n', "s.toml")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_kernel_sampling_is_opt_in() -> None:
    from pglab.probes import make_probes

    assert "os.kernel" not in [p.name for p in make_probes()]
    assert "os.kernel" in [p.name for p in make_probes(include=["os.kernel"])]
    assert "os.kernel" not in [p.name for p in make_probes(["os.kernel"], ["os.kernel"])]
