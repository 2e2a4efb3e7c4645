"""What a probe is: a small unit with start/sample/stop that turns a source into samples.

Every probe of every kind (database views, procfs, the server log) produces the same two
things: `Sample` rows for timeseries.parquet (long format) and `Event`s for
events.parquet. The telemetry runner owns the clock and the schedule; a probe only reads
its source when asked, so tests can drive it with any clock.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pglab.events import Event


@dataclass(frozen=True)
class Sample:
    """One value of one metric at one time: a row of timeseries.parquet."""

    t: dt.datetime  # UTC, tz-aware
    node: str  # "primary", "standby1", ... or "host" for machine-wide OS metrics
    source: str  # the probe's name, e.g. "os.cpu"
    metric: str  # e.g. "iowait_pct"
    label: str  # what the value is about: a device, a backend type, a wait event; "" if none
    value: float


@dataclass
class ProbeOutput:
    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


@dataclass(frozen=True)
class NodeHandle:
    """What probes may know about one node under test."""

    name: str
    connect: Callable[[], Any] | None  # a new psycopg connection (autocommit), or None
    data_dir: Path | None  # None for a server pglab did not start
    postmaster_pid: Callable[[], int | None]  # changes when a node restarts
    log_dir: Path | None = None
    # Block devices and image files under the node's volumes (storage/): their I/O is
    # the node's too, though no mount of its data dir shows them.
    storage_paths: list[Path] = field(default_factory=list)
    # The network namespace the node runs in, when it is a host of its own (network/): its
    # sockets are seen from there.
    netns: str | None = None


@dataclass(frozen=True)
class ProbeContext:
    nodes: list[NodeHandle]
    client_pid: Callable[[], int | None]  # the running pgbench, if any
    clock: Callable[[], float]  # epoch seconds; injectable for tests
    db: Any = None  # probes.dbsessions.DbSessions: one connection per node and thread
    pooler: Callable[[], Any] | None = None  # PgBouncer's admin console, when there is one
    results_dir: Path | None = None  # the run folder, for a probe that writes a file of its own
    profile_hz: int = 49  # telemetry.profile_hz: os.profile's samples per second and CPU
    # The load generator's network namespace, when it is a host of its own (network/).
    client_netns: str | None = None


Cadence = Literal["interval", "fast"]  # every telemetry.interval, or wait_sampling_hz


class Probe(ABC):
    """A source of samples. Subclasses set name, help and cadence, and read on sample()."""

    name: ClassVar[str]
    help: ClassVar[str]
    cadence: ClassVar[Cadence] = "interval"
    # Off unless a scenario names it in telemetry.include: its cost is above the observer's
    # budget (about 1% of the machine) for some runs.
    opt_in: ClassVar[bool] = False

    def start(self, ctx: ProbeContext) -> None:  # noqa: B027 - optional hook
        """Open what the probe needs; read baselines for deltas."""

    @abstractmethod
    def sample(self, now: dt.datetime) -> ProbeOutput:
        """Read the source once; deltas are since the previous call."""

    def stop(self) -> ProbeOutput:
        """Release resources; may return what only the end can tell."""
        return ProbeOutput()

    def tool_cpu_s(self) -> float:
        """CPU seconds the probe used outside the sampling loops (the programs it runs, a
        thread of its own), which no loop's thread time holds: part of the observer's
        cost. Read after stop()."""
        return 0.0

    def record(self) -> dict[str, Any] | None:
        """What the manifest's telemetry section says of this probe, if anything (after
        stop())."""
        return None
