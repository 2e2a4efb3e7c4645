"""`pglab doctor`: what the storage under a directory is, and what that means for PostgreSQL.

The cheap facts (filesystem and mount options, block device, rotational, scheduler,
read-ahead, the device's write cache mode; hostfacts.cheap_facts) are read from /proc and
/sys in milliseconds, so every run records them in its manifest and the recommendation rules
can use them. `--fsync` adds the sync latency per wal_sync_method from pg_test_fsync of
the binaries in use, which takes seconds and writes to the disk.

It also lists the optional system parts pglab can use (system_parts.PARTS), present or
missing here with the command that installs them, and whether pglab runs as root.

A finding is a sentence a DBA acts on, e.g. that a write-back cache whose flush returns
in microseconds is either protected against power loss or lying, and that only a power
loss test can tell which.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from pglab.errors import BadInput, PglabError
from pglab.hostfacts import cheap_facts
from pglab.system_parts import is_root, parts_report

# A flush this fast did not reach a platter or NAND without a cache in front: flushes that
# do take 0.5 ms and more (a drive's cache flush, a cloud volume's round trip), while a
# cache that returns at once answers in tens of microseconds, and a few times that on a
# busy machine (a RAM-backed device took 25-123 us at a load average of 5).
FAST_FLUSH_US = 250
NOT_DISKS = ("tmpfs", "ramfs", "overlay", "squashfs", "nfs", "nfs4", "cifs", "9p",
             "virtiofs")


# pg_test_fsync's "Compare file sync methods using one 8kB write" section
_METHOD_LINE = re.compile(r"^\s+(\S+)\s+([\d.]+) ops/sec\s+(\d+) usecs/op", re.M)
_NEXT_SECTION = "Compare file sync methods using two 8kB writes"
FSYNC_TIMEOUT_S = 120


def parse_pg_test_fsync(text: str) -> dict[str, float]:
    """wal_sync_method -> microseconds per 8 kB write + sync (the first section only)."""
    section = text.split(_NEXT_SECTION, maxsplit=1)[0]
    return {m.group(1): float(m.group(3)) for m in _METHOD_LINE.finditer(section)}


def fsync_latency(path: Path, pg_test_fsync: Path, seconds: int = 2) -> dict[str, float]:
    """Sync latency per wal_sync_method on `path`'s filesystem (writes a test file).

    Only the first section is used, so pg_test_fsync is stopped when it begins the
    second: about 10 s instead of its 30 s for all sections (it prints each line as its
    test ends)."""
    with tempfile.TemporaryDirectory(prefix="pglab-doctor-", dir=path) as tmp:
        tool = subprocess.Popen(
            [str(pg_test_fsync), "-s", str(seconds), "-f", str(Path(tmp) / "fsync.test")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # A flush that hangs (a paused or dead device) must not hang the doctor.
        timer = threading.Timer(FSYNC_TIMEOUT_S, tool.kill)
        timer.start()
        assert tool.stdout is not None and tool.stderr is not None
        try:
            lines = []
            for line in tool.stdout:
                lines.append(line)
                if line.startswith(_NEXT_SECTION):
                    tool.terminate()  # its SIGTERM handler removes the test file
                    break
            stopped = bool(lines) and lines[-1].startswith(_NEXT_SECTION)
            stderr = tool.stderr.read()
            code = tool.wait()
        finally:
            timed_out = not timer.is_alive()
            timer.cancel()
            tool.stdout.close()
            tool.stderr.close()
    if timed_out and not stopped:
        raise PglabError(f"pg_test_fsync on {path} did not finish in {FSYNC_TIMEOUT_S} s")
    output = "".join(lines)
    if code != 0 and not stopped:
        last = (stderr.strip() or output.strip() or "?").splitlines()[-1]
        raise PglabError(f"pg_test_fsync on {path} failed: {last}")
    found = parse_pg_test_fsync(output)
    if not found:
        raise PglabError(f"pg_test_fsync on {path} printed no sync method timings")
    return found


def findings(facts: dict[str, Any]) -> list[str]:
    """What the facts mean for PostgreSQL, one sentence each."""
    found: list[str] = []
    fstype = str(facts.get("fstype") or "")
    options = str(facts.get("mount_options") or "").split(",")
    dev = facts.get("block_device") or {}
    if fstype in NOT_DISKS:
        found.append(f"{fstype} is not a local disk: fsync timings and durability there say "
                     "nothing about a server's real storage")
    if "nobarrier" in options or "barrier=0" in options:
        found.append("mounted without barriers: cache flushes are not sent, so a power loss "
                     "can lose or corrupt committed data")
    if fstype in ("zfs", "fuse.zfs", "btrfs"):
        found.append(f"{fstype.removeprefix('fuse.')} is copy-on-write: wal_init_zero = off "
                     "and wal_recycle = off usually help (test them with pglab run --set)")
    if dev.get("rotational"):
        found.append(f"{dev.get('name')} is rotational: random reads and WAL syncs cost "
                     "milliseconds each")
    ahead = dev.get("read_ahead_kb")
    if isinstance(ahead, int) and ahead > 4096:
        found.append(f"read-ahead of {ahead} kB on {dev.get('name')}: random 8 kB reads "
                     "drag in much more than they need")
    sync = facts.get("fsync_us") or {}
    fastest = min(sync.values()) if sync else None
    cache = dev.get("write_cache")
    if fastest is not None and fastest < FAST_FLUSH_US:
        if cache == "write back":
            found.append(f"the device has a write-back cache and a sync returns in "
                         f"{fastest:.0f} µs: its cache is either protected against power loss "
                         "or lying about flushes, and only a power-loss test tells which "
                         "(a durability scenario with power-loss faults)")
        else:
            found.append(f"a sync returns in {fastest:.0f} µs: faster than stable storage "
                         "without a protected cache; check what is under this filesystem")
    if sync:
        best = min(sync, key=lambda k: sync[k])
        if best != "fdatasync" and "fdatasync" in sync and sync[best] < 0.7 * sync["fdatasync"]:
            found.append(f"wal_sync_method = {best} syncs in {sync[best]:.0f} µs against "
                         f"{sync['fdatasync']:.0f} µs for fdatasync (the Linux default): "
                         "worth a pglab run --set server.settings.wal_sync_method=" + best)
    return found


def doctor(path: Path, pg_test_fsync: Path | None) -> dict[str, Any]:
    if not path.exists():
        raise BadInput(f"doctor: {path} does not exist")
    if not path.is_dir():
        raise BadInput(f"doctor: {path} is not a directory")
    facts = cheap_facts(path)
    if pg_test_fsync is not None:
        facts["fsync_us"] = fsync_latency(path, pg_test_fsync)
        facts["fsync_tool"] = str(pg_test_fsync)
    facts["findings"] = findings(facts)
    # what else pglab can use on this machine, and how to get what is missing
    facts["root"] = is_root()
    facts["system_parts"] = parts_report()
    return facts
