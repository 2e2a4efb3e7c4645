"""What a scenario needs of the machine beyond pglab and PostgreSQL: root, and the system
parts of `system_parts.PARTS` (a filesystem's tools, the emulated device's, PgBouncer,
sysbench).

`scenario_needs` derives them from the validated model alone, so `pglab scenarios` can
say them for every built-in, and `run`, `validate` and every Lab check them before
anything starts (`unmet_problem`: one line naming all that is missing and the command
that installs it). The lab decides the same things with the same functions (which
volume gets the emulated device, which nodes a device fault acts on), so the two cannot
disagree.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pglab.scenario.fault_kinds import kind_of
from pglab.scenario.model import Scenario, VolumeSpec
from pglab.system_parts import EMULATED_DEVICE_PARTS, FILESYSTEM_PARTS, PARTS, is_root

ROOT = "root"



@dataclass(frozen=True)
class Need:
    name: str  # ROOT or a name of system_parts.PARTS
    why: tuple[str, ...]  # the scenario's keys that ask for it

    def met(self) -> bool:
        return is_root() if self.name == ROOT else PARTS[self.name].present()


def device_fault_nodes(scenario: Scenario) -> dict[str, str]:
    """Nodes with a fault that acts on their volumes' devices: node -> the action (a
    throttle-disk fault does when the node has volumes: their device is throttled)."""
    found: dict[str, str] = {}
    for fault in scenario.faults:
        kind = kind_of(fault.action)
        if kind.on_device or (kind.throttles and scenario.node_storage(fault.node).volumes()):
            found.setdefault(fault.node, fault.action)
    return found


def volume_is_emulated(spec: VolumeSpec, device_fault: bool) -> bool:
    """Whether the volume's device is pglab's emulated one (else a plain loop device, or
    the user's own storage): when asked for, or on `auto` when a limit, latency, a cache
    mode or a device fault on its node needs it."""
    if spec.path or spec.pool or spec.block_device:
        return False
    if spec.device.kind != "auto":
        return spec.device.kind == "emulated"
    return device_fault or not spec.device.is_plain()


def _storage_key(node: str) -> str:
    return "storage" if node == "primary" else f"nodes.{node}.storage"


def scenario_needs(scenario: Scenario) -> tuple[Need, ...]:
    """Root and the system parts the scenario needs, each once with every key that asks
    for it; root first, then the parts in the registry's order."""
    return runs_needs([scenario])


def runs_needs(scenarios: Iterable[Scenario]) -> tuple[Need, ...]:
    """What all the runs of a scenario file need together (a matrix over filesystems
    needs every filesystem's tools)."""
    why: dict[str, list[str]] = {}

    def add(name: str, reason: str) -> None:
        reasons = why.setdefault(name, [])
        if reason not in reasons:
            reasons.append(reason)

    for scenario in scenarios:
        _add_needs(scenario, add)
    order = [ROOT, *PARTS]
    return tuple(Need(name, tuple(why[name])) for name in order if name in why)


def _add_needs(scenario: Scenario, add: Callable[[str, str], None]) -> None:
    envelopes = {"envelope": scenario.envelope, "workload.envelope": scenario.workload.envelope}
    for node in scenario.node_names()[1:]:
        envelopes[f"nodes.{node}.envelope"] = scenario.node_spec(node).envelope
    for key, envelope in envelopes.items():
        if not envelope.is_unlimited():
            add(ROOT, f"{key} (cgroup limits)")
    for action in sorted({f.action for f in scenario.faults if kind_of(f.action).throttles}):
        add(ROOT, f"faults: {action} (a cgroup)")
    if scenario.kernel:
        add(ROOT, "[kernel] (machine-wide knobs)")
    faulted = device_fault_nodes(scenario)
    for node in scenario.node_names():
        for role, spec in scenario.node_storage(node).volumes().items():
            key = _storage_key(node) + (".wal" if role == "wal" else "")
            add(ROOT, f"{key} (a volume: losetup, mkfs, mount)")
            if spec.path:
                continue  # an existing mount, used as it is
            filesystem = "zfs" if spec.pool and spec.filesystem == "host" else spec.filesystem
            if filesystem in FILESYSTEM_PARTS:
                add(FILESYSTEM_PARTS[filesystem], f"{key}.filesystem = '{filesystem}'")
            if volume_is_emulated(spec, node in faulted):
                for part in EMULATED_DEVICE_PARTS:
                    add(part, f"{key}.device (emulated)")
    if scenario.network.hosts == "separate":
        add(ROOT, "network.hosts = 'separate' (network namespaces)")
        add("iproute2", "network.hosts = 'separate'")
    if any(f.action == "network-partition" for f in scenario.faults):
        add("nftables", "faults: network-partition")
    if scenario.topology.pooler == "pgbouncer":
        add("pgbouncer", "topology.pooler = 'pgbouncer'")
    driver_part = scenario.workload.traits.part
    if driver_part is not None:
        add(driver_part, f"workload.driver = '{scenario.workload.driver}'")


def unmet_problem(needs: tuple[Need, ...] | list[Need], where: str) -> str | None:
    """None when every need is met here, else one line: what is missing, for which keys,
    and the one command that installs the missing parts."""
    unmet = [n for n in needs if not n.met()]
    if not unmet:
        return None
    pieces = []
    for need in unmet:
        what = (f"root (pglab runs as uid {os.geteuid()})" if need.name == ROOT
                else f"{need.name} ({PARTS[need.name].why_missing()})")
        pieces.append(f"{what} for {', '.join(need.why)}")
    return f"{where}: this machine lacks {'; '.join(pieces)}: {fix_for(unmet)}"


def fix_for(needs: Iterable[Need]) -> str | None:
    """What gives this machine the unmet ones of `needs`: one apt-get command for every
    missing part, then root; None when nothing is missing."""
    unmet = list(dict.fromkeys(n.name for n in needs if not n.met()))
    packages = [name for name in unmet if name != ROOT]
    fixes = ([f"apt-get install {' '.join(packages)}"] if packages else []) + (
        ["run pglab as root"] if ROOT in unmet else [])
    return "; ".join(fixes) or None

