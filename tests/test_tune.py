"""pglab tune on a real pathology: the baseline's advice, measured against it."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from conftest import run_cli, write_scenario
from test_builtin_scenarios import low_seconds


def test_tune_keeps_a_change_that_removes_the_checkpoint_storm(tmp_path: Path) -> None:
    # One round (baseline, candidate) with an 8 s load: the storm costs most of the TPS,
    # so a single interleaved round is enough to see it; more rounds only narrow it.
    result = run_cli("tune", "checkpoint-flush-storm", "--results", str(tmp_path / "r"),
                     "--set", "workload.duration=8s", "--set", "workload.warmup=1s",
                     "--set", "workload.scale=10",
                     "--top", "1", "--repeats", "1", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (tune_file,) = (tmp_path / "r" / "checkpoint-flush-storm").glob("*.tune.json")
    tune = json.loads(tune_file.read_text())
    assert len(tune["baseline"]) == 2  # the first run, then one interleaved round
    (candidate,) = tune["candidates"]
    assert len(candidate["runs"]) == 1 and "checkpoint-io" in candidate["because"]
    verdicts = {m["metric"]: m["verdict"] for m in candidate["metrics"]}
    assert set(verdicts) == {"stall_seconds", "tps", "p99"}
    assert candidate["kept"] == ("better" in verdicts.values()
                                 and "worse" not in verdicts.values())
    assert "winning overrides" in result.stdout or "keep the baseline" in result.stdout
    # The baseline runs are the checkpoint-flush-storm scenario itself: its signal.
    baselines = [tune_file.parent / name for name in tune["baseline"]]
    assert max(low_seconds(run) for run in baselines) >= 1
    for run in baselines:
        events = pl.read_parquet(run / "events.parquet")
        assert events.filter(pl.col("kind") == "checkpoint").height >= 1
        envelope = json.loads((run / "manifest.json").read_text())["nodes"]["primary"][
            "envelope"]
        assert abs(envelope["measured_write_mbps"] - 16) <= 1.6  # verified at 16 MB/s


def test_tune_refuses_a_sweep(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, "[workload]\nclients = [1, 2]\nscale = 1\n")
    result = run_cli("tune", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "tune needs a single run" in result.stderr and "Traceback" not in result.stderr
