"""What differs between the runs being compared, and whether they are comparable at all.

Facts come from the manifests, in six categories. A difference in `host` or `version`
makes the comparison not like for like (another machine or another PostgreSQL measures
something else than the setting you changed): that raises the "not comparable" warning.
Differences in `settings`, `envelope`, `storage` and `scenario` are listed as what the comparison is
about. A fact a run did not record (an imported run has no host facts) is "unknown", and
the comparability check says it could not check it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pglab.compare.rundata import RunData
from pglab.network.describe import link_facts
from pglab.storage.describe import describe as describe_volume
from pglab.storage.describe import volumes as storage_volumes

# Settings that differ between any two runs without meaning anything.
_VOLATILE_SETTINGS = frozenset({
    "port", "unix_socket_directories", "data_directory", "config_file", "hba_file",
    "ident_file", "external_pid_file",
})
_HOST_KEYS = ("hostname", "cpu_model", "cpu_cores", "memory_bytes", "kernel")
COMPARABILITY = ("host", "version")
UNKNOWN = "unknown"


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), sub, out)
    elif isinstance(value, list):
        out[prefix] = ", ".join(str(v) for v in value)
    else:
        out[prefix] = UNKNOWN if value is None else str(value)


def facts(run: RunData) -> dict[str, dict[str, str]]:
    """category -> key -> value, the facts a comparison checks."""
    m = run.manifest
    host = m.host
    primary = m.node()
    pgbench = m.pgbench
    scenario = m.scenario
    data_dir = host.get("data_dir") or {}
    out: dict[str, dict[str, str]] = {
        "host": {k: UNKNOWN if host.get(k) is None else str(host.get(k)) for k in _HOST_KEYS},
        "version": {
            "postgresql": str(primary.get("server_version") or UNKNOWN),
            "pgbench": str(pgbench.get("pgbench_version") or UNKNOWN),
        },
        "settings": {},
        "envelope": {},
        "storage": {},
        "scenario": {},
    }
    for node, role, volume in storage_volumes(m):
        out["storage"][f"{node}.{role}"] = describe_volume(volume)
    if out["storage"].get("primary.data"):
        # the data dir is on a volume the run made: a storage fact, not the host's
        out["host"]["data_dir_fs"] = "(storage volume)"
    elif data_dir.get("fstype") or data_dir.get("device"):
        out["host"]["data_dir_fs"] = f"{data_dir.get('fstype')} on {data_dir.get('device')}"
    else:
        out["host"]["data_dir_fs"] = UNKNOWN
    for name, info in (primary.get("settings") or {}).items():
        if name in _VOLATILE_SETTINGS:
            continue
        setting = info.get("setting") if isinstance(info, dict) else info
        unit = info.get("unit") if isinstance(info, dict) else None
        out["settings"][name] = f"{setting}{' ' + unit if unit else ''}"
    _flatten("", m.envelope or scenario.get("envelope") or {}, out["envelope"])
    shape: dict[str, Any] = {
        "workload": scenario.get("workload") or {},
        "initdb": (scenario.get("server") or {}).get("initdb") or {},
        "topology": scenario.get("topology") or {},
        "target": (scenario.get("server") or {}).get("target"),
        "variant": m.variant,
        "source": (m.source or {}).get("kind", "pglab run"),
    }
    _flatten("", shape, out["scenario"])
    for key, value in link_facts(m.network).items():
        out["scenario"][f"network.{key}"] = value
    return out


@dataclass
class EnvDiff:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)  # cat, key, base, other
    warnings: list[str] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return not any(w.startswith("NOT COMPARABLE") for w in self.warnings)


def diff_facts(base: dict[str, dict[str, str]], other: dict[str, dict[str, str]],
               other_label: str) -> EnvDiff:
    result = EnvDiff()
    for category, base_values in base.items():
        other_values = other.get(category, {})
        if bool(base_values) != bool(other_values) and category in ("settings", "envelope"):
            # One side recorded nothing (an imported run): one row, not one per value.
            a, b = (f"{len(v)} recorded" if v else "not recorded"
                    for v in (base_values, other_values))
            result.rows.append((category, "*", a, b))
            continue
        changed: list[str] = []
        unknown: list[str] = []
        for key in sorted(set(base_values) | set(other_values)):
            a = base_values.get(key, "(default)" if category == "settings" else UNKNOWN)
            b = other_values.get(key, "(default)" if category == "settings" else UNKNOWN)
            if a == b:
                continue
            result.rows.append((category, key, a, b))
            (unknown if UNKNOWN in (a, b) else changed).append(key)
        if category in COMPARABILITY and changed:
            result.warnings.append(
                f"NOT COMPARABLE: {other_label} ran with a different {category} "
                f"({', '.join(changed)})")
        if category in COMPARABILITY and unknown:
            result.warnings.append(
                f"cannot check {category} ({', '.join(unknown)}): not recorded for one side")
    return result


def compare_environments(base: list[RunData], contender: list[RunData],
                         contender_label: str) -> EnvDiff:
    """The base's first run against the contender's first run, plus repeats that differ
    from the first run of their own side (repeats should be the same experiment)."""
    base_facts = facts(base[0])
    result = diff_facts(base_facts, facts(contender[0]), contender_label)
    for side, runs in (("base", base), ("contender", contender)):
        first = facts(runs[0])
        differing = 0
        for run in runs[1:]:
            inner = diff_facts(first, facts(run), run.label)
            keys = sorted({f"{cat}.{key}" for cat, key, _, _ in inner.rows
                           if cat != "scenario" or not key.startswith("variant")})
            if keys:
                differing += 1
            if keys and differing <= 3:
                result.warnings.append(
                    f"{side} repeat {run.label} differs from {runs[0].label} in "
                    f"{', '.join(keys[:6])}{' ...' if len(keys) > 6 else ''}")
        if differing > 3:
            result.warnings.append(f"{side}: {differing - 3} more repeats differ from "
                                   f"{runs[0].label}")
    return result
