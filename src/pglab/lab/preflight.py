"""What a scenario asks of the lab, checked before anything starts: one line naming the
key, the scenario's own mistakes (exit 2) before what this machine lacks (exit 3)."""

from __future__ import annotations

from pglab.errors import BadInput, EnvironmentProblem
from pglab.lab.faults import check_faults
from pglab.lab.resources import check_resources, node_envelope
from pglab.lab.settings import check_managed
from pglab.network.hosts import require_namespaces
from pglab.scenario import Scenario
from pglab.scenario.fault_kinds import kind_of
from pglab.scenario.model import resolve_envelope
from pglab.scenario.needs import Need, device_fault_nodes, scenario_needs, unmet_problem
from pglab.storage.volume import check_storage, power_loss_problem, storage_key


def check_supported(scenario: Scenario, where: str,
                    needs: tuple[Need, ...] | None = None) -> None:
    """Refuse, before anything starts, what cannot work: one line naming the key. The
    scenario's own mistakes first (exit 2), then what this machine lacks (exit 3) of
    `needs` (default: the scenario's own; a sweep's checks pass what all its runs need,
    so that one line names all that is missing)."""
    _check_topology(scenario, where)
    check_faults(scenario, where)
    _check_storage(scenario, where)
    if not scenario.server.is_local:
        if not scenario.server.dsn:
            raise BadInput(f"{where}: server.dsn is empty: target = 'dsn' needs a connection "
                           "string like 'host=db1 dbname=bench user=bench'")
        if scenario.faults:
            raise BadInput(f"{where}: faults cannot be used with target = 'dsn': they stop, "
                           "crash or write to the server, and pglab does that only to servers "
                           "it starts")
        if scenario.server.settings:
            raise BadInput(f"{where}: server.settings cannot be used with target = 'dsn': "
                           "pglab does not change the configuration of a server it did not "
                           "create")
        if not scenario.server.allow_writes and not scenario.workload.is_read_only():
            raise BadInput(f"{where}: the workload writes, and the server at server.dsn is not "
                           "pglab's: use a read-only mix (select-only) or set "
                           "server.allow_writes = true")
    else:
        check_managed(scenario.server.settings, where)
    if problem := unmet_problem(needs or scenario_needs(scenario), where):
        raise EnvironmentProblem(problem)  # root and system parts, all in one line
    if scenario.network.hosts == "separate":
        require_namespaces()  # made and removed once: the kernel may still refuse
    check_resources(scenario, where)  # the cgroups this machine offers, once root


def _check_storage(scenario: Scenario, where: str) -> None:
    for node in scenario.node_names():
        envelope = node_envelope(scenario, node)
        if scenario.node_storage(node).volumes() and resolve_envelope(envelope).has_disk:
            key = "envelope" if node == "primary" else f"nodes.{node}.envelope"
            raise BadInput(f"{where}: {key} has disk limits and {node} has a storage volume: "
                           f"put the limits on {storage_key(node)}.device (write_mbps, "
                           "read_mbps, iops, profile), where they hold for every byte")
    check_storage(scenario, where, device_fault_nodes(scenario))
    for index, fault in enumerate(scenario.faults):
        if not kind_of(fault.action).drops_unflushed:
            continue
        volumes = scenario.node_storage(fault.node).volumes()
        for role, spec in volumes.items():
            if why := power_loss_problem(spec):
                key = storage_key(fault.node) + (".wal" if role == "wal" else "")
                raise BadInput(f"{where}: faults[{index}]: '{fault.action}' cannot cut {key}: "
                               f"{why}")


def _check_topology(scenario: Scenario, where: str) -> None:
    topo, workload = scenario.topology, scenario.workload
    if topo.standbys:
        scenario.require_local(where, f"topology.standbys = {topo.standbys}",
                               "pglab makes standbys only of servers it starts")
    if topo.pooler != "none":
        scenario.require_local(where, f"topology.pooler = '{topo.pooler}'")
    if topo.synchronous != "off":
        need = 1 if topo.synchronous == "on" else int(topo.synchronous.split(":")[1])
        if topo.standbys < need:
            raise BadInput(f"{where}: topology.synchronous = '{topo.synchronous}' needs at "
                           f"least {need} standby(s), topology.standbys = {topo.standbys}")
    if workload.on == "standbys":
        if not topo.standbys:
            raise BadInput(f"{where}: workload.on = 'standbys' needs topology.standbys ≥ 1")
        if not workload.is_read_only():
            raise BadInput(f"{where}: workload.on = 'standbys': hot standbys are read-only; "
                           "use a read-only mix such as ['select-only']")
        if topo.pooler != "none":
            raise BadInput(f"{where}: topology.pooler fronts the primary; it cannot be used "
                           "with workload.on = 'standbys'")
    if topo.pooler == "pgbouncer" and workload.protocol == "prepared" and (
            workload.path == "pooler") and topo.pool_mode == "transaction":
        raise BadInput(f"{where}: workload.protocol = 'prepared' does not work through "
                       "PgBouncer in transaction mode; use 'simple' or 'extended', or "
                       "topology.pool_mode = 'session'")
    names = scenario.node_names()
    for name, spec in scenario.nodes.items():
        if name == "primary":
            raise BadInput(f"{where}: nodes.primary: the primary is set by [server.settings] "
                           "and [envelope]")
        if name != "standbys" and name not in names:
            raise BadInput(f"{where}: nodes.{name}: no such standby (topology.standbys = "
                           f"{topo.standbys}; names are standby1.., or 'standbys' for all)")
        check_managed(spec.settings, f"{where}: nodes.{name}")
