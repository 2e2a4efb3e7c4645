"""The scenario model: every table and key of a scenario file, typed and validated.

Frozen pydantic models; a validator checks what it can without a server (names,
ranges, units, the disk profile and kernel knob registries). PostgreSQL parameter names
and values are checked later, against the started server's own pg_settings
(lab/settings.py). docs/SCENARIO.md describes each key.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from pglab.driver_traits import DRIVER_TRAITS, DriverTraits
from pglab.errors import BadInput, did_you_mean
from pglab.scenario.disk_profiles import DiskFigures, profile_figures
from pglab.scenario.envelope_limits import EnvelopeLimits, cpu_list
from pglab.scenario.fault_kinds import STANDBY_ACTIONS
from pglab.scenario.kernel_knobs import check_knobs
from pglab.scenario.sysbench_tests import (
    MANAGED_OPTIONS,
    MANAGED_PREFIXES,
    PGLAB_TESTS,
    READ_ONLY_TESTS,
    SYSBENCH_TESTS,
)
from pglab.units import DURATION_HINT, SIZE_HINT, parse_duration, parse_size

BUILTIN_SCRIPTS = ("tpcb-like", "simple-update", "select-only", "select-1", "update-1")
# Builtins that pgbench does not have: pglab writes them as script files (workload/pgbench.py).
# "select-1" is one `SELECT 1;` a transaction: no table, no plan worth the name, so its
# latency is the connection path's round trip (workload.path).
# "update-1" is one UPDATE of a random account in autocommit: one round trip from the
# client and one commit a transaction, so that a commit's cost (a local flush, a standby's
# round trip) is the transaction's.
PGLAB_SCRIPTS = {"select-1": "SELECT 1;\n",
                 "update-1": "\\set aid random(1, 100000 * :scale)\n"
                             "UPDATE pgbench_accounts SET abalance = abalance + 1 "
                             "WHERE aid = :aid;\n"}
# Named mixes expand to weighted builtins; "read-intensive" is the common 80/20 read/write mix.
NAMED_MIXES = {"read-intensive": ("select-only@80", "tpcb-like@20")}
READ_ONLY_SCRIPTS = frozenset({"select-only", "select-1"})


def _duration(value: Any) -> float:
    try:
        return parse_duration(value)
    except (ValueError, TypeError):
        raise ValueError(f"expected {DURATION_HINT}") from None


def _size(value: Any) -> int:
    try:
        return parse_size(value)
    except (ValueError, TypeError):
        raise ValueError(f"expected {SIZE_HINT}") from None


Duration = Annotated[float, BeforeValidator(_duration)]
Size = Annotated[int, BeforeValidator(_size)]
SettingValue = bool | int | float | str


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InitdbOptions(StrictModel):
    wal_segsize_mb: int | None = None
    data_checksums: bool | None = None  # None: the server's own default (on from PG 18)
    locale: str = "C"
    encoding: str = "UTF8"

    @field_validator("wal_segsize_mb")
    @classmethod
    def _power_of_two(cls, value: int | None) -> int | None:
        if value is not None and (value < 1 or value > 1024 or value & (value - 1)):
            raise ValueError("expected a power of 2 from 1 to 1024 (MB)")
        return value


class ServerSpec(StrictModel):
    target: Literal["local", "dsn"] = "local"
    bin: str = ""
    dsn: str = ""
    # An existing server (target = "dsn") is read-only to pglab unless the user says so:
    # no pgbench -i, no write workloads, no ALTER SYSTEM.
    allow_writes: bool = False
    initdb: InitdbOptions = InitdbOptions()
    settings: dict[str, SettingValue] = Field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        """A server pglab starts (and may limit, fault, give standbys), not one by DSN."""
        return self.target == "local"

    @field_validator("settings")
    @classmethod
    def _setting_names(cls, value: dict[str, SettingValue]) -> dict[str, SettingValue]:
        for name in value:
            if not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?", name):
                raise ValueError(f"'{name}' is not a PostgreSQL parameter name")
        return value


class DiskLimits(StrictModel):
    # None: not given (a disk_profile's figure applies); 0: explicitly unlimited.
    write_mbps: float | None = Field(None, ge=0)
    read_mbps: float | None = Field(None, ge=0)
    write_iops: int | None = Field(None, ge=0)
    read_iops: int | None = Field(None, ge=0)


_MIN_MEMORY = 32 * 1024 * 1024


class Envelope(StrictModel):
    """Limits for one node (lab/envelope.py applies them with cgroups)."""

    cpus: float | None = Field(None, gt=0)
    cpuset: str | None = None  # CPUs to pin to, like "0" or "0-1,3"
    memory: Size | None = None  # page cache included, like a container's limit
    disk: DiskLimits = DiskLimits()
    disk_profile: str | None = None  # like "cloud-ssd:300GB", see envelope_limits.py
    # What a write limit must hold: "all" the bytes that reach the disk, or only "own-io",
    # what the node's processes submit themselves (direct I/O, the writeback their
    # fsyncs start): all that cgroup v1 can throttle, as the kernel's flusher writes back
    # on no one's account there. lab/resources.py refuses "all" where it cannot hold.
    disk_scope: Literal["all", "own-io"] = "all"

    @field_validator("cpuset")
    @classmethod
    def _cpuset(cls, value: str | None) -> str | None:
        if value is not None:
            cpu_list(value)
        return value

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: int | None) -> int | None:
        if value is not None and value < _MIN_MEMORY:
            raise ValueError("expected a size of at least 32MB (PostgreSQL needs that much)")
        return value

    @field_validator("disk_profile")
    @classmethod
    def _profile(cls, value: str | None) -> str | None:
        if value is not None:
            profile_figures(value)
        return value

    def is_unlimited(self) -> bool:
        return resolve_envelope(self).is_unlimited()


def resolve_envelope(envelope: Envelope) -> EnvelopeLimits:
    """Merge the profile's disk figures with explicit `disk` values (explicit wins)."""
    base = profile_figures(envelope.disk_profile) if envelope.disk_profile else DiskFigures()
    disk = envelope.disk
    return EnvelopeLimits(
        cpus=envelope.cpus, cpuset=envelope.cpuset, memory=envelope.memory,
        write_mbps=base.write_mbps if disk.write_mbps is None else disk.write_mbps,
        read_mbps=base.read_mbps if disk.read_mbps is None else disk.read_mbps,
        write_iops=base.write_iops if disk.write_iops is None else disk.write_iops,
        read_iops=base.read_iops if disk.read_iops is None else disk.read_iops,
        disk_profile=envelope.disk_profile,
        disk_scope=envelope.disk_scope,
    )


class DeviceSpec(StrictModel):
    """The block device under a volume (storage/devices.py); limits hold for every byte."""

    # auto: emulated when a limit, latency, a cache mode or a device fault asks for it,
    # else a plain loop device; emulated: always (the same stack across a matrix).
    kind: Literal["auto", "loop", "emulated"] = "auto"
    profile: str | None = None  # a disk profile like "cloud-ssd:300GB" (`pglab storage`)
    write_mbps: float | None = Field(None, ge=0)
    read_mbps: float | None = Field(None, ge=0)
    iops: int | None = Field(None, ge=0)  # both directions, unless one is given
    write_iops: int | None = Field(None, ge=0)
    read_iops: int | None = Field(None, ge=0)
    latency: Duration | None = Field(None, ge=0)  # added to every read, write and flush
    # honest: durable when acknowledged; volatile: a cache that honours flushes;
    # volatile-ignores-flush: a cache that acknowledges flushes and keeps nothing.
    cache: Literal["honest", "volatile", "volatile-ignores-flush"] = "honest"
    # a volatile cache's size and how long a write waits in it before it is written
    # back (storage/device_server.py has the defaults: a modest drive's)
    cache_mb: int | None = Field(None, ge=1)
    destage: Duration | None = Field(None, gt=0)

    def figures(self) -> DiskFigures:
        """The profile's figures with the explicit keys over them; ValueError naming a bad
        profile."""
        base = profile_figures(self.profile) if self.profile else DiskFigures()
        iops = self.iops
        return DiskFigures(
            write_mbps=base.write_mbps if self.write_mbps is None else self.write_mbps,
            read_mbps=base.read_mbps if self.read_mbps is None else self.read_mbps,
            write_iops=(self.write_iops if self.write_iops is not None
                        else iops if iops is not None else base.write_iops),
            read_iops=(self.read_iops if self.read_iops is not None
                       else iops if iops is not None else base.read_iops))

    def is_plain(self) -> bool:
        """No limit, latency or cache mode: what a plain loop device does."""
        try:
            figures = self.figures()
        except ValueError:
            return False  # a profile asks for limits (the unknown name is refused elsewhere)
        return (figures == DiskFigures() and not self.latency and self.cache == "honest")


class VolumeSpec(StrictModel):
    """One volume: its filesystem, size, options and device, or the user's own storage."""

    filesystem: str = "host"  # host | ext4 | xfs | btrfs | zfs (storage/filesystems.py)
    size: Size = 4 * 1024**3
    options: dict[str, bool | int | str] = Field(default_factory=dict)
    device: DeviceSpec = DeviceSpec()
    pool: str | None = None  # an existing ZFS pool: the volume is a dataset of it
    path: str | None = None  # an existing mount, used as it is
    block_device: str | None = None  # a device to format: needs destroy_data = true
    destroy_data: bool = False


class StorageSpec(VolumeSpec):
    """A node's storage: the data volume, and pg_wal on a volume of its own if given."""

    wal: VolumeSpec | None = None

    def volumes(self) -> dict[str, VolumeSpec]:
        """The node's volumes that are not the host directory, by role."""
        found: dict[str, VolumeSpec] = {}
        if self.is_volume():
            found["data"] = self
        if self.wal is not None:
            found["wal"] = self.wal
        return found

    def is_volume(self) -> bool:
        return self.filesystem != "host" or bool(self.path or self.pool or self.block_device)


def _flat_knobs(value: Any, prefix: str = "") -> Any:
    # `vm.dirty_ratio = 5` unquoted in TOML, or `--set kernel.vm.dirty_ratio=5`, nest.
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict):
            out.update(_flat_knobs(item, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = item
    return out


def _kernel_knobs(value: Any) -> Any:
    # Checked before pydantic coerces anything (true is not a swappiness of 1).
    flat = _flat_knobs(value)
    return check_knobs(flat) if isinstance(flat, dict) else flat


class Topology(StrictModel):
    standbys: int = Field(0, ge=0, le=8)
    synchronous: str = "off"
    pooler: Literal["none", "pgbouncer"] = "none"
    # PgBouncer's default_pool_size: server connections per database/user pair.
    pool_size: int = Field(20, ge=1, le=1000)
    # "transaction": a server connection per transaction; "session": one per client for
    # its whole session (prepared statements work through it).
    pool_mode: Literal["transaction", "session"] = "transaction"
    # With network.hosts = "separate": the pooler on a host of its own ("pooler", between
    # the clients and the primary) or on the primary's host. Shared hosts: one host.
    pooler_host: Literal["own", "primary"] = "own"

    @field_validator("synchronous")
    @classmethod
    def _sync_mode(cls, value: str) -> str:
        if value in ("off", "on") or re.fullmatch(r"any:[1-9]\d*", value):
            return value
        raise ValueError("expected 'off', 'on' or 'any:K' (K standbys must confirm)")


def _counts(what: str) -> Any:
    def check(value: Any) -> list[int]:
        items = value if isinstance(value, list) else [value]
        if not items:
            raise ValueError(f"expected a whole number of {what} ≥ 1, or a non-empty list "
                             "of them")
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or item < 1:
                raise ValueError(f"expected a whole number of {what} ≥ 1, or a list of them")
        return list(items)

    return check


_clients = _counts("clients")

_SYSBENCH_OPTION = re.compile(r"[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*")


class Workload(StrictModel):
    driver: Literal["pgbench", "sysbench"] = "pgbench"
    scale: int = Field(10, ge=1)
    mix: list[str] = Field(default_factory=lambda: ["tpcb-like"])
    scripts: list[str] = Field(default_factory=list)
    clients: Annotated[list[int], BeforeValidator(_clients)] = Field(default_factory=lambda: [8])
    jobs: int = Field(2, ge=1)
    duration: Duration = 60.0
    warmup: Duration = 10.0
    rate: float = Field(0, ge=0)
    latency_limit: Duration = 0.0
    protocol: Literal["simple", "extended", "prepared"] = "simple"
    per_statement: bool = True
    max_tries: int = Field(1, ge=1)
    # pgbench -C: a new connection for every transaction, like an application without a
    # connection pool (each one forks a backend on the server).
    reconnect: bool = False
    # Fraction of transactions pgbench logs; lower it only for very high rates. TPS per
    # second stays exact for all jobs together (pgbench's own progress report).
    log_sampling: float = Field(1.0, gt=0, le=1)
    on: Literal["primary", "standbys"] = "primary"
    # How the clients reach the primary: its Unix socket, loopback TCP or the lab's
    # PgBouncer (lab/lab.py: Lab.client_env). Not given, it is "pooler" when the topology
    # has one (the clients have always gone through it), else "unix".
    path: Literal["unix", "tcp", "pooler"] = "unix"
    # Limits for pgbench itself (a load generator with the CPU of a small client VM).
    envelope: Envelope = Envelope()
    # --- driver = "sysbench" (workload/sysbench.py) ---
    test: str = "oltp_read_write"  # a bundled test, or a Lua script relative to the file
    tables: int = Field(1, ge=1)
    table_size: int = Field(10000, ge=1)
    threads: Annotated[list[int], BeforeValidator(_counts("threads"))] = Field(
        default_factory=lambda: [8])
    percentile: int = Field(95, ge=0, le=100)  # sysbench --percentile; 0 turns it off
    # Any other sysbench option, passed as --NAME=VALUE (true/false as on/off).
    options: dict[str, bool | int | float | str] = Field(default_factory=dict)

    @field_validator("duration")
    @classmethod
    def _whole_seconds(cls, value: float) -> float:
        if value < 1 or value != int(value):
            raise ValueError("expected a whole number of seconds ≥ 1 (pgbench -T)")
        return value

    @field_validator("warmup")
    @classmethod
    def _whole_warmup(cls, value: float) -> float:
        if value != int(value):
            raise ValueError("expected a whole number of seconds ≥ 0")
        return value

    @field_validator("mix")
    @classmethod
    def _mix(cls, value: list[str]) -> list[str]:
        for entry in value:
            name, _, weight = entry.partition("@")
            if name not in BUILTIN_SCRIPTS and name not in NAMED_MIXES:
                known = [*BUILTIN_SCRIPTS, *NAMED_MIXES]
                raise ValueError(f"unknown builtin '{name}'{did_you_mean(name, known)}")
            if name in NAMED_MIXES and weight:
                raise ValueError(f"'{name}' is a named mix and takes no @weight")
            if weight and not re.fullmatch(r"[1-9]\d*", weight):
                raise ValueError(f"'{entry}': expected NAME or NAME@WEIGHT, a whole weight ≥ 1")
        return value

    @field_validator("scripts")
    @classmethod
    def _scripts(cls, value: list[str]) -> list[str]:
        for entry in value:
            path, sep, weight = entry.rpartition("@") if "@" in entry else (entry, "", "")
            if not path or (sep and not re.fullmatch(r"[1-9]\d*", weight)):
                raise ValueError(f"'{entry}': expected PATH or PATH@WEIGHT, a whole weight ≥ 1")
        return value

    @field_validator("test")
    @classmethod
    def _test(cls, value: str) -> str:
        if value in SYSBENCH_TESTS or value in PGLAB_TESTS or value.endswith(".lua"):
            return value
        known = [*SYSBENCH_TESTS, *PGLAB_TESTS]
        raise ValueError(f"unknown sysbench test '{value}'{did_you_mean(value, known)}"
                         f"; expected one of {', '.join(known)} or a Lua script "
                         "path ending in .lua")

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not _SYSBENCH_OPTION.fullmatch(name):
                raise ValueError(f"'{name}' is not a sysbench option name (lowercase words "
                                 "joined by '_' or '-', without the leading '--')")
            if name in MANAGED_OPTIONS:
                raise ValueError(f"'{name}' is set by pglab from {MANAGED_OPTIONS[name]}")
            if name.startswith(MANAGED_PREFIXES):
                raise ValueError(f"'{name}': pglab connects sysbench to the lab's server "
                                 "itself")
        return value

    @property
    def traits(self) -> DriverTraits:
        return DRIVER_TRAITS[self.driver]

    @model_validator(mode="after")
    def _driver_keys(self) -> Workload:
        """Keys only another driver reads would be silently ignored: refused."""
        given = self.model_fields_set
        for other in DRIVER_TRAITS.values():
            wrong = [key for key in other.keys if key in given and key not in self.traits.keys]
            if wrong:
                names = ", ".join(f"'{key}'" for key in wrong)
                raise ValueError(f"{names} {'is a' if len(wrong) == 1 else 'are'} "
                                 f"{other.name} key{'s' if len(wrong) > 1 else ''}, and "
                                 f"driver = '{self.driver}'")
        if self.traits.whole_rate and self.rate != int(self.rate):
            raise ValueError(f"rate = {self.rate:g}: sysbench --rate takes a whole number of "
                             "transactions per second")
        return self

    @property
    def concurrency(self) -> list[int]:
        """The client counts of the sweep: pgbench's clients or sysbench's threads."""
        counts: list[int] = getattr(self, self.traits.concurrency)
        return counts

    @property
    def concurrency_key(self) -> str:
        """The dotted key a sweep varies (`workload.clients` or `workload.threads`)."""
        return self.traits.concurrency_key

    def expanded_mix(self) -> list[tuple[str, int]]:
        """Builtin scripts with weights, named mixes expanded."""
        out: list[tuple[str, int]] = []
        for entry in self.mix:
            name, _, weight = entry.partition("@")
            for part in NAMED_MIXES.get(name, (entry,)):
                pname, _, pweight = part.partition("@")
                out.append((pname, int(pweight or weight or 1)))
        return out

    def script_files(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for entry in self.scripts:
            if "@" in entry:
                path, _, weight = entry.rpartition("@")
                out.append((path, int(weight)))
            else:
                out.append((entry, 1))
        return out

    def is_read_only(self) -> bool:
        """True when every script is a builtin known not to write."""
        if self.traits.runs_test:
            return self.test in READ_ONLY_TESTS
        return not self.scripts and all(n in READ_ONLY_SCRIPTS for n, _ in self.expanded_mix())


class Telemetry(StrictModel):
    enabled: bool = True
    interval: Duration = 1.0
    wait_sampling_hz: int = Field(10, ge=1, le=100)
    exclude: list[str] = Field(default_factory=list)  # probe names, see `pglab probes`
    include: list[str] = Field(default_factory=list)  # opt-in probes to turn on (os.kernel)
    # os.profile's samples per second of each CPU (so of each process on it): an odd
    # rate, off the beat of anything that runs at 10, 50 or 100 Hz
    profile_hz: int = Field(49, ge=1, le=999)

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: float) -> float:
        if value < 0.1 or value > 60:
            raise ValueError("expected an interval from 100ms to 60s")
        return value

    @field_validator("exclude")
    @classmethod
    def _known_probes(cls, value: list[str]) -> list[str]:
        from pglab.probes import probe_names  # the registry; imported late to stay light

        names = probe_names()
        for name in value:
            if name not in names:
                raise ValueError(f"unknown probe '{name}'{did_you_mean(name, names)}; "
                                 "see `pglab probes`")
        return value

    @field_validator("include")
    @classmethod
    def _opt_in_probes(cls, value: list[str]) -> list[str]:
        from pglab.probes import opt_in_names

        names = opt_in_names()
        for name in value:
            if name not in names:
                raise ValueError(f"'{name}' is not an opt-in probe{did_you_mean(name, names)}; "
                                 f"include turns on {', '.join(names)} (the others are on "
                                 "unless excluded)")
        return value


class Link(StrictModel):
    """One link between two hosts (network.hosts = "separate"): its figures each way."""

    # two host names: primary, standbyN, "pooler" (the pooler's own host), "client" (the
    # load generator)
    between: list[str]
    rtt: Duration = 0.0  # round-trip time added, half each way (network/wire.py)
    jitter: Duration = 0.0
    bandwidth_mbps: float = Field(0.0, ge=0)  # each direction; 0: unlimited

    @field_validator("between")
    @classmethod
    def _two_nodes(cls, value: list[str]) -> list[str]:
        if len(value) != 2:
            raise ValueError("expected two node names, like ['primary', 'standby1']")
        if value[0] == value[1]:
            raise ValueError(f"a link joins two different nodes, not '{value[0]}' with "
                             "itself")
        return value


class Network(StrictModel):
    # "shared": every node on this host's loopback; "separate": each node (and the load
    # generator, "client") in a network namespace of its own, joined by links (network/).
    hosts: Literal["shared", "separate"] = "shared"
    links: list[Link] = Field(default_factory=list)




class Fault(StrictModel):
    at: Duration  # from the start of the measured window (after warmup)
    action: str  # a name from lab/faults.py's registry; checked there with its args
    node: str = "primary"
    duration: Duration | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    repeat: int = Field(1, ge=1)  # this many times, `every` apart
    every: Duration | None = Field(None, gt=0)

    def occurrences(self) -> list[Fault]:
        """The fault once per repeat, each with its own `at`."""
        if self.repeat == 1:
            return [self]
        step = self.every or 0.0
        return [self.model_copy(update={"at": self.at + i * step, "repeat": 1,
                                        "every": None}) for i in range(self.repeat)]


class NodeSpec(StrictModel):
    """What differs on one standby (or on all of them, as [nodes.standbys])."""

    settings: dict[str, SettingValue] = Field(default_factory=dict)
    envelope: Envelope = Envelope()
    storage: StorageSpec | None = None  # None: [nodes.standbys.storage], else the host


class Scenario(StrictModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=64)
    description: str = ""  # the story: why this scenario exists
    expect: str = ""  # the signal a run should show (listed by `pglab scenarios`)
    server: ServerSpec = ServerSpec()
    envelope: Envelope = Envelope()
    storage: StorageSpec = StorageSpec()  # the primary's (storage/)
    # Machine-wide knobs set for the run and restored after (kernel_knobs.py: KNOBS).
    kernel: Annotated[dict[str, int | str], BeforeValidator(_kernel_knobs)] = Field(
        default_factory=dict)
    topology: Topology = Topology()
    network: Network = Network()
    workload: Workload = Workload()
    telemetry: Telemetry = Telemetry()
    faults: list[Fault] = Field(default_factory=list)
    nodes: dict[str, NodeSpec] = Field(default_factory=dict)
    matrix: dict[str, list[Any]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _default_path(cls, data: Any) -> Any:
        """workload.path defaults to the pooler when there is one (scenarios written
        before the key existed sent their clients through it), else to TCP when each node
        is a host of its own."""
        if not isinstance(data, dict):
            return data
        topology, workload = data.get("topology"), data.get("workload")
        if workload is not None and not (isinstance(workload, dict) and "path" not in workload):
            return data
        if isinstance(topology, dict) and topology.get("pooler") == "pgbouncer":
            return {**data, "workload": {**(workload or {}), "path": "pooler"}}
        network = data.get("network")
        if isinstance(network, dict) and network.get("hosts") == "separate":
            # The clients' host reaches the primary over its link, as an application does.
            return {**data, "workload": {**(workload or {}), "path": "tcp"}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _only_standby(cls, data: Any) -> Any:
        """A standby's fault with no node, in a topology of one standby, acts on it."""
        if not isinstance(data, dict) or not isinstance(data.get("faults"), list):
            return data
        topology = data.get("topology")
        if not isinstance(topology, dict) or topology.get("standbys") != 1:
            return data
        faults = [{**f, "node": "standby1"} if isinstance(f, dict) and "node" not in f
                  and f.get("action") in STANDBY_ACTIONS else f for f in data["faults"]]
        return {**data, "faults": faults}

    def require_local(self, where: str, what: str, why: str = "") -> None:
        """BadInput unless pglab starts the server: `what` needs that, because `why`."""
        if not self.server.is_local:
            raise BadInput(f"{where}: {what} needs server.target = 'local'"
                           + (f": {why}" if why else ""))

    def node_names(self) -> list[str]:
        return ["primary", *(f"standby{i}" for i in range(1, self.topology.standbys + 1))]

    def pooler_host(self) -> str | None:
        """The host the pooler runs on with network.hosts = "separate": "pooler" (a host
        of its own), "primary", or None without a pooler."""
        topo = self.topology
        if topo.pooler == "none":
            return None
        return "pooler" if topo.pooler_host == "own" else "primary"

    def host_names(self) -> list[str]:
        """The hosts a network link may join: the servers, the pooler's own host and the
        load generator."""
        own_pooler = ["pooler"] if self.pooler_host() == "pooler" else []
        return [*self.node_names(), *own_pooler, "client"]

    def node_spec(self, name: str) -> NodeSpec:
        """A standby's own settings and envelope: [nodes.standbys], then [nodes.standbyN]."""
        shared = self.nodes.get("standbys", NodeSpec())
        own = self.nodes.get(name, NodeSpec())
        envelope = own.envelope if not own.envelope.is_unlimited() else shared.envelope
        return NodeSpec(settings={**shared.settings, **own.settings}, envelope=envelope,
                        storage=own.storage or shared.storage)

    def node_storage(self, name: str) -> StorageSpec:
        """The storage of a node: [storage] for the primary, else its [nodes.*.storage]."""
        if name == "primary":
            return self.storage
        return self.node_spec(name).storage or StorageSpec()

