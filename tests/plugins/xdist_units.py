"""The one place that depends on pytest-xdist's internals: its scope scheduling, with the
workers' units (plugins.units) as scopes. xdist's public way, `--dist loadgroup` and the
`xdist_group` marker, tags a test by assigning `item._nodeid`, which pytest 9 no longer
reads (a node's id is `_id`): every test would be a unit of its own. So this overrides
LoadScopeScheduling's `_split_scope`, and pyproject.toml pins the versions it was tested
with (test_harness.py fails on others)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from plugins.units import UNITS_ENV

TESTED = {"pytest": "9.2", "pytest-xdist": "3.8"}  # major.minor, as pyproject.toml pins


def unit_scheduler(config: pytest.Config, log: object, units: Path) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):  # type: ignore[misc]
        _map: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._map is None:  # written by the workers before their collection ends
                self._map = json.loads(units.read_text())
            return self._map.get(nodeid, nodeid)

    return UnitScheduling(config, log)


class UnitScheduler:
    """The controller's side: makes the file the workers write their units to."""

    def __init__(self) -> None:
        self.units = Path(tempfile.mkdtemp(prefix="pglab-test-units-")) / "units.json"
        os.environ[UNITS_ENV] = str(self.units)  # the workers, started later, inherit it

    @pytest.hookimpl
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> Any:
        return unit_scheduler(config, log, self.units)

    def pytest_unconfigure(self) -> None:
        shutil.rmtree(self.units.parent, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and getattr(config.option, "numprocesses", None)):
        config.pluginmanager.register(UnitScheduler(), "pglab-unit-scheduler")
