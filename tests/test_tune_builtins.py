"""Every built-in completes a tune (issue 17): shortened runs, one round, one candidate.
About 10 minutes on a loaded 2-core machine, most of it the two synchronous-standby
scenarios (four labs with standbys each: baseline, the candidate's check, a round).

What is checked is that the tune reaches its end on each built-in and says what happened
to each candidate (measured, or failed with its reason), not which change wins: a 2 s
run of a pathology may not show it (bench/tune_time.py measures the default tunes). The
sweep built-in (too-many-connections) is tuned at its first point. Which advice a paused
standby gets (quorum commit first) is checked on a full-length run in
test_builtin_scenarios.py and on committed samples in test_analysis.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from pglab.scenario.builtin import builtin_names

SHORT = ("workload.duration='2s'", "workload.warmup='1s'")
# faults must fall inside the shortened measured window
EXTRA = {
    # 2 s of pause in 4 s: long enough that the standby's silence is the window's story
    "sync-standby-paused": ["workload.duration='4s'",
                            'faults=[{at="1s", action="pause-standby", node="standby1", '
                            'duration="2s"}]'],
    "sync-standby-slow-disk": ['faults=[{at="1s", action="bulk-update", args={rows=20000}}]'],
    "standby-slow-volume": ['faults=[{at="1s", action="bulk-update", args={rows=20000}}]'],
    # the durability built-ins: one cut at scale 1 (a cycle of a few seconds)
    "crash-under-load": ["workload.scale=1", 'faults=[{at="1s", action="crash"}]'],
    **{name: ["workload.scale=1", 'faults=[{at="1s", action="power-loss"}]']
       for name in ("power-loss-honest", "power-loss-lying-cache", "power-loss-async-commit",
                    "power-loss-fsync-off")},
}


# demo is the tour's healthy load, tuned like healthy-control; the rest are the catalogue
@pytest.mark.live
@pytest.mark.timeout(600)  # a synchronous-standby tune takes 3 minutes under load
@pytest.mark.parametrize("name", [n for n in builtin_names() if n != "demo"])
def test_every_builtin_completes_a_tune(tmp_path: Path, name: str) -> None:
    sets = [*SHORT, *EXTRA.get(name, [])]
    args = ["tune", name, "--results", str(tmp_path / "r"), "--repeats", "1", "--top", "1"]
    for item in sets:
        args += ["--set", item]
    result = run_cli(*args, timeout=600)
    files = list((tmp_path / "r" / name).glob("*.tune.json"))
    assert len(files) == 1, result.stderr[-2000:]
    tuned = json.loads(files[0].read_text())
    assert result.returncode == 0 and tuned["status"] == "completed", (
        tuned["reason"], result.stderr[-2000:])
    assert len(tuned["baseline"]) >= 1
    for candidate in tuned["candidates"]:
        # measured against the baseline, or marked with why not: never silently dropped
        assert candidate["metrics"] or candidate["failed"], candidate
    assert f"tune {tuned['tune_id']}: completed" in result.stdout
