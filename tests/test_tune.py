"""pglab tune: input checks, and one real tune whose answer is not in doubt.

The real tune runs a connection-per-transaction load (pgbench -C, no pool): the analysis
finds too-many-connections over the whole run and recommends PgBouncer; tune then runs
the baseline and the pooled variant interleaved and must keep the pooler, measured
several times better. A tune on a checkpoint storm is measured by hand (its short form
did not storm on every run; see the closing notes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli, write_scenario

CHURN = """
[server.settings]
max_connections = 100
[workload]
scale = 5
mix = ["select-only"]
reconnect = true
clients = 30
jobs = 2
duration = "2s"
warmup = "1s"
"""


def test_tune_refuses_a_sweep(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, "[workload]\nclients = [1, 2]\nscale = 1\n")
    result = run_cli("tune", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "tune needs a single run" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.live  # interleaved repeats: made for a shared machine
def test_tune_keeps_a_pooler_for_a_connection_per_transaction(
        tmp_path: Path, pgbouncer_binary: str) -> None:
    scenario = write_scenario(tmp_path, CHURN, name="churn")
    result = run_cli("tune", str(scenario), "--results", str(tmp_path / "r"),
                     "--repeats", "2", "--top", "1", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    (tune_file,) = (tmp_path / "r" / "churn").glob("*.tune.json")
    tuned = json.loads(tune_file.read_text())
    assert len(tuned["baseline"]) == 3  # the first run, then one per round
    (candidate,) = tuned["candidates"]
    assert candidate["rule"] == "pgbouncer" and candidate["because"] == ["too-many-connections"]
    assert len(candidate["runs"]) == 2
    tps = next(m for m in candidate["metrics"] if m["metric"] == "tps")
    assert tps["verdict"] == "better" and tps["delta_pct"] > 100, tps
    assert tps["ci_pct"][0] > 0  # the whole interval is an improvement
    assert candidate["kept"] is True
    assert tuned["winning_overrides"] == ['topology.pooler="pgbouncer"']
    assert "topology.pooler" in result.stdout
