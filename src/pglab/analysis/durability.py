"""analysis.json's `durability` section: what the crashes and power losses of a run cost.

Pure over the manifest: its `durability` record (the integrity verdicts pglab.durability
made with no load running, one per verified cut and one at the end), its `faults` (when
and where each cut happened) and its storage facts (the emulated device's cache mode).
Each verdict counts the lost commits of the whole run so far (`lost`) and its own cut's
(`newly_lost`, with their window); in manifests made before `newly_lost` a cut's own loss
is its verdict's count minus the previous verdict's.
docs/ANALYSIS.md ("Durability") describes the section.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pglab.analysis.signals import Finding, Score
from pglab.results.manifest import Manifest
from pglab.storage.describe import DESTAGE_SLACK, cache_size_words

CUT_ACTIONS = ("power-loss", "crash")
LYING_CACHE = "volatile-ignores-flush"
# pg_amcheck names the relation on one line and says what is wrong on the next ones
AMCHECK_HEADER = re.compile(r'^(heap table|btree index|table|index) "([^"]+)"')
# synchronous_commit = off acknowledges before the WAL flush; the WAL writer flushes
# every wal_writer_delay, and PostgreSQL documents the loss window as three of them
WAL_WRITER_DELAY_MS = 200

# the section's verdict, worst first: what the run's summary verdict names first
FAILURES = ("server-lost", "corruption", "data-loss")


def _attrs(event: dict[str, Any]) -> dict[str, Any]:
    attrs = event.get("attrs")
    if isinstance(attrs, str):
        try:
            attrs = json.loads(attrs)
        except json.JSONDecodeError:
            return {}
    return attrs if isinstance(attrs, dict) else {}


def _cut_events(manifest: Manifest) -> list[dict[str, Any]]:
    """The cuts that fired, in time order: (time, kind, node, at_s, downtime, recovery)."""
    cuts = []
    for event in manifest.faults or []:
        attrs = _attrs(event)
        if event.get("kind") != "fault" or attrs.get("action") not in CUT_ACTIONS:
            continue
        cuts.append({"time": event.get("t_start"), "kind": attrs["action"],
                     "node": event.get("node", "primary"), "at_s": attrs.get("at_s"),
                     "downtime_s": attrs.get("downtime_s"),
                     "recovery_s": attrs.get("recovery_s"),
                     "lost_bytes": attrs.get("lost_bytes"),
                     "held_s": _held_s(attrs),
                     "recovered": attrs.get("recovered")})
    return sorted(cuts, key=lambda c: str(c["time"]))


def _held_s(attrs: dict[str, Any]) -> float | None:
    """How long the oldest write the node's caches dropped had waited in them (each
    device's figure in `dropped`, the largest one)."""
    figures = [float(d["held_s"]) for d in (attrs.get("dropped") or {}).values()
               if isinstance(d, dict) and isinstance(d.get("held_s"), (int, float))]
    if isinstance(attrs.get("held_s"), (int, float)):
        figures.append(float(attrs["held_s"]))
    return max(figures) if figures and attrs.get("lost_bytes") else None


def destage_bound_s(manifest: Manifest, node: str) -> float | None:
    """The longest a write can wait in the node's volatile device caches (DESTAGE_SLACK
    x their destage delay). None when the node has no bounded volatile cache (an older
    run's caches held writes until a flush)."""
    bounds = [float(device["destage_ms"]) * DESTAGE_SLACK / 1000
              for volume in manifest.node_storage(node)
              if (device := volume.get("device") or {}).get("kind") == "emulated"
              and device.get("cache", "honest") != "honest"
              and isinstance(device.get("destage_ms"), (int, float))]
    return round(max(bounds), 3) if bounds else None


def amcheck_findings(check: dict[str, Any]) -> list[dict[str, Any]]:
    """pg_amcheck's findings as relation and message: a header line names the relation
    (and the block), the indented lines after it say what is wrong. A line outside any
    relation's report (a connection error) has relation None."""
    found: list[dict[str, Any]] = []
    for line in check.get("findings") or []:
        text = str(line)
        header = AMCHECK_HEADER.match(text)
        if header:
            found.append({"relation": header.group(2),
                          "where": text[header.end():].strip(" ,:") or None, "message": ""})
        elif found and text[:1].isspace() and found[-1]["relation"] is not None:
            previous = found[-1]["message"]
            found[-1]["message"] = f"{previous}; {text.strip()}" if previous else text.strip()
        else:
            found.append({"relation": None, "where": None, "message": text.strip()})
    return found


def _verdict_problems(verdict: dict[str, Any], where: str) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]]]:
    """(corruption findings, invariant violations) of one integrity verdict."""
    corruption = [{**f, "found": where} for f in amcheck_findings(verdict.get("amcheck") or {})]
    if verdict.get("error"):  # the checks' own queries failed: the data is not readable
        corruption.append({"relation": None, "where": None, "message": str(verdict["error"]),
                           "found": where})
    tpcb = verdict.get("tpcb") or {}
    invariants = ([{"invariant": "tpcb balances equal history deltas",
                    "sums": tpcb.get("sums"), "found": where}]
                  if tpcb.get("holds") is False else [])
    return corruption, invariants


def _groups(events: list[dict[str, Any]], verdicts: list[dict[str, Any]]
            ) -> list[tuple[list[dict[str, Any]], dict[str, Any] | None]]:
    """The cut events, grouped by the verdict that first looked at them: a verdict covers
    `cuts_covered` cuts (the next cut came before the last one was verified). Cuts no cut
    verdict covered were looked at by the final verdict (None here)."""
    groups: list[tuple[list[dict[str, Any]], dict[str, Any] | None]] = []
    rest = list(events)
    for verdict in verdicts:
        covered = max(1, int(verdict.get("cuts_covered") or 1))
        taken, rest = rest[:covered], rest[covered:]
        if not taken:  # no fault record (a hand-made manifest): the verdict says when
            taken = [{"time": None, "kind": verdict.get("action"), "node": "primary",
                      "at_s": verdict.get("at_s"), "downtime_s": verdict.get("downtime_s"),
                      "recovery_s": verdict.get("recovery_s"),
                      "lost_bytes": verdict.get("lost_bytes"),
                      "held_s": verdict.get("held_s")}]
        groups.append((taken, verdict))
    if rest:
        groups.append((rest, None))
    return groups


def _lost(verdict: dict[str, Any] | None) -> int | None:
    lost = ((verdict or {}).get("commits") or {}).get("lost")
    return int(lost) if isinstance(lost, int) else None


def _loss_window_s(manifest: Manifest) -> float:
    """synchronous_commit = off's allowed loss: up to three WAL writer rounds."""
    delay = manifest.node_settings().get("wal_writer_delay")
    try:
        ms = float(delay["setting"]) if isinstance(delay, dict) else WAL_WRITER_DELAY_MS
    except (KeyError, TypeError, ValueError):
        ms = WAL_WRITER_DELAY_MS
    return round(3 * ms / 1000, 3)


def storage_caches(manifest: Manifest) -> list[dict[str, Any]]:
    """Every volume's write cache as the run made it: node, role, filesystem, cache (and
    a volatile one's size and destage delay)."""
    out = []
    for node in manifest.nodes:
        for volume in manifest.node_storage(node):
            device = volume.get("device") or {}
            emulated = device.get("kind") == "emulated"
            out.append({"node": node, "role": volume.get("role", "data"),
                        "filesystem": volume.get("filesystem"),
                        "cache": device.get("cache", "honest") if emulated
                        else "the host device's",
                        **{k: device[k] for k in ("cache_mb", "destage_ms")
                           if emulated and device.get(k) is not None}})
    return out


def durability_section(manifest: Manifest) -> dict[str, Any] | None:
    """The section of a run with cuts; None for a run without any."""
    record = manifest.durability
    events = _cut_events(manifest)
    if not record and not events:
        return None
    record = record or {}
    verdicts = [v for v in record.get("cuts") or [] if isinstance(v, dict)]
    final = record.get("final") if isinstance(record.get("final"), dict) else None
    cuts: list[dict[str, Any]] = []
    corruption: list[dict[str, Any]] = []
    invariants: list[dict[str, Any]] = []
    checked: list[tuple[dict[str, Any], str]] = []  # each verdict, and when it was made
    previous = 0
    server_lost = False
    for group, verdict in _groups(events, verdicts):
        looked = verdict if verdict is not None else final
        lost = _lost(looked)
        last = group[-1]
        where = (f"after the {last['kind']} at {float(last['at_s'] or 0):g} s"
                 if verdict is not None else "at the end of the run")
        for cut in group:
            entry = {k: cut.get(k) for k in ("time", "kind", "node", "at_s", "downtime_s",
                                              "recovery_s", "lost_bytes")}
            if cut.get("held_s") is not None:
                entry["held_s"] = cut["held_s"]
            if cut.get("kind") == "power-loss" and (
                    bound := destage_bound_s(manifest, str(cut.get("node")))) is not None:
                entry["destage_bound_s"] = bound  # what the cache model lets it drop
            entry["verified"] = where
            cuts.append(entry)
        head = cuts[-1]
        if looked is None:
            continue
        if not looked.get("server_up", True):
            server_lost = True
            head["server_up"] = False
            head["start_error"] = looked.get("start_error")
        if lost is not None:
            commits = looked.get("commits") or {}
            if isinstance(commits.get("newly_lost"), int):  # the verdict's own cut's loss
                head["lost_commits"] = commits["newly_lost"]
                window = commits.get("newly_lost_window_s")
            else:  # older manifests count cumulatively: the loss is the difference, and
                # the window (over every loss so far) is this cut's only at the first loss
                head["lost_commits"] = max(0, lost - previous)
                window = commits.get("lost_window_s") if previous == 0 else None
            if head["lost_commits"] and window:
                head["lost_window_s"] = window  # seconds before the cut, over the losses
            head["loss_allowed"] = bool(commits.get("allowed"))
            previous = max(previous, lost)
        if len(group) > 1:
            head["cuts_covered"] = len(group)
        checked.append((looked, where))
    if final is not None and all(v is not final for v, _ in checked):
        checked.append((final, "at the end of the run"))  # damage found only at the end
    seen_corruption: set[tuple[Any, Any, str]] = set()
    for looked, where in checked:
        found, broken = _verdict_problems(looked, where)
        for item in found:  # a later verdict reports the same damage again
            key = (item["relation"], item["where"], item["message"])
            if key not in seen_corruption:
                seen_corruption.add(key)
                corruption.append(item)
        invariants += broken
    if final is not None and not final.get("server_up", True):
        server_lost = True
    # the last verdict that counted (a server that did not come back cannot be counted)
    counting = [v for v in [*verdicts, final] if v is not None and _lost(v) is not None]
    last = counting[-1] if counting else (final or {})
    commits = last.get("commits") or {}
    total_lost = _lost(last)
    allowed = bool(commits.get("allowed"))
    section: dict[str, Any] = {
        "cuts": cuts,
        "acknowledged": commits.get("acknowledged"),
        "lost_commits": 0 if allowed else total_lost,
        "allowed_lost_commits": total_lost if allowed else 0,
        "lost_window_s": commits.get("lost_window_s"),
        "synchronous_commit": (final or {}).get("synchronous_commit"),
        "corruption": corruption,
        "invariant_violations": invariants,
        "recovery_s": [c["recovery_s"] for c in cuts if isinstance(c.get("recovery_s"),
                                                                   (int, float))],
        "downtime_s": [c["downtime_s"] for c in cuts if isinstance(c.get("downtime_s"),
                                                                   (int, float))],
        "storage": storage_caches(manifest),
    }
    if allowed:
        section["allowed_loss_window_s"] = _loss_window_s(manifest)
    if total_lost is None:
        section["not_counted"] = (commits.get("not_counted") or record.get("ledger_problem")
                                  or "no integrity verdict was made")
    section["verdict"] = _verdict_of(section, server_lost)
    section["failed"] = section["verdict"] in FAILURES
    return section


def _verdict_of(section: dict[str, Any], server_lost: bool) -> str:
    if server_lost:
        return "server-lost"
    if section["corruption"] or section["invariant_violations"]:
        return "corruption"
    if section["lost_commits"]:
        return "data-loss"
    if section["allowed_lost_commits"]:
        return "allowed-loss"
    if section.get("not_counted"):
        return "not-verified"
    return "clean"


def headline(section: dict[str, Any]) -> str:
    """The section in one line: what a reader must know first."""
    cuts = section["cuts"]
    kinds = {c["kind"] for c in cuts}
    noun = ("power loss" if kinds == {"power-loss"} else "crash" if kinds == {"crash"}
            else "cut")
    plural = {"power loss": "power losses", "crash": "crashes", "cut": "cuts"}[noun]
    text = f"{len(cuts)} {noun if len(cuts) == 1 else plural}: "
    lost, allowed = section["lost_commits"], section["allowed_lost_commits"]
    if section["verdict"] == "server-lost":
        text += "the server did not come back"
        if lost:
            text += (f" (before that, {lost:,} of {section['acknowledged'] or 0:,} "
                     "acknowledged commits lost)")
        return text
    if lost is None:
        text += f"acknowledged commits not counted ({section.get('not_counted')})"
    elif allowed:
        text += (f"{allowed:,} of {section['acknowledged'] or 0:,} acknowledged commits lost, "
                 "allowed by synchronous_commit = off (up to "
                 f"{section.get('allowed_loss_window_s', 0.6):g} s)")
    else:
        text += f"{lost:,} of {section['acknowledged'] or 0:,} acknowledged commits lost"
        window = section.get("lost_window_s")
        if lost and window:
            text += f" (acknowledged {window[0]:.1f}-{window[1]:.1f} s before the cut)"
    problems = len(section["corruption"]) + len(section["invariant_violations"])
    text += (f"; integrity NOT clean ({problems} finding(s))" if problems
             else "; integrity clean")
    recovery = section["recovery_s"]
    if recovery:
        text += f"; recovery {min(recovery):g}-{max(recovery):g} s" if len(recovery) > 1 \
            else f"; recovery {recovery[0]:g} s"
    return text


def cut_lines(section: dict[str, Any]) -> list[str]:
    """One line per cut: when, what it lost, the damage found after it, recovery."""
    lines = []
    for cut in section["cuts"]:
        text = f"{cut['kind']} of {cut['node']} at {float(cut.get('at_s') or 0):g} s"
        if cut.get("time"):
            text += f" ({_clock(cut['time'])} UTC)"
        if "lost_commits" in cut:
            text += f": {cut['lost_commits']:,} acknowledged commits lost"
            if cut.get("lost_window_s"):
                window = cut["lost_window_s"]
                text += f" (the last {window[1]:.1f} s before the cut)"
            if cut["lost_commits"] and cut.get("loss_allowed"):
                text += ", allowed by synchronous_commit = off"
        if cut.get("cuts_covered"):
            text += f" (verified after {cut['cuts_covered']} cuts)"
        if cut.get("server_up") is False:
            text += f": the server did not come back ({cut.get('start_error') or '?'})"
        if isinstance(cut.get("downtime_s"), (int, float)):
            text += f"; down {cut['downtime_s']:g} s"
        if isinstance(cut.get("recovery_s"), (int, float)):
            text += f", recovery {cut['recovery_s']:g} s"
        if cut.get("lost_bytes"):
            text += f"; the device's cache dropped {int(cut['lost_bytes']) // 1024:,} KiB"
            if cut.get("held_s") is not None:
                text += f" written in its last {cut['held_s']:.2f} s"
            if cut.get("destage_bound_s") is not None:
                text += f" (its destage bound: {cut['destage_bound_s']:g} s)"
        lines.append(text)
    for item in section["corruption"]:
        lines.append(f"corruption {item['found']}: {item['relation'] or '(no relation)'}: "
                     f"{item['message']}")
    for item in section["invariant_violations"]:
        lines.append(f"invariant broken {item['found']}: {item['invariant']} {item['sums']}")
    return lines


def _clock(value: Any) -> str:
    try:
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).strftime(
            "%H:%M:%S")
    except ValueError:
        return str(value)




# --- the layers that can drop a flush PostgreSQL asked for -----------------------------
#
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
