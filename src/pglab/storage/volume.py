"""A node's volumes: made before its data is copied in, removed on every exit path.

One volume is, from the bottom up: a sparse image file under the lab dir (or the user's
block device), a block device (a plain loop device, or the emulated device when limits,
latency, a cache mode or a device fault ask for it), a filesystem from the registry,
mounted under the node dir. A ZFS volume is a pool of its own on that device, or a
dataset of the user's pool (`pool`); `path` uses an existing mount as it is.

Limits are set on the device only after the data is copied and synced, so setting up a
10 MB/s volume does not take minutes. Everything a volume makes is found again by the
reaper from the lab dir alone (mounts under it, loop devices backed by files under it,
device servers naming it, ZFS names with a dead pid), so a kill -9 at any stage leaves
nothing the next pglab does not remove.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pglab.errors import BadInput, PglabError
from pglab.processes import run_to_end
from pglab.scenario import Scenario, StorageSpec, VolumeSpec
from pglab.scenario.needs import volume_is_emulated
from pglab.storage.device_server import behaviour_from_limits
from pglab.storage.devices import (
    DeviceLimits,
    EmulatedDevice,
    attach_loop,
    detach_loop,
    loops_backed_under,
    make_image,
    resolve_device,
    stop_device_servers_under,
)
from pglab.storage.filesystems import (
    Filesystem,
    _Mkfs,
    mount_entry,
    option_text,
    unmount,
)
from pglab.storage.registry import FILESYSTEMS
from pglab.storage.zfs import Zfs, destroy, reap_stale_zfs, release_daemon, zfs_name

# FS_IOC_SHUTDOWN (XFS_IOC_GOINGDOWN, EXT4_IOC_SHUTDOWN) = _IOR('X', 125, __u32), with
# NOLOGFLUSH: the filesystem stops at once and neither its dirty pages nor its journal's
# uncommitted part reach the device, as at a power cut (xfstests' shutdown tests).
FS_IOC_SHUTDOWN = 0x8004587D
SHUTDOWN_NOLOGFLUSH = 2


def power_loss_problem(spec: VolumeSpec) -> str | None:
    """Why a power loss cannot be made on this volume, or None when it can."""
    if spec.path or spec.pool or spec.block_device:
        return ("it needs a volume pglab makes on its emulated device, not the user's own "
                "storage (path, pool, block_device)")
    if spec.device.kind == "loop":
        return "it needs device.kind = 'auto' or 'emulated', not 'loop'"
    fs = FILESYSTEMS.get(spec.filesystem)
    if fs is None or not fs.shutdown_ioctl:
        able = ", ".join(f.name for f in FILESYSTEMS.entries.values() if f.shutdown_ioctl)
        return (f"filesystem '{spec.filesystem}' cannot be shut down without flushing its "
                f"journal (the kernel's FS_IOC_SHUTDOWN); use one of {able}")
    return None


def storage_key(node: str) -> str:
    """Where a node's storage is written in the scenario file."""
    return "storage" if node == "primary" else f"nodes.{node}.storage"


# --- checks before anything starts ----------------------------------------------------

def check_storage(scenario: Scenario, where: str, device_faults: dict[str, str]) -> None:
    """Refuse, before anything starts, storage that cannot be had: one line each.
    `device_faults` maps a node to the action of a fault that needs its device."""
    wanted = {node: scenario.node_storage(node).volumes() for node in scenario.node_names()}
    for node, action in device_faults.items():
        specs = wanted.get(node, {})
        if not any(not (s.path or s.pool) for s in specs.values()):
            raise BadInput(f"{where}: the '{action}' fault acts on {node}'s storage volume "
                           f"device, and {node} has none: give it one ({storage_key(node)} "
                           "with a filesystem)")
        if any(s.device.kind == "loop" for s in specs.values()):
            raise BadInput(f"{where}: the '{action}' fault needs {storage_key(node)}.device."
                           "kind = 'auto' or 'emulated', not 'loop'")
    if not any(wanted.values()):
        return
    scenario.require_local(where, "[storage]", "pglab makes volumes only for servers it starts")
    for node, volumes in wanted.items():
        for role, spec in volumes.items():
            _check_volume(spec, f"{where}: {storage_key(node)}" + (
                ".wal" if role == "wal" else ""))
    # root and the filesystems' and devices' tools: scenario/needs.py, checked after this


def _check_volume(spec: VolumeSpec, key: str) -> None:
    given = [k for k in ("pool", "path", "block_device") if getattr(spec, k)]
    if len(given) > 1:
        raise BadInput(f"{key}: {' and '.join(given)} are given; a volume is one of them")
    if spec.path:
        path = Path(spec.path)
        if not path.is_dir():
            raise BadInput(f"{key}.path = '{spec.path}' is not an existing directory")
        if closed := _closed_to_others(path):
            raise BadInput(f"{key}.path = '{spec.path}': the server runs as an unprivileged "
                           f"user, who cannot enter {closed} (mode "
                           f"{closed.stat().st_mode & 0o777:o}); give it o+x or use another "
                           "directory")
        if spec.filesystem != "host" or spec.options:
            raise BadInput(f"{key}.path uses an existing mount as it is: leave filesystem "
                           "and options out")
        return
    name = "zfs" if spec.pool and spec.filesystem == "host" else spec.filesystem
    fs = FILESYSTEMS.get(name)
    if fs is None:
        import difflib

        close = difflib.get_close_matches(name, FILESYSTEMS.names(), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise BadInput(f"{key}.filesystem = '{name}' is not known{hint}; expected one of "
                       f"{', '.join(FILESYSTEMS.names())}")
    if spec.pool and name != "zfs":
        raise BadInput(f"{key}.pool makes a dataset of a ZFS pool: filesystem must be 'zfs'")
    for option, value in spec.options.items():
        text = option_text(value)
        problem = fs.check_value(option, text, bool(spec.pool))
        if problem == "no such option":
            names = ", ".join(o.name for o in fs.options)
            raise BadInput(f"{key}.options.{option}: {fs.name} has no option '{option}'; it "
                           f"accepts {names}")
        if problem:
            raise BadInput(f"{key}.options.{option} = {text!r} is not valid for {fs.name}: "
                           f"{problem}")
    if problem := fs.conflict({k: option_text(v) for k, v in spec.options.items()}):
        raise BadInput(f"{key}.options: {problem}")
    if not spec.pool and spec.size < fs.min_size:
        raise BadInput(f"{key}.size = {spec.size // 2**20}MB is too small for {fs.name}: "
                       f"at least {fs.min_size // 2**20}MB")
    try:
        limits = resolve_device(spec.device)
    except ValueError as exc:
        raise BadInput(f"{key}.device.profile: {exc}") from None
    if spec.block_device:
        _check_block_device(spec, key)
    if (spec.pool or spec.path) and (not limits.is_plain() or spec.device.kind == "emulated"):
        raise BadInput(f"{key}.device: a pool or path is the user's own storage; device "
                       "limits apply to volumes pglab makes")


def _closed_to_others(path: Path) -> Path | None:
    """As root the server runs as another user (lab/osuser.py): the first directory on
    the way to `path` that others may not enter, if any."""
    if os.geteuid() != 0:
        return None
    for directory in [*reversed(path.resolve().parents), path.resolve()]:
        if not directory.stat().st_mode & 0o001:
            return directory
    return None


def _check_block_device(spec: VolumeSpec, key: str) -> None:
    dev = Path(str(spec.block_device))
    try:
        is_block = stat.S_ISBLK(dev.stat().st_mode)
    except OSError:
        is_block = False
    if not is_block:
        raise BadInput(f"{key}.block_device = '{dev}' is not a block device")
    if not spec.destroy_data:
        raise BadInput(f"{key}.block_device = '{dev}': formatting destroys its data; add "
                       "destroy_data = true beside it to allow that")
    real = os.path.realpath(dev)
    mounts = Path("/proc/self/mounts").read_text().split("\n")
    if any(line.split(" ")[0] in (str(dev), real) for line in mounts if line):
        raise BadInput(f"{key}.block_device = '{dev}' is mounted; pglab formats only unused "
                       "devices")
    probe = subprocess.run(["blkid", "-p", "-o", "value", "-s", "PTTYPE", real],
                           capture_output=True, text=True)
    if probe.stdout.strip():
        raise BadInput(f"{key}.block_device = '{dev}' holds a partition table "
                       f"({probe.stdout.strip()}); pglab formats only a device without one")


# --- one volume -----------------------------------------------------------------------

@dataclass
class Volume:
    """One volume of one node; create() then remove() (safe after a partial create)."""

    node: str
    role: str  # data | wal
    spec: VolumeSpec
    node_dir: Path
    emulated: bool
    limits: DeviceLimits
    label: str
    mountpoint: Path = field(init=False)
    image: Path | None = None
    device: Path | None = None
    emulator: EmulatedDevice | None = None
    zfs: str | None = None  # the pool or dataset name
    facts: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.mountpoint = self.node_dir / f"{self.role}-volume"
        if self.spec.path:
            self.mountpoint = Path(self.spec.path) / self.label

    @property
    def filesystem(self) -> Filesystem | None:
        name = "zfs" if self.spec.pool and self.spec.filesystem == "host" else (
            self.spec.filesystem)
        return FILESYSTEMS.get(name)

    @property
    def options(self) -> dict[str, str]:
        return {k: option_text(v) for k, v in self.spec.options.items()}

    def create(self) -> Path:
        """Make and mount the volume; the directory PostgreSQL's files go under."""
        if self.spec.path:
            self.mountpoint.mkdir(mode=0o755)
            self.facts = _path_facts(Path(self.spec.path))
            return self.mountpoint
        fs = self.filesystem
        assert fs is not None
        if self.spec.pool:
            assert isinstance(fs, Zfs)
            self.zfs = fs.create_dataset(self.spec.pool, self.mountpoint, self.options,
                                         self.label)
            self.facts = fs.read_dataset(self.zfs, self.options)
            return self.mountpoint
        if self.spec.block_device:
            self.device = Path(self.spec.block_device)
        else:
            self.image = self.node_dir / f"{self.role}.img"
            make_image(self.image, self.spec.size)
            if self.emulated:
                self.emulator = EmulatedDevice(self.node_dir / f"{self.role}-device",
                                               self.image, self.spec.size)
                self.device = self.emulator.start({})  # unlimited until the data is in
            else:
                self.device = attach_loop(self.image, direct_io=True)
        if isinstance(fs, Zfs):
            self.zfs = self.label
        fs.create(self.device, self.mountpoint, self.options, self.label)
        self.facts = (fs.read_dataset(self.label, self.options) if isinstance(fs, Zfs)
                      else fs.read_back(self.device, self.mountpoint, self.options))
        return self.mountpoint

    def apply_limits(self) -> None:
        """The device's limits, once the data is on it (and synced)."""
        if self.emulator is None:
            return
        _sync(self.mountpoint)
        self.emulator.set_behaviour(self.limits.behaviour())

    def set_behaviour(self, behaviour: dict[str, Any]) -> dict[str, Any]:
        if self.emulator is None:
            raise PglabError(f"{self.node}'s {self.role} volume has no emulated device")
        return self.emulator.set_behaviour(behaviour)

    def power_cut(self) -> dict[str, Any]:
        """The first half of a power loss: the filesystem stops where it is (its dirty
        pages and unflushed journal never reach the device) and the device drops its
        volatile cache. The processes using it are the caller's to kill before
        power_restore()."""
        assert self.emulator is not None
        fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", SHUTDOWN_NOLOGFLUSH))
        finally:
            os.close(fd)
        return self.emulator.power_loss()

    def power_restore(self) -> float:
        """The reboot: unmount, a fresh FUSE file and loop device (no page or buffer
        cache survives), power on, mount (the journal is replayed). Returns the seconds
        the mount took."""
        assert self.emulator is not None
        fs = self.filesystem
        assert fs is not None and isinstance(fs, _Mkfs)
        unmount(self.mountpoint)
        self.emulator.detach()
        self.device = None
        self.emulator.power_on()
        self.device = self.emulator.attach()
        started = time.monotonic()
        fs.mount(self.device, self.mountpoint, self.options)
        return time.monotonic() - started

    def remove(self) -> None:
        fs = self.filesystem
        if self.emulator is not None:  # a paused or failing device would hang the unmount
            with contextlib.suppress(OSError):  # (and one cut mid-power-loss, by Ctrl-C)
                self.emulator.set_behaviour({"paused": False, "failing": False,
                                             "powered": True})
        if self.spec.path:
            shutil.rmtree(self.mountpoint, ignore_errors=True)
        elif self.zfs is not None:
            destroy(self.zfs)
        elif fs is not None and self.device is not None:
            fs.remove(self.device, self.mountpoint, self.label)
        unmount(self.mountpoint)
        if self.emulator is not None:
            self.emulator.stop()
        elif self.device is not None and self.image is not None:
            detach_loop(self.device)
        if self.image is not None:
            self.image.unlink(missing_ok=True)

    def storage_paths(self) -> list[Path]:
        """Paths whose devices carry this volume's I/O (for os.disk)."""
        return [p for p in (self.device, self.image) if p is not None]

    def to_manifest(self) -> dict[str, Any]:
        fs = self.filesystem
        record: dict[str, Any] = {
            "role": self.role,
            "filesystem": fs.name if fs else "host",
            "size_bytes": None if (self.spec.path or self.spec.pool) else self.spec.size,
            "options_asked": self.options,
            **self.facts,
        }
        if self.spec.path:
            record.update(kind="path", path=self.spec.path)
        elif self.spec.pool:
            record.update(kind="pool", pool=self.spec.pool)
        elif self.spec.block_device:
            record.update(kind="block_device", block_device=self.spec.block_device)
        else:
            record["kind"] = "image"
        record["device"] = {
            "kind": "emulated" if self.emulated else ("loop" if self.image else "none"),
            "name": self.device.name if self.device else None,
            **self.limits.to_manifest(),
        }
        return record


def _sync(path: Path) -> None:
    """syncfs(2) of the filesystem holding `path` (coreutils' sync -f)."""
    subprocess.run(["sync", "-f", str(path)], capture_output=True, timeout=600)


def _path_facts(path: Path) -> dict[str, Any]:
    entry = None
    probe = path.resolve()
    while entry is None:
        entry = mount_entry(probe)
        if probe == probe.parent:
            break
        probe = probe.parent
    if entry is None:
        return {}
    return {"mount_source": entry[0], "filesystem_found": entry[1],
            "mount_options": ",".join(entry[2]), "mountpoint": str(probe)}


# --- all volumes of a lab ---------------------------------------------------------------

class LabStorage:
    """The volumes of one lab's nodes; close() removes them in reverse, on every path."""

    def __init__(self, scenario: Scenario, lab_dir: Path, faulted: set[str]) -> None:
        self.scenario = scenario
        self.lab_dir = lab_dir
        self.faulted = faulted  # nodes with a fault that acts on their devices
        self.volumes: list[Volume] = []
        self._zfs_used = False

    def make(self, node: str, node_dir: Path) -> dict[str, Path]:
        """Create a node's volumes; {role: directory on the volume} ('data', 'wal')."""
        storage: StorageSpec = self.scenario.node_storage(node)
        made: dict[str, Path] = {}
        for role, spec in storage.volumes().items():
            limits = resolve_device(spec.device)
            emulated = volume_is_emulated(spec, node in self.faulted)
            volume = Volume(node, role, spec, node_dir, emulated, limits,
                            zfs_name(os.getpid(), node, role))
            self.volumes.append(volume)
            if volume.filesystem is not None and volume.filesystem.name == "zfs":
                self._zfs_used = True
            node_dir.mkdir(parents=True, exist_ok=True)
            made[role] = volume.create()
        return made

    def apply_limits(self, node: str) -> None:
        for volume in self.volumes:
            if volume.node == node:
                volume.apply_limits()

    def volume(self, node: str, role: str = "data") -> Volume | None:
        return next((v for v in self.volumes if v.node == node and v.role == role), None)

    def emulated(self, node: str) -> list[Volume]:
        return [v for v in self.volumes if v.node == node and v.emulator is not None]

    def storage_paths(self, node: str) -> list[Path]:
        return [p for v in self.volumes if v.node == node for p in v.storage_paths()]

    def power_cut(self, node: str) -> dict[str, Any]:
        """Every volume of the node at once; what each device's cache dropped."""
        return {v.role: v.power_cut() for v in self.emulated(node)}

    def power_restore(self, node: str) -> dict[str, float]:
        return {v.role: round(v.power_restore(), 3) for v in self.emulated(node)}

    def set_disk_limits(self, node: str, overrides: dict[str, float]) -> dict[str, Any]:
        """throttle-disk on a node with emulated volumes: each device gets the limits
        (they hold for every byte); {} puts each device's own back. What the data
        volume (or the first) applies."""
        applied = {}
        for volume in self.emulated(node):
            limits = volume.limits
            if overrides:
                behaviour = behaviour_from_limits(
                    overrides.get("write_mbps", 0.0), overrides.get("read_mbps", 0.0),
                    overrides.get("write_iops", 0), overrides.get("read_iops", 0),
                    limits.latency_ms, limits.cache, limits.cache_mb, limits.destage_ms)
            else:
                behaviour = limits.behaviour()
            volume.set_behaviour(behaviour)
            applied[volume.role] = {"write_mbps": behaviour["write_bps"] / 2**20,
                                    "read_mbps": behaviour["read_bps"] / 2**20,
                                    "write_iops": behaviour["write_iops"],
                                    "read_iops": behaviour["read_iops"], "on": "device"}
        return applied.get("data") or next(iter(applied.values()))

    def set_behaviour(self, node: str, behaviour: dict[str, Any]) -> dict[str, Any]:
        """A device fault on every emulated volume of the node: role -> the behaviour
        in force. `restore: "latency_s"` puts back each volume's own latency."""
        applied = {}
        for volume in self.emulated(node):
            wanted = dict(behaviour)
            if wanted.pop("restore", None) == "latency_s":
                wanted["latency_s"] = volume.limits.latency_ms / 1000
            applied[volume.role] = volume.set_behaviour(wanted)["behaviour"]
        return applied

    def manifest(self) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for volume in self.volumes:
            found.setdefault(volume.node, []).append(volume.to_manifest())
        return found

    def close(self) -> None:
        errors = []
        for volume in reversed(self.volumes):
            try:
                volume.remove()
            except (OSError, PglabError) as exc:
                errors.append(f"{volume.node} {volume.role}: {exc}")
        self.volumes = []
        if self._zfs_used:
            release_daemon()
        if errors:
            raise PglabError("could not remove every volume: " + "; ".join(errors))


def move_wal(data_dir: Path, wal_root: Path, user_chown: Any) -> Path:
    """pg_wal onto its own volume, as initdb --waldir makes it: a symlink in the data dir."""
    target = wal_root / "pg_wal"
    source = data_dir / "pg_wal"
    run_to_end(["cp", "-a", str(source), str(target)], "pg_wal to its volume")
    shutil.rmtree(source)
    source.symlink_to(target)
    user_chown(wal_root)
    return target


def reap_storage_under(lab: Path) -> None:
    """After a kill -9: everything a dead lab's volumes left, found from its dir alone.
    From the top down: ZFS pools, filesystems, loop devices, the emulated devices' FUSE
    files, their servers."""
    reap_stale_zfs()
    root = str(lab) + "/"
    mounts = [line.split()[1:3] for line in Path("/proc/self/mounts").read_text().splitlines()]
    ours = [(point, kind) for point, kind in mounts if point.startswith(root)]
    device_files = {point for point, kind in ours if kind == "fuse"}  # nbdfuse's
    for point in sorted({p for p, _ in ours} - device_files, key=len, reverse=True):
        unmount(Path(point))
    for loop in loops_backed_under(lab):
        detach_loop(loop)
    for point in sorted(device_files, key=len, reverse=True):
        subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True)
    stop_device_servers_under(lab)
