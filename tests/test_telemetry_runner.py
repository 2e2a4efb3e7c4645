"""probes/telemetry.py offline: the one way telemetry starts (which probes, for a run and
for an observation) and what the observer's cost counts."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from pglab.probes import PROBES
from pglab.probes.base import Probe, ProbeOutput, Sample
from pglab.probes.db_base import DbProbe
from pglab.probes.telemetry import open_telemetry
from pglab.results import files


class Extra(Probe):
    name = "extra.probe"
    help = "stands in for what observe adds (throughput, node_exporter, its log)"

    def sample(self, now: dt.datetime) -> ProbeOutput:
        return ProbeOutput()


def _names(probes: list[Probe]) -> list[str]:
    return [p.name for p in probes]


def test_a_run_gets_the_default_probes_less_the_excluded_and_the_included_opt_in(
        tmp_path: Path) -> None:
    runner = open_telemetry([], tmp_path, exclude=["db.waits"], include=["os.kernel"])
    runner.sink.close()
    expected = [p.name for p in PROBES
                if p.name != "db.waits" and (not p.opt_in or p.name == "os.kernel")]
    assert _names(runner._probes) == expected


def test_an_observation_gets_the_database_probes_and_its_own(tmp_path: Path) -> None:
    extra = Extra()
    runner = open_telemetry([], tmp_path, db_only=True, extra=[extra], interval_s=2.0,
                            wait_hz=5)
    runner.sink.close()
    expected = [p.name for p in PROBES if issubclass(p, DbProbe) and not p.opt_in]
    assert _names(runner._probes) == [*expected, "extra.probe"]
    assert runner._probes[-1] is extra
    assert (runner.interval_s, runner.fast_period) == (2.0, 0.2)


def test_the_sinks_writing_is_part_of_the_observers_cost(tmp_path: Path) -> None:
    runner = open_telemetry([], tmp_path, db_only=True)
    runner.start()
    now = dt.datetime.now(dt.timezone.utc)
    runner.sink.write(ProbeOutput(samples=[Sample(now, "host", "os.cpu", "user_pct", "",
                                                  float(i)) for i in range(50_000)]))
    # the writing thread records its CPU after each write: wait for the write's, not an
    # earlier tick's (a fraction of a millisecond with nothing to write)
    spool = tmp_path / files.SPOOL / files.SPOOL_SAMPLES
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
            not spool.exists() or spool.stat().st_size == 0 or runner.sink.cpu_s < 0.001):
        time.sleep(0.05)
    runner.stop()
    runner.sink.close()  # as a run and an observation do: its last write is counted
    cost = runner.summary()
    # the loops sampled nothing here (no nodes): what the sink's thread wrote is the cost
    assert runner.sink.cpu_s > 0
    assert cost["observer_cpu_s"] >= cost["sink_cpu_s"] == round(runner.sink.cpu_s, 3) > 0
    assert cost["observer_cpu_pct"] > 0
