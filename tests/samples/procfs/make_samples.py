#!/usr/bin/env python3
"""Regenerates the procfs samples under tests/samples/procfs/ from THIS machine.

    sudo python3 tests/samples/procfs/make_samples.py

Takes two snapshots (t0/, t1/) of /proc/stat, /proc/diskstats, /proc/meminfo,
/proc/vmstat, /proc/pressure/* and `ss -tinpmH` about one second apart, with real
activity in between: `dd ... conv=fsync` writes 50 MiB next to the data dirs, a real
PostgreSQL 15 primary streams the WAL of a 200k-row CREATE TABLE to a real standby over
loopback TCP, a psql TCP session sits in pg_sleep (a non-replication socket) and a
Python child spins on one core. Also saved: /proc/self/mountinfo, the spinning child's
/proc/<pid>/stat at both times, the process titles of both servers' processes and the
command lines of the processes that own the sockets `ss` reported.

Needs root (the servers run as `nobody`; PostgreSQL refuses to run as root). Everything
listens on 127.0.0.1 only; the servers and their directories are removed at exit.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PG_BIN = Path(os.environ.get("PG15_BIN", "/usr/lib/postgresql/15/bin"))
RUNAS = "nobody"
PROC_FILES = (
    "stat",
    "diskstats",
    "meminfo",
    "vmstat",
    "pressure/cpu",
    "pressure/io",
    "pressure/memory",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def as_server_user(*args: str) -> None:
    subprocess.run(
        ["runuser", "-u", RUNAS, "--", *args], check=True, cwd="/tmp", stdout=subprocess.DEVNULL
    )


def psql(port: int, sql: str) -> str:
    result = subprocess.run(
        [
            str(PG_BIN / "psql"),
            "-X",
            "-A",
            "-t",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            sql,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip()


def start_server(data: Path, port: int, log: Path) -> None:
    options = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
    as_server_user(
        str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "start", "-o", options
    )


def postmaster_pid(data: Path) -> int:
    return int((data / "postmaster.pid").read_text().splitlines()[0])


def ss_text(ports: list[int]) -> str:
    wanted = " or ".join(f"sport = :{p} or dport = :{p}" for p in ports)
    result = subprocess.run(
        ["ss", "-tinpmH", "state", "established", f"( {wanted} )"],
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout


def snapshot(target: Path, ports: list[int], busy_pid: int) -> float:
    """Copies the proc files into `target`; returns the monotonic time of the reads."""
    target.mkdir(parents=True)
    (target / "pressure").mkdir()
    texts = {name: Path("/proc", name).read_text() for name in PROC_FILES}
    taken = time.monotonic()  # next to the reads, as the probes do
    busy_stat = Path(f"/proc/{busy_pid}/stat").read_text()
    for name, text in texts.items():
        (target / name).write_text(text)
    (target / "busy_stat").write_text(busy_stat)
    (target / "ss.txt").write_text(ss_text(ports))
    return taken


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
    except OSError:
        return ""


def socket_owners(ss_output: str) -> dict[str, dict[str, Any]]:
    owners: dict[str, dict[str, Any]] = {}
    for pid_text in re.findall(r"pid=(\d+)", ss_output):
        stat = Path(f"/proc/{pid_text}/stat").read_text()
        owners[pid_text] = {
            "cmdline": cmdline(int(pid_text)),
            "ppid": int(stat.rpartition(")")[2].split()[1]),
        }
    return owners


def capture(work: Path) -> None:
    primary, standby = work / "primary", work / "standby"
    primary_port, standby_port = free_port(), free_port()
    as_server_user(
        str(PG_BIN / "initdb"),
        "-D",
        str(primary),
        "-U",
        "postgres",
        "--auth=trust",
        "-E",
        "UTF8",
        "--locale=C",
    )
    start_server(primary, primary_port, work / "primary.log")
    as_server_user(
        str(PG_BIN / "pg_basebackup"),
        "-h",
        "127.0.0.1",
        "-p",
        str(primary_port),
        "-U",
        "postgres",
        "-D",
        str(standby),
        "-R",
    )
    start_server(standby, standby_port, work / "standby.log")
    for _ in range(100):
        if (
            psql(primary_port, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
            == "1"
        ):
            break
        time.sleep(0.1)
    else:
        raise SystemExit("the standby never started streaming")
    sleeper = subprocess.Popen(
        [
            str(PG_BIN / "psql"),
            "-X",
            "-h",
            "127.0.0.1",
            "-p",
            str(primary_port),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            "SELECT pg_sleep(6)",
        ],
        stdout=subprocess.DEVNULL,
    )
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        ports = [primary_port, standby_port]
        t0 = snapshot(HERE / "t0", ports, busy.pid)
        subprocess.run(
            [
                "dd",
                "if=/dev/zero",
                f"of={work / 'ddfile'}",
                "bs=1M",
                "count=50",
                "conv=fsync",
                "status=none",
            ],
            check=True,
        )
        psql(primary_port, "CREATE TABLE t AS SELECT g FROM generate_series(1, 200000) g")
        time.sleep(max(0.0, t0 + 1.0 - time.monotonic()))
        t1 = snapshot(HERE / "t1", ports, busy.pid)
        pids = {"primary": postmaster_pid(primary), "standby": postmaster_pid(standby)}
        titles = [cmdline(child) for pid in pids.values() for child in children_of(pid)]
        owners = socket_owners((HERE / "t1" / "ss.txt").read_text())
    finally:
        busy.kill()
        sleeper.kill()
    shutil.copyfile("/proc/self/mountinfo", HERE / "mountinfo")
    (HERE / "postgres_titles.jsonl").write_text("".join(json.dumps(t) + "\n" for t in titles))
    (HERE / "socket_owners.json").write_text(json.dumps(owners, indent=1) + "\n")
    meta = {
        "t0_monotonic": t0,
        "t1_monotonic": t1,
        "elapsed_s": t1 - t0,
        "clk_tck": os.sysconf("SC_CLK_TCK"),
        "page_size": os.sysconf("SC_PAGE_SIZE"),
        "online_cpus": os.cpu_count(),
        "kernel": platform.release(),
        "ports": {"primary": primary_port, "standby": standby_port},
        "postmaster_pids": pids,
        "busy_pid": busy.pid,
        "dd_dir": str(work),
        "dd_bytes": 50 * 1024 * 1024,
    }
    (HERE / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def stop_server(data: Path) -> None:
    if (data / "postmaster.pid").exists():
        subprocess.run(
            [
                "runuser",
                "-u",
                RUNAS,
                "--",
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(data),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
            cwd="/tmp",
            check=False,
            stdout=subprocess.DEVNULL,
        )


def main() -> None:
    for old in ("t0", "t1"):
        shutil.rmtree(HERE / old, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="pglab-procfs-samples-", dir="/tmp"))
    shutil.chown(work, RUNAS)
    try:
        capture(work)
    finally:
        for node in ("standby", "primary"):
            stop_server(work / node)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
