"""The scenario file: model, validation with one-line errors, --set overrides, variants.

A scenario is validated completely before anything starts. Every error names the file,
the dotted key, the value and what was expected, on one line; unknown keys get a
did-you-mean. PostgreSQL parameter names and values are checked later, against the
started server's own pg_settings (see lab/settings.py).
"""

from __future__ import annotations

import copy
import difflib
import itertools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from pglab.errors import BadInput
from pglab.units import DURATION_HINT, SIZE_HINT, parse_duration, parse_size

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

BUILTIN_SCRIPTS = ("tpcb-like", "simple-update", "select-only")
# Named mixes expand to weighted builtins; "read-intensive" is the common 80/20 read/write mix.
NAMED_MIXES = {"read-intensive": ("select-only@80", "tpcb-like@20")}
READ_ONLY_SCRIPTS = frozenset({"select-only"})


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
    disk_profile: str | None = None  # like "cloud-ssd:300GB", see lab/envelope.py

    @field_validator("cpuset")
    @classmethod
    def _cpuset(cls, value: str | None) -> str | None:
        from pglab.lab.envelope import cpu_list

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
        from pglab.storage.profiles import profile_figures

        if value is not None:
            profile_figures(value)
        return value

    def is_unlimited(self) -> bool:
        from pglab.lab.envelope import resolve_envelope

        return resolve_envelope(self).is_unlimited()


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
    latency: Duration | None = Field(None, ge=0)  # added to every read and write
    # honest: durable when acknowledged; volatile: a cache that honours flushes;
    # volatile-ignores-flush: a cache that acknowledges flushes and keeps nothing.
    cache: Literal["honest", "volatile", "volatile-ignores-flush"] = "honest"


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
    from pglab.lab.kernel import check_knobs

    # Checked before pydantic coerces anything (true is not a swappiness of 1).
    flat = _flat_knobs(value)
    return check_knobs(flat) if isinstance(flat, dict) else flat


class Topology(StrictModel):
    standbys: int = Field(0, ge=0, le=8)
    synchronous: str = "off"
    pooler: Literal["none", "pgbouncer"] = "none"
    # PgBouncer's default_pool_size: server connections per database/user pair.
    pool_size: int = Field(20, ge=1, le=1000)

    @field_validator("synchronous")
    @classmethod
    def _sync_mode(cls, value: str) -> str:
        if value in ("off", "on") or re.fullmatch(r"any:[1-9]\d*", value):
            return value
        raise ValueError("expected 'off', 'on' or 'any:K' (K standbys must confirm)")


def _clients(value: Any) -> list[int]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ValueError("expected a whole number of clients ≥ 1, or a non-empty list of them")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise ValueError("expected a whole number of clients ≥ 1, or a list of them")
    return list(items)


class Workload(StrictModel):
    driver: Literal["pgbench"] = "pgbench"
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
    # Limits for pgbench itself (a load generator with the CPU of a small client VM).
    envelope: Envelope = Envelope()

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
                raise ValueError(f"unknown builtin '{name}'{_did_you_mean(name, known)}")
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
        return not self.scripts and all(n in READ_ONLY_SCRIPTS for n, _ in self.expanded_mix())


class Telemetry(StrictModel):
    enabled: bool = True
    interval: Duration = 1.0
    wait_sampling_hz: int = Field(10, ge=1, le=100)
    exclude: list[str] = Field(default_factory=list)  # probe names, see `pglab probes`

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
                raise ValueError(f"unknown probe '{name}'{_did_you_mean(name, names)}; "
                                 "see `pglab probes`")
        return value


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
    # Machine-wide knobs set for the run and restored after (lab/kernel.py: KNOBS).
    kernel: Annotated[dict[str, int | str], BeforeValidator(_kernel_knobs)] = Field(
        default_factory=dict)
    topology: Topology = Topology()
    workload: Workload = Workload()
    telemetry: Telemetry = Telemetry()
    faults: list[Fault] = Field(default_factory=list)
    nodes: dict[str, NodeSpec] = Field(default_factory=dict)
    matrix: dict[str, list[Any]] = Field(default_factory=dict)

    def node_names(self) -> list[str]:
        return ["primary", *(f"standby{i}" for i in range(1, self.topology.standbys + 1))]

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


# --- loading, errors ---------------------------------------------------------------------

_EXPECTED = {
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
}


def _did_you_mean(word: str, choices: list[str] | tuple[str, ...], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""


def _fields_at(path: tuple[str, ...]) -> list[str] | None:
    """Field names of the model at a dotted path, or None where any key is allowed."""
    model: type[BaseModel] = Scenario
    parts = list(path)
    while parts:
        info = model.model_fields.get(parts.pop(0))
        if info is None:
            return None
        annotation = info.annotation
        value_type = get_args(annotation)[-1] if get_origin(annotation) is dict else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        elif isinstance(value_type, type) and issubclass(value_type, BaseModel) and parts:
            parts.pop(0)  # a table of models such as [nodes.standby1]: any key, known fields
            model = value_type
        else:
            return None
    return list(model.model_fields)


def _format_value(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value).lower() if isinstance(
        value, bool
    ) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(err: Any, where: str) -> str:
    loc = tuple(str(p) for p in err["loc"])
    key = ".".join(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        siblings = _fields_at(loc[:-1]) or []
        prefix = "".join(f"{p}." for p in loc[:-1])
        return f"{where}: unknown key '{key}'{_did_you_mean(loc[-1], siblings, prefix)}"
    if kind == "missing":
        return f"{where}: missing key '{key}'"
    shown = err.get("input")
    value = _format_value(shown)
    ctx = err.get("ctx") or {}
    if kind == "value_error":
        expected = str(ctx.get("error", err["msg"]))
    elif kind == "literal_error":
        expected = f"expected one of {ctx.get('expected', '')}"
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        sign = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤",
                "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "")
        expected = f"expected a number {sign} {bound}"
    elif kind == "string_pattern_mismatch":
        expected = "expected lowercase letters, digits and '-' (like 'checkpoint-storm')"
    else:
        expected = _EXPECTED.get(kind, str(err["msg"]).lower())
    if isinstance(shown, dict):  # the message names the offending entry itself
        return f"{where}: {key}: {expected}"
    return f"{where}: {key} = {value} is not valid: {expected}"


def validate(raw: dict[str, Any], where: str) -> Scenario:
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        message = _describe(errors[0], where)
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        raise BadInput(message) from None


def parse_override(text: str) -> tuple[str, Any]:
    """'workload.clients=32' -> ('workload.clients', 32); values are TOML, else strings."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise BadInput(f"--set {text}: expected KEY=VALUE, like workload.clients=32")
    value = value.strip()
    try:
        parsed: Any = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value  # a bare word such as off, 512MB or on
    check_key(key, f"--set {text}")
    return key, parsed


def check_key(key: str, where: str) -> None:
    """Reject a dotted key that names no scenario field (server.settings.* is open)."""
    parts = tuple(key.split("."))
    for depth in range(1, len(parts) + 1):
        fields = _fields_at(parts[: depth - 1])
        if fields is None:
            return  # inside an open table such as server.settings or args
        if parts[depth - 1] not in fields:
            bad = ".".join(parts[:depth])
            prefix = "".join(f"{p}." for p in parts[: depth - 1])
            hint = _did_you_mean(parts[depth - 1], fields, prefix)
            raise BadInput(f"{where}: unknown key '{bad}'{hint}")


def _drop_kernel_pair(raw: dict[str, Any], key: str) -> None:
    """`--set kernel.vm.dirty_background_bytes=...` replaces the file's
    vm.dirty_background_ratio: the kernel keeps one of a ratio/bytes pair (writing one
    zeroes the other), so the override of either is an override of the pair."""
    from pglab.lab.kernel import KNOBS

    if not key.startswith("kernel."):
        return
    pair = next((k.pair for k in KNOBS if k.name == key[len("kernel."):] and k.pair), None)
    kernel = raw.get("kernel")
    if pair is None or not isinstance(kernel, dict):
        return
    kernel.pop(pair, None)  # written "vm.dirty_ratio" = 5 (quoted key)
    head, _, tail = pair.partition(".")
    nested = kernel.get(head)
    if isinstance(nested, dict):  # written vm.dirty_ratio = 5 (a dotted TOML key)
        nested.pop(tail, None)


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


@dataclass(frozen=True)
class Variant:
    """One run's worth of scenario: the base plus the overrides that make this point."""

    scenario: Scenario
    overrides: dict[str, Any]  # the matrix/sweep point, e.g. {"workload.clients": 8}

    @property
    def clients(self) -> int:
        return self.scenario.workload.clients[0]

    def label(self) -> str:
        return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.overrides.items())


@dataclass(frozen=True)
class LoadedScenario:
    path: Path | None  # None for a built-in scenario
    source_text: str
    raw: dict[str, Any]  # after --set overrides
    overrides: list[tuple[str, Any]]
    scenario: Scenario
    variants: list[Variant] = field(default_factory=list)

    @property
    def where(self) -> str:
        return str(self.path) if self.path else f"built-in scenario '{self.scenario.name}'"

    @property
    def base_dir(self) -> Path:
        return self.path.parent if self.path else Path.cwd()


def load_text(
    text: str, where: str, overrides: list[str] | None = None, path: Path | None = None
) -> LoadedScenario:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{where}: invalid TOML: {exc}") from None
    parsed = [parse_override(o) for o in overrides or []]
    merged = copy.deepcopy(raw)
    for key, value in parsed:
        _drop_kernel_pair(merged, key)
        set_dotted(merged, key, value)
    scenario = validate(merged, where)
    loaded = LoadedScenario(path, text, merged, parsed, scenario)
    variants = expand_variants(loaded)
    _check_files(loaded)
    return LoadedScenario(path, text, merged, parsed, scenario, variants)


def load(path: Path, overrides: list[str] | None = None) -> LoadedScenario:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such scenario file") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a directory, expected a scenario .toml file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot read: {exc}") from None
    return load_text(text, str(path), overrides, path)


def expand_variants(loaded: LoadedScenario) -> list[Variant]:
    """One variant per matrix point times client count, in a stable order."""
    axes: list[tuple[str, list[Any]]] = []
    for key, values in loaded.scenario.matrix.items():
        check_key(key, f"{loaded.where}: matrix")
        if not values:
            raise BadInput(f"{loaded.where}: matrix.{key} is empty: expected a list of values")
        if key == "workload.clients":
            raise BadInput(f"{loaded.where}: matrix.workload.clients: use workload.clients = [..]")
        axes.append((key, values))
    clients = loaded.scenario.workload.clients
    if len(clients) > 1 or axes:
        axes.append(("workload.clients", clients))
    variants: list[Variant] = []
    for point in itertools.product(*(values for _, values in axes)):
        overrides = {key: value for (key, _), value in zip(axes, point, strict=True)}
        raw = copy.deepcopy(loaded.raw)
        raw.pop("matrix", None)
        for key, value in overrides.items():
            set_dotted(raw, key, value)
        where = f"{loaded.where} (variant {overrides})" if overrides else loaded.where
        variants.append(Variant(validate(raw, where), overrides))
    return variants


def _check_files(loaded: LoadedScenario) -> None:
    for script, _ in loaded.scenario.workload.script_files():
        path = loaded.base_dir / script
        if not path.is_file():
            raise BadInput(
                f"{loaded.where}: workload.scripts: '{script}' not found (looked for {path})"
            )
