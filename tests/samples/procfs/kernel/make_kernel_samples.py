#!/usr/bin/env python3
"""Regenerates the kernel-state samples under tests/samples/procfs/kernel/ on THIS machine.

    sudo python3 tests/samples/procfs/kernel/make_kernel_samples.py

A pglab lab (PostgreSQL 18 of the embedded wheel) with its data on an ext4 volume on
pglab's emulated block device. Session A commits one row while the device is paused, so
its backend blocks flushing the commit's WAL; session B is idle (waiting for its client).
One second into the pause, for every process the postmaster forked, the script saves
/proc/<pid>/{stat,syscall,wchan,stack,io,cmdline} into processes.json (kind by title),
then resumes the device and removes the lab. Also saved: meta.json (kernel, machine, the
two sessions' backend pids). spinner.json: /proc/<pid>/{stat,syscall,wchan} of a Python
child spinning in user space, read 20 times (on a CPU: "running"), then once stopped by
SIGSTOP (state T, outside any call: "-1 SP PC").

Needs root (the volume; the stack file). wal_writer_delay is 10 s so that the WAL writer
does not flush the commit first (the backend would then wait on its lock, not the disk).
"""

from __future__ import annotations

import json
import platform
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from pglab.lab.lab import Lab
from pglab.probes import procfs
from pglab.scenario import load_text

HERE = Path(__file__).resolve().parent
FILES = ("stat", "syscall", "wchan", "stack", "io", "cmdline")
SCENARIO = """name = "kernel-samples"
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


def read(path: Path) -> str | None:
    try:
        return path.read_bytes().decode(errors="replace")
    except OSError as exc:
        return f"<unreadable: {exc.strerror}>"


def main() -> None:
    scenario = load_text(SCENARIO, "kernel-samples.toml").scenario  # the fault: an emulated device
    with Lab(scenario, "kernel-samples.toml", f"kernel-samples-{time.time_ns()}") as lab:
        server = lab.primary
        assert server is not None and server.process is not None
        committing, idle = server.connect(), server.connect()
        committing.execute("CREATE TABLE blocked (x int)")
        pids = {"committing": committing.info.backend_pid, "idle": idle.info.backend_pid}
        devices = lab.storage.emulated("primary")
        for device in devices:
            device.set_behaviour({"paused": True})
        writer = threading.Thread(target=lambda: committing.execute(
            "INSERT INTO blocked VALUES (1)"), daemon=True)
        try:
            writer.start()
            time.sleep(1.0)
            root = server.process.pid
            children = procfs.parse_children(
                (Path(f"/proc/{root}/task/{root}/children")).read_text())
            processes = []
            for pid in children:
                files = {name: read(Path(f"/proc/{pid}/{name}")) for name in FILES}
                kind = procfs.process_kind(files["cmdline"] or "")
                processes.append({"pid": pid, "kind": kind, "files": files})
        finally:
            for device in devices:
                device.set_behaviour({"paused": False})
        writer.join(timeout=30)
        committing.close()
        idle.close()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        reads = []
        for _ in range(20):
            reads.append({name: read(Path(f"/proc/{spinner.pid}/{name}"))
                          for name in ("stat", "syscall", "wchan")})
            time.sleep(0.05)
        spinner.send_signal(signal.SIGSTOP)
        time.sleep(0.2)
        reads.append({name: read(Path(f"/proc/{spinner.pid}/{name}"))
                      for name in ("stat", "syscall", "wchan")})
    finally:
        spinner.kill()
        spinner.wait()
    (HERE / "spinner.json").write_text(json.dumps(reads, indent=1) + "\n")
    (HERE / "processes.json").write_text(json.dumps(processes, indent=1) + "\n")
    (HERE / "meta.json").write_text(json.dumps({
        "kernel": platform.release(), "machine": platform.machine(), "backend_pids": pids,
        "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }, indent=1) + "\n")
    print(f"{len(processes)} processes saved; backends {pids}")


if __name__ == "__main__":
    main()
