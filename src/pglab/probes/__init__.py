"""The probe registry: every source of telemetry, in one list.

This list drives the runs (which probes sample), `pglab probes` (names and help) and the
docs; adding a probe means one class and one entry here.
"""

from __future__ import annotations

from pglab.probes.base import Probe
from pglab.probes.db_activity import (
    BackendStates,
    LockWaits,
    Replication,
    VacuumProgress,
    WaitSampler,
)
from pglab.probes.db_lockqueue import LockQueue
from pglab.probes.db_statements import StatementStats
from pglab.probes.db_stats import CheckpointerStats, DatabaseStats, IoStats, WalStats
from pglab.probes.os_probes import OS_PROBES
from pglab.probes.pooler_probe import PoolerPools
from pglab.probes.serverlog_probe import ServerLogEvents

PROBES: tuple[type[Probe], ...] = (
    WaitSampler,
    DatabaseStats,
    CheckpointerStats,
    WalStats,
    IoStats,
    LockWaits,
    LockQueue,
    StatementStats,
    BackendStates,
    VacuumProgress,
    Replication,
    ServerLogEvents,
    PoolerPools,
    *OS_PROBES,
)


def probe_names() -> list[str]:
    return [p.name for p in PROBES]


def opt_in_names() -> list[str]:
    return [p.name for p in PROBES if p.opt_in]


def make_probes(exclude: list[str] | None = None,
                include: list[str] | None = None) -> list[Probe]:
    """The probes of a run: every default one not excluded, and the opt-in ones included."""
    skip, wanted = set(exclude or []), set(include or [])
    return [cls() for cls in PROBES
            if cls.name not in skip and (not cls.opt_in or cls.name in wanted)]
