"""The workload drivers' traits: what the scenario model, the loader, the needs check, the
manifest's readers and the analysis ask of a driver, in one pure table.

workload/drivers.py's `DRIVERS` runs each driver; this table says what it is, so no
reader asks a driver by its name (a test checks that the two, and the model's accepted
values of `workload.driver`, name the same drivers). Pure data, at the bottom: readers of
a results folder use it as well as the scenario model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DriverTraits:
    name: str  # the value of workload.driver
    # The workload keys only this driver reads: given with another driver they would be
    # silently ignored, so the model refuses them.
    keys: tuple[str, ...]
    concurrency: str  # the workload key with the client counts a sweep varies
    # Its load is `workload.test`: a bundled test, or a Lua script beside the scenario file.
    runs_test: bool = False
    whole_rate: bool = False  # `rate` is a whole number of transactions a second
    part: str | None = None  # the system part it needs (system_parts.PARTS), if any

    @property
    def concurrency_key(self) -> str:
        """The dotted key a sweep varies (`workload.clients`, `workload.threads`)."""
        return f"workload.{self.concurrency}"


DRIVER_TRAITS: dict[str, DriverTraits] = {t.name: t for t in (
    DriverTraits("pgbench", keys=("scale", "mix", "scripts", "clients", "jobs",
                                  "latency_limit", "protocol", "per_statement", "max_tries",
                                  "reconnect", "log_sampling"),
                 concurrency="clients"),
    DriverTraits("sysbench", keys=("test", "tables", "table_size", "threads", "percentile",
                                   "options"),
                 concurrency="threads", runs_test=True, whole_rate=True, part="sysbench"),
)}
DEFAULT_DRIVER = "pgbench"


def driver_traits(driver: object) -> DriverTraits:
    """The traits of `driver`; a run recorded without one (None) was pgbench's."""
    return DRIVER_TRAITS.get(str(driver), DRIVER_TRAITS[DEFAULT_DRIVER])
