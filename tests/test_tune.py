"""pglab tune's input checks.

A real tune (baseline + candidates on the checkpoint storm) takes over a minute and its
short form did not storm reliably on every run; it is measured by hand for now (see the
README's tuning section and the closing note of the session that added it)."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli, write_scenario


def test_tune_refuses_a_sweep(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, "[workload]\nclients = [1, 2]\nscale = 1\n")
    result = run_cli("tune", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 2
    assert "tune needs a single run" in result.stderr and "Traceback" not in result.stderr
