"""The fault kinds: each fault action's traits, in one pure table.

The lab's registry (lab/fault_actions.py) says how an action is done; this table says what
it is, so the model, the needs check, the lab, the load and the analysis ask a trait
instead of comparing action names. Pure data: the model does not import the lab.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class FaultKind:
    name: str  # the `action` of a [[faults]] entry
    nodes: Literal["any", "standby", "primary"] = "any"
    # Kills the node: the load restarts once it is back, and each one gets an integrity
    # verdict of its own (a cut).
    cuts_node: bool = False
    # Acts on the node's volume devices: they are pglab's emulated devices.
    on_device: bool = False
    # Sets cgroup limits mid-run: the node gets a cgroup from the start (and, with
    # volumes, their devices are what is throttled).
    throttles: bool = False
    # Drops what the device holds unflushed: every volume of the node must support a cut.
    drops_unflushed: bool = False
    noun: str = ""  # in words, where the action's name is not ("power loss")

    @property
    def words(self) -> str:
        return self.noun or self.name


FAULT_KINDS: dict[str, FaultKind] = {k.name: k for k in (
    FaultKind("pause-standby", nodes="standby"),
    FaultKind("throttle-disk", throttles=True),
    FaultKind("vacuum", nodes="primary"),
    FaultKind("bulk-update", nodes="primary"),
    FaultKind("sql", nodes="primary"),
    FaultKind("idle-in-transaction", nodes="primary"),
    FaultKind("checkpoint"),
    FaultKind("switch-wal", nodes="primary"),
    FaultKind("crash", cuts_node=True),
    FaultKind("power-loss", cuts_node=True, on_device=True, drops_unflushed=True,
              noun="power loss"),
    FaultKind("memory-pressure"),
    FaultKind("pause-disk", on_device=True),
    FaultKind("fail-disk", on_device=True),
    FaultKind("slow-disk", on_device=True),
    FaultKind("network-partition"),
    FaultKind("network-latency"),
)}

CUT_ACTIONS = tuple(k.name for k in FAULT_KINDS.values() if k.cuts_node)
DEVICE_ACTIONS = tuple(k.name for k in FAULT_KINDS.values() if k.on_device)
STANDBY_ACTIONS = tuple(k.name for k in FAULT_KINDS.values() if k.nodes == "standby")


def kind_of(action: str) -> FaultKind:
    """The traits of `action`; an unknown name (refused by lab/faults.py's check) has none."""
    return FAULT_KINDS.get(action) or FaultKind(action)


def is_cut(action: str) -> bool:
    return kind_of(action).cuts_node
