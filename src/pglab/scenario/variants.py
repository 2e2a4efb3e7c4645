"""Sweeps and matrices: one scenario -> the variants that each make one run.

`workload.clients = [1, 4, 16]` (sysbench: `workload.threads`) is a sweep; `[matrix]` is
a cartesian product of overrides; together, every matrix point runs at every client count.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Any

from pglab.errors import BadInput
from pglab.scenario.model import Scenario
from pglab.scenario.overrides import check_key, set_dotted
from pglab.scenario.validation import validate


@dataclass(frozen=True)
class Variant:
    """One run's worth of scenario: the base plus the overrides that make this point."""

    scenario: Scenario
    overrides: dict[str, Any]  # the matrix/sweep point, e.g. {"workload.clients": 8}

    @property
    def clients(self) -> int:
        """This point's client count (pgbench clients, sysbench threads)."""
        return self.scenario.workload.concurrency[0]

    def label(self) -> str:
        return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.overrides.items())


def expand_variants(scenario: Scenario, raw: dict[str, Any], where: str) -> list[Variant]:
    """One variant per matrix point times client count, in a stable order; each point is
    validated as a scenario of its own, so a bad matrix value names its variant."""
    axes: list[tuple[str, list[Any]]] = []
    for key, values in scenario.matrix.items():
        check_key(key, f"{where}: matrix")
        if not values:
            raise BadInput(f"{where}: matrix.{key} is empty: expected a list of values")
        if key in ("workload.clients", "workload.threads"):
            raise BadInput(f"{where}: matrix.{key}: use {key} = [..]")
        axes.append((key, values))
    clients = scenario.workload.concurrency
    if len(clients) > 1 or axes:
        axes.append((scenario.workload.concurrency_key, clients))
    variants: list[Variant] = []
    for point in itertools.product(*(values for _, values in axes)):
        overrides = {key: value for (key, _), value in zip(axes, point, strict=True)}
        raw = copy.deepcopy(raw)
        raw.pop("matrix", None)
        for key, value in overrides.items():
            set_dotted(raw, key, value, f"{where}: matrix")
        # each variant's own label: not accumulated over the loop
        variant_where = f"{where} (variant {overrides})" if overrides else where
        variants.append(Variant(validate(raw, variant_where), overrides))
    return variants
