"""The layers that can drop a flush PostgreSQL asked for, read from a run's manifest: each
is a durability cause of its own (causes.py) and a rule (recommendations.py).
docs/ANALYSIS.md ("Durability") describes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pglab.analysis.signals import Finding, Score
from pglab.results.manifest import Manifest
from pglab.storage.describe import cache_size_words

LYING_CACHE = "volatile-ignores-flush"

# A commit is durable when its WAL flush reaches stable media through every layer: the
# server's own fsync setting, the wal_sync_method as the OS carries it out, the
# filesystem's cache flushes (barriers), ZFS's sync property, the device's write cache.
# FLUSH_LAYERS holds one entry per layer that can drop the flush: a predicate on the
# run's manifest (the stack as built, the settings in force) that says where it holds,
# and the advice for it. Each layer is a durability cause of its own (causes.py) and a
# rule (recommendations.py), both made from this table.


@dataclass(frozen=True)
class Place:
    """Where a layer drops flushes in one run: the evidence line and the scenario keys
    that would run it again with the flushes kept ({} when the lab cannot)."""

    node: str
    role: str  # data, wal, or the node's directory on the host
    line: str
    change: dict[str, Any] = field(default_factory=dict)
    medium_volatile: bool | None = None  # the device under it caches writes (None: unknown)


@dataclass(frozen=True)
class FlushLayer:
    cause: str  # the cause it is named by
    layer: str  # where in the stack, in words
    title: str  # the cause's title in a DBA's words
    places: Callable[[Manifest], list[Place]]  # where it holds in a run ([] when nowhere)
    rule: str  # the advice's id
    action: str
    effect: str
    risk: str
    not_when: str
    # PostgreSQL issued the flush (fsync on) and a layer below it lost it; False for
    # PostgreSQL's own fsync = off, which never asks
    below_postgres: bool = True
    # it loses data only where a volatile cache sits below it (a mount without barriers
    # on a device that keeps what it acknowledges loses nothing)
    needs_volatile_medium: bool = False
    why_untestable: str = ""


# mount options with which a filesystem sends no cache flushes (the kernel's words)
NO_BARRIER_OPTIONS = ("nobarrier", "barrier=0")
# the scenario option that turns barriers back on, by filesystem (storage/filesystems.py);
# XFS has always had them on since Linux 4.19, which refuses nobarrier
BARRIER_OPTION = {"ext4": "barrier", "btrfs": "barrier"}


def _volume_key(node: str, role: str) -> str:
    """Where a volume is written in the scenario file (storage/volume.storage_key)."""
    base = "storage" if node == "primary" else f"nodes.{node}.storage"
    return base if role == "data" else f"{base}.{role}"


def _medium_volatile(volume: dict[str, Any]) -> bool | None:
    """Whether the device under a volume keeps writes in a volatile cache: the emulated
    device's mode; a plain loop device's medium is the host's, which the lab never cuts."""
    device = volume.get("device") or {}
    if device.get("kind") == "emulated":
        return bool(device.get("cache", "honest") != "honest")
    return False if device.get("kind") == "loop" else None


def _medium_words(volume: dict[str, Any]) -> str:
    """', and its device's cache = "volatile" (64 MB, ...) keeps writes until then'."""
    device = volume.get("device") or {}
    if device.get("kind") != "emulated" or device.get("cache", "honest") == "honest":
        return ""
    size = f" ({cache_size_words(device)})" if device.get("cache_mb") is not None else ""
    return (f", and its device's cache = \"{device['cache']}\"{size} holds what no flush "
            "asks it to write")


def _setting(manifest: Manifest, node: str, name: str) -> str | None:
    value = manifest.node_settings(node).get(name)
    return str(value.get("setting")) if isinstance(value, dict) else None


def _without_barriers(manifest: Manifest) -> list[Place]:
    found = []
    for node in manifest.nodes:
        for volume in manifest.node_storage(node):
            mounted = str(volume.get("mount_options") or "").split(",")
            shown = [o for o in mounted if o in NO_BARRIER_OPTIONS]
            asked = (volume.get("options") or {}).get("barrier") == "off"
            if not shown and not asked:
                continue
            fs, role = str(volume.get("filesystem")), str(volume.get("role", "data"))
            option = BARRIER_OPTION.get(fs)
            how = ", ".join([*(f"the kernel shows {o}" for o in shown),
                             *(["barrier = off"] if asked else [])])
            found.append(Place(
                node, role,
                f"{node}'s {role} volume ({fs}) is mounted without write barriers ({how}): "
                "its fsyncs and journal commits send the device no cache flush"
                + _medium_words(volume),
                {f"{_volume_key(node, role)}.options.{option}": "on"} if option else {},
                _medium_volatile(volume)))
    host = manifest.host.get("data_dir") or {}
    shown = [o for o in str(host.get("mount_options") or "").split(",")
             if o in NO_BARRIER_OPTIONS]
    if shown and not manifest.node_storage():
        cache = str((host.get("block_device") or {}).get("write_cache") or "")
        found.append(Place(
            "primary", "directory",
            f"primary's data directory is on {host.get('fstype')} at "
            f"{host.get('mount_point')} mounted {', '.join(shown)} (device write cache: "
            f"{cache or 'unknown'}): its fsyncs send the device no cache flush",
            {}, None if not cache else cache == "write back"))
    return found


def _ignoring_device(manifest: Manifest) -> list[Place]:
    found = []
    for node in manifest.nodes:
        for volume in manifest.node_storage(node):
            device = volume.get("device") or {}
            if device.get("kind") != "emulated" or device.get("cache") != LYING_CACHE:
                continue
            role = str(volume.get("role", "data"))
            size = (f" ({cache_size_words(device)})" if device.get("cache_mb") is not None
                    else "")
            found.append(Place(
                node, role,
                f"the device under {node}'s {role} volume ({volume.get('filesystem')}) has "
                f"cache = \"{LYING_CACHE}\"{size}: it acknowledges flushes without making "
                "the data durable",
                {f"{_volume_key(node, role)}.device.cache": "honest"}, True))
    return found


def _fsync_off(manifest: Manifest) -> list[Place]:
    return [Place(node, "server", f"{node} runs with fsync = off: PostgreSQL never asks "
                  "for its WAL and data files to be flushed",
                  {"server.settings.fsync": "on"} if node == "primary" else
                  {f"nodes.{node}.settings.fsync": "on"})
            for node in manifest.nodes if _setting(manifest, node, "fsync") == "off"]


def _zfs_sync_disabled(manifest: Manifest) -> list[Place]:
    found = []
    for node in manifest.nodes:
        for volume in manifest.node_storage(node):
            props = {**(volume.get("properties") or {}), **(volume.get("options") or {})}
            if volume.get("filesystem") != "zfs" or str(props.get("sync")) != "disabled":
                continue
            role = str(volume.get("role", "data"))
            found.append(Place(
                node, role, f"{node}'s {role} dataset has ZFS sync = disabled: fsync and "
                "O_DSYNC writes return before the ZIL or the pool has the data",
                {f"{_volume_key(node, role)}.options.sync": "standard"}))
    return found


FLUSH_LAYERS: tuple[FlushLayer, ...] = (
    FlushLayer(
        "lying-write-cache", "the device's write cache",
        "a storage stack that acknowledges flushes it does not keep", _ignoring_device,
        "device-cache-honest",
        "make the storage keep what it acknowledges: a write cache that honours flushes "
        "(in the lab, the emulated device's cache = \"honest\"; on real drives, disable a "
        "volatile write cache with hdparm -W0 / sdparm --clear WCE, or use drives with "
        "power-loss protection)",
        "PostgreSQL's flushes reach stable media before commits are acknowledged: a "
        "power loss no longer takes acknowledged commits or tears pages",
        "commits and checkpoints wait for the device's real flush latency: throughput "
        "can fall sharply on a device whose cache was hiding it",
        "the cache is battery- or capacitor-backed (power-loss protection): it is durable "
        "though volatile; check with pg_test_fsync and a pull-the-plug test "
        "(diskchecker.pl) rather than trusting the label"),
    FlushLayer(
        "no-write-barriers", "the filesystem's mount",
        "a filesystem mounted without write barriers: fsync sends the device no cache flush",
        _without_barriers, "barriers-on",
        "mount the filesystem with write barriers (ext4 barrier=1, the default; btrfs "
        "without nobarrier; XFS always has them since Linux 4.19)",
        "each fsync and journal commit flushes the device's write cache: what PostgreSQL "
        "flushed survives a power loss, and the journal's order holds on the medium",
        "every fsync waits for the device's cache flush: on a drive without power-loss "
        "protection commits can be several times slower (that speed was never safe)",
        "the device has no volatile write cache, or a battery- or capacitor-backed one "
        "(power-loss protection): there barriers cost time and protect nothing",
        needs_volatile_medium=True,
        why_untestable="the filesystem is not one pglab made with a barrier option: "
                       "remount it with barriers (mount -o remount,barrier=1)"),
    FlushLayer(
        "fsync-off", "PostgreSQL (fsync = off)",
        "PostgreSQL runs with fsync = off: it never asks for a flush", _fsync_off,
        "fsync-on", "turn fsync back on",
        "WAL and data files are flushed before PostgreSQL relies on them: a crash or power "
        "loss loses no acknowledged commit and leaves no torn state behind",
        "writes, commits and checkpoints wait for flushes: slower on slow devices",
        "a disposable cluster that is rebuilt from scratch after any crash (a bulk load "
        "re-done from its source): there fsync = off is a fair trade",
        below_postgres=False),
    FlushLayer(
        "zfs-sync-disabled", "ZFS (sync = disabled)",
        "a ZFS dataset with sync = disabled: fsync returns before the data is on the pool",
        _zfs_sync_disabled, "zfs-sync-standard",
        "set the dataset's sync property back to standard (zfs set sync=standard)",
        "fsync and O_DSYNC writes wait for the ZIL: acknowledged commits survive a power "
        "loss; ZFS's transaction groups keep the pool consistent either way",
        "commit latency includes a ZIL write (a separate log device, SLOG, makes it short)",
        "the data can be lost wholesale (a scratch copy): then sync = disabled trades the "
        "last seconds of commits for speed, as synchronous_commit = off does"),
)
LAYER_BY_CAUSE = {layer.cause: layer for layer in FLUSH_LAYERS}


def _exposed(layer: FlushLayer, places: list[Place]) -> list[Place]:
    """The places where the layer can lose data: all of them, or for a layer that needs
    a volatile cache below it, those not known to sit on a device without one."""
    if not layer.needs_volatile_medium:
        return places
    return [p for p in places if p.medium_volatile is not False]


def flush_places(layer: FlushLayer, manifest: Manifest) -> list[Place]:
    """Where the layer drops the flushes in this run, on storage that can lose them."""
    return _exposed(layer, layer.places(manifest))


def flush_change(layer: FlushLayer, manifest: Manifest) -> dict[str, Any]:
    """The scenario keys that run the same load with every place's flushes kept; {}
    when some place cannot be changed in the lab (the test would not be the fix)."""
    places = flush_places(layer, manifest)
    if not places or any(not p.change for p in places):
        return {}
    return {k: v for p in places for k, v in p.change.items()}


def flush_scorer(layer: FlushLayer) -> Callable[[dict[str, Any], Manifest], Finding | None]:
    """The layer's durability scorer (causes.py's `Cause.durability`)."""
    def score(section: dict[str, Any], manifest: Manifest) -> Finding | None:
        return flush_finding(layer, section, manifest)
    return score


def flush_finding(layer: FlushLayer, section: dict[str, Any], manifest: Manifest
                  ) -> Finding | None:
    """The layer as a cause of what the run's cuts cost: where it dropped the flushes,
    what the cuts lost there, and that PostgreSQL had asked for them. None where the
    layer is absent, harmless (no volatile cache below it), or where no power was cut
    and nothing was lost (a crash of processes keeps every cache)."""
    places = flush_places(layer, manifest)
    lost = bool(section["lost_commits"] or section["corruption"]
                or section["invariant_violations"])
    power_cut = any(c.get("kind") == "power-loss" for c in section["cuts"])
    if not places or not (lost or power_cut):
        return None
    s = Score(layer.cause)
    s.add(0.6 if lost else 0.4, places[0].line)
    for place in places[1:3]:
        s.add(0.0, place.line)
    if layer.below_postgres:
        for cut in [c for c in section["cuts"] if c.get("lost_bytes")][:2]:
            s.add(0.2, f"the device's cache dropped {int(cut['lost_bytes']) // 1024:,} KiB "
                       f"of acknowledged writes at the {cut['kind']} of {cut['node']} at "
                       f"{float(cut.get('at_s') or 0):g} s")
        fsync = _setting(manifest, "primary", "fsync") or "on"
        if lost and section.get("synchronous_commit") != "off" and fsync != "off":
            s.add(0.2, "PostgreSQL flushed every commit (fsync on, synchronous_commit "
                       f"{section.get('synchronous_commit') or 'on'}) and still lost them: "
                       f"the flushes stopped at {layer.layer}")
    elif lost:
        s.add(0.3, "the acknowledged commits lost were never flushed: PostgreSQL did not "
                   "ask (the storage below had no part in it)")
    return s.finding()


def flush_layer_lines(manifest: Manifest) -> list[str]:
    """The layers of the run's stack that drop flushes PostgreSQL asks for, each with
    what it does there: read before the losses they explain."""
    return [f"flushes dropped ({layer.cause}): {place.line}"
            for layer in FLUSH_LAYERS for place in flush_places(layer, manifest)]
