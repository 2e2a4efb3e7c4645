"""End to end through the real CLI: real PostgreSQL 18, real pgbench, real results folders."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from conftest import SAMPLES, TINY, processes_under, run_cli, write_scenario
from pglab.paths import labs_dir


def _only_run(results: Path, scenario: str) -> Path:
    runs = [p for p in (results / scenario).iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


@pytest.mark.live
def test_demo_runs_and_summarises(tmp_path: Path) -> None:
    result = run_cli("demo", "--duration", "3s", "--set", "workload.scale=1",
                     "--set", "workload.warmup=1s", "--results", str(tmp_path))
    assert result.returncode == 0, result.stderr
    run_dir = _only_run(tmp_path, "demo")
    for word in ("TPS", "p50 ms", "p95 ms", "p99 ms", "max ms", "failed", "TPS/s", str(run_dir)):
        assert word in result.stdout, word
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["nodes"]["primary"]["server_version"].startswith("18")
    measured = manifest["results"]["measured"]
    assert measured["tps"] > 0 and measured["seconds"] == 3  # exactly --duration
    assert manifest["results"]["pgbench"]["transactions"] >= measured["transactions"]
    for name in ("scenario.toml", "client.parquet", "raw/pgbench.stdout", "raw/pgbench.stderr"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "raw").glob("primary-postgresql.*"))
    series = pl.read_parquet(run_dir / "client.parquet")
    total = series.filter(pl.col("job").is_null())
    assert set(series["job"].drop_nulls().to_list()) == {0, 1}
    measured_tps = total.filter(~pl.col("warmup") & ~pl.col("partial"))["tps"].to_list()
    assert measured_tps and min(measured_tps) > 0
    assert processes_under(labs_dir()) == []


@pytest.fixture(scope="module")
def overridden_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run with --set overrides, which several tests read (none changes it)."""
    work = tmp_path_factory.mktemp("overridden")
    scenario = write_scenario(work, TINY + '[server.settings]\nwork_mem = "8MB"\n')
    result = run_cli("run", str(scenario), "--set", "workload.mix=['select-only@3', "
                     "'tpcb-like@1']", "--set", "server.settings.synchronous_commit=off",
                     "--results", str(work / "r"))
    assert result.returncode == 0, result.stderr
    return _only_run(work / "r", "t")


# disk: os.disk watches the device under the real data dir (these tests share the run)
@pytest.mark.disk
def test_run_scenario_with_overrides_and_show_ls(overridden_run: Path) -> None:
    run_dir, results = overridden_run, overridden_run.parent.parent
    manifest = json.loads((run_dir / "manifest.json").read_text())
    settings = manifest["nodes"]["primary"]["settings"]
    assert settings["work_mem"]["setting"] == "8192"
    assert settings["synchronous_commit"]["setting"] == "off"
    assert manifest["overrides"]["server.settings.synchronous_commit"] == "off"
    argv = manifest["workload"]["argv"]
    assert "select-only@3" in argv and "tpcb-like@1" in argv
    assert manifest["host"]["data_dir"]["fstype"]

    shown = run_cli("show", str(run_dir), "--json")
    assert shown.returncode == 0
    summary = json.loads(shown.stdout)
    assert summary["status"] == "completed" and summary["measured"]["tps"] > 0
    cost = manifest["telemetry"]
    line = next(s for s in run_cli("show", str(run_dir)).stdout.splitlines() if "observer" in s)
    assert f"{cost['observer_cpu_s']:.2f} s pglab" in line and "% of the machine" in line

    listed = run_cli("ls", str(results), "--json")
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [run_dir.name]
    table = run_cli("ls", str(results))
    assert run_dir.name in table.stdout and "completed" in table.stdout


@pytest.mark.disk
def test_os_probes_of_a_real_run(overridden_run: Path) -> None:
    """os.processes splits the real server's CPU by process kind, and os.disk watches the
    device that holds the real data dir (the parsers' own tests use samples and stand-ins)."""
    manifest = json.loads((overridden_run / "manifest.json").read_text())
    ts = pl.read_parquet(overridden_run / "timeseries.parquet")
    procs = ts.filter((pl.col("source") == "os.processes") & (pl.col("node") == "primary"))
    cores = procs.filter(pl.col("metric") == "cpu_cores")
    per_kind = dict(cores.filter(pl.col("label") != "postgres").group_by("label")
                    .agg(pl.col("value").sum()).iter_rows())
    total = cores.filter(pl.col("label") == "postgres")["value"].sum()
    # the load runs in the client backends; the kinds add up to the whole server
    assert max(per_kind, key=lambda k: per_kind[k]) == "backends", per_kind
    assert {"checkpointer", "walwriter", "bgwriter"} <= set(per_kind), per_kind
    assert sum(per_kind.values()) == pytest.approx(total, rel=0.01) and total > 0
    (clients,) = manifest["scenario"]["workload"]["clients"]  # one run: [2]
    processes = procs.filter((pl.col("label") == "postgres") & (pl.col("metric") == "processes"))
    assert processes["value"].max() >= clients + 4  # + checkpointer, writers...
    client = ts.filter((pl.col("source") == "os.processes") & (pl.col("node") == "client")
                       & (pl.col("metric") == "cpu_cores"))
    assert client["value"].sum() > 0
    disk = ts.filter(pl.col("source") == "os.disk")
    device = manifest["host"]["data_dir"]["device"].removeprefix("/dev/")
    labels = set(disk["label"].to_list())  # the device, or its whole disk (a partition's)
    assert any(device.startswith(label) for label in labels), (device, labels)
    assert set(disk["node"].to_list()) == {"primary"}
    assert disk.filter(pl.col("metric") == "write_mbps")["value"].sum() > 0


BAD_SCENARIOS = {
    "invalid-toml": ("[workload\n", "invalid TOML"),
    "unknown-key": ("[workload]\nclinets = 2\n", "did you mean 'workload.clients'?"),
    "wrong-type": ('[workload]\nscale = "big"\n', "workload.scale = 'big' is not valid"),
    "zero-clients": ("[workload]\nclients = 0\n", "workload.clients = 0 is not valid"),
    "negative-clients": ("[workload]\nclients = -2\n", "workload.clients = -2 is not valid"),
    "bad-duration": ('[workload]\nduration = "soon"\n', "expected a duration"),
    "unknown-parameter": (TINY + "[server.settings]\nshared_bufers = '64MB'\n",
                          'unrecognized configuration parameter "shared_bufers"'),
    "invalid-parameter-value": (TINY + "[server.settings]\nmax_connections = 0\n",
                                'outside the valid range for parameter "max_connections"'),
    "managed-parameter": (TINY + "[server.settings]\nport = 5999\n", "set by pglab itself"),
    "unknown-disk-profile": (TINY + '[envelope]\ndisk_profile = "cloud-sdd:300GB"\n',
                             "did you mean 'cloud-ssd'?"),
    "standbys-on-dsn": (TINY + '[server]\ntarget = "dsn"\ndsn = "host=db1"\n'
                        "[topology]\nstandbys = 1\n", "needs server.target = 'local'"),
    "fault-after-the-end": (TINY + '[[faults]]\nat = "5s"\naction = "checkpoint"\n',
                            "is after the run ends"),
    "unknown-fault-action": (TINY + '[[faults]]\nat = "1s"\naction = "chekpoint"\n',
                             "did you mean 'checkpoint'?"),
    "sync-without-standbys": (TINY + '[topology]\nsynchronous = "on"\n',
                              "needs at least 1 standby"),
}


@pytest.mark.live
@pytest.mark.parametrize("case", sorted(BAD_SCENARIOS))
def test_bad_input_is_one_line_and_nonzero(tmp_path: Path, case: str) -> None:
    body, expected = BAD_SCENARIOS[case]
    scenario = write_scenario(tmp_path, body)
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"))
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("pglab:")]
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert processes_under(labs_dir()) == []


def test_missing_pooler_binary_is_one_line(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, TINY + '[topology]\npooler = "pgbouncer"\n')
    result = run_cli("run", str(scenario), "--results", str(tmp_path / "r"),
                     env={"PGLAB_PGBOUNCER": str(tmp_path / "no-pgbouncer")})
    assert result.returncode == 3, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("pglab: ") and "lacks pgbouncer (PGLAB_PGBOUNCER=" in line
    assert not (tmp_path / "r").exists()  # refused before anything started


def test_missing_file(tmp_path: Path) -> None:
    result = run_cli("run", str(tmp_path / "absent.toml"))
    assert result.returncode == 2
    assert result.stderr.strip() == f"pglab: {tmp_path / 'absent.toml'}: no such scenario file"


def test_unknown_builtin_scenario_name() -> None:
    """A misspelt name gets the one it is close to, not a list of all twenty."""
    result = run_cli("run", "chekpoint-flush-storm")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == ("pglab: chekpoint-flush-storm: no such scenario file, "
                                      "and no built-in scenario of that name (did you mean "
                                      "'checkpoint-flush-storm'?)")
    far = run_cli("validate", "no-such-scenario")
    assert far.returncode == 2 and "`pglab scenarios` lists" in far.stderr
    assert "demo" not in far.stderr


def test_unwritable_results_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    scenario = write_scenario(tmp_path, TINY)
    result = run_cli("run", str(scenario), "--results", str(blocker / "sub"))
    assert result.returncode == 3, result.stderr
    assert "cannot write there" in result.stderr and "Traceback" not in result.stderr


def test_missing_binaries(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    scenario = write_scenario(tmp_path, TINY)
    result = run_cli("run", str(scenario), "--pg-bin", str(empty), "--results", str(tmp_path))
    assert result.returncode == 3
    assert "no postgres, initdb, pgbench there" in result.stderr
    assert "Traceback" not in result.stderr
    # the folder says why the run did not happen
    run_dir = _only_run(tmp_path, "t")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "no postgres" in manifest["reason"]


def test_show_on_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    result = run_cli("show", str(tmp_path))
    assert result.returncode == 2
    assert "not a pglab run folder" in result.stderr


def test_validate(tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, TINY.replace("clients = 2", "clients = [1, 2, 4]"))
    result = run_cli("validate", str(scenario))
    assert result.returncode == 0 and "3 run(s)" in result.stdout


def test_no_color_is_respected() -> None:
    # FORCE_COLOR makes rich colour a pipe as it would a terminal: a comparison with a
    # worse verdict is then red, unless NO_COLOR says no colour (bold and dim may stay).
    runs = SAMPLES / "runs"
    args = ("compare", str(runs / "control"), str(runs / "lock"))
    colour = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-9]|9[0-7]|38;[0-9;]+)m")
    coloured = run_cli(*args, env={"NO_COLOR": "", "FORCE_COLOR": "1"})
    assert coloured.returncode == 0 and colour.search(coloured.stdout), coloured.stdout
    plain = run_cli(*args, env={"NO_COLOR": "1", "FORCE_COLOR": "1"})
    assert plain.returncode == 0 and "worse" in plain.stdout
    assert not colour.search(plain.stdout + plain.stderr), plain.stdout


@pytest.mark.disk
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the server as another user")
def test_as_root_the_server_runs_unprivileged(overridden_run: Path) -> None:
    manifest = json.loads((overridden_run / "manifest.json").read_text())
    assert manifest["nodes"]["primary"]["os_user"] == "nobody"
    assert manifest["host"]["running_as_root"] is True


def test_run_repeats_compare_the_first_variant_with_each_other(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`pglab run --repeats N` on a matrix ends on compare's statistics over the rounds:
    each variant's completed runs are one side (recorded runs stand in for the rounds), and
    a variant none of whose runs completed is named, not compared."""
    from pglab.commands.runs import _compare_variants
    from pglab.results.folder import load_run
    from pglab.scenario import load_text

    runs = SAMPLES / "runs"
    loaded = load_text('name = "t"\n[matrix]\n"server.settings.work_mem" = '
                       '["4MB", "8MB", "16MB"]\n', "t.toml")
    failed = tmp_path / "failed"
    shutil.copytree(runs / "control", failed)
    manifest = json.loads((failed / "manifest.json").read_text())
    (failed / "manifest.json").write_text(json.dumps({**manifest, "status": "failed"}))
    unfinished = load_run(failed)
    assert unfinished.status == "failed"
    rounds = [[load_run(runs / "dirty-storm"), load_run(runs / "control"), unfinished],
              [load_run(runs / "dirty-storm-2"), load_run(runs / "control-4clients"),
               unfinished]]
    _compare_variants(loaded, rounds)
    printed = capsys.readouterr()
    assert "work_mem=4MB, clients=8 (base) against work_mem=8MB, clients=8, 2 rounds" in (
        printed.out)
    assert re.search(r"base \S*dirty-storm,\S*dirty-storm-2 \(2 runs\)", printed.out)
    assert re.search(r"contender \S*control,\S*control-4clients \(2 runs\)", printed.out)
    # a table row, or a line of its own where the output's width is unknown (piped)
    assert re.search(r"^\W*TPS\b.* (better|worse|no significant difference)", printed.out,
                     re.M)
    assert "no compare with work_mem=16MB, clients=8: none of its runs completed" in (
        printed.err)
