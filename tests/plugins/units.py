"""Work units: which tests go to one xdist worker together, and the order of the queue.

xdist hands out work units in queue order, one at a time to whichever worker is free. A
unit is every exclusive and cpu_exclusive test, or every disk_exclusive and cpu_light test
(two chains, which run at once), with the tests that share a module fixture with one (the other
workers are drained once, and the tests of a chain run back to back under one hold of
its locks); or the tests of a module that share a module- or class-scoped fixture of that
module (a real run made once); or else one test, so that a long module spreads over all
workers. The workers know markers and fixtures, the controller only node ids: each worker
writes the map to a file (UNITS_ENV) that xdist_units reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from plugins.durations import known_seconds
from plugins.needs import ALONE, OFFLINE, Needs, needs_of

UNITS_ENV = "PGLAB_TEST_UNITS"
EXCLUSIVE_UNIT, DISK_UNIT = "exclusive", "disk_exclusive"


def chain_of(needs: Needs) -> str | None:
    """The chain of a favoured test: the exclusive and cpu_exclusive tests in one, the
    disk_exclusive and cpu_light ones in the other."""
    if not needs.favoured:
        return None
    return EXCLUSIVE_UNIT if needs.machine == ALONE or needs.cpu else DISK_UNIT


def units(uses: Mapping[str, Sequence[str]], chains: Mapping[str, str | None]
          ) -> dict[str, str]:
    """Each test's unit, from the shared fixtures each uses (`module::fixture` keys) and
    the chain of each favoured test: tests sharing fixtures, directly or through another
    test, are one unit (a union-find), which is a chain's when a favoured test is in it
    (the exclusive chain's when tests of both chains share it)."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    for keys in uses.values():
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    chained: dict[str, str] = {}  # a fixture's root -> the chain of a favoured test using it
    for nodeid, keys in uses.items():
        if ((chain := chains.get(nodeid)) and keys
                and chained.get(root(keys[0])) != EXCLUSIVE_UNIT):
            chained[root(keys[0])] = chain
    found = {}
    for nodeid, keys in uses.items():
        shared = root(keys[0]) if keys else None
        found[nodeid] = (chained.get(shared or "") or chains.get(nodeid) or shared or nodeid)
    return found


@dataclass(frozen=True)
class Planned:
    """What the queue's order needs to know of one test."""

    nodeid: str
    unit: str
    needs: Needs
    seconds: float  # its time in the last run, 0.0 when unknown


def queue(tests: Sequence[Planned]) -> list[str]:
    """The units in the order they go out. The exclusive chain first; the offline units
    next, which the other workers run beside its exclusive tests, the disk_exclusive chain
    among them once they have enough to do until those end (it would only wait them out:
    its tests share the machine); then the live units, longest
    first by their times in the last run (no long one starts last while the other workers
    have nothing left), or else shared-fixture units, live tests, the rest. Those on the
    disk wait out the disk_exclusive chain: they come after enough units in RAM to keep the
    two workers beside the chains busy while it runs."""
    total: dict[str, float] = {}
    kind: dict[str, int] = {}
    offline: dict[str, bool] = {}
    on_disk: dict[str, bool] = {}
    for test in tests:
        unit = test.unit
        total[unit] = total.get(unit, 0.0) + test.seconds
        offline[unit] = offline.get(unit, True) and test.needs == OFFLINE
        on_disk[unit] = on_disk.get(unit, False) or test.needs.on_disk
        kind[unit] = min(kind.get(unit, 2), 0 if unit != test.nodeid
                         else 1 if test.needs.machine is not None else 2)
    chains = [unit for unit in (EXCLUSIVE_UNIT, DISK_UNIT) if unit in total]
    longest = sorted((unit for unit in total if unit not in chains),
                     key=lambda unit: (-total[unit], kind[unit]))
    in_ram_first: list[str] = []
    # the two workers beside the chains, while the disk_exclusive tests hold the disk
    covered = 0.0
    cover = 2 * sum(test.seconds for test in tests if test.needs.disk == ALONE)
    for unit in longest:
        if covered >= cover:
            break
        if not offline[unit] and not on_disk[unit]:
            in_ram_first.append(unit)
            covered += total[unit]
    first = set(in_ram_first)
    beside_alone = [unit for unit in longest if offline[unit]]
    if DISK_UNIT in chains:
        # two workers' worth of the time the machine is held alone (three run offline
        # units meanwhile: the disk chain goes out a little before the exclusive tests end)
        alone = 2 * sum(test.seconds for test in tests if test.needs.machine == ALONE)
        ahead, taken = 0, 0.0
        while ahead < len(beside_alone) and taken < alone:
            taken += total[beside_alone[ahead]]
            ahead += 1
        beside_alone.insert(ahead, DISK_UNIT)
    return [*(unit for unit in chains if unit != DISK_UNIT), *beside_alone, *in_ram_first,
            *(unit for unit in longest if not offline[unit] and unit not in first)]


def within_unit(needs: Needs) -> int:
    """A test's place in its unit: in the exclusive chain the exclusive tests go first,
    while the other workers have not begun (locks.FIRST_SHARED_DELAY_S), so none has to be
    waited out; then the cpu_exclusive ones in RAM, beside the disk_exclusive tests; those
    on the disk last, after them. In the other chain the disk_exclusive tests go first, so
    that the disk is free early for the tests on it; then the cpu_light ones."""
    return 0 if ALONE in (needs.machine, needs.disk) else 2 if needs.on_disk else 1


def ordered(tests: Sequence[Planned]) -> list[Planned]:
    """The tests in queue order (stable: collection order within a unit and a place)."""
    rank = {unit: place for place, unit in enumerate(queue(tests))}
    return sorted(tests, key=lambda test: (rank[test.unit], within_unit(test.needs)))


def _module(nodeid: str) -> str:
    return nodeid.split("::", maxsplit=1)[0]


def shared_fixtures(item: pytest.Item) -> set[str]:
    """The module- or class-scoped fixtures defined in `item`'s own module that it uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    module = _module(item.nodeid)
    return {name for name, defs in info.name2fixturedefs.items()
            if defs and defs[-1].scope in ("module", "class", "package")
            and defs[-1].baseid.startswith(module)}


def mixed_homes(places: Mapping[str, set[bool]]) -> list[str]:
    """The shared fixtures (`module::name`) whose tests are both in RAM and on the disk."""
    return sorted(name for name, where in places.items() if len(where) > 1)


def _check_homes(items: list[pytest.Item]) -> None:
    """A fixture shared by tests (a module's server, its runs) is made where its first
    test's servers are: the tests that share one (or `pglab_home`, module-scoped) are all
    in RAM or all on the disk."""
    where: dict[str, set[bool]] = {}
    for item in items:
        shared = shared_fixtures(item)
        if "pglab_home" in getattr(item, "fixturenames", ()):
            shared.add("pglab_home")
        for name in shared:
            where.setdefault(f"{_module(item.nodeid)}::{name}", set()).add(
                needs_of(item).on_disk)
    if mixed := mixed_homes(where):
        raise pytest.UsageError(f"tests sharing a fixture are both in RAM and on the disk "
                                f"(mark them all `disk`, or none): {', '.join(mixed)}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # after needs' hook (tryfirst) has marked the tests of the other tiers live
    found = units({item.nodeid: [f"{_module(item.nodeid)}::{name}"
                                 for name in sorted(shared_fixtures(item))] for item in items},
                  {item.nodeid: chain_of(needs_of(item)) for item in items})
    _check_homes(items)
    seconds = known_seconds(config)
    by_id = {item.nodeid: item for item in items}
    plan = ordered([Planned(item.nodeid, found[item.nodeid], needs_of(item),
                            seconds.get(item.nodeid, 0.0)) for item in items])
    items[:] = [by_id[test.nodeid] for test in plan]
    path = os.environ.get(UNITS_ENV)
    if path and hasattr(config, "workerinput"):
        written = Path(f"{path}.{config.workerinput['workerid']}")
        written.write_text(json.dumps(found))
        written.replace(path)  # every worker writes the same map
