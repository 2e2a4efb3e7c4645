"""The kernel knob registry: what a scenario's `[kernel]` table may set, and its checks.

Pure data, used by the scenario model to validate `[kernel]` and `--set kernel.*`, and by
lab/kernel.py, which reads, sets and restores the knobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pglab.errors import did_you_mean
from pglab.units import parse_size

KnobValue = int | str
THP_CHOICES = ("always", "madvise", "never")


@dataclass(frozen=True)
class Knob:
    name: str  # the key in [kernel], sysctl style for /proc/sys knobs
    path: Path
    kind: str  # "int", "size" (bytes, accepts '64MB') or "thp"
    low: int = 0
    high: int | None = None
    help: str = ""
    # The kernel keeps only one of a ratio/bytes pair: writing one zeroes the other.
    pair: str = ""

    def parse(self, value: object) -> KnobValue:
        """The value to write, or ValueError naming what is expected."""
        if self.kind == "thp":
            if value not in THP_CHOICES:
                raise ValueError(f"expected one of {', '.join(THP_CHOICES)}")
            return str(value)
        if self.kind == "size" and isinstance(value, str):
            try:
                value = parse_size(value)
            except ValueError:
                raise ValueError("expected a number of bytes or a size like '64MB'") from None
        top = f" to {self.high}" if self.high is not None else " or more"
        if isinstance(value, bool) or not isinstance(value, int) or value < self.low or (
            self.high is not None and value > self.high
        ):
            raise ValueError(f"expected a whole number from {self.low}{top}")
        return value


def _vm(name: str, kind: str = "int", low: int = 0, high: int | None = None, help: str = "",
        pair: str = "") -> Knob:
    return Knob(f"vm.{name}", Path("/proc/sys/vm") / name, kind, low, high, help, pair)


# The one list: validation, reading, docs (docs/LAB.md lists these names) and tests use it.
KNOBS: tuple[Knob, ...] = (
    _vm("dirty_ratio", high=100, help="% of memory dirty before writers block",
        pair="vm.dirty_bytes"),
    _vm("dirty_bytes", "size", low=8192, help="bytes dirty before writers block",
        pair="vm.dirty_ratio"),
    _vm("dirty_background_ratio", high=100, help="% of memory dirty before writeback starts",
        pair="vm.dirty_background_bytes"),
    _vm("dirty_background_bytes", "size", low=1, help="bytes dirty before writeback starts",
        pair="vm.dirty_background_ratio"),
    _vm("dirty_expire_centisecs", help="age at which dirty data is written back"),
    _vm("dirty_writeback_centisecs", help="interval of the flusher threads' wake-ups"),
    _vm("swappiness", high=200, help="preference for swapping over dropping page cache"),
    # the kernel may reserve fewer than asked (free memory too fragmented): read back
    _vm("nr_hugepages", help="huge pages reserved (2 MB each on x86-64), for huge_pages = on"),
    Knob("transparent_hugepage", Path("/sys/kernel/mm/transparent_hugepage/enabled"), "thp",
         help="transparent huge pages: always, madvise or never"),
)
KNOB_NAMES = tuple(k.name for k in KNOBS)
BY_NAME = {k.name: k for k in KNOBS}


def check_knobs(wanted: Mapping[str, object]) -> dict[str, KnobValue]:
    """Validated values; ValueError('key: message') for the first bad one."""
    out: dict[str, KnobValue] = {}
    for name, value in wanted.items():
        knob = BY_NAME.get(name)
        if knob is None:
            raise ValueError(f"unknown kernel knob '{name}'{did_you_mean(name, KNOB_NAMES)}; "
                             f"known: {', '.join(KNOB_NAMES)}")
        try:
            out[name] = knob.parse(value)
        except ValueError as exc:
            shown = str(value).lower() if isinstance(value, bool) else repr(value)
            raise ValueError(f"'{name}' = {shown}: {exc}") from None
        if knob.pair in wanted:
            raise ValueError(f"set '{name}' or '{knob.pair}', not both: the kernel keeps only one")
    return out
