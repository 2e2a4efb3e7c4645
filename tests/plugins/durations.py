"""Each test's time: kept in .pytest_cache for the next run's queue (plugins.units), and
written to tests/durations.json by --save-durations (the order of a fresh clone's first run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SECONDS_KEY = "pglab/test-seconds"  # each test's time in the last run, in .pytest_cache
DURATIONS = Path(__file__).resolve().parent.parent / "durations.json"
SAVED_FROM_S = 0.5  # shorter tests are left out of durations.json


def known_seconds(config: pytest.Config) -> dict[str, float]:
    """Each test's time in the last run (.pytest_cache) over the committed durations."""
    cache = getattr(config, "cache", None)
    return {**json.loads(DURATIONS.read_text()), **(cache.get(SECONDS_KEY, {}) if cache else {})}


class Durations:
    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.spent[report.nodeid] = self.spent.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if os.environ.get("PYTEST_XDIST_WORKER") or not self.spent:
            return
        if getattr(session.config, "cache", None) is not None:
            known: dict[str, float] = session.config.cache.get(SECONDS_KEY, {})
            session.config.cache.set(SECONDS_KEY, {**known, **self.spent})
        if session.config.getoption("save_durations"):
            DURATIONS.write_text(json.dumps({nodeid: round(spent, 1) for nodeid, spent
                                             in sorted(self.spent.items())
                                             if spent >= SAVED_FROM_S}, indent=0) + "\n")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--save-durations", action="store_true",
                     help="write this run's test times to tests/durations.json (the order "
                          "of a fresh clone's first run)")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Durations(), "pglab-durations")
