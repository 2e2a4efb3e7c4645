"""`pglab ls` filters, and docs/RESULTS.md's "Querying many runs" example run for real with polars
over a results tree made from real pgbench 15 and 18 logs (imported)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

from conftest import ROOT, SAMPLES, run_cli
from pglab.importer import import_run

PGBENCH = SAMPLES / "pgbench"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ls") / "results"
    for version in ("15", "18"):
        sample = PGBENCH / version
        import_run(sample / "txlog_plain.summary.txt",
                   [sample / "txlog_plain.0", sample / "txlog_plain.1"], root, f"tx-{version}")
        import_run(sample / "agg_rate.summary.txt",
                   [sample / "agg_rate.0", sample / "agg_rate.1"], root, f"agg-{version}")
    return root


def listed(*args: str) -> list[dict[str, object]]:
    result = run_cli("ls", *args, "--json")
    assert result.returncode == 0, result.stderr
    runs: list[dict[str, object]] = json.loads(result.stdout)
    return runs


def test_filters(results: Path) -> None:
    every = listed(str(results))
    assert sorted(str(r["scenario"]) for r in every) == ["agg-15", "agg-18", "tx-15", "tx-18"]
    assert all(r["status"] == "completed" and r["source"] == "import" for r in every)
    assert {str(r["scenario"]) for r in listed(str(results), "--scenario", "tx-*")} == {
        "tx-15", "tx-18"}
    assert listed(str(results), "--status", "failed", "--status", "interrupted") == []
    # The samples were made on 2026-11-21 (UTC): dates and times around it.
    assert len(listed(str(results), "--since", "2026-11-21", "--until", "2026-11-22")) == 4
    assert listed(str(results), "--since", "2026-11-22") == []
    assert listed(str(results), "--until", "2026-11-21T00:00") == []
    table = run_cli("ls", str(results), "--scenario", "agg-18")
    assert "agg-18" in table.stdout and "tx-18" not in table.stdout
    assert "imported" in table.stdout


def test_bad_date_is_one_line(results: Path) -> None:
    result = run_cli("ls", str(results), "--since", "yesterday")
    assert result.returncode == 2
    assert result.stderr.strip() == ("pglab: --since 'yesterday': expected a date or time "
                                     "like 2026-11-21 or 2026-11-21T14:00")


def test_readme_polars_example_runs(results: Path) -> None:
    readme = (ROOT / "docs" / "RESULTS.md").read_text()
    section = readme.split("## Querying many runs", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    printed = io.StringIO()
    namespace: dict[str, object] = {}
    cwd = os.getcwd()
    os.chdir(results.parent)
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "docs/RESULTS.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    per_run = namespace["per_run"]
    import polars as pl

    assert isinstance(per_run, pl.DataFrame)
    assert per_run.height == 4 and per_run.columns == ["file", "tps_median", "p99_worst_ms",
                                                       "seconds"]
    by_scenario = {Path(f).parent.parent.name: row for f, row in
                   zip(per_run["file"], per_run.iter_rows(named=True), strict=True)}
    # p99 exists only where per-transaction logs were imported.
    assert by_scenario["tx-18"]["p99_worst_ms"] is not None
    assert by_scenario["agg-18"]["p99_worst_ms"] is None
    assert all(row["tps_median"] > 0 for row in by_scenario.values())
    assert "tps_median" in printed.getvalue()
