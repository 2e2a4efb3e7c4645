"""`pglab import` with real pgbench 15 and 18 outputs (tests/samples/pgbench/): the
summary alone (with and without -r), -P progress lines kept with it, -l per-transaction logs,
--aggregate-interval logs;
round trips against what pgbench itself printed and logged; bad input."""

from __future__ import annotations

import datetime as dt
import itertools
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from conftest import SAMPLES, run_cli
from pglab.errors import BadInput
from pglab.importer import import_run, read_aggregate_log
from pglab.workload.pgbench_output import parse_progress_line, parse_summary

PGBENCH = SAMPLES / "pgbench"
VERSIONS = ("15", "18")


def do_import(tmp_path: Path, summary: Path, *logs: Path,
              name: str = "old") -> tuple[Path, dict[str, Any]]:
    """In-process (the CLI path is tested below): the folder and its manifest."""
    run = import_run(summary, list(logs), tmp_path, name)
    return run.path, json.loads((run.path / "manifest.json").read_text())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["summary_tpcb", "summary_r", "summary_mix_r"])
def test_summary_only(tmp_path: Path, version: str, name: str) -> None:
    path = PGBENCH / version / f"{name}.txt"
    summary = parse_summary(path.read_text())
    folder, manifest = do_import(tmp_path, path)
    measured = manifest["results"]["measured"]
    assert measured["tps"] == summary.tps and measured["transactions"] == summary.transactions
    assert measured["lat_avg_ms"] == summary.latency_avg_ms and measured["lat_p99_ms"] is None
    assert manifest["status"] == "completed" and manifest["source"]["kind"] == "import"
    assert manifest["source"]["from"] == "summary"
    assert manifest["nodes"]["primary"]["server_version"].startswith(version + ".")
    workload = manifest["scenario"]["workload"]
    assert workload["per_statement"] is name.endswith("_r")
    assert workload["clients"] == [summary.clients] and workload["jobs"] == summary.threads
    if name == "summary_mix_r":
        assert workload["mix"] == ["select-only@80", "tpcb-like@20"]
    else:
        assert workload["mix"] == ["tpcb-like"]
    assert (folder / "raw" / "pgbench.stdout").read_text() == path.read_text()
    assert not (folder / "client.parquet").exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_progress_lines_make_the_series(tmp_path: Path, version: str) -> None:
    """pgbench -P 1 with its stderr kept (2>&1): each progress line is a second of the
    series, as pgbench printed it; the 2 s table lock is a stall the analysis finds."""
    path = PGBENCH / version / "progress_summary.txt"
    lines = [p for line in path.read_text().splitlines()
             if (p := parse_progress_line(line)) is not None]
    assert len(lines) == 8
    folder, manifest = do_import(tmp_path, path)
    assert manifest["source"]["from"] == "progress"
    series = pl.read_parquet(folder / "client.parquet").sort("t")
    assert series["tps"].to_list() == [line.tps for line in lines]
    assert series["lat_avg_ms"].to_list() == [line.lat_ms for line in lines]
    assert series["job"].null_count() == 8 and not series["partial"].any()
    gaps = {b - a for a, b in itertools.pairwise(series["t"].to_list())}
    assert gaps == {dt.timedelta(seconds=1)}
    # the run ended when the file was last written
    last: dt.datetime = series["t"].to_list()[-1]
    assert abs(last.timestamp() + 1.0 - path.stat().st_mtime) < 1e-3
    measured = manifest["results"]["measured"]
    assert measured["seconds"] == 8
    assert measured["transactions"] == round(sum(line.tps for line in lines))
    # what pgbench's own summary says, within a second's rounding of its intervals
    summary = parse_summary(path.read_text())
    assert summary.transactions is not None
    assert abs(measured["transactions"] - summary.transactions) <= max(lines, key=lambda
                                                                       p: p.tps).tps
    analysis = run_cli("analyze", str(folder))  # as `pglab import` did after importing
    assert analysis.returncode == 0, analysis.stderr
    document = json.loads((folder / "analysis.json").read_text())
    (stall,) = document["stalls"]
    assert stall["kind"] == "drop-to-zero" and stall["seconds"] >= 2
    assert "an imported run: no telemetry" in analysis.stdout


def test_progress_timestamps_are_the_clock(tmp_path: Path) -> None:
    path = PGBENCH / "15" / "progress_timestamp_summary.txt"
    first = next(p for line in path.read_text().splitlines()
                 if (p := parse_progress_line(line)) is not None)
    folder, manifest = do_import(tmp_path, path, name="stamped")
    series = pl.read_parquet(folder / "client.parquet").sort("t")
    # a line is stamped when its second ended: the series' first second began 1 s before
    assert series["t"][0].timestamp() == pytest.approx(first.t - 1.0)
    assert manifest["started_at"].startswith(
        dt.datetime.fromtimestamp(first.t - 1.0, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"))
    assert manifest["results"]["measured"]["seconds"] == 4
    warm = import_run(path, [], tmp_path, "warm", warmup_s=2)  # --warmup 2s
    assert pl.read_parquet(warm.path / "client.parquet").sort("t")["warmup"].to_list() == [
        True, True, False, False]
    assert json.loads((warm.path / "manifest.json").read_text())["results"]["measured"][
        "seconds"] == 2


@pytest.mark.parametrize("version", VERSIONS)
def test_per_transaction_logs_round_trip(tmp_path: Path, version: str) -> None:
    sample = PGBENCH / version
    logs = [sample / "txlog_plain.0", sample / "txlog_plain.1"]
    folder, manifest = do_import(tmp_path, sample / "txlog_plain.summary.txt", *logs)
    assert manifest["source"]["from"] == "transactions"
    series = pl.read_parquet(folder / "client.parquet")
    # Every logged transaction is in the series once (all-jobs rows), and per job.
    lines = [sum(1 for _ in p.open()) for p in logs]
    everything = series.filter(pl.col("job").is_null())
    assert everything["tps"].sum() == sum(lines)
    for job, count in enumerate(lines):
        assert series.filter(pl.col("job") == job)["tps"].sum() == count
    measured = manifest["results"]["measured"]
    assert measured["lat_p99_ms"] is not None and measured["seconds"] >= 1
    window = everything.filter(~pl.col("warmup") & ~pl.col("partial"))
    assert measured["transactions"] == window["tps"].sum()


def test_warmup_is_left_out(tmp_path: Path) -> None:
    sample = PGBENCH / "15"
    logs = [sample / "txlog_stall.0", sample / "txlog_stall.1"]
    run = import_run(sample / "txlog_stall.summary.txt", logs, tmp_path, "w", warmup_s=2)
    series = pl.read_parquet(run.path / "client.parquet").filter(pl.col("job").is_null())
    flags = series["warmup"].to_list()
    assert flags[:2] == [True, True] and not any(flags[3:])
    measured = run.manifest.measured
    window = series.filter(~pl.col("warmup") & ~pl.col("partial"))
    assert measured["seconds"] == window.height and measured["transactions"] == window[
        "tps"].sum()


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["agg_plain", "agg_rate", "agg_retries", "agg_failed"])
def test_aggregate_logs_round_trip(tmp_path: Path, version: str, name: str) -> None:
    sample = PGBENCH / version
    logs = [sample / f"{name}.0", sample / f"{name}.1"]
    raw = pl.concat([read_aggregate_log(p, job) for job, p in enumerate(logs)])
    assert raw.width == 16  # 15 columns in pgbench 15 and 18, plus the job
    folder, manifest = do_import(tmp_path, sample / f"{name}.summary.txt", *logs)
    assert manifest["source"]["from"] == "aggregate"
    series = pl.read_parquet(folder / "client.parquet")
    everything = series.filter(pl.col("job").is_null())
    assert everything["tps"].sum() == raw["n"].sum()
    assert everything["lat_max_ms"].max() == pytest.approx(
        int(raw["lat_max"].cast(pl.Int64).max() or 0) / 1000.0)
    assert everything["lat_p99_ms"].null_count() == everything.height
    measured = manifest["results"]["measured"]
    window = raw.filter(pl.col("start") == sorted(set(raw["start"].to_list()))[1])
    assert measured["seconds"] == 1  # 3 intervals: the first and last are partial
    assert measured["transactions"] == window["n"].sum()
    lat_sum, n = int(window["lat_sum"].sum()), int(window["n"].sum())
    assert measured["lat_avg_ms"] == pytest.approx(lat_sum / n / 1000.0)
    summary = parse_summary((sample / f"{name}.summary.txt").read_text())
    if name == "agg_rate":  # skipped transactions and schedule lag are logged with -R/-L
        assert everything["skipped"].sum() == raw["skipped"].sum() > 0
        assert summary.skipped is not None and summary.skipped >= raw["skipped"].sum()
        assert measured["lag_avg_ms"] > 0
    if name == "agg_failed":  # deadlocks, but no --failures-detailed: unknown, not zero
        assert summary.failed is not None and summary.failed > 0
        assert measured["failures"] is None
        assert everything["failures"].null_count() == everything.height
    else:
        assert everything["failures"].null_count() == 0
    if name == "agg_retries":  # --failures-detailed: serialization failures are counted
        assert everything["failures"].sum() == raw["serialization_failures"].sum() > 0
        assert summary.failed is not None and summary.failed >= everything["failures"].sum()
        assert everything["retries"].sum() == raw["retries"].sum() > 0


def test_imported_runs_show_in_ls_and_show(tmp_path: Path) -> None:
    sample = PGBENCH / "15"
    result = run_cli("import", str(sample / "agg_plain.summary.txt"),
                     str(sample / "agg_plain.0"), str(sample / "agg_plain.1"),
                     "--results", str(tmp_path), "--name", "legacy", "--warmup", "0s")
    assert result.returncode == 0, result.stderr
    assert "imported" in result.stdout
    (folder,) = (tmp_path / "legacy").iterdir()
    # a series is analysed as a run's is: its findings printed, analysis.json written
    assert "analysis: median" in result.stdout and (folder / "analysis.json").is_file()
    listing = run_cli("ls", str(tmp_path))
    assert listing.returncode == 0 and "legacy" in listing.stdout
    assert "imported" in listing.stdout and "completed" in listing.stdout
    as_json = json.loads(run_cli("ls", str(tmp_path), "--json").stdout)
    assert as_json[0]["source"] == "import" and as_json[0]["status"] == "completed"
    shown = run_cli("show", str(folder))
    assert shown.returncode == 0
    assert "imported" in shown.stdout and "PostgreSQL 15.18" in shown.stdout


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(("files", "expected"), [
    (["{bad_summary}"], "{bad_summary}: not a pgbench summary"),
    (["{summary}", "{bad_agg}"], "{bad_agg}:3: not an --aggregate-interval log line"),
    (["{summary}", "{not_a_log}"], "{not_a_log}: not a pgbench log"),
    (["{summary}", "{txlog}", "{agg}"], "a mix of per-transaction and aggregate logs"),
    (["{summary}", "{tmp}/missing.0"], "{tmp}/missing.0: no such pgbench log file"),
    (["{summary}", "{tmp}"], "{tmp}: a folder, not a pgbench log file"),
])
def test_bad_input_is_one_line(tmp_path: Path, files: list[str], expected: str) -> None:
    sample = PGBENCH / "18"
    agg_lines = (sample / "agg_plain.0").read_text().splitlines()
    values = {
        "tmp": str(tmp_path),
        "summary": str(sample / "agg_plain.summary.txt"),
        "agg": str(sample / "agg_plain.0"),
        "txlog": str(sample / "txlog_plain.0"),
        # a summary cut before its figures, as when pgbench was killed
        "bad_summary": str(write(tmp_path / "cut.txt", "\n".join(
            (sample / "summary_r.txt").read_text().splitlines()[:6]))),
        "bad_agg": str(write(tmp_path / "agg.0", "\n".join(
            [*agg_lines[:2], agg_lines[2][:20] + " x 1"]) + "\n")),
        "not_a_log": str(write(tmp_path / "notes.txt", "this is not a log\n")),
    }
    result = run_cli("import", *[f.format(**values) for f in files], "--results",
                     str(tmp_path / "r"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected.format(**values) in lines[0], result.stderr
    assert not (tmp_path / "r").exists()  # nothing written for bad input


# --- sysbench's stdout ---------------------------------------------------------------------

SYSBENCH = SAMPLES / "sysbench"


def test_sysbench_output_imports_with_its_series_and_summary(tmp_path: Path) -> None:
    path = SYSBENCH / "run_read_write.txt"
    run = import_run(path, [], tmp_path, "old-sysbench", warmup_s=1)
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["source"]["from"] == "sysbench"
    assert manifest["scenario"]["workload"]["driver"] == "sysbench"
    assert manifest["workload"] == {"driver": "sysbench", "version": "1.0.20", "threads": 4,
                                    "per_transaction_log": False}
    assert manifest["results"]["sysbench"]["transactions"] == 3132
    measured = manifest["results"]["measured"]
    # the seconds after the first: 756.83, 647.06, 656.90, 352.66 tps
    assert measured["seconds"] == 4
    assert measured["tps"] == pytest.approx((756.83 + 647.06 + 656.90 + 352.66) / 4)
    assert measured["lat_p95_ms"] == pytest.approx((13.70 + 15.27) / 2)
    series = pl.read_parquet(run.path / "client.parquet")
    assert series["tps"].to_list() == [712.28, 756.83, 647.06, 656.90, 352.66]
    assert series["warmup"].to_list() == [True, False, False, False, False]
    ended = path.stat().st_mtime
    assert series["t"][-1].timestamp() == pytest.approx(ended - 5.0399 + 4, abs=1)
    assert (run.path / "raw" / "sysbench.stdout").read_text() == path.read_text()


def test_imported_sysbench_runs_compare(tmp_path: Path) -> None:
    old = import_run(SYSBENCH / "run_read_write.txt", [], tmp_path, "sb")
    new = import_run(SYSBENCH / "run_insert.txt", [], tmp_path, "sb")
    # wide enough for the table (narrower, a line per metric)
    result = run_cli("compare", str(old.path), str(new.path), env={"COLUMNS": "250"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # the means of the per-second tps: (712.28 + ... + 352.66) / 5, (3368.86 + ...) / 3
    tps = next(line for line in lines if line.startswith("TPS"))
    assert tps.split()[1:8] == ["mean", "of", "seconds", "625.1", "tx/s", "3,207", "tx/s"]
    p95 = next(line for line in lines if line.startswith("latency p95"))
    assert p95.split()[2:9] == ["median", "of", "seconds", "13.70", "ms", "5.67", "ms"]


def test_a_failed_sysbench_output_imports_as_failed(tmp_path: Path) -> None:
    run = import_run(SYSBENCH / "run_division_by_zero.txt", [], tmp_path, "sb")
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["reason"] == "PQexec() failed: 7 division by zero"
    with pytest.raises(BadInput, match="imported alone"):
        import_run(SYSBENCH / "run_insert.txt", [SYSBENCH / "run_deadlock.txt"], tmp_path, "sb")
