"""What a test's markers ask for: where its servers and files are (RAM or the host's
disk), which of the machine locks it shares or holds alone, and whether its worker is
favoured over the others (CPU weight). tests/README.md has the decision table."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

SHARED, ALONE = "shared", "alone"
MARKERS = ("live", "disk", "exclusive", "disk_exclusive", "cpu_exclusive", "cpu_light")
MARKER_HELP = {
    "live": "starts servers or loads, touches cgroups, kernel knobs or the machine "
            "(deselect with -m 'not live'); its servers and files in RAM",
    "disk": "its servers and files on the host's disk (a disk limit, disk telemetry, an "
            "ext4 flag); implies live",
    "exclusive": "needs the machine alone (kernel knobs, a CPU share or a limit measured, "
                 "a CPU-bound run that may not dip); implies live",
    "disk_exclusive": "needs the host's disk alone (a timing the others' writes change), "
                      "the tests in RAM beside it at a low CPU weight; implies live and disk",
    "cpu_exclusive": "one at a time, the rest of the suite beside it at a low CPU weight (a "
                     "signal their disk writes do not change: tests/README.md); implies live",
    "cpu_light": "a timing that the others' CPU would delay, of a test that itself uses "
                 "little CPU (a slow device's, a standby's): one at a time after the "
                 "disk_exclusive chain, beside the cpu_exclusive test, the rest at a low CPU "
                 "weight; implies live",
}
# A live test's servers and files are in RAM, where they write nothing to the host's disk,
# so a test timing that disk runs beside them; without a tmpfs here, all are on the disk.
RAM_ROOT = Path("/dev/shm")


@dataclass(frozen=True)
class Needs:
    """What a test holds while it runs, and where its servers and files are."""

    machine: str | None = None  # SHARED or ALONE; None: a test not marked live
    disk: str | None = None
    cpu: bool = False  # the CPU lock, alone
    favoured: bool = False  # its worker over the others (CPU weight)
    on_disk: bool = False

    def locks(self) -> tuple[str | None, str | None, bool, bool]:
        """What it holds: tests alike in this keep the locks from one to the next."""
        return self.machine, self.disk, self.cpu, self.favoured


OFFLINE = Needs()  # parsers, analysis of committed samples, lint, types: touches nothing


def needs_for(marked: Iterable[str], in_ram_possible: bool = True) -> Needs:
    """The needs of a test with these markers (pure: the decision table of tests/README.md)."""
    marked = set(marked) & set(MARKERS)
    on_disk = bool(marked & {"disk", "disk_exclusive"}) or not in_ram_possible
    disk = SHARED if on_disk else None
    if "exclusive" in marked:  # nothing live beside it
        return Needs(machine=ALONE, favoured=True, on_disk=on_disk)
    if "disk_exclusive" in marked:
        return Needs(machine=SHARED, disk=ALONE, favoured=True, on_disk=True)
    if "cpu_exclusive" in marked:
        return Needs(machine=SHARED, disk=disk, cpu=True, favoured=True, on_disk=on_disk)
    if "cpu_light" in marked:  # favoured, in the second chain: no lock alone
        return Needs(machine=SHARED, disk=disk, favoured=True, on_disk=on_disk)
    if marked:
        return Needs(machine=SHARED, disk=disk, on_disk=on_disk)
    return OFFLINE


@functools.cache
def in_ram_possible() -> bool:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[1] == str(RAM_ROOT) and fields[2] == "tmpfs":
            return os.access(RAM_ROOT, os.W_OK)
    return False


def needs_of(item: pytest.Item | None) -> Needs:
    if item is None:
        return OFFLINE
    return needs_for((name for name in MARKERS if item.get_closest_marker(name)),
                     in_ram_possible())


def pytest_configure(config: pytest.Config) -> None:
    for name in MARKERS:
        config.addinivalue_line("markers", f"{name}: {MARKER_HELP[name]}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of the other tiers is live (`-m "not live"` leaves it out)."""
    for item in items:
        if needs_of(item).machine is not None and not item.get_closest_marker("live"):
            item.add_marker(pytest.mark.live)
