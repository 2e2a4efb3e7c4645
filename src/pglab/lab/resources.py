"""What a lab holds beyond its servers: kernel knobs and each node's cgroup envelope.

One ExitStack owns them, so they are undone in reverse order on every path: envelopes
are destroyed after their processes stopped, kernel knobs restored last.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pglab.errors import EnvironmentProblem
from pglab.lab.cgroups import detect_cgroups
from pglab.lab.envelope import AppliedEnvelope, applied_envelope, cgroup_limits, check_possible
from pglab.lab.kernel import kernel_knobs, read_knobs
from pglab.scenario import Envelope, Scenario
from pglab.scenario.envelope_limits import EnvelopeLimits
from pglab.scenario.fault_kinds import kind_of
from pglab.scenario.model import resolve_envelope


def node_envelope(scenario: Scenario, node: str) -> Envelope:
    if node == "primary":
        return scenario.envelope
    if node == "client":
        return scenario.workload.envelope
    return scenario.node_spec(node).envelope


def check_resources(scenario: Scenario, where: str) -> None:
    """Refuse limits or knobs that cannot be had here, before anything starts."""
    nodes = [*scenario.node_names(), "client"]
    limited = [n for n in nodes if not node_envelope(scenario, n).is_unlimited()]
    throttled = sorted({f.node for f in scenario.faults if kind_of(f.action).throttles})
    if limited or throttled:
        scenario.require_local(where, "an envelope or a throttle-disk fault",
                               "pglab limits only servers it starts")
    for node in limited:
        limits = resolve_envelope(node_envelope(scenario, node))
        try:
            support = check_possible(limits)
        except EnvironmentProblem as exc:
            raise EnvironmentProblem(f"{where}: {node}: {exc}") from None
        # a node with a volume of its own is told to put its limits on the volume's device
        if node == "client" or not scenario.node_storage(node).volumes():
            _check_disk_scope(node, limits, support.version, where)
    if throttled:
        try:
            detect_cgroups().require("a throttle-disk fault")
        except EnvironmentProblem as exc:
            raise EnvironmentProblem(f"{where}: {exc}") from None
    # [kernel] needs root: scenario/needs.py says so with every other need, before this


def _envelope_key(node: str) -> str:
    return {"primary": "envelope", "client": "workload.envelope"}.get(
        node, f"nodes.{node}.envelope")


def _check_disk_scope(node: str, limits: EnvelopeLimits, cgroup_version: int | None,
                      where: str) -> None:
    """A write limit for every byte (disk_scope "all") cannot be had from cgroup v1, whose
    blkio throttles only what the node's processes submit: the kernel's flusher writes
    their buffered pages back on no one's account, at the disk's own speed."""
    asked = [f"{key} = {value:g}" for key, value in (("write_mbps", limits.write_mbps),
                                                      ("write_iops", limits.write_iops))
             if value]
    if cgroup_version != 1 or not asked or limits.disk_scope != "all":
        return
    key = _envelope_key(node)
    storage = ("[storage]" if node == "primary" else f"[nodes.{node}.storage]")
    device = ", ".join(asked)
    hint = (f"put {node}'s data on an emulated device, which holds every byte ({storage} "
            f'filesystem = "ext4" with device = {{ {device} }}), or ' if node != "client"
            else "")
    raise EnvironmentProblem(
        f"{where}: {key}.disk {device}: cgroup v1 here throttles only the I/O {node}'s "
        "processes submit (fsync, direct I/O), not the kernel's writeback of their "
        f"buffered writes, so the limit would not hold for every byte; {hint}accept what "
        f'v1 holds with {key}.disk_scope = "own-io"')


class LabResources:
    """Kernel knobs for the run and an envelope per node, undone by close()."""

    def __init__(self, scenario: Scenario, run_id: str) -> None:
        self.scenario = scenario
        self.run_id = run_id
        self._stack = contextlib.ExitStack()
        self.envelopes: dict[str, AppliedEnvelope] = {}
        self.knobs: dict[str, Any] = {}

    def set_kernel_knobs(self, on_status: Callable[[str], None]) -> None:
        wanted = dict(self.scenario.kernel)
        in_effect = self._stack.enter_context(kernel_knobs(wanted, on_wait=on_status))
        self.knobs = {"set": wanted, "in_effect": in_effect}

    def enter_envelope(self, node: str, data_dir: Path | None,
                       on_status: Callable[[str], None] = lambda _msg: None) -> list[Path]:
        """The node's cgroup (made when it has limits or a throttle-disk fault); returns
        the cgroup.procs files its processes join at spawn ([] when there is none). A disk
        check that fell short of its limit is said: the limit may not bind."""
        limits = resolve_envelope(node_envelope(self.scenario, node))
        needs = any(f.node == node and kind_of(f.action).throttles
                    for f in self.scenario.faults)
        applied = self._stack.enter_context(applied_envelope(
            f"{self.run_id}-{node}", limits, data_dir, always=needs))
        if applied is None:
            return []
        self.envelopes[node] = applied
        for check in applied.checks:
            if check.limit and not check.reached_limit:
                on_status(f"{node}: a writer in its envelope reached {check.measured:g} of "
                          f"its {check.limit:g} {check.unit} limit: the disk was slower "
                          "than the limit then, so the limit may not bind")
        return applied.procs_files()

    def memory_cgroup(self, node: str) -> list[Path]:
        applied = self.envelopes.get(node)
        return applied.procs_files() if applied and applied.limits.memory else []

    def set_disk_limits(self, node: str, overrides: dict[str, float]) -> dict[str, Any]:
        """Change a node's disk limits mid-run; {} puts the envelope's own back."""
        applied = self.envelopes[node]
        limits: EnvelopeLimits = applied.limits
        if overrides:
            limits = dataclasses.replace(
                limits, write_mbps=overrides.get("write_mbps", 0.0),
                read_mbps=overrides.get("read_mbps", 0.0),
                write_iops=int(overrides.get("write_iops", 0)),
                read_iops=int(overrides.get("read_iops", 0)))
        applied.cgroup.apply(cgroup_limits(limits, applied.device))
        return {k: getattr(limits, k) for k in ("write_mbps", "read_mbps", "write_iops",
                                                "read_iops")}

    def manifest(self) -> dict[str, Any]:
        return {
            "kernel": self.knobs or {"set": {}, "in_effect": read_knobs()},
            "envelopes": {n: e.to_manifest() for n, e in self.envelopes.items()},
        }

    def close(self) -> None:
        self._stack.close()
