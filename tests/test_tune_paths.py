"""pglab tune on the paths that could end it: a candidate that cannot start, a change
that needs others to go with it, a Ctrl-C. Each still leaves its <tune-id>.tune.json.

Real servers, real pgbench; a candidate that "cannot start" is made real by pointing
PGLAB_PGBOUNCER at a program that exits at once (/bin/false)."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import SAMPLES, run_cli, write_scenario
from pglab.analysis.recommendations import Facts, recommend
from pglab.results.manifest import Manifest
from pglab.runner import QuietUI, RunOptions
from pglab.scenario import load
from pglab.tune import Candidate, CandidateResult, TuneResult, _Tuner
from test_tune import CHURN


def _tune_file(results: Path, name: str) -> dict[str, Any]:
    (path,) = (results / name).glob("*.tune.json")
    found: dict[str, Any] = json.loads(path.read_text())
    return found


# A connection per transaction: its baseline shows too-many-connections (so the pooler
# is a candidate) only with the CPU it needs; under the whole suite's load it did 16 TPS
# and 0 in its measured seconds, and nothing was a candidate.
@pytest.mark.cpu_exclusive
def test_a_candidate_that_cannot_start_is_marked_and_the_tune_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = write_scenario(tmp_path, CHURN, name="churn")
    results = tmp_path / "r"
    result = run_cli("tune", str(scenario), "--results", str(results), "--repeats", "1",
                     "--top", "1", env={"PGLAB_PGBOUNCER": "/bin/false"}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    tuned = _tune_file(results, "churn")
    assert tuned["status"] == "completed" and tuned["format"] == 2
    (candidate,) = tuned["candidates"]
    assert candidate["rule"] == "pgbouncer"
    # step 1's round starts with the candidate (the analysed run is its baseline): its
    # first run is where it is refused, and the tune goes on without it
    assert candidate["failed"].startswith("run failed in round 1: "), candidate
    assert "pgbouncer" in candidate["failed"].lower(), candidate
    assert candidate["runs"] == [] and candidate["kept"] is False
    assert len(tuned["baseline"]) == 1  # no baseline run after the analysed one
    assert tuned["winning_overrides"] == []
    assert "failed: run failed in round 1" in result.stdout
    assert "details: " in result.stdout
    # Where a round would start with a baseline (a later step, the combined changes), the
    # server's check refuses it first, with no run spent on it
    monkeypatch.setenv("PGLAB_PGBOUNCER", "/bin/false")
    tuner = _Tuner(lambda extra: load(scenario, list(extra)), RunOptions(results), QuietUI(),
                   1, 1, None, TuneResult("check", 0.1), 2)
    refused = CandidateResult(Candidate("pgbouncer", candidate["change"], []))
    assert tuner.prepare([refused], [], check=True) == {}
    assert refused.failed is not None and refused.failed.startswith(
        "refused before its runs: "), refused.failed
    assert refused.runs == []


def _builtin_walinit_manifest() -> dict[str, Any]:
    """The walinit sample's facts with the built-in wal-segment-init-stall's WAL sizes
    (min_wal_size 32MB, max_wal_size 64MB), under which 64 MB segments cannot start."""
    manifest = json.loads((SAMPLES / "runs" / "walinit" / "manifest.json").read_text())
    manifest = copy.deepcopy(manifest)
    settings = manifest["nodes"]["primary"]["settings"]
    settings["min_wal_size"] = {"setting": "32", "unit": "MB"}
    settings["max_wal_size"] = {"setting": "64", "unit": "MB"}
    result: dict[str, Any] = manifest
    return result


@pytest.mark.root
@pytest.mark.disk  # the built-in's ext4 volume: an image under a loop device
def test_wal_segment_size_brings_the_wal_sizes_it_needs(storage_packages: None,
                                                        tmp_path: Path) -> None:
    manifest = _builtin_walinit_manifest()
    fired = recommend(Facts({"wal-segment-init": 0.9}, Manifest.from_json(manifest), False))
    rule = next(r for r in fired if r["rule"] == "wal-segment-size")
    assert rule["change"] == {"server.initdb.wal_segsize_mb": 64,
                              "server.settings.min_wal_size": "128MB",
                              "server.settings.max_wal_size": "128MB"}
    # and the server takes it: the built-in with the whole change starts and runs
    sets = [f"--set={k}={json.dumps(v)}" for k, v in rule["change"].items()]
    result = run_cli("run", "wal-segment-init-stall", *sets, "--set",
                     "workload.duration='1s'", "--set", "workload.warmup='0s'",
                     "--set", "telemetry.enabled=false", "--results", str(tmp_path / "r"),
                     timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    # large enough already: nothing added
    settings = manifest["nodes"]["primary"]["settings"]
    settings["min_wal_size"] = {"setting": "256", "unit": "MB"}
    settings["max_wal_size"] = {"setting": "1024", "unit": "MB"}
    fired = recommend(Facts({"wal-segment-init": 0.9}, Manifest.from_json(manifest), False))
    rule = next(r for r in fired if r["rule"] == "wal-segment-size")
    assert rule["change"] == {"server.initdb.wal_segsize_mb": 64}


@pytest.mark.live
def test_an_interrupted_tune_writes_its_file(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, CHURN.replace('duration = "2s"', 'duration = "60s"'),
                              name="churn")
    results = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "pglab", "tune", str(scenario),
                             "--results", str(results)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1"})
    try:
        deadline = time.monotonic() + 180
        while not list(results.glob("churn/*/raw/pgbench.stderr")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
            time.sleep(0.1)
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    tuned = _tune_file(results, "churn")
    assert tuned["status"] == "interrupted" and tuned["reason"] == "SIGINT received"
