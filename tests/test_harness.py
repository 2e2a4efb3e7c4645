"""The suite's own plugins (tests/plugins/): their decisions, as pure functions, on the
cases tests/README.md describes."""

from __future__ import annotations

import inspect
from importlib.metadata import version
from pathlib import Path

import pytest

from plugins import cpu_weight, locks, skips, units, xdist_units
from plugins.needs import ALONE, OFFLINE, SHARED, Needs, needs_for
from plugins.units import DISK_UNIT, EXCLUSIVE_UNIT, Planned

LIVE = needs_for({"live"})
DISK = needs_for({"disk"})
EXCLUSIVE = needs_for({"exclusive"})
DISK_EXCLUSIVE = needs_for({"disk_exclusive"})
CPU_EXCLUSIVE = needs_for({"cpu_exclusive"})
CPU_EXCLUSIVE_ON_DISK = needs_for({"cpu_exclusive", "disk"})
CPU_LIGHT = needs_for({"cpu_light"})
CPU_LIGHT_ON_DISK = needs_for({"cpu_light", "disk"})


@pytest.mark.parametrize(("marked", "plan", "favoured", "on_disk"), [
    ((), [], False, False),
    (("live",), [(locks.MACHINE, SHARED)], False, False),
    (("disk",), [(locks.MACHINE, SHARED), (locks.DISK, SHARED)], False, True),
    (("live", "disk"), [(locks.MACHINE, SHARED), (locks.DISK, SHARED)], False, True),
    (("exclusive",), [(locks.MACHINE, ALONE)], True, False),
    (("exclusive", "disk"), [(locks.MACHINE, ALONE)], True, True),
    (("disk_exclusive",), [(locks.MACHINE, SHARED), (locks.DISK, ALONE)], True, True),
    (("cpu_exclusive",), [(locks.MACHINE, SHARED), (locks.CPU, ALONE)], True, False),
    (("cpu_exclusive", "disk"),
     [(locks.MACHINE, SHARED), (locks.DISK, SHARED), (locks.CPU, ALONE)], True, True),
    (("cpu_light",), [(locks.MACHINE, SHARED)], True, False),
    (("cpu_light", "disk"), [(locks.MACHINE, SHARED), (locks.DISK, SHARED)], True, True),
    (("root",), [], False, False),  # a marker of no tier
])
def test_each_marker_takes_its_locks_and_its_place(
        marked: tuple[str, ...], plan: list[tuple[str, str]], favoured: bool,
        on_disk: bool) -> None:
    needs = needs_for(marked)
    assert locks.lock_plan(needs) == plan
    assert (needs.favoured, needs.on_disk) == (favoured, on_disk)


def test_without_a_tmpfs_every_live_test_is_on_the_disk() -> None:
    assert needs_for({"live"}, in_ram_possible=False) == DISK
    assert needs_for({"cpu_exclusive"}, in_ram_possible=False) == CPU_EXCLUSIVE_ON_DISK
    assert needs_for((), in_ram_possible=False) == OFFLINE


def test_a_chain_keeps_its_locks_from_one_test_to_the_next() -> None:
    assert locks.keeps_locks(EXCLUSIVE, EXCLUSIVE)
    assert locks.keeps_locks(CPU_EXCLUSIVE, CPU_EXCLUSIVE)
    assert not locks.keeps_locks(CPU_EXCLUSIVE, CPU_EXCLUSIVE_ON_DISK)  # the disk lock too
    assert locks.keeps_locks(CPU_LIGHT, CPU_LIGHT)  # favoured: its chain holds on
    assert not locks.keeps_locks(DISK_EXCLUSIVE, CPU_LIGHT_ON_DISK)  # the disk, alone no more
    assert not locks.keeps_locks(EXCLUSIVE, OFFLINE)  # the last of the chain
    assert not locks.keeps_locks(LIVE, LIVE)  # a shared hold is one test's
    # only a worker's first shared hold waits, and only when some test holds the machine
    assert locks.waits_before_first_hold(LIVE, started=False, any_alone=True)
    assert not locks.waits_before_first_hold(LIVE, started=True, any_alone=True)
    assert not locks.waits_before_first_hold(LIVE, started=False, any_alone=False)
    assert not locks.waits_before_first_hold(EXCLUSIVE, started=False, any_alone=True)
    assert not locks.waits_before_first_hold(OFFLINE, started=False, any_alone=True)


def test_tests_sharing_fixtures_directly_or_through_another_are_one_unit() -> None:
    uses = {"m.py::a": ["m.py::run"], "m.py::b": ["m.py::run", "m.py::server"],
            "m.py::c": ["m.py::server"], "m.py::d": [], "n.py::e": ["n.py::run"]}
    found = units.units(uses, dict.fromkeys(uses))
    assert found["m.py::a"] == found["m.py::b"] == found["m.py::c"]
    assert found["m.py::d"] == "m.py::d"  # a test of its own
    assert found["n.py::e"] not in (found["m.py::a"], "n.py::e")


def test_a_favoured_test_takes_its_fixtures_tests_into_its_chain() -> None:
    uses = {"m.py::a": ["m.py::run"], "m.py::b": ["m.py::run"], "m.py::c": [],
            "d.py::x": ["d.py::lab"], "d.py::y": ["d.py::lab"],
            "both.py::p": ["both.py::lab"], "both.py::q": ["both.py::lab"]}
    chains = {**dict.fromkeys(uses), "m.py::a": EXCLUSIVE_UNIT, "m.py::c": EXCLUSIVE_UNIT,
              "d.py::x": DISK_UNIT, "both.py::p": DISK_UNIT, "both.py::q": EXCLUSIVE_UNIT}
    found = units.units(uses, chains)
    assert found["m.py::a"] == found["m.py::b"] == found["m.py::c"] == EXCLUSIVE_UNIT
    assert found["d.py::x"] == found["d.py::y"] == DISK_UNIT
    # a fixture used by both chains goes to the exclusive one, whichever test comes first
    assert found["both.py::p"] == found["both.py::q"] == EXCLUSIVE_UNIT
    assert units.chain_of(EXCLUSIVE) == units.chain_of(CPU_EXCLUSIVE) == EXCLUSIVE_UNIT
    assert units.chain_of(DISK_EXCLUSIVE) == units.chain_of(CPU_LIGHT) == DISK_UNIT
    assert units.chain_of(CPU_LIGHT_ON_DISK) == DISK_UNIT
    assert units.chain_of(LIVE) is None and units.chain_of(OFFLINE) is None


def test_the_queue_puts_the_chains_first_then_offline_then_ram_to_cover_the_disk_chain(
) -> None:
    tests = [
        Planned("a.py::ram_long", "a.py::ram_long", LIVE, 100.0),
        Planned("b.py::disk_long", "b.py::disk_long", DISK, 500.0),
        Planned("c.py::offline", "c.py::offline", OFFLINE, 30.0),
        Planned("d.py::light", DISK_UNIT, CPU_LIGHT_ON_DISK, 30.0),
        Planned("d.py::d1", DISK_UNIT, DISK_EXCLUSIVE, 40.0),
        Planned("e.py::ram_short", "e.py::ram_short", LIVE, 10.0),
        Planned("f.py::x1", EXCLUSIVE_UNIT, CPU_EXCLUSIVE_ON_DISK, 5.0),
        Planned("f.py::x2", EXCLUSIVE_UNIT, CPU_EXCLUSIVE, 5.0),
        Planned("f.py::x3", EXCLUSIVE_UNIT, EXCLUSIVE, 5.0),
        Planned("g.py::ram_mid", "g.py::ram_mid", LIVE, 60.0),
    ]
    # the two workers beside the chains need 2 x 40 s of RAM units while the
    # disk_exclusive test holds the disk (the cpu_light one after it does not): the
    # longest of them (100 s) covers it; the disk unit, though longest, waits it out
    # the disk chain after offline units enough for two workers while the exclusive test
    # (5 s) holds the machine: its tests would only wait it out
    assert units.queue(tests) == [
        EXCLUSIVE_UNIT, "c.py::offline", DISK_UNIT, "a.py::ram_long", "b.py::disk_long",
        "g.py::ram_mid", "e.py::ram_short"]
    # in the exclusive chain: alone first, the cpu_exclusive in RAM, those on the disk
    # last; in the other, the disk_exclusive test first, then the cpu_light one
    assert [t.nodeid for t in units.ordered(tests)][:6] == [
        "f.py::x3", "f.py::x2", "f.py::x1", "c.py::offline", "d.py::d1", "d.py::light"]
    # without a test that holds the machine alone the disk chain has nothing to wait out
    no_alone = [t for t in tests if t.needs != EXCLUSIVE]
    assert units.queue(no_alone)[:3] == [EXCLUSIVE_UNIT, DISK_UNIT, "c.py::offline"]
    # more offline work than the exclusive tests' time: the rest comes after the chain
    more = [*tests, Planned("h.py::offline", "h.py::offline", OFFLINE, 20.0)]
    assert units.queue(more)[:4] == [EXCLUSIVE_UNIT, "c.py::offline", DISK_UNIT,
                                     "h.py::offline"]


def test_without_times_shared_fixture_units_go_first_then_live_tests() -> None:
    tests = [Planned("a.py::offline", "a.py::offline", OFFLINE, 0.0),
             Planned("b.py::live", "b.py::live", LIVE, 0.0),
             Planned("c.py::s1", "c.py::run", LIVE, 0.0),
             Planned("c.py::s2", "c.py::run", LIVE, 0.0)]
    assert units.queue(tests) == ["a.py::offline", "c.py::run", "b.py::live"]


def test_a_fixture_shared_in_ram_and_on_the_disk_is_refused() -> None:
    assert units.mixed_homes({"m.py::run": {True, False}, "n.py::lab": {True}}) == [
        "m.py::run"]


def test_cpu_weight_groups_and_shares() -> None:
    def own(controller: str) -> str:
        return "/user.slice"

    v1 = {"cpu": Path("/sys/fs/cgroup/cpu,cpuacct"), "cpuacct": Path("/sys/fs/cgroup/cpu,cpuacct"),
          "memory": Path("/sys/fs/cgroup/memory")}
    assert cpu_weight.hierarchies(1, v1, own) == [Path("/sys/fs/cgroup/cpu,cpuacct/user.slice")]
    apart = {"cpu": Path("/c/cpu"), "cpuacct": Path("/c/cpuacct")}
    assert cpu_weight.hierarchies(1, apart, own) == [Path("/c/cpu/user.slice"),
                                                     Path("/c/cpuacct/user.slice")]
    assert cpu_weight.hierarchies(1, {"cpu": Path("/c/cpu")}, own) == [Path("/c/cpu/user.slice")]
    assert cpu_weight.hierarchies(2, v1, own) == []  # v2: nothing moves
    assert cpu_weight.shares_after(favoured_running=True) == cpu_weight.BESIDE_SHARES
    assert cpu_weight.shares_after(favoured_running=False) == cpu_weight.FULL_SHARES
    assert cpu_weight.BESIDE_SHARES * 4 == cpu_weight.FULL_SHARES  # a fifth of a contended CPU


def test_a_suites_leftovers_are_stale_only_when_its_controller_is_gone() -> None:
    alive = {100}.__contains__
    assert cpu_weight.stale("pglabtests-200", "pglabtests-", alive)
    assert not cpu_weight.stale("pglabtests-100", "pglabtests-", alive)
    assert not cpu_weight.stale("pglabtests-x", "pglabtests-", alive)
    assert not cpu_weight.stale("pglab-200", "pglabtests-", alive)  # pglab's own: reaped by it


def test_as_root_only_the_machines_facts_may_skip() -> None:
    assert skips.allowed("Skipped: v1 only")
    assert skips.allowed("machine too busy: the quota reached 0.6 of 1.0 CPU")
    assert not skips.allowed("Skipped: needs /usr/sbin/pgbouncer (apt-get install pgbouncer)")


def test_the_xdist_internals_the_scheduler_overrides_are_the_tested_ones() -> None:
    """xdist_units overrides a private method of pytest-xdist: pyproject.toml pins the
    versions it was tested with, and this fails on others (check the override, then
    move the pins and TESTED together)."""
    for package, tested in xdist_units.TESTED.items():
        assert version(package).startswith(f"{tested}."), (package, version(package))
    from xdist.scheduler import LoadScopeScheduling
    assert list(inspect.signature(LoadScopeScheduling._split_scope).parameters) == [
        "self", "nodeid"]
    for method in (LoadScopeScheduling.schedule, LoadScopeScheduling.mark_test_complete):
        assert "self._split_scope(" in inspect.getsource(method)
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    for package, tested in xdist_units.TESTED.items():
        major, minor = map(int, tested.split("."))
        assert f'"{package}>={tested},<{major}.{minor + 1}"' in pyproject, package


def test_a_needs_record_is_what_it_holds() -> None:
    assert Needs().locks() == (None, None, False, False)
    assert EXCLUSIVE.locks() == (ALONE, None, False, True)
