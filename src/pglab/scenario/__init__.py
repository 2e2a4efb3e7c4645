"""The scenario file, pglab's input contract (docs/SCENARIO.md).

One job per module: `model` (the typed tables and keys), `envelope_limits` and
`kernel_knobs` (the registries `[envelope]` and `[kernel]` are checked against),
`validation` (raw table -> Scenario, one-line errors), `overrides` (`--set` and dotted
keys), `variants` (sweeps and matrices) and `loading` (file -> LoadedScenario). The
names below are the ones the rest of pglab uses.
"""

from pglab.scenario.fault_kinds import STANDBY_ACTIONS
from pglab.scenario.loading import LoadedScenario, load, load_text
from pglab.scenario.model import (
    DeviceSpec,
    Envelope,
    Fault,
    InitdbOptions,
    NodeSpec,
    Scenario,
    ServerSpec,
    SettingValue,
    StorageSpec,
    Telemetry,
    Topology,
    VolumeSpec,
    Workload,
)
from pglab.scenario.variants import Variant

__all__ = ["STANDBY_ACTIONS", "DeviceSpec", "Envelope", "Fault", "InitdbOptions",
           "LoadedScenario", "NodeSpec", "Scenario", "ServerSpec", "SettingValue", "StorageSpec",
           "Telemetry", "Topology", "Variant", "VolumeSpec", "Workload", "load", "load_text"]
