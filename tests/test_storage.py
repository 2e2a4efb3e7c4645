"""Storage volumes (src/pglab/storage/): real filesystems on real loop devices and on the
emulated block device, used by real servers under pgbench, and removed after.

The live tests need root (losetup, mkfs, mount) and Debian's packages, which the
`storage_packages` fixture installs when they are missing, as CI runs as root.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl
import psutil
import pytest

from conftest import SAMPLES, run_cli
from pglab.errors import BadInput, EnvironmentProblem
from pglab.results.manifest import Manifest
from pglab.scenario import load_text
from pglab.storage.describe import lines as storage_lines
from pglab.storage.doctor import FAST_FLUSH_US, findings, parse_pg_test_fsync
from pglab.storage.registry import FILESYSTEMS

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="storage volumes need root")

# The tests that make volumes are on the host's disk (`disk`): a volume's file, under a loop
# device, is where a user's would be. In RAM (a tmpfs file under the loop device), an ext4
# volume with data=journal can stop every commit for 5 s, in a run that measures none.
# The tests that share the module's pglab_home follow them.


# --- pure: the registry, the checks, the doctor's parser and findings ------------------

def _check(text: str) -> None:
    from pglab.lab.preflight import check_supported

    loaded = load_text(text, "s.toml")
    check_supported(loaded.scenario, "s.toml")


BASE = 'name = "s"\n[workload]\nscale = 1\n'


@pytest.mark.parametrize(("storage", "message"), [
    ('filesystem = "xfz"', "storage.filesystem = 'xfz' is not known (did you mean 'xfs'?)"),
    ('filesystem = "xfs"\nsize = "200MB"', "storage.size = 200MB is too small for xfs: "
                                          "at least 300MB"),
    ('filesystem = "ext4"\noptions = { recordsize = "16k" }',
     "storage.options.recordsize: ext4 has no option 'recordsize'; it accepts data, barrier"),
    ('filesystem = "zfs"\noptions = { compression = "lz4" }',
     "storage.options.compression = 'lz4' is not valid for zfs: zfs-fuse (pool version 23) "
     "has no compression = lz4"),
    ('filesystem = "zfs"\noptions = { sync = "always" }',
     "storage.options.sync = 'always' is not valid for zfs: zfs-fuse (pool version 23) has "
     "no sync property"),
    ('filesystem = "zfs"\noptions = { recordsize = "1m" }',
     "storage.options.recordsize = '1m' is not valid for zfs: zfs-fuse (pool version 23) "
     "has no recordsize = 1m"),
    ('filesystem = "btrfs"\noptions = { compress = "zstd", datacow = false }',
     "storage.options: compress and datacow = off: btrfs does not compress"),
    ('filesystem = "ext4"\ndevice = { profile = "cloud-sdd:100GB" }',
     "storage.device.profile: unknown disk profile 'cloud-sdd' (did you mean 'cloud-ssd'?)"),
    ('filesystem = "ext4"\nblock_device = "/dev/null"', "storage.block_device = '/dev/null' "
                                                        "is not a block device"),
    ('path = "/nonexistent/dir"', "storage.path = '/nonexistent/dir' is not an existing "
                                  "directory"),
    ('filesystem = "ext4"\npool = "tank"', "storage.pool makes a dataset of a ZFS pool: "
                                           "filesystem must be 'zfs'"),
])
def test_bad_storage_is_one_line_before_anything_starts(storage: str, message: str) -> None:
    with pytest.raises((BadInput, EnvironmentProblem)) as info:
        _check(BASE + "[storage]\n" + storage + "\n")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_device_fault_needs_a_volume() -> None:
    with pytest.raises(BadInput, match="the 'pause-disk' fault acts on primary's storage "
                                       "volume device, and primary has none"):
        _check(BASE + 'duration = "20s"\n[[faults]]\nat = "5s"\naction = "pause-disk"\n'
               'duration = "2s"\n')


def test_envelope_disk_limits_and_a_volume_are_refused() -> None:
    with pytest.raises(BadInput, match=r"put the limits on storage\.device"):
        _check(BASE + '[envelope]\ndisk = { write_mbps = 5 }\n[storage]\nfilesystem = "ext4"\n')


def test_unknown_keys_get_did_you_mean() -> None:
    with pytest.raises(BadInput, match="unknown key 'storage.device.write_mbs' "
                                       r"\(did you mean 'storage.device.write_mbps'\?\)"):
        load_text(BASE + '[storage]\ndevice = { write_mbs = 5 }\n', "s.toml")


def test_every_option_documented_in_the_storage_docs() -> None:
    readme = (Path(__file__).resolve().parent.parent / "docs" / "STORAGE.md").read_text()
    missing = [f"{fs.name}.{o.name}" for fs in FILESYSTEMS.entries.values() for o in fs.options
               if f"`{o.name}`" not in readme]
    assert missing == []
    assert [fs for fs in FILESYSTEMS.entries if f"`{fs}`" not in readme] == []


def test_pg_test_fsync_parsed_from_a_real_run() -> None:
    # pg_test_fsync 18.6 on ext4 / virtio disk (this project's CI machine kind)
    text = (SAMPLES / "storage" / "pg_test_fsync-18-ext4-virtio.txt").read_text()
    assert parse_pg_test_fsync(text) == {"open_datasync": 3004.0, "fdatasync": 2882.0,
                                         "fsync": 2025.0, "open_sync": 2508.0}


def test_doctor_findings() -> None:
    lying = {"fstype": "xfs", "block_device": {"name": "loop3", "write_cache": "write back"},
             "fsync_us": {"fdatasync": 31.0, "open_datasync": 29.0}}
    found = findings(lying)
    assert any("either protected against power loss or lying" in f for f in found)
    assert findings({"fstype": "tmpfs", "block_device": {}})[0].startswith("tmpfs is not")
    assert any("without barriers" in f for f in findings(
        {"fstype": "ext4", "mount_options": "rw,nobarrier", "block_device": {}}))


# --- live: real volumes -----------------------------------------------------------------

def leftovers(home: Path) -> list[str]:
    """Whatever volumes of labs under `home` could leave: mounts, loop devices, device
    servers, pglab's ZFS pools, a zfs-fuse daemon pglab started."""
    found = []
    labs = str(home / "labs") + "/"
    for line in Path("/proc/self/mounts").read_text().splitlines():
        if line.split()[1].startswith(labs):
            found.append(f"mount {line.split()[1]}")
    out = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True,
                         text=True).stdout
    found += [f"loop {line}" for line in out.splitlines() if labs in line]
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if labs in cmd and ("device_server" in cmd or "nbdfuse" in cmd):
            found.append(f"process {proc.pid} {cmd[:80]}")
    # ZFS names are machine-wide and carry their pglab's pid: a pool of a dead pglab is
    # a leftover if it was mounted under `home` (a concurrent test's killed pglab has
    # one under its own home until its next pglab reaps it).
    pools = subprocess.run(["zfs", "list", "-H", "-d", "0", "-o", "name,mountpoint"],
                           capture_output=True, text=True).stdout.splitlines()
    for pool, _, mountpoint in (line.partition("\t") for line in pools):
        match = re.match(r"pglab-(\d+)-", pool)
        if (match and not psutil.pid_exists(int(match.group(1)))
                and mountpoint.startswith(labs)):
            found.append(f"ZFS pool {pool} of a dead pglab")
    return found


def _scenario(tmp_path: Path, storage: str, extra: str = "", duration: int = 4,
              name: str = "vol") -> Path:
    path = tmp_path / f"{name}.toml"
    scale = "" if "scale =" in extra else "scale = 2\n"
    path.write_text(f'name = "{name}"\n[workload]\n{scale}clients = 2\nduration = '
                    f'"{duration}s"\nwarmup = "1s"\n{extra}\n[storage]\n{storage}\n')
    return path


def _manifest(results: Path) -> dict[str, Any]:
    found = sorted(results.glob("*/*/manifest.json"))
    assert found, f"no run folder under {results}"
    manifest: dict[str, Any] = json.loads(found[-1].read_text())
    return manifest


@root_only
@pytest.mark.disk  # a volume on a loop device over a file on the host's disk
@pytest.mark.root
@pytest.mark.parametrize(("fs", "options", "expected"), [
    ("ext4", '{ data = "journal", barrier = false, commit = 10, journal = true }',
     {"data": "journal", "barrier": "off", "commit": "10", "journal": "on"}),
    ("xfs", '{ logbsize = "64k", atime = false, reflink = false }',
     {"logbsize": "64k", "atime": "off", "reflink": "off"}),
    ("btrfs", '{ compress = "zstd", commit = 20, barrier = false }',
     {"compress": "zstd", "commit": "20", "barrier": "off"}),
    ("zfs", '{ recordsize = "16k", compression = "gzip", logbias = "throughput" }',
     {"recordsize": "16k", "compression": "gzip", "logbias": "throughput"}),
])
def test_each_filesystem_made_used_read_back_removed(
        storage_packages: None, pglab_home: Path, tmp_path: Path, fs: str, options: str,
        expected: dict[str, str]) -> None:
    size = "1GB" if fs != "ext4" else "512MB"
    scenario = _scenario(tmp_path, f'filesystem = "{fs}"\nsize = "{size}"\noptions = {options}')
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr[-2000:]
    manifest = _manifest(tmp_path / "r")
    assert manifest["status"] == "completed"
    assert manifest["results"]["measured"]["transactions"] > 0
    [volume] = manifest["nodes"]["primary"]["storage"]
    assert volume["filesystem"] == fs
    assert volume["options"] == expected  # read back from the kernel / zfs get
    assert volume["device"]["kind"] == "loop"  # no limits: a plain loop device
    if fs == "zfs":  # the daemon's bounded caches are part of what was measured
        assert "--max-arc-size" in volume["zfs_fuse_args"], volume
    data_fs = manifest["host"]["data_dir"]["fstype"]
    assert data_fs == ("fuse.zfs" if fs == "zfs" else fs)
    assert leftovers(pglab_home) == []


@root_only
@pytest.mark.disk  # a volume on a loop device over a file on the host's disk
@pytest.mark.root
def test_wal_on_its_own_volume_and_a_standby_volume(storage_packages: None, pglab_home: Path,
                                                    tmp_path: Path) -> None:
    scenario = _scenario(
        tmp_path, 'filesystem = "xfs"\nsize = "1GB"\n[storage.wal]\nfilesystem = "ext4"\n'
        'size = "256MB"\n[nodes.standby1.storage]\nfilesystem = "ext4"\nsize = "512MB"\n'
        'device = { write_mbps = 40 }', extra="[topology]\nstandbys = 1\n")
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr[-2000:]
    manifest = _manifest(tmp_path / "r")
    nodes = manifest["nodes"]
    assert [(v["role"], v["filesystem"]) for v in nodes["primary"]["storage"]] == [
        ("data", "xfs"), ("wal", "ext4")]
    [standby] = nodes["standby1"]["storage"]
    assert standby["device"]["kind"] == "emulated"
    assert standby["device"]["write_mbps"] == 40
    assert nodes["standby1"]["replication_state"] == "streaming"
    text = "\n".join(storage_lines(Manifest.from_json(manifest)))
    assert "primary wal: ext4 256 MB" in text and "standby1 data: ext4 512 MB" in text
    # WAL went to its own volume's device: os.disk follows both of the primary's devices,
    # and the commits' WAL flushes wrote to the WAL one
    devices = {v["role"]: v["device"]["name"] for v in nodes["primary"]["storage"]}
    assert devices["data"] != devices["wal"]
    series = pl.read_parquet(next((tmp_path / "r").glob("*/*/timeseries.parquet")))
    writes = series.filter((pl.col("source") == "os.disk") & (pl.col("metric") == "write_mbps")
                           & (pl.col("node") == "primary")).group_by("label").agg(
                               pl.col("value").sum())
    written = dict(zip(writes["label"].to_list(), writes["value"].to_list(), strict=True))
    assert devices["data"] in written
    assert written[devices["wal"]] > 1.0, written
    assert leftovers(pglab_home) == []


def _disk_rates(folder: Path, device: str) -> list[float]:
    series = pl.read_parquet(folder / "timeseries.parquet")
    return series.filter((pl.col("source") == "os.disk") & (pl.col("metric") == "write_mbps")
                         & (pl.col("label") == device)).sort("t")["value"].to_list()


@root_only
# an emulated device: the CPU first; the run waits on its 10 MB/s (0.34 of a CPU over it)
@pytest.mark.cpu_light
@pytest.mark.disk  # pglab_home is the module's, on the disk
@pytest.mark.root
def test_write_limit_holds_for_every_byte(storage_packages: None, pglab_home: Path,
                                         tmp_path: Path) -> None:
    """At 10 MB/s, no second of the volume device's measured write rate goes above 11 MB/s,
    though the kernel flusher writes back a checkpoint's dirty pages (cgroup v1 cannot
    throttle those: the same scenario with an [envelope] limit measured 61 MB/s)."""
    scenario = _scenario(
        tmp_path, 'filesystem = "ext4"\nsize = "1GB"\ndevice = { write_mbps = 10 }',
        # 150,000 rows: some 40 MB of WAL and 25 MB of dirty heap, seconds at the limit
        # each (every commit of the load waits behind the update, and pgbench runs on
        # until the update has committed)
        duration=15, extra=(
            'scale = 5\n[server.settings]\nshared_buffers = "256MB"\n'
            'checkpoint_completion_target = 0.1\n'
            '[[faults]]\nat = "3s"\naction = "bulk-update"\nargs = { rows = 150000 }\n'
            '[[faults]]\nat = "9s"\naction = "checkpoint"\n'))
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr[-2000:]
    folder = next((tmp_path / "r").glob("*/*/manifest.json")).parent
    manifest = _manifest(tmp_path / "r")
    device = manifest["nodes"]["primary"]["storage"][0]["device"]["name"]
    rates = _disk_rates(folder, device)
    assert len(rates) >= 15
    assert max(rates) <= 11.0, rates
    assert sorted(rates)[-3] >= 8.0, rates  # the load did reach the limit


@root_only
@pytest.mark.cpu_exclusive  # an emulated or RAM-backed device: the CPU alone
@pytest.mark.disk  # its device's file on the host's disk, as the others'
@pytest.mark.root
def test_latency_iops_and_pause_measured_on_the_device(storage_packages: None,
                                                       tmp_path: Path) -> None:
    """The device's behaviours measured from outside with O_DIRECT writes and fsync."""
    from pglab.scenario import VolumeSpec
    from pglab.storage.devices import resolve_device
    from pglab.storage.volume import Volume

    spec = VolumeSpec.model_validate({"filesystem": "ext4", "size": "256MB",
                                      "device": {"latency": "20ms"}})
    volume = Volume("primary", "data", spec, tmp_path / "node", True,
                    resolve_device(spec.device), "pglab-test-dev")
    try:
        mount = volume.create()
        volume.apply_limits()
        target = mount / "probe"
        fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
        import mmap

        buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs

        def write_for(seconds: float) -> tuple[int, float]:
            count, slowest, end = 0, 0.0, time.monotonic() + seconds
            while time.monotonic() < end:
                started = time.monotonic()
                os.pwrite(fd, buf, (count % 64) * 4096)
                slowest = max(slowest, time.monotonic() - started)
                count += 1
            return count, slowest

        started = time.monotonic()
        os.pwrite(fd, buf, 0)
        assert time.monotonic() - started >= 0.019  # every write waits its 20 ms
        volume.set_behaviour({"latency_s": 0.0, "write_iops": 100})
        count, _ = write_for(2.0)
        # About 100 per second, never more. Beside the whole suite the device server is
        # short of CPU and completes fewer (as few as 139 in 2 s); 120 still tells this
        # limit from one of half the rate (at most 110).
        assert 120 <= count <= 2 * 100 * 1.1
        volume.set_behaviour({"write_iops": 0, "paused": True})
        resume_at = time.monotonic() + 1.5

        def resume() -> None:
            time.sleep(max(0.0, resume_at - time.monotonic()))
            volume.set_behaviour({"paused": False})

        import threading

        threading.Thread(target=resume, daemon=True).start()
        started = time.monotonic()
        os.pwrite(fd, buf, 0)  # waits while the device is paused
        assert time.monotonic() - started >= 1.0
        os.close(fd)
    finally:
        volume.remove()
    assert not volume.mountpoint.is_mount()


@pytest.mark.live
def test_device_server_answers_real_nbd_clients(storage_packages: None,
                                                tmp_path: Path) -> None:
    """libnbd's own tools against the server alone: the handshake nbdinfo reads, and data
    nbdcopy writes over several connections in large requests, read back from a volatile
    cache before it reaches the image (the server reuses its read buffer, so what a cache
    keeps must be its own copy), written to the image by a flush, then written through."""
    from pglab.storage.device_server import control

    size = 8 << 20
    image, socket_path, ctl = tmp_path / "image", tmp_path / "nbd.sock", tmp_path / "ctl.sock"
    image.write_bytes(bytes(size))
    config = tmp_path / "device.json"
    config.write_text(json.dumps({"image": str(image), "size": size, "socket": str(socket_path),
                                  "control": str(ctl),
                                  # a cache only a flush empties (asked for explicitly)
                                  "behaviour": {"cache": "volatile", "destage_s": 3600}}))
    server = subprocess.Popen([sys.executable, "-m", "pglab.storage.device_server",
                               str(config)], stdout=subprocess.PIPE)
    uri = f"nbd+unix:///?socket={socket_path}"
    try:
        assert server.stdout is not None and server.stdout.readline() == b"ready\n"
        info = json.loads(subprocess.run(["nbdinfo", "--json", uri], capture_output=True,
                                         check=True, text=True).stdout)["exports"][0]
        assert (info["export-size"], info["can_flush"], info["can_multi_conn"]) == (
            size, True, True)
        assert info["block_size_preferred"] == 4096
        first, second, third = (tmp_path / f"d{i}" for i in range(3))
        for path in (first, second, third):
            path.write_bytes(os.urandom(size))
        copy = ["nbdcopy", "--connections=4", "--request-size=1048576"]
        subprocess.run([*copy, str(first), uri], check=True)
        subprocess.run([*copy, uri, str(tmp_path / "back")], check=True)
        assert (tmp_path / "back").read_bytes() == first.read_bytes()
        assert image.read_bytes() == bytes(size)  # all of it still in the cache
        assert control(ctl, {"op": "stats"})["counters"]["cached_bytes"] == size
        subprocess.run([*copy, "--flush", str(second), uri], check=True)
        assert image.read_bytes() == second.read_bytes()
        control(ctl, {"op": "set", "behaviour": {"cache": "honest"}})
        subprocess.run([*copy, str(third), uri], check=True)
        assert image.read_bytes() == third.read_bytes()
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.cpu_exclusive  # the device server's write-back loop must wake on time
def test_a_volatile_cache_is_bounded_and_destages(storage_packages: None,
                                                  tmp_path: Path) -> None:
    """The server alone, under nbdcopy (about 2 s): a cache of 2 MB never holds more,
    whatever is written (its oldest blocks go first); what it holds is on the medium
    within the destage delay with no flush; and a power loss drops only the writes of
    that last moment, with how long the oldest had waited."""
    from pglab.storage.device_server import control

    size, cache, destage = 8 << 20, 2 << 20, 0.2
    image, socket_path, ctl = tmp_path / "image", tmp_path / "nbd.sock", tmp_path / "ctl.sock"
    image.write_bytes(bytes(size))
    config = tmp_path / "device.json"
    config.write_text(json.dumps({"image": str(image), "size": size, "socket": str(socket_path),
                                  "control": str(ctl), "behaviour": {
                                      "cache": "volatile-ignores-flush", "cache_bytes": cache,
                                      "destage_s": destage}}))
    server = subprocess.Popen([sys.executable, "-m", "pglab.storage.device_server",
                               str(config)], stdout=subprocess.PIPE)
    uri = f"nbd+unix:///?socket={socket_path}"
    try:
        assert server.stdout is not None and server.stdout.readline() == b"ready\n"
        data = tmp_path / "data"
        data.write_bytes(os.urandom(size))
        subprocess.run(["nbdcopy", "--flush", "--request-size=1048576", str(data), uri],
                       check=True)
        held = control(ctl, {"op": "stats"})["counters"]["cached_bytes"]
        assert 0 < held <= cache, held  # bounded; the flush did nothing (a lying cache)
        time.sleep(destage * 1.25 + 0.3)  # the destage's bound, and a busy machine's slack
        assert control(ctl, {"op": "stats"})["counters"]["cached_bytes"] == 0
        assert image.read_bytes() == data.read_bytes()  # written back without a flush
        fresh = tmp_path / "fresh"
        fresh.write_bytes(os.urandom(1 << 20))
        subprocess.run(["nbdcopy", "--request-size=1048576", str(fresh), uri], check=True)
        lost = control(ctl, {"op": "power-loss"})
        # dropped: what came within the destage delay before the cut, and nothing older
        assert 0 < lost["lost_bytes"] <= 1 << 20 and lost["held_s"] <= destage * 1.25 + 0.3, lost
    finally:
        server.terminate()
        server.wait(timeout=10)


@root_only
@pytest.mark.cpu_exclusive  # an emulated or RAM-backed device: the CPU alone
@pytest.mark.disk  # pglab_home is the module's, on the disk
@pytest.mark.root
def test_pause_disk_stops_commits_and_the_analysis_names_it(
        storage_packages: None, pglab_home: Path, tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, 'filesystem = "ext4"\nsize = "512MB"', duration=10, extra=(
        '[telemetry]\ninclude = ["os.kernel"]\n'
        '[[faults]]\nat = "3s"\naction = "pause-disk"\nduration = "3s"\n'))
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 0, result.stderr[-2000:]
    folder = next((tmp_path / "r").glob("*/*/manifest.json")).parent
    client = pl.read_parquet(folder / "client.parquet").filter(
        pl.col("job").is_null() & ~pl.col("warmup") & ~pl.col("partial")).sort("t")
    tps = client["tps"].to_list()
    assert min(tps) == 0 and tps[-1] > 0, tps  # commits stopped, then went on
    analysis = json.loads((folder / "analysis.json").read_text())
    stalls = analysis["stalls"]
    assert stalls, "the pause made no stall"
    longest = max(stalls, key=lambda s: int(s["seconds"]))
    assert longest["seconds"] >= 2
    assert longest["causes"][0]["cause"] == "storage-device"
    # below the wait events (os.kernel): whoever flushed the WAL when the device paused
    # (a backend, or the WAL writer) sat in fdatasync under ext4's fsync the whole time,
    # and the stall says what the backends did in the kernel
    kernel = pl.read_parquet(folder / "timeseries.parquet").filter(
        (pl.col("source") == "os.kernel") & (pl.col("node") == "primary")
        & pl.col("metric").str.starts_with("stack:")
        & pl.col("metric").str.contains("ext4_sync_file"))
    start = dt.datetime.fromisoformat(longest["start"].replace("Z", "+00:00"))
    flushing = kernel.filter(pl.col("t") >= start).group_by("t").agg(pl.col("value").sum())
    assert flushing.height >= 2, kernel
    assert longest["kernel"] and "were in the kernel in " in longest["kernel"][0], longest
    assert leftovers(pglab_home) == []


STAGES = {"creating": "making primary's storage", "mounted": "copying initialised data",
          "under load": "starting PostgreSQL"}


def _wait_for_pgbench(parent: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(c.name() == "pgbench" for c in psutil.Process(parent).children(True)):
                time.sleep(2)  # well into the load
                return
        except psutil.Error:
            pass
        time.sleep(0.2)
    raise AssertionError("pgbench never started")


@root_only
@pytest.mark.disk  # a volume on a loop device over a file on the host's disk
@pytest.mark.root
@pytest.mark.parametrize(("stage", "sig"), [
    ("creating", signal.SIGKILL), ("mounted", signal.SIGKILL), ("under load", signal.SIGKILL),
    ("mounted", signal.SIGTERM), ("under load", signal.SIGINT),
])
def test_signals_at_each_stage_leave_nothing(storage_packages: None, pglab_home: Path,
                                             tmp_path: Path, stage: str,
                                             sig: signal.Signals) -> None:
    filesystem = "zfs" if stage == "mounted" and sig == signal.SIGKILL else "xfs"
    scenario = _scenario(tmp_path, f'filesystem = "{filesystem}"\nsize = "512MB"\n'
                         'device = { write_mbps = 50 }', duration=60)
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pglab", "run", str(scenario), "--results",
                             str(tmp_path / "r")], stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 240
    for line in proc.stderr:
        seen.append(line)
        if STAGES[stage] in line or time.monotonic() > deadline:
            break
    assert any(STAGES[stage] in line for line in seen), "".join(seen)[-2000:]
    if stage == "under load":
        _wait_for_pgbench(proc.pid)
    proc.send_signal(sig)
    proc.communicate(timeout=120)
    if sig != signal.SIGKILL:
        assert proc.returncode == 128 + sig  # cleaned up by itself
        assert leftovers(pglab_home) == []
    # the next pglab reaps whatever a kill left
    after = run_cli("run", str(_scenario(tmp_path, 'filesystem = "ext4"\nsize = "256MB"',
                                         duration=1, name="next")),
                    "--results", str(tmp_path / "r2"))
    assert after.returncode == 0, after.stderr[-2000:]
    assert leftovers(pglab_home) == []
    labs = pglab_home / "labs"
    assert not labs.is_dir() or list(labs.iterdir()) == []


@root_only
@pytest.mark.cpu_exclusive  # an emulated or RAM-backed device: the CPU alone
@pytest.mark.disk  # its device's file on the host's disk, as the others'
@pytest.mark.root
def test_doctor_on_a_cache_that_acknowledges_flushes_for_nothing(storage_packages: None,
                                                                 tmp_path: Path) -> None:
    """A loop device over a file in RAM (/dev/shm): the kernel reports a write-back cache,
    and a flush returns in microseconds because nothing is made durable. The doctor's
    sync timings show it, and it says only a power-loss test can tell such a cache from
    a protected one."""
    image = Path(tempfile.mkdtemp(dir="/dev/shm")) / "disk.img"
    image.write_bytes(b"")
    os.truncate(image, 256 * 2**20)
    loop = subprocess.run(["losetup", "-f", "--show", str(image)], check=True,
                          capture_output=True, text=True).stdout.strip()
    mount = tmp_path / "mnt"
    mount.mkdir()
    try:
        subprocess.run(["mkfs.ext4", "-q", loop], check=True, capture_output=True)
        subprocess.run(["mount", loop, str(mount)], check=True, capture_output=True)
        result = run_cli("doctor", str(mount), "--fsync", "--json")
        assert result.returncode == 0, result.stderr
        facts = json.loads(result.stdout)
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)
        subprocess.run(["losetup", "-d", loop], capture_output=True)
        shutil.rmtree(image.parent, ignore_errors=True)
    assert facts["fstype"] == "ext4"
    assert facts["block_device"]["name"] == Path(loop).name
    assert facts["block_device"]["write_cache"] == "write back"
    assert min(facts["fsync_us"].values()) < FAST_FLUSH_US, facts["fsync_us"]
    assert any("only a power-loss test tells" in f for f in facts["findings"])


def test_storage_command_lists_the_registries() -> None:
    result = run_cli("storage")
    assert result.returncode == 0
    for name in ("ext4", "xfs", "btrfs", "zfs", "recordsize", "write_mbps", "cloud-ssd"):
        assert name in result.stdout



@root_only
@pytest.mark.disk  # a volume on a loop device over a file on the host's disk
@pytest.mark.root
def test_the_users_own_storage_pool_path_and_device(storage_packages: None, pglab_home: Path,
                                                    tmp_path: Path) -> None:
    """storage.pool (a zfs-fuse pool standing in for the user's), storage.path (an existing
    directory, used as is) and storage.block_device (formatted only with destroy_data)."""
    from pglab.storage.zfs import destroy, ensure_daemon, release_daemon

    image = tmp_path / "user-pool.img"
    image.write_bytes(b"")
    os.truncate(image, 512 * 2**20)
    ensure_daemon()
    subprocess.run(["zpool", "create", "-f", "-m", "none", "userpool", str(image)],
                   check=True, capture_output=True)
    own = tmp_path / "own-dir"
    own.mkdir()
    for parent in [own, *own.parents]:  # the server's user must reach it, as a user's would
        if parent != Path("/"):
            parent.chmod(parent.stat().st_mode | 0o011)
    device_image = tmp_path / "device.img"
    device_image.write_bytes(b"")
    os.truncate(device_image, 512 * 2**20)
    loop = subprocess.run(["losetup", "-f", "--show", str(device_image)], check=True,
                          capture_output=True, text=True).stdout.strip()
    try:
        for storage, kind in (
                ('pool = "userpool"\nfilesystem = "zfs"\noptions = { recordsize = "16k" }',
                 "pool"),
                (f'path = "{own}"', "path"),
                (f'filesystem = "ext4"\nblock_device = "{loop}"\ndestroy_data = true',
                 "block_device")):
            results = tmp_path / f"r-{kind}"
            result = run_cli("run", str(_scenario(tmp_path, storage, duration=2)),
                             "--results", str(results))
            assert result.returncode == 0, result.stderr[-2000:]
            [volume] = _manifest(results)["nodes"]["primary"]["storage"]
            assert volume["kind"] == kind
            if kind == "pool":
                assert volume["options"] == {"recordsize": "16k"}
                assert volume["dataset"].startswith("userpool/pglab-")
            if kind == "path":
                assert volume["mountpoint"]  # the facts of the mount it is on
                assert list(own.iterdir()) == []  # its subdirectory is gone again
        datasets = subprocess.run(["zfs", "list", "-H", "-o", "name", "-r", "userpool"],
                                  capture_output=True, text=True).stdout.split()
        assert datasets == ["userpool"]  # the run's dataset was destroyed
        # a device with a partition table is never formatted
        subprocess.run(["sfdisk", "-q", loop], input="label: dos\n", text=True, check=True,
                       capture_output=True)
        refused = run_cli("validate", str(_scenario(
            tmp_path, f'filesystem = "ext4"\nblock_device = "{loop}"\ndestroy_data = true')))
        assert refused.returncode == 2
        assert "holds a partition table (dos)" in refused.stderr
        without = run_cli("validate", str(_scenario(
            tmp_path, f'filesystem = "ext4"\nblock_device = "{loop}"')))
        assert without.stderr.strip().endswith(
            f"storage.block_device = '{loop}': formatting destroys its data; add "
            "destroy_data = true beside it to allow that")
    finally:
        destroy("userpool")
        release_daemon()
        subprocess.run(["losetup", "-d", loop], capture_output=True)
    assert leftovers(pglab_home) == []


@root_only
@pytest.mark.live
def test_storage_needs_root(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path, 'filesystem = "ext4"')
    # In a user namespace of its own pglab is uid 65534 without any capability on the
    # machine, yet still reads the checkout and the venv wherever they are (CI clones
    # under /root, where `setpriv --reuid=nobody` could not read them).
    result = subprocess.run(["unshare", "--user", sys.executable, "-m", "pglab", "validate",
                             str(scenario)], capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().endswith(
        "this machine lacks root (pglab runs as uid 65534) for storage (a volume: losetup, "
        "mkfs, mount): run pglab as root")
    assert "Traceback" not in result.stderr


_DAEMON_USER = """
import subprocess, sys
from pglab.storage.zfs import ensure_daemon, release_daemon
for _ in range(int(sys.argv[1])):
    ensure_daemon()
    listed = subprocess.run(["zpool", "list"], capture_output=True, text=True)
    if listed.returncode != 0:
        sys.exit("zpool list failed right after ensure_daemon: " + listed.stderr.strip())
    release_daemon()
"""


@root_only
@pytest.mark.disk  # pglab_home is the module's, on the disk
@pytest.mark.root
def test_pglabs_starting_and_stopping_zfs_fuse_together_never_collide(
        storage_packages: None, pglab_home: Path) -> None:
    """The zfs-fuse daemon is machine-wide: one pglab stopping it (its last user) while
    another starts using it must end with the second one's daemon answering, never with
    'zfs-fuse did not start' (a new daemon refused beside the one still exiting)."""
    procs = [subprocess.Popen([sys.executable, "-c", _DAEMON_USER, "4"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outputs = [proc.communicate(timeout=240)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert leftovers(pglab_home) == []
