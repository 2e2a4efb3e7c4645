"""The recommendation rules registry: what to change, given the causes found.

A rule fires when one of its causes was found in a stall (ranked first, or with
confidence of at least CAUSE_FLOOR) and its condition holds on the run's facts (settings,
filesystem, memory, cores). Each rule says the change as scenario keys (what `pglab run
--set` or a [matrix] takes to test it), the expected effect, the risks and when it is
unsafe. Changes with no scenario key (filesystem options, hardware) say so in `test`.
A rule whose `not_when` the run's own data can check (`ruled_out`: the WAL buffers never
filled, dirty memory never reached the threshold) is withheld when the data shows it,
with that data as the reason; so is a rule whose causes were found only in short, weak
stalls (SHORT_STALL_S, WEAK_ADVICE_BELOW). docs/ANALYSIS.md lists the rules; a test
checks that the two agree.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from pglab.analysis.flush_layers import (
    FLUSH_LAYERS,
    FlushLayer,
    flush_change,
    flush_places,
)
from pglab.analysis.loading import RunFrames
from pglab.analysis.network import clients_route, commit_quorum
from pglab.analysis.plans import GoneIndex, PlanFlip
from pglab.analysis.signals import LONG_HOLDER_S, long_holder
from pglab.driver_traits import DriverTraits, driver_traits
from pglab.results import files
from pglab.results.manifest import Manifest
from pglab.scenario.builtin import builtin_names
from pglab.scenario.overrides import toml_value
from pglab.units import parse_duration

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CAUSE_FLOOR = 0.5
# A cause found only in stalls this short (seconds) and under this confidence is weak
# evidence: one second of a per-second series dips on a shared machine for reasons the
# telemetry cannot see, and a cause at 0.5 in it is a guess. Its rules are withheld
# (listed with the reason), unless another, stronger finding fires them too.
SHORT_STALL_S = 2
WEAK_ADVICE_BELOW = 0.6
NOT_TESTABLE = "not testable by pglab on this machine"
COPY_ON_WRITE = ("zfs", "btrfs", "bcachefs")
UNITS = {"B": 1, "kB": 1024, "8kB": 8192, "MB": 2**20, "16MB": 16 * 2**20, "GB": 2**30}


@dataclass(frozen=True)
class Facts:
    """What rules condition on: causes found and the run's recorded facts."""

    causes: dict[str, float]  # cause id -> best confidence over the stalls
    manifest: Manifest
    fpi_surge: bool  # full-page images rose in a checkpoint window
    run_dir: Path | None = None  # for the scenario.toml copy a test command can use
    checkpoint_flags: frozenset[str] = frozenset()  # of checkpoints in the stall windows
    checkpoints_too_frequent: bool = False  # the server logged it during the run
    priority: tuple[str, ...] = ()  # causes by what they cost, the run's top cause first
    direct_reclaim: bool = False  # processes stalled reclaiming memory in a stall window
    # cause -> the sub-causes its findings named (Finding.sub), for the rules' `sub`
    sub_causes: dict[str, frozenset[str]] = field(default_factory=dict)
    # cause -> why its findings are weak (only short stalls at low confidence)
    weak: dict[str, str] = field(default_factory=dict)
    top: frozenset[str] = frozenset()  # the verdict's cause (and the performance verdict's)
    frames: RunFrames | None = None  # the run's series and events, for `ruled_out`
    # the indexes the run's plan changes stopped using, with how each was made if known
    indexes_gone: tuple[GoneIndex, ...] = ()
    plan_flips: tuple[PlanFlip, ...] = ()  # the plan changes no dropped index explains

    def series(self, source: str, metric: str) -> pl.DataFrame:
        """The run's samples of one metric (node, label, value); empty without frames."""
        if self.frames is None:
            return pl.DataFrame(schema={"node": pl.String, "label": pl.String,
                                        "value": pl.Float64})
        ts = self.frames.timeseries
        return ts.filter((pl.col("source") == source) & (pl.col("metric") == metric)
                         ).select("node", "label", "value")

    def events_of(self, kind: str) -> list[dict[str, Any]]:
        """The attrs of the run's events of one kind."""
        if self.frames is None:
            return []
        found = []
        for text in self.frames.events.filter(pl.col("kind") == kind)["attrs"].to_list():
            try:
                attrs = json.loads(text) if text else {}
            except json.JSONDecodeError:
                continue
            if isinstance(attrs, dict):
                found.append(attrs)
        return found

    def setting(self, name: str) -> dict[str, Any] | None:
        value = self.manifest.node_settings().get(name)
        return value if isinstance(value, dict) else None

    def bytes_of(self, name: str, default: int) -> int:
        value = self.setting(name)
        try:
            return int(float(value["setting"]) * UNITS.get(value.get("unit") or "B", 1)) \
                if value else default
        except (TypeError, ValueError):
            return default

    def text_of(self, name: str, default: str) -> str:
        value = self.setting(name)
        return str(value["setting"]) if value else default

    @property
    def fstype(self) -> str:
        found = str((self.manifest.host.get("data_dir") or {}).get("fstype") or "")
        return found.removeprefix("fuse.")  # zfs-fuse's datasets mount as fuse.zfs

    def data_volume(self) -> dict[str, Any]:
        """The primary's data volume as the run made it (storage/), or {}."""
        return next((v for v in self.manifest.node_storage()
                     if v.get("role") == "data"), {})

    @property
    def memory(self) -> int:
        return int(self.manifest.host.get("memory_bytes") or 0)

    @property
    def cores(self) -> int:
        return self.manifest.cpu_cores

    @property
    def wal_segment_mb(self) -> int:
        text = str(self.manifest.node().get("wal_segment_size") or "16MB")
        digits = "".join(c for c in text if c.isdigit())
        return int(digits or 16) * (1024 if text.endswith("GB") else 1)

    def choices(self, name: str) -> list[str] | None:
        """Values the primary accepts for an enum setting: None when the run folder did
        not record them, [] when the setting is not an enum there (a boolean)."""
        recorded = self.manifest.node().get("setting_choices")
        if not isinstance(recorded, dict):
            return None
        found = recorded.get(name)
        return [str(v) for v in found] if isinstance(found, list) else []

    @property
    def standbys(self) -> int:
        topology = self.manifest.scenario.get("topology") or {}
        return int(topology.get("standbys") or 0)

    @property
    def synchronous(self) -> str:
        topology = self.manifest.scenario.get("topology") or {}
        return str(topology.get("synchronous") or "off")

    def found(self, *causes: str) -> bool:
        return any(c in self.causes for c in causes)


@dataclass(frozen=True)
class Rule:
    id: str
    because: tuple[str, ...]  # cause ids this rule addresses
    action: str  # what to do, in words
    change: Callable[[Facts], dict[str, Any]]  # scenario keys -> values ({} when none)
    effect: str
    risk: str
    when: Callable[[Facts], bool] = lambda f: True
    testable: bool = True
    not_when: str = ""  # when the rule does not apply, in words (every rule says)
    # the sub-causes it answers (Finding.sub); () for any. A rule with sub-causes fires
    # when one of them was found, or when the evidence told none of its cause's apart.
    sub: tuple[str, ...] = ()
    why_untestable: str = ""  # for testable=False: why pglab cannot try it here
    # It trades durability for speed: never advised for a run that lost acknowledged
    # commits (whatever else slowed it, that loss comes first and this would add to it).
    gives_up_durability: bool = False
    # `not_when` checked on the run's own data: the data that shows it holds, in words,
    # or None (it does not, or the data cannot tell). The rule is then withheld.
    ruled_out: Callable[[Facts], str | None] | None = None


# The checks of `not_when` on the run's data (Rule.ruled_out): each names what it read.

def _wal_buffers_never_full(f: Facts) -> str | None:
    full = f.series("db.wal", "wal_buffers_full")
    if full.is_empty() or float(full["value"].max() or 0) > 0:  # type: ignore[arg-type]
        return None
    nodes = ", ".join(sorted(set(full["node"].to_list())))
    return f"wal_buffers_full was 0 on every node over the whole run ({nodes})"


FPI_BYTES = 8192  # a full-page image is at most a page (BLCKSZ, 8 kB unless rebuilt)
FEW_FPI_SHARE = 0.1  # compressing at most this share of the WAL cannot change much


def _few_full_page_images(f: Facts) -> str | None:
    fpi = float(f.series("db.wal", "wal_fpi").filter(pl.col("node") == "primary")["value"].sum())
    wal = float(f.series("db.wal", "wal_bytes").filter(pl.col("node") == "primary")["value"].sum())
    if not wal or fpi * FPI_BYTES >= FEW_FPI_SHARE * wal:
        return None
    return (f"full-page images were at most {fpi * FPI_BYTES / wal:.0%} of the WAL the "
            f"primary wrote over the whole run ({fpi * FPI_BYTES / 2**20:.0f} of "
            f"{wal / 2**20:.0f} MB): all that compression could shrink")


VACUUM_SEEN_S = 1.0  # db.vacuum samples every second: a shorter vacuum can slip between


def _vacuums(f: Facts) -> list[tuple[float, str]]:
    """The vacuums that ended in the run, with how long each took: the `vacuum` faults
    (a manual VACUUM) and the server's autovacuum log lines."""
    found = []
    for attrs in f.events_of("fault"):
        took = attrs.get("elapsed_s")
        if attrs.get("action") == "vacuum" and isinstance(took, int | float):
            args = attrs.get("args")
            table = args.get("table") if isinstance(args, dict) else None
            found.append((float(took), f"VACUUM {table}"))
    for attrs in f.events_of("autovacuum"):
        took = attrs.get("elapsed_s")
        if isinstance(took, int | float):
            found.append((float(took), f"autovacuum of {attrs.get('table')}"))
    return found


def _no_vacuum_to_slow(f: Facts) -> str | None:
    """No vacuum on the primary lasted long enough to matter: pg_stat_progress_vacuum
    (db.vacuum, every second) never saw one running, and those that ended took under
    VACUUM_SEEN_S. Its WAL then came out in a moment, and the standby fell behind on the
    load's or a bulk statement's WAL, which a slower vacuum does not touch."""
    running = f.series("db.vacuum", "vacuums_running").filter(pl.col("node") == "primary")
    if running.is_empty() or float(running["value"].max() or 0) > 0:  # type: ignore[arg-type]
        return None
    ended = _vacuums(f)
    if any(took >= VACUUM_SEEN_S for took, _ in ended):
        return None
    longest = (", the longest that ended took {:.2f} s ({})".format(*max(ended))
               if ended else "")
    return (f"no vacuum was running on the primary in any of {running.height} samples"
            f"{longest}: the standby fell behind on other WAL")


XFS_MIN_BYTES = 300 * 2**20  # mkfs.xfs refuses a smaller filesystem


def _wal_volume(f: Facts) -> tuple[str, dict[str, Any]]:
    """The volume pglab made that holds pg_wal, and its scenario key prefix: pg_wal's
    own volume, else the data volume; ("", {}) on the host's directory."""
    volumes = {str(v.get("role")): v for v in f.manifest.node_storage()}
    if "wal" in volumes:
        return "storage.wal.", volumes["wal"]
    return ("storage.", volumes["data"]) if "data" in volumes else ("", {})


def _wal_fstype(f: Facts) -> str:
    _, volume = _wal_volume(f)
    return str(volume.get("filesystem") or "") if volume else f.fstype


def _wal_on_xfs_change(f: Facts) -> dict[str, Any]:
    """storage(.wal).filesystem = xfs on a volume pglab made (an image it formats), with
    the size XFS needs and wal_init_zero off; {} on the host's directory or a mount pglab
    did not make, where the filesystem is not the scenario's to change."""
    prefix, volume = _wal_volume(f)
    if not volume or volume.get("kind") != "image":
        return {}
    change: dict[str, Any] = {f"{prefix}filesystem": "xfs"}
    if int(volume.get("size_bytes") or XFS_MIN_BYTES) < XFS_MIN_BYTES:
        change[f"{prefix}size"] = "300MB"
    # with zero-filling on, XFS writes the same zeros as ext4: the change is the pair
    if f.text_of("wal_init_zero", "on") == "on":
        change["server.settings.wal_init_zero"] = "off"
    return change


DIRTY_BACKGROUND_MB = 64  # what dirty-background-bytes proposes


def _dirty_never_reached(f: Facts) -> str | None:
    dirty = f.series("os.memory", "dirty_mb").filter(pl.col("node") == "host")
    if dirty.is_empty():
        return None
    peak = float(dirty["value"].max() or 0)  # type: ignore[arg-type]
    if peak >= DIRTY_BACKGROUND_MB:
        return None
    return (f"dirty page cache peaked at {peak:.0f} MB over the whole run, under the "
            f"{DIRTY_BACKGROUND_MB} MB this sets: writeback would start no sooner")


def _no_long_holder(f: Facts) -> str | None:
    """The run's lock queues (db.lockqueue) had no holder open LONG_HOLDER_S or more."""
    queues = f.events_of("lock-queue")
    if not queues or any(long_holder(q) is not None for q in queues):
        return None
    longest = max(float((q.get("holder") or {}).get("xact_s") or 0) for q in queues)
    return (f"no session held a lock queue with its transaction open {LONG_HOLDER_S:g} s or "
            f"more (the longest {longest:.1f} s)")


def _no_idle_holder(f: Facts) -> str | None:
    """The long holders of the run's lock queues, none idle in its transaction."""
    holders = [h for q in f.events_of("lock-queue") if (h := long_holder(q)) is not None]
    if not holders:
        return _no_long_holder(f)
    if any(str(h.get("state", "")).startswith("idle in transaction") for h in holders):
        return None
    states = ", ".join(sorted({str(h.get("state") or "?") for h in holders}))
    return (f"the sessions that held the queues for seconds were never idle in their "
            f"transaction ({states})")


def _jobs_already(f: Facts) -> str | None:
    jobs = f.manifest.variant.get("workload.jobs", f.manifest.scenario_workload.get("jobs"))
    wanted = max(2, min(_clients(f), f.cores))
    if not isinstance(jobs, int) or jobs < wanted:
        return None
    return f"pgbench ran {jobs} threads for {_clients(f)} clients on {f.cores} cores"


def _wal_compression(f: Facts) -> str:
    """lz4 where the server was built with it, else the best it has; on PG 13-14 the
    setting is a boolean (on = pglz)."""
    accepted = f.choices("wal_compression")
    if accepted is None:
        return "lz4"  # not recorded (an older run folder)
    return next((v for v in ("lz4", "zstd", "pglz", "on") if v in accepted), "on")


def _zfs_dataset(f: Facts) -> dict[str, Any]:
    """The data volume's ZFS properties that differ from the advice, as scenario keys: a
    volume pglab made can be remade with them, so the rule becomes testable."""
    volume = f.data_volume()
    if volume.get("filesystem") != "zfs":
        return {}
    have = volume.get("properties") or {}
    # zfs-fuse (pool version 23) has no lz4; its `on` is lzjb, cheap enough for pages.
    wanted = {"recordsize": "16k", "logbias": "throughput",
              "compression": "lz4" if volume.get("kind") == "pool" else "on"}
    return {f"storage.options.{k}": v for k, v in wanted.items() if have.get(k) != v}


def _flush_rules() -> list[Rule]:
    """The advice of each layer that can drop a flush (durability.FLUSH_LAYERS): given
    for the layer's cause, or for any loss of data while the layer is in the run."""
    def rule(layer: FlushLayer) -> Rule:
        def change(f: Facts) -> dict[str, Any]:
            return flush_change(layer, f.manifest)

        def holds(f: Facts) -> bool:
            return bool(flush_places(layer, f.manifest))

        return Rule(layer.rule, (layer.cause, "data-loss"), layer.action, change,
                    layer.effect, layer.risk, when=holds, not_when=layer.not_when,
                    why_untestable=layer.why_untestable)

    return [rule(layer) for layer in FLUSH_LAYERS]


def _mb(n: int) -> str:
    return f"{n // 2**30}GB" if n % 2**30 == 0 else f"{n // 2**20}MB"


WAL_SEGMENT_MB = 64  # what wal-segment-size proposes


def _wal_segment_change(f: Facts) -> dict[str, Any]:
    """The new segment size and what depends on it: PostgreSQL refuses to start when
    min_wal_size or max_wal_size is under two segments (checked against the control
    file at start, so ALTER SYSTEM accepts it and the candidate's server dies)."""
    change: dict[str, Any] = {"server.initdb.wal_segsize_mb": WAL_SEGMENT_MB}
    floor = 2 * WAL_SEGMENT_MB * 2**20
    for name, default in (("min_wal_size", 80 * 2**20), ("max_wal_size", 2**30)):
        if f.bytes_of(name, default) < floor:
            change[f"server.settings.{name}"] = _mb(floor)
    return change


def _scenario_link(f: Facts, one: str, other: str) -> tuple[int, dict[str, Any]] | None:
    """The scenario's [[network.links]] entry between two hosts: (its index, itself)."""
    links = (f.manifest.scenario.get("network") or {}).get("links") or []
    for index, link in enumerate(links):
        if isinstance(link, dict) and set(link.get("between") or []) == {one, other}:
            return index, link
    return None


def _far_standby(f: Facts) -> tuple[int, dict[str, Any]] | None:
    """The configured link a commit waits on: the synchronous standby's ("on": the first
    standby), or in a quorum of K ("any:K") the K-th nearest's; an asynchronous standby's
    link is no commit's."""
    waited_on, k = commit_quorum(f.manifest.scenario,
                                 [f"standby{i}" for i in range(1, f.standbys + 1)])
    found = sorted((link for name in waited_on
                    if (link := _scenario_link(f, "primary", name)) is not None),
                   key=lambda link: _seconds(link[1].get("rtt")))
    return found[k - 1] if 0 < k <= len(found) else None


def _seconds(value: Any) -> float:
    try:
        return parse_duration(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _link_change(f: Facts, other: str, key: str, value: Any) -> dict[str, Any]:
    """The scenario key that changes one figure of the primary's link to `other` (a
    standby: the farthest configured one): {} when the scenario configured no such link."""
    found = _far_standby(f) if other == "standby" else _scenario_link(f, "primary", other)
    return {f"network.links.{found[0]}.{key}": value} if found else {}


def _separate_hosts(f: Facts) -> bool:
    return (f.manifest.scenario.get("network") or {}).get("hosts") == "separate"


def _application_closer(f: Facts) -> dict[str, Any]:
    """Each configured link of the clients' route to the primary (theirs, or through the
    pooler's own host its two) at 0 ms."""
    found = [_scenario_link(f, a, b) for a, b in clients_route(f.manifest.scenario)]
    return {f"network.links.{link[0]}.rtt": "0ms" for link in found if link is not None}


def _pooler(f: Facts) -> dict[str, Any]:
    """PgBouncer in front of the primary (the clients go through it unless the scenario
    says otherwise: workload.path's default); on hosts of their own, on the primary's
    host, where a pooler usually runs."""
    if not _separate_hosts(f):
        return {"topology.pooler": "pgbouncer"}
    return {"topology.pooler": "pgbouncer", "topology.pooler_host": "primary"}


def _closer(f: Facts) -> dict[str, Any]:
    """The far standby's link at 0.5 ms (a standby in the primary's zone), or at 0 ms
    when it is that close already."""
    found = _far_standby(f)
    near = "0.5ms" if found is not None and _seconds(found[1].get("rtt")) > 0.0005 else "0ms"
    return _link_change(f, "standby", "rtt", near)


def _wider(f: Facts) -> dict[str, Any]:
    found = _far_standby(f)
    if found is None or not found[1].get("bandwidth_mbps"):
        return {}
    return {f"network.links.{found[0]}.bandwidth_mbps": 4 * float(found[1]["bandwidth_mbps"])}


def _standby_core(f: Facts) -> dict[str, Any]:
    """A whole core for the first standby that the scenario limits to less (what one
    replaying process can use); {} when none is limited: the machine's CPU is not a key."""
    nodes = f.manifest.scenario.get("nodes") or {}
    for name in sorted(nodes):
        cpus = ((nodes[name] or {}).get("envelope") or {}).get("cpus")
        if name.startswith("standby") and isinstance(cpus, (int, float)) and cpus < 1:
            return {f"nodes.{name}.envelope.cpus": 1}
    return {}


REMAKE_AFTER_S = 2.0  # plan-index's test: the index made again this long after its drop
_SCENARIO_FAULT_DEFAULTS: dict[str, Any] = {"node": "primary", "duration": None, "args": {},
                                            "repeat": 1, "every": None}


def _fault_as_set(fault: dict[str, Any]) -> dict[str, Any]:
    """A fault of the run's scenario (manifest.json's, resolved) as a scenario file writes
    it: its times in seconds ("12s"), without the keys at their defaults."""
    out = {}
    for key, value in fault.items():
        if key in _SCENARIO_FAULT_DEFAULTS and value == _SCENARIO_FAULT_DEFAULTS[key]:
            continue
        out[key] = f"{value:g}s" if key in ("at", "duration", "every") and isinstance(
            value, int | float) else value
    return out


def _dropped_at(faults: list[dict[str, Any]], index: str) -> float | None:
    """When the scenario's `sql` fault that drops `index` (DROP INDEX, DROP CONSTRAINT)
    ran, in seconds of the measured window; None when no fault names it."""
    name = re.compile(rf"(?<![\w$]){re.escape(index)}(?![\w$])", re.IGNORECASE)
    for fault in faults:
        text = str((fault.get("args") or {}).get("sql") or "")
        if (fault.get("action") == "sql" and re.search(r"\bdrop\b", text, re.IGNORECASE)
                and name.search(text) and isinstance(fault.get("at"), int | float)):
            return float(fault["at"])
    return None


def _index_again(f: Facts) -> dict[str, Any]:
    """The scenario's own faults plus one `sql` fault per index gone that makes it again
    as it was (its recorded statement), then ANALYZEs its table, REMAKE_AFTER_S after the
    fault that dropped it (half-way to the run's end when that is sooner): the candidate
    tune measures against the run as it was. {} when the run recorded neither how the
    index was made nor a fault that dropped it (dropped by hand, a server observed)."""
    faults = [x for x in f.manifest.scenario.get("faults") or [] if isinstance(x, dict)]
    try:
        measured = float(f.manifest.scenario_workload.get("duration") or 0)
    except (TypeError, ValueError):
        return {}
    remakes = []
    for gone in f.indexes_gone:
        at = _dropped_at(faults, gone.name)
        if gone.make is None or gone.table is None or at is None or at >= measured:
            continue
        remakes.append({"at": round(at + min(REMAKE_AFTER_S, (measured - at) / 2), 3),
                        "action": "sql",
                        "args": {"sql": f"{gone.make}; ANALYZE {gone.table}"}})
    if not remakes:
        return {}
    return {"faults": [_fault_as_set(x) for x in sorted([*faults, *remakes],
                                                         key=lambda x: float(x["at"]))]}


ANALYZE_AFTER_S = 1.0  # autovacuum-analyze's test: ANALYZE this long after the bulk change


def _faults_begun(f: Facts) -> list[tuple[dt.datetime, float]]:
    """When each of the run's faults began, and when it ended in seconds into the measured
    window (its `at_s` plus how long it took), first begun first."""
    if f.frames is None:
        return []
    found = []
    rows = f.frames.events.filter(pl.col("kind") == "fault")
    for start, end, raw in rows.select("t_start", "t_end", "attrs").iter_rows():
        try:
            attrs = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            continue
        at = attrs.get("at_s") if isinstance(attrs, dict) else None
        if isinstance(at, int | float) and end is not None and start is not None:
            found.append((start, float(at) + (end - start).total_seconds()))
    return sorted(found)


def _analyze_again(f: Facts) -> dict[str, Any]:
    """The scenario's own faults plus a `sql` fault that ANALYZEs the tables of the plans
    that flipped, ANALYZE_AFTER_S after the end of the last fault begun before the first
    flip (the bulk change whose statistics the planner did not have: a plan can flip
    while it still runs, as the planner scales the old statistics to the table's pages
    as they grow, and ANALYZE counts its rows only once it has committed): what tune
    measures against the run as it was. Without such a fault (a change the scenario did
    not make, a server observed), the setting that lets autovacuum analyze sooner."""
    setting = {"server.settings.autovacuum_analyze_scale_factor": "0.02"}
    if not f.plan_flips:
        return setting
    first = min(flip.at for flip in f.plan_flips)
    tables = list(dict.fromkeys(t for flip in f.plan_flips for t in flip.tables))
    ended = [at for start, at in _faults_begun(f) if start <= first]
    faults = [x for x in f.manifest.scenario.get("faults") or [] if isinstance(x, dict)]
    try:
        measured = float(f.manifest.scenario_workload.get("duration") or 0)
    except (TypeError, ValueError):
        return setting
    if not ended or not tables or ended[-1] + ANALYZE_AFTER_S >= measured:
        return setting
    analyze = {"at": round(ended[-1] + ANALYZE_AFTER_S, 1), "action": "sql",
               "args": {"sql": "; ".join(f"ANALYZE {t}" for t in tables)}}
    return {"faults": [_fault_as_set(x) for x in sorted([*faults, analyze],
                                                         key=lambda x: float(x["at"]))]}


RULES: tuple[Rule, ...] = (
    Rule("max-wal-size", ("checkpoint-io",),
         "raise max_wal_size so checkpoints are triggered by time, not WAL volume",
         lambda f: {"server.settings.max_wal_size":
                    _mb(min(16 * 2**30, max(4 * 2**30, 4 * f.bytes_of("max_wal_size",
                                                                       2**30))))},
         "fewer checkpoints, fewer full-page images after each, fewer WAL segments removed "
         "and created again",
         "more disk for pg_wal and a longer crash recovery (up to max_wal_size of WAL to "
         "replay)",
         when=lambda f: f.bytes_of("max_wal_size", 2**30) < 16 * 2**30
         and ("wal" in f.checkpoint_flags or f.checkpoints_too_frequent),
         not_when="the checkpoints were timed (checkpoint_timeout), not forced by WAL volume: "
                  "more room for WAL changes nothing; or pg_wal's disk cannot hold the larger "
                  "max_wal_size",
         sub=("wal-volume",)),
    Rule("checkpoint-timeout", ("checkpoint-io",),
         "lengthen checkpoint_timeout",
         lambda f: {"server.settings.checkpoint_timeout":
                    "30min" if f.bytes_of("checkpoint_timeout", 300) >= 900 else "15min"},
         "checkpoints further apart: each page written once for many changes, fewer "
         "full-page images",
         "longer crash recovery; standbys' restartpoints follow the same spacing",
         when=lambda f: "time" in f.checkpoint_flags,
         not_when="the checkpoints were triggered by WAL volume (raise max_wal_size first), or "
                  "crash recovery time is bounded by a recovery-time objective"),
    Rule("checkpoint-completion-target", ("checkpoint-io",),
         "spread checkpoint writes over 90% of the interval",
         lambda f: {"server.settings.checkpoint_completion_target": 0.9},
         "the write phase is paced instead of bursting", "none worth noting (0.9 is the "
         "default since PostgreSQL 14)",
         when=lambda f: float(f.text_of("checkpoint_completion_target", "0.9")) < 0.9
         and bool({"time", "wal"} & f.checkpoint_flags),
         not_when="it is 0.9 already, or the checkpoints were immediate (a CHECKPOINT command, a "
                  "base backup), which write at full speed whatever it says"),
    Rule("forced-checkpoints", ("checkpoint-io",),
         "find what forces immediate checkpoints (a CHECKPOINT command, pg_basebackup "
         "--checkpoint=fast, CREATE DATABASE ... STRATEGY FILE_COPY) and let it wait for a "
         "spread checkpoint instead",
         lambda f: {},
         "the dirty buffers are written over checkpoint_completion_target of the interval "
         "instead of at full speed",
         "a base backup or the command starts later (up to a checkpoint interval)",
         when=lambda f: "immediate" in f.checkpoint_flags, testable=False,
         not_when="the checkpoints were timed or triggered by WAL volume",
         why_untestable="what forces the checkpoints (a command, a backup tool) is outside the "
                        "scenario's keys"),
    Rule("checkpoint-flush-after", ("checkpoint-io", "memory-reclaim"),
         "let the checkpointer ask the kernel to write back as it goes",
         lambda f: {"server.settings.checkpoint_flush_after": "256kB"},
         "no pile of dirty page cache for the sync phase's fsyncs to flush at once",
         "slightly more IO when the same pages are written again soon",
         when=lambda f: f.text_of("checkpoint_flush_after", "32") == "0",
         not_when="it is on already (256kB, the Linux default), or the device itself is "
                  "saturated: the hints only spread the same writes"),
    Rule("wal-init-zero-off", ("wal-segment-init",),
         "stop zero-filling new WAL segments (write only their last byte)",
         lambda f: {"server.settings.wal_init_zero": "off"},
         "a new segment costs one small write instead of writing the whole segment and "
         "fsyncing it while commits wait",
         "on ext4/xfs the first write to each block of a sparse segment allocates it and can "
         "make steady WAL writes slower: test it; clearly better on copy-on-write "
         "filesystems (ZFS, btrfs)",
         when=lambda f: f.text_of("wal_init_zero", "on") == "on",
         not_when="segments are recycled (wal_recycle on with enough min_wal_size): none is "
                  "created while commits wait"),
    Rule("wal-filesystem-xfs", ("wal-segment-init", "wal-write"),
         "put pg_wal on XFS instead of ext4, with wal_init_zero = off (the Kubernetes "
         "report's answer): new segments are then sparse, and XFS allocates their blocks "
         "as WAL is written",
         _wal_on_xfs_change,
         "no segment is zero-filled while commits wait, without what sparse segments cost "
         "on ext4 (each first write to a block allocates it and its fdatasync commits "
         "ext4's journal: wal_init_zero = off alone can cut the stalls and lower TPS)",
         "a filesystem to make and migrate to (a new volume, pg_wal moved or the cluster "
         "restored); XFS cannot shrink",
         when=lambda f: _wal_fstype(f) == "ext4"
         and (f.found("wal-segment-init") or f.text_of("wal_init_zero", "on") == "off"),
         not_when="pg_wal is on XFS already, or on a copy-on-write filesystem (ZFS, btrfs: "
                  "wal-init-zero-off and wal-recycle answer there); or a WAL write stall "
                  "with wal_init_zero on, where no segment is sparse",
         why_untestable="pg_wal is on the host's directory or a mount pglab did not make: "
                        "its filesystem is not the scenario's to change (a [storage] "
                        "volume makes it testable)"),
    Rule("wal-recycle", ("wal-segment-init",),
         "recycle old WAL segments (rename) instead of creating new ones; on a "
         "copy-on-write filesystem do the opposite",
         lambda f: {"server.settings.wal_recycle":
                    "off" if f.fstype in COPY_ON_WRITE else "on"},
         "on ext4/xfs a recycled segment is already allocated: no creation during commits",
         "on copy-on-write filesystems recycling buys nothing (every write goes to a new "
         "block) and keeps old segments' space",
         when=lambda f: f.text_of("wal_recycle", "on") == ("on" if f.fstype in COPY_ON_WRITE
                                                            else "off"),
         not_when="on copy-on-write filesystems (ZFS, btrfs) the opposite holds; or segments are "
                  "removed because max_wal_size is exceeded, not for want of recycling"),
    Rule("wal-segment-size", ("wal-segment-init", "wal-write"),
         "initialise the cluster with a different WAL segment size",
         _wal_segment_change,
         "64 MB segments: fewer creations and switches than 16 MB, and each creation "
         "much shorter than with a segment of hundreds of MB; min_wal_size and "
         "max_wal_size are raised to two segments where they were below (the server does "
         "not start otherwise)",
         "needs a new cluster (initdb, dump/restore or a new replica); archiving tools must "
         "accept the size",
         when=lambda f: f.wal_segment_mb != WAL_SEGMENT_MB,
         not_when="archiving or backup tools assume 16 MB segments; or the time goes to "
                  "zero-filling, which wal-init-zero-off answers without a new cluster"),
    Rule("wal-compression", ("checkpoint-io", "wal-write"),
         "compress full-page images in WAL",
         lambda f: {"server.settings.wal_compression": _wal_compression(f)},
         "less WAL after each checkpoint (full-page images shrink by half or more)",
         "some CPU per full-page image; lz4 needs PostgreSQL 15+ built with lz4 (pglz "
         "otherwise)",
         when=lambda f: f.text_of("wal_compression", "off") == "off"
         and (f.fpi_surge or f.found("wal-write")),
         not_when="the CPU is saturated (compression costs CPU per full-page image), or few "
                  "full-page images are written (under 10% of the WAL)",
         ruled_out=_few_full_page_images,
         sub=("wal-volume", "full-page-images")),
    Rule("full-page-writes-off", ("checkpoint-io", "wal-write"),
         "turn off full_page_writes (only on storage that never tears an 8 kB page)",
         lambda f: {"server.settings.full_page_writes": "off"},
         "no full-page images at all: WAL volume after checkpoints stays flat",
         "UNSAFE unless writes of 8 kB pages are atomic (ZFS with recordsize >= 8K is; ext4 "
         "and xfs on ordinary disks are not): a torn page after a power loss is corruption "
         "that recovery cannot repair",
         when=lambda f: f.fstype == "zfs" and f.fpi_surge,
         not_when="any storage that can tear an 8 kB page (ext4, xfs on ordinary disks): only "
                  "ZFS is safe; a run that lost acknowledged commits",
         gives_up_durability=True),
    Rule("wal-buffers", ("wal-write",),
         "enlarge wal_buffers",
         lambda f: {"server.settings.wal_buffers": "64MB"},
         "bursts of WAL stay in memory instead of forcing writes while backends wait",
         "a little shared memory; needs a restart",
         when=lambda f: f.bytes_of("wal_buffers", 16 * 2**20) < 64 * 2**20,
         not_when="the WAL buffers never filled (wal_buffers_full 0): the flush is slow, not the "
                  "buffer small",
         ruled_out=_wal_buffers_never_full),
    Rule("synchronous-commit-off", ("wal-write",),
         "commit without waiting for the WAL flush (for the transactions that can afford it)",
         lambda f: {"server.settings.synchronous_commit": "off"},
         "commit latency no longer includes a WAL fsync or a standby round trip",
         "a crash loses the last commits (up to 3 x wal_writer_delay, ~0.6 s) that clients "
         "were told succeeded; no corruption. The same holds for ZFS sync=disabled, for "
         "every fsync",
         not_when="transactions whose acknowledged commits must survive a crash (payments, "
                  "orders): keep those synchronous and set it per transaction for the rest; "
                  "a run that lost acknowledged commits",
         gives_up_durability=True),
    *_flush_rules(),
    Rule("full-page-writes-on", ("data-loss",),
         "turn full_page_writes back on",
         lambda f: {"server.settings.full_page_writes": "on"},
         "the first change of a page after a checkpoint logs the whole page, so crash "
         "recovery can repair a page the power loss tore",
         "more WAL after each checkpoint (wal_compression halves it)",
         when=lambda f: f.text_of("full_page_writes", "on") == "off",
         not_when="storage that writes 8 kB pages atomically (ZFS with recordsize >= 8K): "
                  "no page can tear there"),
    Rule("synchronous-commit-on", ("data-loss",),
         "acknowledge commits only after their WAL is flushed (synchronous_commit = on), "
         "at least for the transactions that must survive a crash",
         lambda f: {"server.settings.synchronous_commit": "on"},
         "no acknowledged commit is lost at a crash or power loss on honest storage",
         "commit latency includes a WAL flush again (group commit shares it among "
         "concurrent commits); lower TPS on a slow-flushing device",
         when=lambda f: f.text_of("synchronous_commit", "on") == "off",
         not_when="the transactions can afford losing their last ~0.6 s (logs, caches, "
                  "work that is redone): off is then a fair trade, set per transaction",
         sub=("synchronous-commit-off",)),
    Rule("shared-buffers-down", ("memory-reclaim",),
         "shrink shared_buffers to leave the kernel room",
         lambda f: {"server.settings.shared_buffers": _mb(max(f.memory // 4, 2**27))},
         "no direct reclaim stalls in backends",
         "more reads served from the page cache instead of shared buffers",
         when=lambda f: f.memory > 0 and f.bytes_of("shared_buffers", 2**27) > f.memory * 0.4,
         not_when="the memory pressure comes from other processes or dirty page cache, not from "
                  "shared_buffers' size"),
    Rule("shared-buffers-up", ("vacuum-io",),
         "enlarge shared_buffers towards a quarter of RAM",
         lambda f: {"server.settings.shared_buffers": _mb(max(f.memory // 4, 2**27))},
         "vacuum and the load read pages from shared buffers instead of the disk; hot pages "
         "are written once per checkpoint rather than evicted and written by backends",
         "checkpoints have more to write; memory for the OS page cache shrinks",
         when=lambda f: f.memory > 0 and f.bytes_of("shared_buffers", 2**27) < f.memory * 0.1,
         not_when="the working set does not fit a quarter of RAM either, or the OS page cache "
                  "serves it already"),
    Rule("dirty-background-bytes", ("memory-reclaim", "checkpoint-io"),
         "start kernel writeback earlier (a fixed vm.dirty_background_bytes)",
         lambda f: {"kernel.vm.dirty_background_bytes": 64 * 2**20},
         "the kernel writes dirty pages steadily instead of the fsyncs of a checkpoint "
         "flushing gigabytes at once",
         "machine-wide: other workloads that rewrite files soon write more",
         not_when="dirty memory never reached the threshold (writeback was not the stall), or "
                  "other workloads on the machine rewrite files (the knob is machine-wide)",
         ruled_out=_dirty_never_reached),
    Rule("huge-pages", ("memory-reclaim", "cpu-saturation"),
         "back shared memory with huge pages",
         lambda f: {"server.settings.huge_pages": "on",
                    "kernel.vm.nr_hugepages":
                        f.bytes_of("shared_buffers", 2**27) // (2 * 2**20) + 64},
         "smaller page tables per backend, no reclaim of shared memory pages, fewer TLB "
         "misses",
         "with huge_pages=on the server refuses to start if too few huge pages are "
         "reserved; reserved huge pages are lost to everything else",
         # for reclaim (page tables, shared memory pages), not for dirty-page writeback
         when=lambda f: f.bytes_of("shared_buffers", 2**27) >= 2**30
         and (f.direct_reclaim or f.found("cpu-saturation")),
         not_when="shared_buffers is under 1 GB (few page-table entries to save), or huge pages "
                  "cannot be reserved (a container without the right, a fragmented host)"),
    Rule("pgbouncer", ("too-many-connections", "cpu-saturation"),
         "put a transaction pooler in front of the server",
         _pooler,
         "a few server backends per core serve many clients: less contention on "
         "ProcArray/lock manager, less memory",
         "transaction pooling breaks session state (SET, advisory locks, session prepared "
         "statements before PgBouncer 1.21)",
         when=lambda f: f.found("too-many-connections") or _clients(f) > 4 * f.cores,
         not_when="the application relies on session state (SET, advisory locks, LISTEN, session "
                  "prepared statements before PgBouncer 1.21), or it pools its connections "
                  "already"),
    Rule("persistent-connections", ("too-many-connections",),
         "keep connections open across transactions (a pool in the application or its "
         "driver) instead of connecting for each one",
         lambda f: {"workload.reconnect": False},
         "no backend forked and initialised per transaction: the server's CPU goes to the "
         "queries",
         "idle connections hold a backend each; with many clients, a pooler is needed too",
         not_when="the clients already keep their connections and there are simply too many "
                  "sessions for the cores: see pgbouncer",
         sub=("connection-churn",)),
    Rule("vacuum-cost-limit", ("vacuum-io",),
         "throttle autovacuum's IO",
         lambda f: {"server.settings.autovacuum_vacuum_cost_limit": 100,
                    "server.settings.autovacuum_vacuum_cost_delay": "10ms"},
         "autovacuum reads and dirties pages at a bounded rate instead of competing with "
         "the load",
         "vacuum takes longer: bloat grows and anti-wraparound vacuums start later",
         not_when="bloat or transaction-id wraparound is closer than the load's cost: a slower "
                  "vacuum makes those worse"),
    Rule("lock-timeout", ("lock-contention",),
         "find the transaction holding the lock (the evidence names its pid); bound waits "
         "with lock_timeout and keep DDL/LOCK TABLE out of busy hours",
         lambda f: {"server.settings.lock_timeout": "2s"},
         "a blocked statement fails after 2 s instead of queueing everyone behind it",
         "statements fail with an error the application must retry",
         sub=('table-lock', 'row-locks'),
         not_when="one hot row every transaction updates (a timeout only turns the queue into "
                  "errors; see hot-row), or the application cannot retry a failed statement"),
    Rule("long-holder", ("lock-contention",),
         "end the session that holds the lock (the evidence names its pid, application and "
         "state: pg_terminate_backend(pid)) and find why its transaction stays open: keep "
         "transactions short (no user think time, batches committed in slices); bound the "
         "role's waits and statements with lock_timeout and statement_timeout (ALTER ROLE "
         "... SET)",
         lambda f: {},
         "the queue lasts as long as one short transaction, not as long as the holder "
         "stays open",
         "a terminated session's transaction is rolled back; timeouts make statements fail "
         "with an error the application must retry",
         testable=False,
         not_when="the holder was itself waiting (on a disk, a standby): its wait is the cause",
         sub=("long-holder",),
         ruled_out=_no_long_holder,
         why_untestable="what keeps the transaction open (a person at a psql prompt, a batch, "
                        "an application's code) is outside the scenario's keys"),
    Rule("idle-in-transaction-timeout", ("lock-contention",),
         "end sessions left idle in a transaction: idle_in_transaction_session_timeout for "
         "the role (ALTER ROLE ... SET), or server-wide",
         lambda f: {"server.settings.idle_in_transaction_session_timeout": "1s"},
         "a session that stops inside its transaction is terminated after the timeout and "
         "its row locks released: the queue behind it lasts that long at most",
         "the terminated session's work is rolled back and its connection closed; a client "
         "that pauses within its transactions (think time) must reconnect and retry",
         not_when="the holder was running a statement, not idle in its transaction (a slow "
                  "batch: statement_timeout for its role bounds that instead)",
         sub=("long-holder",),
         ruled_out=_no_idle_holder),
    Rule("hot-row", ("lock-contention",),
         "spread or shorten the updates of the hot rows: split a counter row into N rows "
         "summed on read, update the hot row last and commit at once, or batch its updates",
         lambda f: {},
         "waiters queue for one short update, not behind every transaction ahead of them",
         "reads of a split counter sum N rows; batching delays what others see",
         testable=False,
         not_when="the waits are on many different rows or on a table lock",
         sub=("hot-row",),
         why_untestable="the fix is in the application's data model; pglab's pgbench "
                        "scripts (tpcb-like's branch row) would only measure another workload"),
    Rule("plan-index", ("plan-change",),
         "make again the index the statement's earlier plan used (the evidence names it and "
         "both plans: CREATE INDEX CONCURRENTLY, for a primary key a unique one and then "
         "ALTER TABLE ... ADD PRIMARY KEY USING INDEX; then ANALYZE the table), and keep DDL "
         "that drops or rebuilds indexes out of busy hours",
         _index_again,
         "the statement finds its rows through the index again: its time per call back to "
         "what it was before the plan changed",
         "building an index reads the whole table and slows writes to it while it is made",
         not_when="the earlier plan's index is still there (then the statistics or a setting "
                  "changed the plan: see autovacuum-analyze)",
         sub=("index-gone",),
         why_untestable="the run recorded no statement that makes the index (db.statements "
                        "reads it, on PostgreSQL 16+, when a statement's plan first uses it) "
                        "or no `sql` fault of the scenario that dropped it; a `sql` fault "
                        "that makes it (faults = [{at = \"0s\", action = \"sql\", args = "
                        "{ sql = \"CREATE INDEX ...\" }}]) tries it in a run of your own"),
    Rule("autovacuum-analyze", ("plan-change",),
         "ANALYZE the tables the statement reads after a bulk change, and let autovacuum "
         "analyze them sooner (autovacuum_analyze_scale_factor, per table with ALTER TABLE "
         "... SET too): the planner chose the new plan from statistics that no longer "
         "described the table",
         _analyze_again,
         "statistics follow a bulk change within seconds, so the plan made from them fits "
         "the table again",
         "more frequent ANALYZE runs on big tables (each reads a sample of 300 x the "
         "statistics target rows)",
         not_when="the earlier plan used an index that is gone (see plan-index)",
         sub=("plan-flip",)),
    Rule("quorum-commit", ("sync-replication",),
         "wait for any one of two synchronous standbys (synchronous_standby_names = "
         "'ANY 1 (standby1, standby2)'), so that one standby that stops answering no longer "
         "stops every commit",
         lambda f: {"topology.standbys": max(2, f.standbys + 1), "topology.synchronous": "any:1"},
         "commits go on while one standby is paused, hung or gone; each is still on two nodes",
         "a second standby to run; a commit that only the other standby confirmed is lost "
         "if the primary and that standby fail together",
         when=lambda f: f.standbys < 2 or f.synchronous in ("on", "any:2"),
         not_when="the standby is slow rather than unresponsive (both standbys on the same "
                  "slow storage confirm no sooner), or there is no host for a second standby",
         sub=("standby-unresponsive",)),
    Rule("synchronous-commit-local", ("sync-replication",),
         "let the transactions that can afford it commit after the local flush only "
         "(SET synchronous_commit = local per transaction or role)",
         lambda f: {"server.settings.synchronous_commit": "local"},
         "those commits no longer wait for the standby; the others still do",
         "a failover to the standby loses the local-only commits it had not received yet",
         when=lambda f: f.text_of("synchronous_commit", "on") not in ("local", "off"),
         not_when="transactions that must survive a failover, the reason for synchronous "
                  "replication: keep them on and set it per transaction for the rest"),
    Rule("ha-synchronous-role", ("sync-replication",),
         "let the HA manager take the synchronous role from a standby that stops answering "
         "(Patroni synchronous_mode, pg_auto_failover number_sync_standbys, CloudNativePG "
         "quorum) within a bounded time",
         lambda f: {},
         "commits wait until synchronous_standby_names is rewritten (seconds), not until the "
         "standby is back",
         "meanwhile a commit is on one node only (Patroni's synchronous_mode_strict refuses "
         "that and waits)",
         testable=False,
         not_when="the standby is only slow: taking the role from it makes the guarantee "
                  "flap with the load",
         sub=("standby-unresponsive",),
         why_untestable="pglab runs no HA manager: nothing would rewrite "
                        "synchronous_standby_names during a run"),
    Rule("standby-wal-disk", ("sync-replication",),
         "give the synchronous standby's pg_wal a disk as fast as the primary's",
         lambda f: {},
         "the standby flushes WAL as fast as the primary produces it",
         "cost of faster storage on the standby", testable=False,
         sub=('standby-slow-disk',),
         not_when="the standby stopped answering (paused, hung, its host gone): no disk helps "
                  "then; see quorum-commit",
         why_untestable="the standby's disk in the lab is the scenario's envelope (or this "
                        "machine's disk): lifting the limit says nothing about the standby's "
                        "real storage"),
    Rule("vacuum-cost-delay", ("sync-replication",),
         "make vacuum slower: a cost delay for manual VACUUM (vacuum_cost_delay, 0 by "
         "default: unthrottled) and a longer one for autovacuum, so its WAL comes no "
         "faster than the synchronous standby flushes it",
         lambda f: {"server.settings.vacuum_cost_delay": "10ms",
                    "server.settings.vacuum_cost_limit": 100,
                    "server.settings.autovacuum_vacuum_cost_delay": "10ms",
                    "server.settings.autovacuum_vacuum_cost_limit": 100},
         "vacuum dirties at most ~500 pages/s (~4 MB/s of pages; its WAL about that "
         "when each page is logged whole after a checkpoint), so the standby's flush "
         "queue stays short and commits stop waiting on SyncRep behind vacuum's WAL",
         "vacuum takes longer: dead tuples and bloat stay longer, anti-wraparound vacuums "
         "finish later; a manual VACUUM in a maintenance window runs several times longer",
         not_when="no vacuum ran while commits waited (the WAL came from the load or one "
                  "bulk statement: a slower vacuum changes nothing), or bloat or "
                  "transaction-id wraparound is closer than the commits' cost",
         sub=("standby-slow-disk",),
         ruled_out=_no_vacuum_to_slow),
    Rule("walreceiver-cpu", ("sync-replication",),
         "pin the standby's WAL receiver and startup process to cores of their own",
         lambda f: {},
         "the standby confirms flushes without queueing behind other work",
         "pinned cores are unavailable to queries on the standby", testable=False,
         sub=('standby-slow-cpu',),
         not_when="the standby had idle CPU, or it stopped answering",
         why_untestable="pglab limits whole nodes with cgroups and pins no single process; a "
                        "2-core machine has no core to spare"),
    Rule("synchronous-commit-flush", ("sync-replication",),
         "let commits wait for the standby to flush their WAL (synchronous_commit = on; "
         "remote_write: only to write it), not to replay it: with remote_apply every commit "
         "waits for the standby's one replaying process",
         lambda f: {"server.settings.synchronous_commit": "on"},
         "commits return once the standby has their WAL on disk; its replay catches up "
         "behind them, and its lag no longer holds commits",
         "a read on the standby right after a commit may not see it yet (the read-your-"
         "writes remote_apply gives across nodes); a failover still loses nothing the "
         "standby flushed (with remote_write: what its OS had not written when both fail)",
         when=lambda f: f.text_of("synchronous_commit", "on") == "remote_apply",
         not_when="reads sent to the standby must see each commit at once (what "
                  "remote_apply is for), or commits waited on the standby's flush, not its "
                  "replay",
         sub=("standby-replay",)),
    Rule("standby-replay-cpu", ("sync-replication",),
         "give the synchronous standby a core of its own for replay (a faster or a whole "
         "one): WAL replay runs in one process, the startup process, which must keep up "
         "with what the primary writes",
         _standby_core,
         "the startup process replays as fast as the WAL comes: replay lag and the commits "
         "waiting on it shrink",
         "the cost of the larger standby; beyond one core replay goes no faster (one "
         "process): then fewer full-page images (wal_compression, checkpoints further "
         "apart) are what is left",
         sub=("standby-replay",),
         not_when="the standby's startup process already had a whole core, or it waited on "
                  "reads (its disk) rather than computing",
         why_untestable="the scenario gives the standby no CPU envelope under one core: its "
                        "CPU is this machine's"),
    Rule("zfs-dataset", ("checkpoint-io", "wal-write", "vacuum-io", "wal-segment-init"),
         "ZFS: recordsize=16K (data; 8K for heavy random updates), compression=lz4, "
         "logbias=throughput on the data dataset, primarycache=metadata when "
         "shared_buffers holds the working set (testable on a [storage] ZFS volume)",
         _zfs_dataset,
         "no read-modify-write of 128K records for 8 kB pages; fewer bytes written; no "
         "double caching",
         "primarycache=metadata makes reads that miss shared buffers go to disk; ZFS "
         "sync=disabled would lose the last seconds of commits on a crash (never use it "
         "for data you need)",
         when=lambda f: f.fstype == "zfs" and (bool(_zfs_dataset(f))
                                                or f.data_volume().get("filesystem") != "zfs"),
         not_when="the data directory is not on ZFS",
         why_untestable="on a ZFS dataset pglab did not make, the properties belong to the "
                        "filesystem: put the data on a [storage] ZFS volume to test them"),
    Rule("quorum-commit-nearby", ("network",),
         "commit on a quorum that includes a standby near the primary "
         "(synchronous_standby_names = 'ANY 1 (near, far)'): the nearest standby to "
         "confirm a flush releases the commit",
         lambda f: {"topology.standbys": max(2, f.standbys), "topology.synchronous": "any:1"},
         "commits wait for the nearer standby's round trip; a cut or far link no longer "
         "holds every commit",
         "a standby in the same zone as the primary, so a zone's loss can lose the commits "
         "only that standby confirmed",
         when=lambda f: f.standbys < 2 or f.synchronous in ("on", "any:2"),
         not_when="every standby is as far as this one, or the far standby's copy is what "
                  "the synchronous commit is for (a zone's loss must lose nothing)",
         sub=("link-latency", "partition")),
    Rule("synchronous-commit-remote-write", ("network",),
         "let commits wait for the standby to write the WAL, not to flush it "
         "(synchronous_commit = remote_write)",
         lambda f: {"server.settings.synchronous_commit": "remote_write"},
         "a commit costs the round trip and the standby's write, not its fsync",
         "a commit confirmed only in the standby's page cache is lost if the primary and "
         "the standby's OS fail together",
         when=lambda f: f.text_of("synchronous_commit", "on") == "on" and f.standbys > 0,
         not_when="the round trip, not the standby's flush, is nearly all of the wait: the "
                  "commit still crosses the link",
         sub=("link-latency", "narrow-link")),
    Rule("standby-closer", ("network",),
         "put the synchronous standby closer to the primary (the same zone, or a shorter "
         "path between them)",
         _closer,
         "each commit costs the shorter round trip: one client's commits/s rise as "
         "1 / (rtt + flush)",
         "a standby in the primary's zone does not survive that zone's loss",
         not_when="the standby is far on purpose (another zone for disaster recovery): "
                  "quorum-commit-nearby keeps it and adds a near one",
         sub=("link-latency",),
         why_untestable="the scenario configured no link to the standby (its delay came "
                        "from a fault)"),
    Rule("wal-compression-link", ("network",),
         "compress full-page images in WAL, so less crosses the narrow link",
         lambda f: {"server.settings.wal_compression": _wal_compression(f)},
         "fewer bytes to send for the same changes (full-page images shrink by half or more)",
         "some CPU per full-page image; no gain for WAL without full-page images",
         when=lambda f: f.text_of("wal_compression", "off") == "off",
         not_when="few full-page images are written (under 10% of the WAL)",
         ruled_out=_few_full_page_images,
         sub=("narrow-link",)),
    Rule("wider-standby-link", ("network",),
         "give the standby a link wider than the WAL rate of the heaviest writes (or "
         "spread bulk writes over time)",
         _wider,
         "the WAL crosses as fast as it is written: the primary's Send-Q stays empty",
         "the cost of the wider link",
         not_when="the standby's Recv-Q filled: the standby, not the link, was too slow",
         sub=("narrow-link",),
         why_untestable="the scenario configured no bandwidth for the standby's link"),
    # Not a pooler on the database's host: the application's statements still cross its
    # link one by one (app-far-from-database measures it); a pooler there saves only the
    # cost of new connections (the pgbouncer rule, for connection churn).
    Rule("application-closer", ("network",),
         "run the application next to its database (the same zone or host); a pooler on "
         "the database's host does not shorten the round trip of each statement",
         _application_closer,
         "each statement costs the short round trip: a transaction of n statements saves "
         "n round trips",
         "none for the database",
         not_when="the statements themselves are slow (their time, not ClientRead, "
                  "dominates)",
         sub=("client-far",),
         why_untestable="the scenario configured no link on the clients' route to the "
                        "primary"),
    Rule("fewer-round-trips", ("network",),
         "send a transaction in fewer round trips: one function call or a multi-statement "
         "string, or pipelining, instead of a statement at a time",
         lambda f: {},
         "a transaction costs one or two round trips instead of one per statement",
         "logic moved into the database or batched in the client",
         testable=False,
         not_when="each statement depends on the client's work between them",
         sub=("client-far",),
         why_untestable="the round trips per transaction are the application's code; "
                        "pglab's pgbench scripts send a statement at a time"),
    Rule("pgbench-jobs", ("client-bound",),
         "give pgbench more threads (the load generator, not the server, was the limit)",
         lambda f: {"workload.jobs": max(2, min(_clients(f), f.cores))},
         "the measurement reflects the server again",
         "pgbench threads compete with the server for the same cores on one machine",
         # a driver without workload.jobs (sysbench) has a thread per client already
         when=lambda f: "jobs" in _driver(f).keys,
         not_when="pgbench has a thread per core or per client already",
         ruled_out=_jobs_already),
    Rule("fewer-clients", ("cpu-saturation",),
         "measure with fewer clients (about 2 per core) or more CPUs",
         lambda f: {_concurrency_key(f): 2 * f.cores},
         "same throughput, much lower latency: the excess clients only queue",
         "none for the server; it changes what is measured",
         when=lambda f: _clients(f) > 2 * f.cores,
         not_when="the clients are the real workload's concurrency: add CPUs or a pooler instead"),
)


def _driver(f: Facts) -> DriverTraits:
    return driver_traits(f.manifest.scenario_workload.get("driver"))


def _concurrency_key(f: Facts) -> str:
    return _driver(f).concurrency_key


def _clients(f: Facts) -> int:
    clients = f.manifest.clients
    if isinstance(clients, list):
        clients = f.manifest.variant.get(_concurrency_key(f), max(clients) if clients else 1)
    return int(clients or 1)


def _scenario_argument(f: Facts) -> str:
    """The original file if it is still there (its scripts resolve), a built-in's name,
    else the copy in the run folder; SCENARIO for a run pglab did not make (an observed
    or imported one has no scenario file: the test is on one that reproduces it)."""
    source = f.manifest.scenario_source
    if f.manifest.source_kind in ("observe", "import"):
        return "SCENARIO"  # pglab made no scenario of it: one that reproduces the load
    if source.startswith("builtin:") and source[8:] in builtin_names():
        return source[8:]
    if source and not source.startswith("builtin:") and Path(source).is_file():
        return shlex.quote(source)
    return shlex.quote(str(f.run_dir / files.SCENARIO)) if f.run_dir else "SCENARIO"


def _set_value(value: Any) -> str:
    """As `--set` parses it: TOML, or a bare word (off, 16GB) taken as a string."""
    if isinstance(value, str):
        try:
            tomllib.loads(f"v = {value}")
        except tomllib.TOMLDecodeError:
            return shlex.quote(value)  # a bare word stays a string
        return shlex.quote(f'"{value}"')  # e.g. "true" or "64" meant as strings
    return shlex.quote(toml_value(value))  # a list or table has spaces and quotes


def _test_line(f: Facts, rule: Rule, change: dict[str, Any]) -> str:
    """The run that tests the change: the same scenario, overrides and variant, plus it."""
    if not rule.testable or not change:
        return NOT_TESTABLE
    sets: dict[str, Any] = {}
    for recorded in (f.manifest.overrides, f.manifest.variant):
        sets.update(recorded)
    if f.manifest.variant or "matrix" in sets:
        # one point of a matrix: its values are pinned above, and the matrix (the
        # scenario's or an override's) would otherwise run every point again, the
        # change's own setting among them overridden by the point's
        sets = {"matrix": {}, **{k: v for k, v in sets.items() if k != "matrix"}}
    sets.update(change)
    flags = " ".join(f"--set {k}={_set_value(v)}" for k, v in sets.items())
    return f"pglab run {_scenario_argument(f)} {flags}"


def _answers(rule: Rule, facts: Facts, cause: str) -> bool:
    """Whether the rule fits what `cause` was found to be: any rule without sub-causes;
    one with them when its sub-cause was found, or when none was told apart (then the
    advice for every kind stands, each saying when it does not apply)."""
    found = facts.sub_causes.get(cause, frozenset())
    return not rule.sub or not found or bool(found & set(rule.sub))


@dataclass(frozen=True)
class Advice:
    given: list[dict[str, Any]]  # analysis.json's `recommendations`
    withheld: list[dict[str, Any]]  # rules that fired but the run's data rules out, and why


def _answered(rule: Rule, facts: Facts) -> list[str]:
    """The causes found that the rule answers: its sub-cause fits, and its condition holds
    on that cause alone (wal-compression holds for checkpoint-io only with a surge of
    full-page images: without one it is wal-write's advice, and ranks with wal-write)."""
    return [c for c in rule.because if c in facts.causes and _answers(rule, facts, c)
            and rule.when(replace(facts, causes={c: facts.causes[c]}))]


def advise(facts: Facts) -> Advice:
    """The rules that fire, those addressing the costliest cause first (facts.priority),
    then by the confidence of their cause; the rules the run's own data rules out (their
    `ruled_out`), or that only weak, short stalls would fire, are withheld, with why (the
    verdict's own are given, marked `weak_evidence`: they are all the run has)."""
    fired = []
    withheld = []
    for rule in RULES:
        because = _answered(rule, facts)
        if not because or (rule.gives_up_durability and "data-loss" in facts.causes):
            continue
        why = rule.ruled_out(facts) if rule.ruled_out is not None else None
        if why is not None:
            withheld.append({"rule": rule.id, "because": because, "why": f"not when: {why}"})
            continue
        weak = ("weak evidence: " + "; ".join(f"{c} from {facts.weak[c]} only" for c in because)
                if all(c in facts.weak for c in because) else None)
        if weak and not facts.top & set(because):
            withheld.append({"rule": rule.id, "because": because, "why": weak})
            continue
        change = rule.change(facts)
        test = _test_line(facts, rule, change)
        rank = min((facts.priority.index(c) for c in because if c in facts.priority),
                   default=len(facts.priority))
        fired.append((rank, -max(facts.causes[c] for c in because), {
            "rule": rule.id, "action": rule.action, "change": change, "because": because,
            "effect": rule.effect, "risk": rule.risk, "test": test,
            "not_when": rule.not_when,
            # the run's top cause itself rests on a short, weak stall: given, but said so
            **({"weak_evidence": weak} if weak else {}),
            **({"sub_causes": list(rule.sub)} if rule.sub else {}),
            **({"not_testable_because": rule.why_untestable}
               if rule.why_untestable and test == NOT_TESTABLE else {}),
        }))
    fired.sort(key=lambda item: (item[0], item[1]))
    return Advice([item for _, _, item in fired], withheld)


def recommend(facts: Facts) -> list[dict[str, Any]]:
    """The rules that fire (advise's `given`)."""
    return advise(facts).given
